"""The fault plan's compact form, and faults as a program calling the simulator sees them."""

from __future__ import annotations

import pytest

from ge_python_backend.sim import Fault, FaultSchedule, Simulator


def test_compact_form_parses_every_kind_of_entry():
    plan = FaultSchedule.parse("execute_async:3=507011, malloc:2;memcpy_async:9=lost malloc_host:1=ACL_ERROR_BAD_ALLOC")
    assert plan.faults == (
        Fault("execute_async", 3, 507011),
        Fault("malloc", 2),
        Fault("memcpy_async", 9, lose_device=True),
        Fault("malloc_host", 1, 200000),
    )
    assert FaultSchedule.parse(str(plan)) == plan
    assert FaultSchedule.parse("  ") == FaultSchedule()


@pytest.mark.parametrize(
    "text, message",
    [
        ("execute_async", "FUNCTION:N"),
        ("get_num_inputs:1", "cannot be faulted"),
        ("malloc:0", ">= 1"),
        ("malloc:1=123", "not a code"),
        ("malloc:1=ACL_NOPE", "not a ret code name"),
        ("malloc:1=0", "not a code listed|cannot return success"),
    ],
)
def test_bad_entries_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        FaultSchedule.parse(text)


def test_nth_call_fails_with_the_given_or_default_code():
    simulator = Simulator()
    acl = simulator.acl
    acl.init()
    acl.rt.set_device(0)
    simulator.configure(faults="malloc:2, malloc_host:1=507899")
    assert acl.rt.malloc(8, 0)[1] == 0
    assert acl.rt.malloc(8, 0) == (0, 207001)
    assert "injected failure (fault malloc:2)" in acl.get_recent_err_msg()
    assert acl.rt.malloc(8, 0)[1] == 0
    assert acl.rt.malloc_host(8) == (0, 507899)
    simulator.reset()


def test_lost_device_fails_every_later_device_call_but_lets_resources_go():
    simulator = Simulator()
    acl = simulator.acl
    acl.init()
    acl.rt.set_device(0)
    kept, _ = acl.rt.malloc(8, 0)
    simulator.configure(faults="malloc:2=lost")
    before_loss, ret = acl.rt.malloc(8, 0)
    assert ret == 0
    assert acl.rt.malloc(8, 0) == (0, 507899)
    assert acl.rt.create_stream() == (0, 507899)
    assert "device is gone" in acl.get_recent_err_msg()
    assert acl.rt.free(kept) == 0
    assert simulator.live() == ["device 0 set (count 1)", f"device malloc {before_loss:#x} (8 bytes, device 0)"]
    assert acl.rt.free(before_loss) == 0
    assert acl.rt.reset_device(0) == 0
    assert simulator.live() == []
    simulator.reset()
