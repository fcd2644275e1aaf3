"""ge_device_busy_seconds_total's source: each acl-engine batch's share of its device's busy time,
counted once over every instance on the device (engines/acl/busy.py), against the simulated
device's own busy seconds (sim/device.py: the modelled reference, independent of the engine)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ge_python_backend import sim
from ge_python_backend.engines.acl.busy import DeviceBusy
from ge_python_backend.hostshm import DIR_ENV
from tests.support import acl_sim_nets as nets

pytestmark = pytest.mark.usefixtures("clean_simulator")


@pytest.fixture(scope="module")
def om_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("busy")
    sim.sim_compile(nets.matmul_add(folder / "m.onnx"), folder / "m.om", batch_gears=[1, 2, 4, 8])
    return folder / "m.om"


def run_instances(om_file, instances: int, batches: int, every: int) -> tuple[float, float, float]:
    """``instances`` engines (as instances of one model would be) on device 0, each running
    ``batches`` batches from a thread of its own at once: (sum of their device-busy shares, sum
    of their execute phases, the device's modelled busy seconds over the same runs)."""
    engines = [nets.open_sim(om_file, acl_timing_every=every) for _ in range(instances)]
    device = sim.get_simulator().device_model(0)
    busy, execute = [0.0] * instances, [0.0] * instances

    def work(index: int) -> None:
        engine = engines[index]
        engine.bind_thread()
        slot = engine.slots[0]
        rng = np.random.default_rng(index)
        for _ in range(batches):
            views = slot.inputs({"x": (8, 4)})
            views["x"][...] = rng.standard_normal((8, 4))
            slot.run()
            busy[index] += slot.last_times.device_busy
            execute[index] += slot.last_times.execute

    try:
        before = device.usage().busy_seconds
        threads = [threading.Thread(target=work, args=(i,)) for i in range(instances)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        modelled = device.usage().busy_seconds - before
    finally:
        for engine in engines:
            engine.close()
    return sum(busy), sum(execute), modelled


@pytest.mark.parametrize("every", [1, 8])
def test_instances_queued_on_one_device_count_its_busy_time_once(om_file, every):
    sim.configure(device_ms=20.0)
    busy, execute, modelled = run_instances(om_file, instances=2, batches=12, every=every)
    assert modelled == pytest.approx(24 * 0.020, rel=0.01)  # the reference: 24 executions, one at a time
    assert busy == pytest.approx(modelled, rel=0.1)
    if every == 1:  # the execute phases count each one's wait behind the other: more than the device ran
        assert execute > 1.3 * modelled


def test_one_instance_alone_is_busy_for_its_executions(om_file):
    """Idle between its batches: a timed batch's interval is anchored at its run's start, not at the
    wait's wake-up (an untimed one's end carries the wake-up latency: busy.py)."""
    sim.configure(device_ms=15.0)
    busy, _, modelled = run_instances(om_file, instances=1, batches=10, every=1)
    assert modelled == pytest.approx(0.150, rel=0.01)
    assert busy == pytest.approx(modelled, rel=0.1)


def test_without_shared_state_each_process_counts_its_own(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(DIR_ENV, str(blocker / "shm"))
    busy = DeviceBusy(5)
    assert "counts this process's executions only" in caplog.text
    assert busy.account(10.0, 11.0) == 1.0
    assert busy.account(10.5, 11.5) == pytest.approx(0.5)
    assert busy.account(11.2, 11.4) == 0.0
    busy.close()


def test_an_interval_counts_only_what_lies_beyond_what_was_counted(tmp_path, monkeypatch):
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    first, second = DeviceBusy(2), DeviceBusy(2)  # two instances of the scope on device 2
    assert first.account(100.0, 100.02) == pytest.approx(0.02)
    assert second.account(100.001, 100.04) == pytest.approx(0.02)  # it waited behind the first
    assert first.account(100.5, 100.52) == pytest.approx(0.02)  # after an idle gap
    assert DeviceBusy(3).account(100.001, 100.04) == pytest.approx(0.039)  # another device
    first.close()
    second.close()
