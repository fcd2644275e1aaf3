"""The pyACL simulator used directly, like `import acl`: results, ret codes and refused misuse.

Each test makes its own Simulator, so nothing here touches the process-wide one the engine uses.
Expected codes come from CANN's headers and sources, as docs/fidelity.md cites them (written out
here, not read from the simulator's tables).
"""

from __future__ import annotations

import ctypes
import json
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.sim import Simulator, sim_compile
from ge_python_backend.sim.memory import HostMemory
from tests.support import acl_sim_nets as nets
from tests.support.samples import OM_SAMPLES

H2D, D2H, HUGE_FIRST = 1, 2, 0


@pytest.fixture(scope="module")
def om_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("simrt")
    onnx_path = nets.matmul_add(folder / "m.onnx")
    sim_compile(onnx_path, folder / "batch.om", batch_gears=[1, 2, 4])
    sim_compile(onnx_path, folder / "static.om", input_shapes={"x": (2, 4)})
    sim_compile(
        nets.conv(folder / "conv.onnx"), folder / "hw.om", input_shapes="x:1,3,-1,-1", dynamic_image_size="8,8;4,6"
    )
    sim_compile(
        nets.two_inputs(folder / "two.onnx"),
        folder / "dims.om",
        input_shapes="a:-1,-1;b:-1,-1",
        dynamic_dims="1,2,1,2;2,3,2,3",
    )
    return {
        "onnx": onnx_path,
        "batch": folder / "batch.om",
        "static": folder / "static.om",
        "hw": folder / "hw.om",
        "dims": folder / "dims.om",
        "dir": folder,
    }


@pytest.fixture
def sim():
    simulator = Simulator()
    yield simulator
    simulator.reset()


@pytest.fixture
def acl(sim):
    acl = sim.acl
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    return acl


class Rig:
    """A loaded model with datasets, as CANN's samples set one up (load, datasets, execute)."""

    def __init__(self, acl, path):
        self.acl = acl
        self.context, ret = acl.rt.create_context(0)
        assert ret == 0
        self.stream, ret = acl.rt.create_stream()
        assert ret == 0
        self.model_id, ret = acl.mdl.load_from_file(str(path))
        assert ret == 0, acl.get_recent_err_msg()
        self.desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(self.desc, self.model_id) == 0
        self.inputs, self.outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        self.in_ptrs = self._fill(self.inputs, acl.mdl.get_num_inputs(self.desc), acl.mdl.get_input_size_by_index)
        self.out_ptrs = self._fill(self.outputs, acl.mdl.get_num_outputs(self.desc), acl.mdl.get_output_size_by_index)
        self.dyn_index, ret = acl.mdl.get_input_index_by_name(self.desc, "ascend_mbatch_shape_data")
        self.dynamic = ret == 0

    def _fill(self, dataset, count, size_of):
        ptrs = []
        for i in range(count):
            size = size_of(self.desc, i)
            ptr, ret = self.acl.rt.malloc(size, HUGE_FIRST)
            assert ret == 0
            buffer = self.acl.create_data_buffer(ptr, size)
            _, ret = self.acl.mdl.add_dataset_buffer(dataset, buffer)
            assert ret == 0
            ptrs.append((ptr, size, buffer))
        return ptrs

    def release(self):
        acl = self.acl
        for ptr, _, buffer in self.in_ptrs + self.out_ptrs:
            assert acl.destroy_data_buffer(buffer) == 0
            assert acl.rt.free(ptr) == 0
        assert acl.mdl.destroy_dataset(self.inputs) == 0
        assert acl.mdl.destroy_dataset(self.outputs) == 0
        assert acl.mdl.unload(self.model_id) == 0
        assert acl.mdl.destroy_desc(self.desc) == 0
        assert acl.rt.destroy_stream(self.stream) == 0
        assert acl.rt.destroy_context(self.context) == 0


def pinned(acl, array):
    ptr, ret = acl.rt.malloc_host(max(array.nbytes, 1))
    assert ret == 0
    ctypes.memmove(ptr, array.tobytes(), array.nbytes)
    return ptr


# --- results ---------------------------------------------------------------------------------------


def test_dynamic_batch_model_computes_what_onnxruntime_computes(sim, acl, om_files):
    rig = Rig(acl, om_files["batch"])
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    host_in = pinned(acl, x)
    host_out, _ = acl.rt.malloc_host(64)
    ((dev_x, cap_x, _),) = rig.in_ptrs[:1]
    assert acl.rt.memcpy_async(dev_x, cap_x, host_in, x.nbytes, H2D, rig.stream) == 0
    assert acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, rig.dyn_index, 2) == 0
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    dims, ret = acl.mdl.get_cur_output_dims(rig.desc, 0)
    assert (dims["dims"], ret) == ([2, 3], 0)
    dev_y, cap_y, _ = rig.out_ptrs[0]
    assert acl.rt.memcpy_async(host_out, 64, dev_y, 24, D2H, rig.stream) == 0
    assert acl.rt.synchronize_stream(rig.stream) == 0
    got = np.frombuffer(acl.util.ptr_to_bytes(host_out, 24), np.float32).reshape(2, 3)
    np.testing.assert_allclose(got, nets.reference(om_files["onnx"], {"x": x})["y"], rtol=1e-6)
    assert acl.rt.free_host(host_in) == 0 and acl.rt.free_host(host_out) == 0
    rig.release()
    assert acl.rt.reset_device(0) == 0
    assert sim.live() == []


def test_desc_reports_gears_and_the_extra_dynamic_input_last(acl, om_files):
    rig = Rig(acl, om_files["batch"])
    assert acl.mdl.get_num_inputs(rig.desc) == 2
    assert (rig.dynamic, rig.dyn_index) == (True, 1)
    assert acl.mdl.get_input_dims(rig.desc, 0) == ({"name": "x", "dimCount": 2, "dims": [-1, 4]}, 0)
    assert acl.mdl.get_input_size_by_index(rig.desc, 0) == 4 * 4 * 4  # largest gear
    assert acl.mdl.get_input_size_by_index(rig.desc, 1) == 4
    assert acl.mdl.get_input_data_type(rig.desc, 1) == 3 and acl.mdl.get_input_format(rig.desc, 1) == 2
    assert acl.mdl.get_output_data_type(rig.desc, 1) == 1  # h is FLOAT16
    assert acl.mdl.get_output_dims(rig.desc, 0) == ({"name": "y", "dimCount": 2, "dims": [4, 3]}, 0)
    assert acl.mdl.get_dynamic_batch(rig.desc) == ({"batchCount": 3, "batch": [1, 2, 4]}, 0)
    assert acl.mdl.get_dynamic_hw(rig.desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dims(rig.desc, 5) == ({}, 100000)
    work, weight, ret = acl.mdl.query_size(str(om_files["batch"]))
    assert ret == 0 and work > 0 and weight > 0


def test_static_model_has_no_dynamic_input(acl, om_files):
    rig = Rig(acl, om_files["static"])
    assert not rig.dynamic
    assert acl.mdl.get_dynamic_batch(rig.desc) == ({"batchCount": 0, "batch": []}, 0)
    # GE never answers 100019 (ACL_ERROR_MODEL_NOT_DYNAMIC): 2 is not a gear of a static model (ge_executor.cc 375-423)
    assert acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, 0, 2) == 145013
    assert acl.mdl.set_input_dynamic_dims(rig.model_id, rig.inputs, 0, {"dimCount": 1, "dims": [2]}) == 145012


def test_gear_lookups_of_a_kind_the_model_lacks_answer_empty_or_fail_as_configured(sim, acl, om_files):
    rig = Rig(acl, om_files["batch"])
    assert acl.mdl.get_input_dynamic_gear_count(rig.desc, -1) == (0, 0)
    assert acl.mdl.get_input_dynamic_dims(rig.desc, -1, 0) == ([], 0)
    sim.configure(absent_gears_ret=145000)
    assert acl.mdl.get_dynamic_hw(rig.desc, -1) == ({}, 145000)
    assert "has batch gears, not hw gears" in acl.get_recent_err_msg()
    assert acl.mdl.get_input_dynamic_gear_count(rig.desc, -1) == (0, 145000)
    assert acl.mdl.get_input_dynamic_dims(rig.desc, -1, 0) == (None, 145000)
    assert acl.mdl.get_dynamic_batch(rig.desc) == ({"batchCount": 3, "batch": [1, 2, 4]}, 0)  # its own kind
    static = Rig(acl, om_files["static"])
    assert acl.mdl.get_dynamic_batch(static.desc) == ({}, 145000)
    with pytest.raises(ValueError, match="not a code"):
        sim.configure(absent_gears_ret=123)


def test_host_memory_is_real_and_aligned(acl):
    ptr, ret = acl.rt.malloc_host(100)
    assert ret == 0 and ptr % 64 == 0
    ctypes.memmove(ptr, b"abc", 3)
    assert acl.util.ptr_to_bytes(ptr, 3) == b"abc"
    data = b"xyz"
    assert ctypes.string_at(acl.util.bytes_to_ptr(data), 3) == b"xyz"
    with pytest.raises(ValueError):
        acl.util.bytes_to_ptr(bytearray(b"no"))


def test_device_memory_cannot_be_read_by_the_host(acl):
    ptr, ret = acl.rt.malloc(16, HUGE_FIRST)
    assert ret == 0
    with pytest.raises(ValueError, match="device memory"):
        acl.util.ptr_to_bytes(ptr, 16)


def test_synchronous_copy_round_trip_through_device_memory(acl):
    dev, _ = acl.rt.malloc(8, HUGE_FIRST)
    source = b"12345678"
    assert acl.rt.memcpy(dev, 8, acl.util.bytes_to_ptr(source), 8, H2D) == 0
    back, _ = acl.rt.malloc_host(8)
    assert acl.rt.memcpy(back, 8, dev, 8, D2H) == 0
    assert acl.util.ptr_to_bytes(back, 8) == source
    assert acl.rt.memset(dev, 8, 0x41, 8) == 0
    assert acl.rt.memcpy(back, 8, dev, 8, D2H) == 0
    assert acl.util.ptr_to_bytes(back, 8) == b"A" * 8


def test_events_measure_stream_work(sim, acl):
    """Never recorded: RT_ERROR_EVENT_RECORDER_NULL -> 507000 (event.cc 1249-1251, errcode_manage.cc
    197); recorded, not yet complete: RT_ERROR_EVENT_TIMESTAMP_INVALID -> 107006 (event.cc 1265-1270,
    errcode_manage.cc 198)."""
    stream, _ = acl.rt.create_stream()
    start, _ = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    assert acl.rt.event_elapsed_time(start, end)[1] == 507000
    assert "never recorded" in acl.get_recent_err_msg()
    gate = threading.Event()
    sim.streams[stream].submit("held", lambda start: gate.wait())  # the stream is busy until the gate opens
    assert acl.rt.record_event(start, stream) == 0
    assert acl.rt.record_event(end, stream) == 0
    assert acl.rt.event_elapsed_time(start, end)[1] == 107006
    assert "not completed yet" in acl.get_recent_err_msg()
    gate.set()
    assert acl.rt.synchronize_event(end) == 0
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and ms >= 0.0


def test_stream_work_runs_in_the_waiting_thread_with_modelled_times(sim, acl, om_files):
    """A stream has no thread (sim/streams.py): its work runs when waited for. The modelled device
    time still starts at submission (host work meanwhile overlaps it), events carry modelled
    times, and work nobody waited for has not run: the output buffer still holds its old bytes."""
    sim.configure(device_ms=150)
    rig = Rig(acl, om_files["static"])
    first, _ = acl.rt.create_event()
    last, _ = acl.rt.create_event()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    dev_x, _, _ = rig.in_ptrs[0]
    assert acl.rt.memcpy(dev_x, x.nbytes, pinned(acl, x), x.nbytes, H2D) == 0
    dev_y, size, _ = rig.out_ptrs[0]
    host, _ = acl.rt.malloc_host(size)
    assert acl.rt.memset(dev_y, size, 0x7F, size) == 0
    assert acl.rt.record_event(first, rig.stream) == 0
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert acl.rt.record_event(last, rig.stream) == 0
    assert acl.rt.memcpy(host, size, dev_y, size, D2H) == 0  # a synchronous copy does not wait
    assert acl.util.ptr_to_bytes(host, size) == b"\x7f" * size
    assert acl.rt.event_elapsed_time(first, last)[1] == 107006
    time.sleep(0.2)  # host work longer than the modelled 150 ms
    waited = time.perf_counter()
    assert acl.rt.synchronize_event(last) == 0
    assert time.perf_counter() - waited < 0.1  # the device time passed meanwhile
    ms, ret = acl.rt.event_elapsed_time(first, last)
    assert ret == 0 and 150.0 <= ms < 190.0  # modelled, not when the wait ran the work
    assert acl.rt.memcpy(host, size, dev_y, size, D2H) == 0
    (expected, _) = ort.InferenceSession(str(om_files["onnx"])).run(None, {"x": x})
    np.testing.assert_allclose(np.frombuffer(acl.util.ptr_to_bytes(host, size), np.float32).reshape(2, 3), expected)


def test_one_thread_waiting_on_two_streams_in_turn_sees_them_overlap(sim, acl, om_files):
    # every stream a device of its own: on one shared device they would take turns (test_sim_device.py)
    sim.configure(device_ms=200, shared_device=False)
    a, b = Rig(acl, om_files["static"]), Rig(acl, om_files["static"])
    started = time.perf_counter()
    for rig in (a, b):
        assert acl.rt.set_context(rig.context) == 0
        assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    for rig in (a, b):
        assert acl.rt.set_context(rig.context) == 0
        assert acl.rt.synchronize_stream(rig.stream) == 0
    assert 0.2 <= time.perf_counter() - started < 0.35  # one modelled 200 ms, not two in a row


def test_synchronize_device_runs_every_streams_work_before_reporting_a_failure(acl):
    first, _ = acl.rt.create_stream()
    second, _ = acl.rt.create_stream()
    gone, _ = acl.rt.malloc(64, HUGE_FIRST)
    kept, _ = acl.rt.malloc(64, HUGE_FIRST)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memset(kept, 64, 0, 64) == 0
    assert acl.rt.memcpy_async(gone, 64, host, 64, H2D, first) == 0
    assert acl.rt.free(gone) == 0  # the first stream's copy now fails
    assert acl.rt.memset_async(kept, 64, 0x41, 64, second) == 0
    assert acl.rt.synchronize_device() == 100000
    assert acl.rt.memcpy(host, 64, kept, 64, D2H) == 0
    assert acl.util.ptr_to_bytes(host, 64) == b"A" * 64


def test_an_event_after_a_failed_operation_still_completes(acl):
    """Its waiters must not hang; the failure is the stream's to report."""
    stream, _ = acl.rt.create_stream()
    event, _ = acl.rt.create_event()
    gone, _ = acl.rt.malloc(64, HUGE_FIRST)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy_async(gone, 64, host, 64, H2D, stream) == 0
    assert acl.rt.free(gone) == 0
    assert acl.rt.record_event(event, stream) == 0
    waiter = threading.Thread(target=acl.rt.synchronize_event, args=(event,), daemon=True)
    waiter.start()
    waiter.join(10)
    assert not waiter.is_alive()
    assert acl.rt.synchronize_stream(stream) == 100000


def test_finalize_runs_queued_work_before_it_releases_memory(sim, acl):
    stream, _ = acl.rt.create_stream()
    dev, _ = acl.rt.malloc(64, HUGE_FIRST)
    host, _ = acl.rt.malloc_host(64)
    block = sim.host_memory.live[host].raw  # held here so the bytes can be read after finalize
    ctypes.memset(host, 0, 64)
    assert acl.rt.memset(dev, 64, 0x5A, 64) == 0
    assert acl.rt.memcpy_async(host, 64, dev, 64, D2H, stream) == 0
    assert acl.finalize() == 0
    # copied while the device memory was still there (after the teardown the copy would fail)
    assert ctypes.string_at(host, 64) == b"Z" * 64 and block


def test_a_timed_synchronize_reports_work_that_ends_past_the_timeout(sim, acl, om_files):
    sim.configure(device_ms=120)
    rig = Rig(acl, om_files["static"])
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert acl.rt.synchronize_stream_with_timeout(rig.stream, 20) == 507046
    assert "past the 20 ms timeout" in acl.get_recent_err_msg()
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert acl.rt.synchronize_stream_with_timeout(rig.stream, 1000) == 0


# --- init / finalize and the ledger ----------------------------------------------------------------


def test_init_finalize_codes(sim, tmp_path):
    acl = sim.acl
    assert acl.rt.malloc(16, 0) == (0, 100001)
    assert acl.init(str(tmp_path / "missing.json")) == 100003  # ACL_ERROR_INVALID_FILE (acl_rt_impl_base.cpp 154-182)
    assert "acl.init" in acl.get_recent_err_msg()
    assert acl.get_recent_err_msg() is None  # read once
    assert acl.finalize() == 0  # no finalize ran before: the teardown runs (aclFinalizeFlag starts false, acl.cpp 42)
    assert acl.finalize() == 100037
    assert acl.init() == 0
    assert acl.init() == 100002
    assert acl.finalize() == 0
    assert acl.finalize() == 100037


def test_a_re_init_must_read_the_first_inits_config_content(sim, tmp_path):
    """acl.cpp 402-416, 536-542: the first successful init's content (hashed) stays; another one
    after a finalize is 100000 (no file counts as empty content), the same content in another
    file is fine."""
    acl = sim.acl
    first, same, other = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text("{}")
    same.write_text("{}")
    other.write_text('{"err_msg_mode": "1"}')
    assert acl.init(str(first)) == 0
    assert acl.finalize() == 0
    assert acl.init(str(other)) == 100000
    assert "differs from the first acl.init's" in acl.get_recent_err_msg()
    assert acl.init() == 100000  # no file: empty content, not "{}"
    assert acl.init(str(same)) == 0
    assert acl.finalize() == 0


def test_finalize_reports_live_resources_to_the_ledger_file(sim, tmp_path, monkeypatch, caplog):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("GE_ACL_SIM_LEDGER_FILE", str(ledger))
    acl = sim.acl
    acl.init()
    acl.rt.set_device(0)
    ptr, _ = acl.rt.malloc(32, 0)
    assert sim.live() == ["device 0 set (count 1)", f"device malloc {ptr:#x} (32 bytes, device 0)"]
    assert acl.finalize() == 0
    assert "2 live resource" in caplog.text
    line = json.loads(ledger.read_text().splitlines()[-1])
    assert line["live"] == ["device 0 set (count 1)", f"device malloc {ptr:#x} (32 bytes, device 0)"]
    assert line["pid"] > 0
    assert sim.live() == []


# --- refused misuse --------------------------------------------------------------------------------


def in_thread(work):
    """Run ``work`` on a new thread (no current context there); return its result."""
    results = []
    thread = threading.Thread(target=lambda: results.append(work()))
    thread.start()
    thread.join()
    return results[0]


def test_event_and_context_calls_need_a_current_context(acl):
    context, _ = acl.rt.create_context(0)
    start, _ = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    assert in_thread(
        lambda: {
            "synchronize_event": acl.rt.synchronize_event(start),
            "event_elapsed_time": acl.rt.event_elapsed_time(start, end),
            "destroy_event": acl.rt.destroy_event(start),
            "destroy_context": acl.rt.destroy_context(context),
        }
    ) == {
        "synchronize_event": 107002,
        "event_elapsed_time": (0.0, 107002),
        "destroy_event": 107002,
        "destroy_context": 107002,
    }


def test_record_event_refuses_an_event_of_another_context(acl):
    acl.rt.create_context(0)
    event, _ = acl.rt.create_event()
    acl.rt.create_context(0)  # now current
    stream, _ = acl.rt.create_stream()
    assert acl.rt.record_event(event, stream) == 107003
    assert "event" in acl.get_recent_err_msg()


@pytest.mark.parametrize("kind", ["batch", "hw", "dims"])
def test_selecting_a_gear_while_the_model_executes_is_refused(sim, acl, om_files, kind):
    rig = Rig(acl, om_files[kind])

    def select():
        if kind == "batch":
            return acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, rig.dyn_index, 2)
        if kind == "hw":
            return acl.mdl.set_dynamic_hw_size(rig.model_id, rig.inputs, rig.dyn_index, 4, 6)
        return acl.mdl.set_input_dynamic_dims(
            rig.model_id, rig.inputs, rig.dyn_index, {"dimCount": 4, "name": "", "dims": [2, 3, 2, 3]}
        )

    assert select() == 0
    sim.configure(device_ms=300)
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert select() == 507011
    assert "still executing on stream" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(rig.stream) == 0
    assert select() == 0


def test_a_context_of_a_reset_device_can_no_longer_be_used(acl):
    context, _ = acl.rt.create_context(0)
    assert acl.rt.reset_device(0) == 0  # the fixture's set_device: the count is 0 now
    assert acl.rt.create_stream() == (0, 107002)
    assert "device 0 was reset" in acl.get_recent_err_msg()
    assert acl.rt.set_context(context) == 100000
    assert "device 0 was reset" in acl.get_recent_err_msg()
    assert acl.rt.set_device(0) == 0  # the device comes back with a new default context, not this one
    assert acl.rt.set_context(context) == 100000
    assert acl.rt.destroy_context(context) == 0  # releasing it still works


def test_destroy_context_refuses_a_context_that_still_owns_resources(acl, om_files):
    default, _ = acl.rt.get_context()  # set_device's default context: reset_device releases it
    rig = Rig(acl, om_files["static"])
    event, _ = acl.rt.create_event()
    assert acl.rt.destroy_context(rig.context) == 100000
    message = acl.get_recent_err_msg()
    assert f"stream {rig.stream:#x}" in message and f"event {event:#x}" in message
    assert f"model {rig.model_id}" in message
    assert acl.rt.destroy_event(event) == 0
    rig.release()  # streams, models, then the context: the documented order works
    assert acl.rt.set_context(default) == 0 and acl.rt.destroy_context(default) == 100000


def test_thread_without_context_is_refused(acl):
    results = {}

    def worker():
        results["malloc"] = acl.rt.malloc(16, 0)
        results["message"] = acl.get_recent_err_msg()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert results["malloc"] == (0, 107002)
    assert "no current context" in results["message"]


def test_contexts_are_per_thread_and_set_context_binds(acl):
    context, _ = acl.rt.create_context(0)
    results = {}

    def worker():
        results["set"] = acl.rt.set_context(context)
        results["get"] = acl.rt.get_context()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert results == {"set": 0, "get": (context, 0)}


def test_stream_from_another_context_is_refused(acl):
    first, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    acl.rt.create_context(0)  # now current
    assert acl.rt.synchronize_stream(stream) == 107003
    acl.rt.set_context(first)
    assert acl.rt.synchronize_stream(stream) == 0


def test_model_from_another_context_is_refused(acl, om_files):
    rig = Rig(acl, om_files["static"])
    acl.rt.create_context(0)
    assert acl.mdl.unload(rig.model_id) == 107004
    assert acl.mdl.execute(rig.model_id, rig.inputs, rig.outputs) == 107004


def test_same_model_on_two_streams_at_once_is_refused(sim, acl, om_files):
    sim.configure(device_ms=300)
    rig = Rig(acl, om_files["static"])
    other, _ = acl.rt.create_stream()
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, other) == 507011
    assert "already executing on stream" in acl.get_recent_err_msg()
    assert acl.mdl.execute(rig.model_id, rig.inputs, rig.outputs) == 507011
    assert acl.rt.synchronize_stream(rig.stream) == 0
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, other) == 0
    assert acl.rt.synchronize_stream(other) == 0


def test_double_free_unknown_pointer_and_use_after_free(acl):
    ptr, _ = acl.rt.malloc(64, 0)
    assert acl.rt.free(ptr) == 0
    assert acl.rt.free(ptr) == 100000
    assert "double free" in acl.get_recent_err_msg()
    assert acl.rt.free(ptr + 8) == 100000
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy(host, 64, ptr, 64, D2H) == 100000
    assert "use after free" in acl.get_recent_err_msg()
    assert acl.rt.free_host(host) == 0
    assert acl.rt.free_host(host) == 100000
    assert acl.rt.free_host(12345) == 100000


def test_copies_refuse_freed_pinned_memory(acl):
    dev, _ = acl.rt.malloc(16, 0)
    host, _ = acl.rt.malloc_host(16)
    ctypes.memmove(host, b"x" * 16, 16)
    assert acl.rt.free_host(host) == 0
    assert acl.rt.memcpy(dev, 16, host, 16, H2D) == 100000
    assert "which was freed" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(host + 4, 8, dev, 8, D2H) == 100000  # writing into it, from inside the block
    assert "which was freed" in acl.get_recent_err_msg()
    with pytest.raises(ValueError, match="was freed"):
        acl.util.ptr_to_bytes(host, 16)


def test_freed_pinned_blocks_stay_reserved_up_to_the_quarantine_size():
    memory = HostMemory(quarantine=100)
    first, second = memory.allocate(64), memory.allocate(64)
    memory.free(first.addr)
    assert memory.freed_block(first.addr + 10, 4) is first
    assert memory.freed_block(first.addr + 64, 4) is None  # just past its end
    memory.free(second.addr)  # 128 freed bytes > 100: the oldest is released
    assert memory.freed_block(first.addr, 4) is None
    assert memory.freed_block(second.addr, 64) is second


def test_queued_copy_into_pinned_memory_freed_before_it_runs_fails(sim, acl, om_files):
    rig = Rig(acl, om_files["static"])
    host, _ = acl.rt.malloc_host(24)
    sim.configure(device_ms=300)
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    dev_y, _, _ = rig.out_ptrs[0]
    assert acl.rt.memcpy_async(host, 24, dev_y, 24, D2H, rig.stream) == 0
    assert acl.rt.free_host(host) == 0
    assert acl.rt.synchronize_stream(rig.stream) == 100000
    assert "which was freed" in acl.get_recent_err_msg()


def test_copies_over_capacity_or_past_an_allocation_are_refused(acl):
    dev, _ = acl.rt.malloc(16, 0)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy(dev, 16, host, 32, H2D) == 100000  # count > dest_max
    assert "exceeds the destination capacity" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(dev, 64, host, 32, H2D) == 100000  # past the 16-byte allocation
    assert "run past the end" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(dev, 16, host, 16, D2H) == 100000  # kind says the source is device memory
    assert acl.rt.memcpy(dev, 16, host, 16, 9) == 100000
    assert "not an aclrtMemcpyKind (0 ACL_MEMCPY_HOST_TO_HOST, 1 ACL_MEMCPY_HOST_TO_DEVICE" in acl.get_recent_err_msg()


def test_malloc_takes_a_policy_with_optional_bandwidth_flags(acl):
    assert acl.rt.malloc(16, 8) == (0, 100000)
    assert "not an aclrtMemMallocPolicy (0 ACL_MEM_MALLOC_HUGE_FIRST" in acl.get_recent_err_msg()
    assert acl.rt.malloc(16, 2 | 0x1000)[1] == 0  # NORMAL_ONLY | ACL_MEM_TYPE_HIGH_BAND_WIDTH


def test_async_copies_take_aligned_addresses_and_any_host_memory(acl):
    """64-byte aligned source and destination (CANN 8.5/9.0 aclrtMemcpyAsync.md 44-45): else 107008.
    Host memory not from malloc_host is accepted and the call returns once the copy is done
    (11-03_memory_copy_and_set.md 136-140)."""
    stream, _ = acl.rt.create_stream()
    dev, _ = acl.rt.malloc(64, 0)
    backing = np.zeros(32, np.float32)
    start = (-backing.ctypes.data) % 64 // 4
    plain = backing[start : start + 4]
    plain[:] = [1.0, 2.0, 3.0, 4.0]
    assert acl.rt.memcpy_async(dev, 64, plain.ctypes.data + 4, 12, H2D, stream) == 107008
    assert "not 64-byte aligned" in acl.get_recent_err_msg()
    assert acl.rt.memcpy_async(dev + 16, 48, plain.ctypes.data, 16, H2D, stream) == 107008
    assert acl.rt.memcpy_async(dev, 64, plain.ctypes.data, 16, H2D, stream) == 0
    back = np.zeros(4, np.float32)
    assert acl.rt.memcpy(back.ctypes.data, 16, dev, 16, D2H) == 0  # no synchronize: the copy is done
    assert back.tolist() == [1.0, 2.0, 3.0, 4.0]
    host, _ = acl.rt.malloc_host(8)
    assert acl.rt.memcpy_async(dev, 64, host, 16, H2D, stream) == 100000  # past the pinned block
    assert acl.rt.free_host(host) == 0 and acl.rt.free(dev) == 0 and acl.rt.destroy_stream(stream) == 0


def test_batch_that_is_not_a_gear_is_refused(acl, om_files):
    rig = Rig(acl, om_files["batch"])
    assert acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, rig.dyn_index, 3) == 145013
    assert acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, rig.dyn_index, 0) == 100000
    assert acl.mdl.set_dynamic_batch_size(rig.model_id, rig.inputs, 0, 2) == 100000  # wrong index


def test_executing_without_a_gear_fails_at_synchronize(acl, om_files):
    rig = Rig(acl, om_files["batch"])
    assert acl.mdl.execute_async(rig.model_id, rig.inputs, rig.outputs, rig.stream) == 0
    assert acl.rt.synchronize_stream(rig.stream) == 507011
    assert "not a gear" in acl.get_recent_err_msg()


def test_undersized_dataset_buffers_are_refused(acl, om_files):
    rig = Rig(acl, om_files["static"])
    small, _ = acl.rt.malloc(8, 0)
    dataset = acl.mdl.create_dataset()
    acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(small, 8))
    assert acl.mdl.execute(rig.model_id, dataset, rig.outputs) == 100017
    assert "needs 32" in acl.get_recent_err_msg()
    wrong_count = acl.mdl.create_dataset()
    assert acl.mdl.execute(rig.model_id, wrong_count, rig.outputs) == 100017
    lying = acl.mdl.create_dataset()  # claims 32 bytes on an 8-byte allocation
    acl.mdl.add_dataset_buffer(lying, acl.create_data_buffer(small, 32))
    assert acl.mdl.execute(rig.model_id, lying, rig.outputs) == 100000


def test_devices_handles_and_sizes_are_checked(sim, acl, om_files):
    assert acl.rt.set_device(99) == 107001
    assert acl.rt.create_context(99) == (0, 107001)
    assert acl.rt.reset_device(3) == 100000  # never set
    assert acl.rt.synchronize_stream(12345) == 107000
    for unknown in (
        acl.rt.destroy_event(64),
        acl.rt.set_context(64),
        acl.mdl.destroy_desc(64),
        acl.mdl.destroy_dataset(64),
        acl.destroy_data_buffer(64),
    ):
        assert unknown == 100000
    assert acl.mdl.unload(999) == 100011
    assert acl.rt.malloc(0, 0) == (0, 100000) and acl.rt.malloc_host(0) == (0, 100000)
    assert acl.rt.malloc(64 << 30, 0) == (0, 207001)
    dev, _ = acl.rt.malloc(16, 0)
    assert acl.rt.free_host(dev) == 100000
    assert acl.rt.memset(dev, 8, 0, 16) == 100000  # count > max_count
    host, _ = acl.rt.malloc_host(16)
    assert acl.rt.memcpy(dev, 16, 0, 16, H2D) == 100000
    assert "NULL host address" in acl.get_recent_err_msg()
    with pytest.raises(ValueError, match="NULL"):
        acl.util.ptr_to_bytes(0, 4)
    with pytest.raises(OverflowError):
        acl.rt.set_device(1 << 40)
    sim.configure(device_memory=64)
    assert acl.mdl.load_from_file(str(om_files["static"])) == (0, 207001)


def test_desc_and_dataset_queries_are_checked(acl, om_files):
    rig = Rig(acl, om_files["static"])
    empty = acl.mdl.create_desc()
    assert acl.mdl.get_input_dims(empty, 0) == ({}, 100000)
    assert "call get_desc first" in acl.get_recent_err_msg()
    assert acl.mdl.get_input_index_by_name(rig.desc, "nope") == ((1 << 64) - 1, 100000)
    assert acl.mdl.get_dataset_buffer(rig.inputs, 5) == 0
    assert "no index 5" in acl.get_recent_err_msg()


def test_dynamic_input_buffer_and_dims_arguments_are_checked(acl, om_files):
    rig = Rig(acl, om_files["batch"])
    tiny, _ = acl.rt.malloc(2, 0)
    # a NULL address: the ACL layer answers 100000 before GE's 145011 (model.cpp 1856-1860, 1897-1901,
    # 1941-1944)
    for address, size, code in ((tiny, 2, 145012), (0, 8, 100000)):
        dataset = acl.mdl.create_dataset()
        acl.mdl.add_dataset_buffer(dataset, rig.in_ptrs[0][2])
        acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(address, size))
        assert acl.mdl.set_dynamic_batch_size(rig.model_id, dataset, rig.dyn_index, 2) == code
    assert "NULL address" in acl.get_recent_err_msg()
    dims = Rig(acl, om_files["dims"])
    null_dims = acl.mdl.create_dataset()
    for _ in range(dims.dyn_index):
        acl.mdl.add_dataset_buffer(null_dims, acl.create_data_buffer(tiny, 2))
    acl.mdl.add_dataset_buffer(null_dims, acl.create_data_buffer(0, 16))
    gear = {"dimCount": 4, "dims": [1, 2, 1, 2]}
    assert acl.mdl.set_input_dynamic_dims(dims.model_id, null_dims, dims.dyn_index, gear) == 100000
    hw = Rig(acl, om_files["hw"])
    null_hw = acl.mdl.create_dataset()
    for _ in range(hw.dyn_index):
        acl.mdl.add_dataset_buffer(null_hw, acl.create_data_buffer(tiny, 2))
    acl.mdl.add_dataset_buffer(null_hw, acl.create_data_buffer(0, 16))
    assert acl.mdl.set_dynamic_hw_size(hw.model_id, null_hw, hw.dyn_index, 8, 8) == 100000
    assert acl.mdl.set_input_dynamic_dims(dims.model_id, dims.inputs, dims.dyn_index, {"dims": [1]}) == 100000
    assert acl.mdl.get_input_dynamic_gear_count(dims.desc, -1) == (2, 0)
    gears, ret = acl.mdl.get_input_dynamic_dims(dims.desc, -1, 3)  # more than the model's 2: zeroed past them
    assert (ret, len(gears), gears[2]) == (0, 3, {"name": "", "dimCount": 0, "dims": []})
    assert acl.mdl.get_input_dynamic_dims(dims.desc, -1, 1) == (None, 100000)


def test_a_damaged_sim_om_is_refused(acl, om_files, tmp_path):
    damaged = tmp_path / "damaged.om"
    damaged.write_bytes(om_files["static"].read_bytes()[:40])
    assert acl.mdl.load_from_file(str(damaged)) == (0, 100013)
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_bytes(b"just some text")
    assert acl.mdl.load_from_file(str(not_a_model)) == (0, 100003)


def test_real_cann_om_is_refused_clearly(acl, tmp_path):
    fake = tmp_path / "real.om"
    fake.write_bytes(b"IMOD" + bytes(252))
    assert acl.mdl.load_from_file(str(fake)) == (0, 100003)
    assert "only a real Ascend NPU" in acl.get_recent_err_msg()
    assert acl.mdl.load_from_file(str(tmp_path / "missing.om")) == (0, 100014)
    assert acl.mdl.query_size(str(fake)) == (0, 0, 100003)


def test_arguments_are_positional_only_and_typed_like_the_binding(acl):
    with pytest.raises(TypeError, match="keyword"):
        acl.rt.create_context(device_id=0)
    with pytest.raises(TypeError, match="exactly 2"):
        acl.rt.malloc(16)
    with pytest.raises(TypeError, match="must be int"):
        acl.rt.free(None)
    with pytest.raises(TypeError, match="must be int"):
        acl.rt.free(1.0)
    with pytest.raises(TypeError, match="must be str"):
        acl.mdl.load_from_file(b"model.om")
    with pytest.raises(TypeError):
        acl.init(None)
    assert acl.rt.malloc(16, 0)[1] == 0
    assert acl.mdl.get_input_dims(0, -1) == ({}, 100000)  # "k" masks -1 instead of refusing it


@pytest.mark.parametrize("sample", OM_SAMPLES or [None], ids=[p.name for p in OM_SAMPLES] or ["absent"])
def test_public_cann_samples_are_refused_as_real_models(acl, sample):
    if sample is None:
        pytest.skip("no public .om samples on this machine")
    model_id, ret = acl.mdl.load_from_file(str(sample))
    assert ret == 100003
    assert "only a real Ascend NPU" in acl.get_recent_err_msg()
