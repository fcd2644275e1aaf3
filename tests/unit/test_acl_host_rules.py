"""The acl engine's host rules on the simulator: device run mode, one weight buffer for every slot, the
device's stream and event limits, fatal codes, acl.json, data dump, profiling, and gears set only
when they change. Each rule cites the CANN source it comes from (docs/fidelity.md lists them)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend import sim
from ge_python_backend.ascend.constants import DEVICE_FATAL_RETS, MemcpyKind
from ge_python_backend.engines.acl.engine import prepare_options
from ge_python_backend.engines.acl.runtime import AclError
from ge_python_backend.errors import ConfigError, EngineError, InputError
from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.sim.dfx import DUMP_MARKER, PROFILING_MARKER
from tests.support import acl_sim_nets as nets
from tests.support.acl_sim_nets import open_sim
from tests.support.fakes import declared

#: hicann/runtime include/external/acl/error_codes/rt_error_codes.h: code -> (name, header comment)
RT_ERROR_CODES = {
    107022: ("ACL_ERROR_RT_DEVICE_TASK_ABORT", "device task aborting"),  # line 43
    207004: ("ACL_ERROR_RT_NO_DEVICE", "no device"),  # line 73
    507010: ("ACL_ERROR_RT_LOST_HEARTBEAT", "ts lost heartbeat"),  # line 102
    507011: ("ACL_ERROR_RT_MODEL_EXECUTE", "model execute failed"),  # line 103
    507033: ("ACL_ERROR_RT_DEV_SETUP_ERROR", "device setup error"),  # line 125
    507053: ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "device MEM ERROR"),  # line 145
    507054: ("ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR", "hbm Multi-bit ECC error"),  # line 146
    507055: ("ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR", "suspect device MEM ERROR"),  # line 147
    507899: ("ACL_ERROR_RT_DRV_INTERNAL_ERROR", "drv internal error"),  # line 150
    507901: ("ACL_ERROR_RT_SOCKET_CLOSE", "hdc disconnect"),  # line 152
    507914: ("ACL_ERROR_RT_L3_PORT_ERROR", "l3 port error"),  # line 165
}
#: device marked down (engine.cc 716-770) or a device-wide failure status every later submit returns
#: (runtime.cc 5553-5662, device_error_core_proc.cc 1022-1032, context.cc 2889-2943)
DEVICE_LOST_OR_STICKY = {507010, 507901, 507053, 507054, 507914}
#: Atlas inference series (310P): 1024 streams (06_stream_management.md 89-91), 1023 events
#: (07_event_management.md 102-104); the simulator's default SoC is Ascend310P3
STREAMS_310P, EVENTS_310P = 1024, 1023

pytestmark = pytest.mark.usefixtures("clean_simulator")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostrules")
    three = nets.three_inputs(folder / "three.onnx")
    matmul = nets.matmul_add(folder / "matmul.onnx")
    sim.sim_compile(three, folder / "dims.om", input_shapes="s:2,3;b:-1,-1;a:-1,4", dynamic_dims="2,3,1;4,5,2;1,1,3")
    sim.sim_compile(matmul, folder / "batch.om", batch_gears="1,2,4,8")
    sim.sim_compile(matmul, folder / "range.om", input_shapes="x:1~8,4")
    return {"dir": folder, "three": three, "matmul": matmul}


DIMS_SHAPES = [{"a": (a0, 4), "b": (b0, b1), "s": (2, 3)} for b0, b1, a0 in ((2, 3, 1), (4, 5, 2), (1, 1, 3))]


def run_and_compare(engine, onnx_path, shapes, seed, slot=0):
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    views = engine.slots[slot].inputs(shapes)
    for name, value in feeds.items():
        views[name][...] = value
    outputs = engine.slots[slot].run()
    for name, want in nets.reference(onnx_path, feeds).items():
        np.testing.assert_allclose(outputs[name], want, rtol=1e-3 if want.dtype == np.float16 else 1e-6)


def calls_since(before):
    now = sim.get_simulator().calls
    return {name: now[name] - before.get(name, 0) for name in now if now[name] != before.get(name, 0)}


class Context:
    """A context of the test's own for raw pyACL calls."""

    def __enter__(self):
        self.acl = acl = sim.get_acl()
        assert acl.init() in (0, 100002)
        assert acl.rt.set_device(0) == 0
        self.context, _ = acl.rt.create_context(0)
        self.stream, _ = acl.rt.create_stream()
        return acl

    def __exit__(self, *exc):
        assert self.acl.rt.destroy_stream(self.stream) == 0
        assert self.acl.rt.destroy_context(self.context) == 0
        assert self.acl.rt.reset_device(0) == 0


# --- a. device run mode ----------------------------------------------------------------------


@pytest.fixture
def device_mode():
    assert sim.live() == []  # the run mode changes only with no memory allocated
    sim.configure(run_mode="device")
    yield
    sim.configure(run_mode="host")


def test_device_run_mode_stages_nothing_and_copies_nothing(built, device_mode):
    """ACL_DEVICE: host and device are one (11-02_host_memory_management.md 71-78), so the engine
    uses the model's device buffers as the client's memory, as the GE samples do
    (cblas_api_invoke_operator_sample_code.md 109-158): no malloc_host, no copies."""
    before = dict(sim.get_simulator().calls)
    for path, onnx_path, shape_sets in (
        (built["dir"] / "dims.om", built["three"], DIMS_SHAPES),
        (built["dir"] / "range.om", built["matmul"], [{"x": (b, 4)} for b in (1, 5, 8)]),
    ):
        engine = open_sim(path, slots=2)
        try:
            assert engine.device_mode is True and "device run mode" in engine.describe()
            engine.bind_thread()
            for seed, shapes in enumerate(shape_sets * 2):
                run_and_compare(engine, onnx_path, shapes, seed, slot=seed % 2)
        finally:
            engine.close()
    calls = calls_since(before)
    assert calls.get("execute_async", 0) == 12
    assert {n: calls.get(n, 0) for n in ("malloc_host", "memcpy", "memcpy_async")} == {
        "malloc_host": 0,
        "memcpy": 0,
        "memcpy_async": 0,
    }


@pytest.mark.parametrize("mode, aligned", [("host", True), ("device", False)])
def test_malloc_host_is_64_byte_aligned_only_in_host_mode(mode, aligned):
    """11-02_host_memory_management.md 5: "the start address is 64-byte aligned"; lines 71-78: in RC /
    open Control CPU form it is device memory "and you must handle the alignment yourself"."""
    sim.configure(run_mode=mode)
    with Context() as acl:
        assert acl.rt.get_run_mode() == (0 if mode == "device" else 1, 0)  # ACL_DEVICE 0, ACL_HOST 1 (acl_rt.h 105-108)
        ptr, ret = acl.rt.malloc_host(256)
        assert ret == 0
        assert (ptr % 64 == 0) is aligned
        assert acl.rt.free_host(ptr) == 0


@pytest.mark.parametrize("mode", ["host", "device"])
def test_memcpy_async_with_an_unaligned_address_is_107008(mode):
    """CANN 8.5/9.0 aclrtMemcpyAsync.md 44-45: both addresses 64-byte aligned; 107008
    ACL_ERROR_RT_ADDR_UNALIGNED (rt_error_codes.h 29)."""
    sim.configure(run_mode=mode)
    with Context() as acl:
        context = acl.rt.get_context()[0]
        assert context
        device, _ = acl.rt.malloc(256, 0)
        host, _ = acl.rt.malloc_host(256)
        aligned_host = (host + 63) // 64 * 64
        stream = acl.rt.create_stream()[0]
        try:
            h2d = MemcpyKind.HOST_TO_DEVICE
            assert acl.rt.memcpy_async(device, 128, aligned_host + 8, 64, h2d, stream) == 107008
            assert acl.rt.memcpy_async(device + 8, 128, aligned_host, 64, h2d, stream) == 107008
            assert "not 64-byte aligned" in acl.get_recent_err_msg()
            assert acl.rt.memcpy_async(device, 128, aligned_host, 64, h2d, stream) == 0
            assert acl.rt.synchronize_stream(stream) == 0
        finally:
            assert acl.rt.destroy_stream(stream) == 0
            assert acl.rt.free(device) == 0
            assert acl.rt.free_host(host) == 0


# --- b. one weight buffer for every slot --------------------------------------------------------

_LEDGER = re.compile(r"^device malloc (0x[0-9a-f]+) \((\d+) bytes, device 0\)$")


def device_allocations():
    """(address, bytes) of every live device allocation in the simulator's ledger."""
    return [(int(m[1], 16), int(m[2])) for line in sim.live() if (m := _LEDGER.match(line))]


def model_sizes(acl, path):
    """(work, weight, I/O bytes) from query_size and the desc (every input and output size)."""
    work, weight, ret = acl.mdl.query_size(str(path))
    assert ret == 0
    model_id, _ = acl.mdl.load_from_file(str(path))
    desc = acl.mdl.create_desc()
    acl.mdl.get_desc(desc, model_id)
    io = sum(acl.mdl.get_input_size_by_index(desc, i) for i in range(acl.mdl.get_num_inputs(desc)))
    io += sum(acl.mdl.get_output_size_by_index(desc, i) for i in range(acl.mdl.get_num_outputs(desc)))
    acl.mdl.destroy_desc(desc)
    acl.mdl.unload(model_id)
    return work, weight, io


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_every_slot_loads_over_one_weight_buffer(built, slots):
    """aclmdlLoadFromFileWithMem.md 47-48: loads of the same model may share weightPtr (weights are
    read-only in inference); each needs its own work memory (45-46)."""
    path = built["dir"] / "dims.om"
    with Context() as acl:
        work, weight, io = model_sizes(acl, path)
    assert weight not in (work, io)  # so the ledger tells the weight buffer apart
    before = dict(sim.get_simulator().calls)
    engine = open_sim(path, slots=slots)
    try:
        allocations = device_allocations()
        weights = {m.weight_ptr for m in sim.get_simulator().models.values()}
        assert len(weights) == 1 and 0 not in weights
        assert [size for addr, size in allocations if addr in weights] == [weight]
        assert [size for _, size in allocations].count(weight) == 1
        assert sum(size for _, size in allocations) == slots * (work + io) + weight
        calls = calls_since(before)
        assert calls["load_from_file_with_mem"] == slots and calls.get("load_from_file", 0) == 0
        text = engine.describe()
        assert f"= {slots} x (work {work} B + I/O buffers {io} B) + 1 x weights {weight} B (shared)" in text
        engine.bind_thread()
        for slot in range(slots):
            run_and_compare(engine, built["three"], DIMS_SHAPES[slot % 3], slot, slot=slot)
    finally:
        engine.close()


def test_a_range_model_loads_every_copy_with_system_managed_memory(built):
    """A model whose input shapes are not fixed cannot have user-managed memory (aclmdlQuerySize.md
    31), and RT2 would take a short weight buffer silently (sink_weight_assigner.cc 86-93): each slot
    of a shape-range model loads with load_from_file, no weight or work memory is allocated for it,
    although query_size still answers (work 0, model_manager.cc 2404-2409)."""
    path = built["dir"] / "range.om"
    with Context() as acl:
        work, weight, ret = acl.mdl.query_size(str(path))
    assert (work, ret) == (0, 0) and weight > 0
    before = dict(sim.get_simulator().calls)
    engine = open_sim(path, slots=2)
    try:
        models = list(sim.get_simulator().models.values())
        assert len(models) == 2 and all(m.weight_ptr == 0 and m.work_ptr == 0 for m in models)
        assert [size for _, size in device_allocations()].count(weight) == 0
        calls = calls_since(before)
        assert calls["load_from_file"] == 2 and "load_from_file_with_mem" not in calls and "query_size" not in calls
        assert "system-managed memory" in engine.describe()
        engine.bind_thread()
        run_and_compare(engine, built["matmul"], {"x": (3, 4)}, 0)
    finally:
        engine.close()


def test_without_sharing_every_slot_loads_its_own_weights(built):
    path = built["dir"] / "dims.om"
    with Context() as acl:
        work, weight, io = model_sizes(acl, path)
    before = dict(sim.get_simulator().calls)
    engine = open_sim(path, slots=3, acl_share_weights=False)
    try:
        calls = calls_since(before)
        assert calls["load_from_file"] == 3 and calls.get("load_from_file_with_mem", 0) == 0
        assert [size for _, size in device_allocations()].count(weight) == 0  # the runtime holds them
        engine.bind_thread()
        free, total = engine.device_memory()
        assert total - free == 3 * (work + weight + io)
        assert f"= 3 x (work {work} B + weights {weight} B + I/O buffers {io} B)" in engine.describe()
    finally:
        engine.close()


def test_freeing_the_weights_of_a_loaded_model_is_refused(built):
    """The weight buffer "must not be freed while it is shared" (aclmdlLoadFromFileWithMem.md 47-48);
    the simulator refuses what the device would turn into a fault at the next execute."""
    engine = open_sim(built["dir"] / "dims.om", slots=2)
    try:
        engine.bind_thread()
        (weights,) = {m.weight_ptr for m in sim.get_simulator().models.values()}
        acl = sim.get_acl()
        assert acl.rt.free(weights) == 100000
        assert "weight memory of loaded model(s)" in acl.get_recent_err_msg()
        run_and_compare(engine, built["three"], DIMS_SHAPES[0], 0)
    finally:
        engine.close()


# --- c. stream and event limits -----------------------------------------------------------------


def test_a_config_above_the_stream_limit_is_refused_before_anything_is_made(built):
    """Per instance (a process): the device's default stream (04_device_management.md 86), the
    engine context's two on 310P in EP form (05_context_management.md 69-73), and per model copy its
    slot's stream and the model's own (davinci_model.cc 1439-1515): 20 x (1 + 2 + 64 x 2) = 2620."""
    before = dict(sim.get_simulator().calls)
    with pytest.raises(ConfigError) as info:
        open_sim(built["dir"] / "batch.om", slots=64, peers=20)
    message = str(info.value)
    assert "need 2620 streams (131 per instance" in message and f"the device has {STREAMS_310P}" in message
    assert "parameter 'streams'" in message and "20 instance(s) x 64 stream(s)" in message
    assert calls_since(before).get("create_stream", 0) == 0
    assert open_sim(built["dir"] / "batch.om", slots=1, peers=200).close() is None  # 200 x 5 = 1000: fits
    with pytest.raises(ConfigError, match=r"need 1025 streams \(5 per instance"):
        open_sim(built["dir"] / "batch.om", slots=1, peers=205)


def test_a_dynamic_shape_model_counts_the_stream_its_load_makes(built):
    """A dynamic-shape (RT2) load creates a stream until it is done (model.cpp 216-233): one more per
    instance, so 204 instances of a range model need 204 x (1 + 2 + 1 x 2 + 1) = 1224 streams on a
    310P, where 204 of a batch model need 1020 and fit."""
    with pytest.raises(ConfigError, match=r"need 1224 streams \(6 per instance.*the 1 stream a dynamic-shape load"):
        open_sim(built["dir"] / "range.om", slots=1, peers=204)
    assert open_sim(built["dir"] / "batch.om", slots=1, peers=204).close() is None


def test_a_model_compiled_for_another_soc_fails_the_load_naming_both(built, tmp_path):
    """The load checks the model's soc_version against the device's NpuArch (om_file_helper.cc
    259-287): on the simulated Ascend310P3, a model for Ascend910B3 is refused with the SoC to
    compile for; one without soc_version loads."""
    path = tmp_path / "for_910b.om"
    sim.sim_compile(built["matmul"], path, input_shapes="x:2,4", soc_version="Ascend910B3")
    with pytest.raises(
        AclError, match=r"load_from_file_with_mem returned 500002.*Ascend910B3.*--soc_version=Ascend310P3"
    ):
        open_sim(path)
    assert sim.live() == []


def test_a_config_above_the_event_limit_is_refused_unless_timing_events_are_off(built):
    """4 timing events per copy: 8 x 32 x 4 = 1024 > 1023 (07_event_management.md 102-104)."""
    with pytest.raises(ConfigError) as info:
        open_sim(built["dir"] / "batch.om", slots=8, peers=32, acl_timing_events=True)
    message = str(info.value)
    assert "need 1024 events (4 timing events per copy" in message and f"the device has {EVENTS_310P}" in message
    assert "acl_timing_events false" in message and "parameter 'streams'" in message
    before = dict(sim.get_simulator().calls)
    open_sim(built["dir"] / "batch.om", slots=8, peers=32, acl_timing_events=False).close()
    assert calls_since(before).get("create_event", 0) == 0


@pytest.fixture(scope="module")
def resourceful(tmp_path_factory, built):
    """A batch model whose file records stream_num 3 and event_num 5, as ATC records them
    (graph_builder.cc 189-190)."""
    path = tmp_path_factory.mktemp("resources") / "batch_3_5.om"
    sim.sim_compile(built["matmul"], path, batch_gears="1,2,4,8", stream_num=3, event_num=5)
    return path


def test_the_limit_check_counts_the_streams_and_events_the_file_records(resourceful):
    """Per instance 1 + 2 + 1 x (1 + 3) = 7 streams: 146 instances take 1022 of 1024, 147 take 1029;
    per copy 4 timing events + 5 of the model (davinci_model.cc 1460-1509): 114 x 9 = 1026 and,
    without timing events, 205 x 5 = 1025 events of 1023."""
    open_sim(resourceful, slots=1, peers=146, acl_timing_events=False).close()
    with pytest.raises(ConfigError, match=r"need 1029 streams \(7 per instance.*3 stream\(s\) and 5 event\(s\)"):
        open_sim(resourceful, slots=1, peers=147, acl_timing_events=False)
    with pytest.raises(ConfigError, match=r"need 1026 events \(4 timing events per copy") as info:
        open_sim(resourceful, slots=1, peers=114)
    assert "stream_num/event_num in the file" in str(info.value)
    with pytest.raises(ConfigError, match=r"need 1025 events \(0 timing events per copy") as info:
        open_sim(resourceful, slots=205, peers=1, acl_timing_events=False)  # 823 streams fit
    assert "acl_timing_events" not in str(info.value)


def test_the_simulator_counts_a_models_streams_and_events_and_refuses_a_load_without_room(resourceful):
    """A load takes the model's stream_num streams and event_num events; without room for them the
    runtime's 207008 / 207007 (rt_error_codes.h 76-77; how GE passes them up is inferred)."""
    with Context() as acl:
        state = sim.get_simulator()
        before = (state.streams_in_use(0), state.events_in_use(0))
        model_id, ret = acl.mdl.load_from_file(str(resourceful))
        assert ret == 0
        assert (state.streams_in_use(0), state.events_in_use(0)) == (before[0] + 3, before[1] + 5)
        streams = []
        try:
            while state.streams_in_use(0) < STREAMS_310P - 2:
                stream, ret = acl.rt.create_stream()
                assert ret == 0
                streams.append(stream)
            assert acl.mdl.load_from_file(str(resourceful)) == (0, 207008)
            assert "creates 3 stream(s) at load" in acl.get_recent_err_msg()
        finally:
            for stream in streams:
                assert acl.rt.destroy_stream(stream) == 0
            assert acl.mdl.unload(model_id) == 0


@pytest.mark.parametrize("mode, context_streams", [("host", 2), ("device", 1)])
def test_the_simulator_refuses_stream_1025_and_event_1024(mode, context_streams):
    """207008 ACL_ERROR_RT_NO_STREAM_RESOURCE, 207007 ACL_ERROR_RT_NO_EVENT_RESOURCE
    (rt_error_codes.h 76-77; errcode_manage.cc 93-96). Already in use: the device's default stream
    (04_device_management.md 86) and the test context's own, 2 on 310P in EP form and 1 in device
    run mode (05_context_management.md 69-73), and the context helper's stream."""
    sim.configure(run_mode=mode)
    with Context() as acl:
        in_use = 1 + context_streams + 1
        streams, events = [], []
        try:
            while len(streams) < STREAMS_310P - in_use:
                stream, ret = acl.rt.create_stream()
                assert ret == 0
                streams.append(stream)
            assert acl.rt.create_stream() == (0, 207008)  # the 1025th stream of the device
            assert "has 1024 streams, all in use" in acl.get_recent_err_msg()
            assert acl.rt.create_context(0) == (0, 207008)  # a context brings streams too
            while len(events) < EVENTS_310P:
                event, ret = acl.rt.create_event()
                assert ret == 0
                events.append(event)
            assert acl.rt.create_event() == (0, 207007)
        finally:
            for stream in streams:
                assert acl.rt.destroy_stream(stream) == 0
            for event in events:
                assert acl.rt.destroy_event(event) == 0


def test_without_timing_events_none_is_made_or_recorded(built):
    before = dict(sim.get_simulator().calls)
    engine = open_sim(built["dir"] / "batch.om", slots=2, acl_timing_events=False)
    try:
        engine.bind_thread()
        run_and_compare(engine, built["matmul"], {"x": (4, 4)}, 0)
        times = engine.slots[0].last_times
        assert times.execute > 0 and times.host_to_device == times.device_to_host == 0
    finally:
        engine.close()
    calls = calls_since(before)
    assert calls.get("create_event", 0) == calls.get("record_event", 0) == calls.get("event_elapsed_time", 0) == 0


def test_timing_events_time_one_batch_in_n_and_count_it_for_the_batches_between(built, monkeypatch):
    """acl_timing_every 4: runs 0, 4 and 8 record the 4 events and read 3 elapsed times; the first
    counts once, the others for themselves and the 3 untimed runs before them, so the totals equal
    timing every run. A timed run that fails counts for nothing and the next run is timed."""
    before = dict(sim.get_simulator().calls)
    engine = open_sim(built["dir"] / "batch.om", acl_timing_events=True, acl_timing_every=4)
    rt = sim.get_acl().rt
    try:
        engine.bind_thread()
        real = rt.event_elapsed_time
        monkeypatch.setattr(rt, "event_elapsed_time", lambda a, b: (0.25, real(a, b)[1]))
        phases = []
        for run in range(9):
            run_and_compare(engine, built["matmul"], {"x": (2, 4)}, run)
            times = engine.slots[0].last_times
            phases.append((times.host_to_device, times.execute, times.device_to_host))
        timed = [i for i, p in enumerate(phases) if any(p)]
        assert timed == [0, 4, 8]
        assert phases[0] == pytest.approx((0.25e-3,) * 3) and phases[4] == pytest.approx((1e-3,) * 3)
        assert sum(p[1] for p in phases) == pytest.approx(9 * 0.25e-3)
        assert calls_since(before).get("record_event", 0) == 3 * 4
        for run in range(3):  # runs 9-11 untimed: run 12 is due
            run_and_compare(engine, built["matmul"], {"x": (2, 4)}, run)
        copy = rt.memcpy_async
        monkeypatch.setattr(rt, "memcpy_async", lambda *args: 100000)
        with pytest.raises(EngineError, match="memcpy_async"):
            run_and_compare(engine, built["matmul"], {"x": (2, 4)}, 0)
        monkeypatch.setattr(rt, "memcpy_async", copy)
        run_and_compare(engine, built["matmul"], {"x": (2, 4)}, 1)
        assert engine.slots[0].last_times.execute == pytest.approx(1e-3)  # timed, for runs 9-11 and itself
    finally:
        engine.close()


@pytest.mark.parametrize("ret", [107006, 507000])
def test_an_unreadable_event_never_fails_a_batch(built, monkeypatch, ret):
    """Elapsed time fails with 507000 for an event never recorded and 107006 before it completed
    (event.cc 345-362, 1247-1279); the outputs are ready, so the batch succeeds with its wall time."""
    engine = open_sim(built["dir"] / "batch.om", acl_timing_events=True, acl_timing_every=1)
    try:
        engine.bind_thread()
        monkeypatch.setattr(sim.get_acl().rt, "event_elapsed_time", lambda start, end: (0.0, ret))
        run_and_compare(engine, built["matmul"], {"x": (2, 4)}, 0)
        times = engine.slots[0].last_times
        assert times.execute > 0 and times.host_to_device == 0
        monkeypatch.undo()
        run_and_compare(engine, built["matmul"], {"x": (2, 4)}, 1)
        assert engine.slots[0].last_times.host_to_device > 0  # read from the events again
    finally:
        engine.close()


# --- d. fatal codes -----------------------------------------------------------------------------


def runner_for(engine):
    return Runner(
        engine,
        batching=True,
        max_batch_size=8,
        outputs=declared(engine.spec),
        preprocess=lambda inputs, info: inputs,
        postprocess=lambda outputs, info: outputs,
    )


def answer(runner, x, parameters=None, request_id=""):
    """One request through ``runner``: (outputs, error)."""
    done = threading.Event()
    result = []

    def respond(outputs, error):
        result.append(({n: np.array(a) for n, a in outputs.items()} if outputs else None, error))
        done.set()

    runner.submit([Request(RequestInfo(request_id=request_id, parameters=parameters or {}), {"x": x}, respond)])
    assert done.wait(30)
    return result[0]


def test_the_fatal_codes_include_every_device_lost_or_sticky_code():
    assert DEVICE_LOST_OR_STICKY <= DEVICE_FATAL_RETS
    assert 507011 not in DEVICE_FATAL_RETS and 507056 not in DEVICE_FATAL_RETS  # a task failure; a retryable link


@pytest.mark.parametrize("code", sorted(DEVICE_FATAL_RETS) + [507011])
def test_a_fatal_code_takes_the_model_out_of_service(built, code):
    name, meaning = RT_ERROR_CODES[code]
    fatal = code in DEVICE_FATAL_RETS
    engine = open_sim(built["dir"] / "batch.om", acl_sim_faults=sim.FaultSchedule.parse(f"execute_async:1={code}"))
    runner = runner_for(engine)
    x = np.ones((2, 4), np.float32)
    try:
        outputs, error = answer(runner, x)
        assert outputs is None and isinstance(error, AclError)
        assert error.ret == code and error.fatal is fatal
        assert f"acl.mdl.execute_async returned {code} {name} ({meaning})" in str(error)
        assert (runner.out_of_service is not None) is fatal
        before = dict(sim.get_simulator().calls)
        outputs, later = answer(runner, x)
        if fatal:  # fails fast, naming the cause, without touching the device
            assert outputs is None and isinstance(later, EngineError) and later.fatal
            assert "out of service" in str(later) and name in str(later)
            assert "execute_async" not in calls_since(before)
        else:
            assert later is None
            np.testing.assert_allclose(outputs["y"], nets.reference(built["matmul"], {"x": x})["y"], rtol=1e-6)
    finally:
        runner.close()
        engine.close()


# --- e. acl.json ----------------------------------------------------------------------------------


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


_ACL_JSON_SCRIPT = """
import sys
import numpy as np
from ge_python_backend.engines import open_engine
engine = open_engine("acl-sim", sys.argv[1], device_id=0, slots=1, options={"acl_json": sys.argv[2]})
engine.bind_thread()
for batch in (1, 4):
    views = engine.slots[0].inputs({"x": (batch, 4)})
    views["x"][...] = 1.0
    engine.slots[0].run()
engine.close()
"""


def test_an_acl_json_with_dump_loads_and_the_model_is_dumped_at_each_run(built, tmp_path):
    """acl.json is read once, at the first acl.init of the process (acl.cpp 387-392), hence a process
    of its own; dump is on with a non-empty dump_list (dump_config_converter.cpp 995-1010)."""
    dump = tmp_path / "dump"
    dump.mkdir()
    config = write_json(tmp_path / "acl.json", {"dump": {"dump_path": str(dump), "dump_list": [{"model_name": "m"}]}})
    done = subprocess.run(
        [sys.executable, "-c", _ACL_JSON_SCRIPT, str(built["dir"] / "batch.om"), str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (dump / DUMP_MARKER).read_text().splitlines()]
    assert len(lines) == 2 and {line["mode"] for line in lines} == {"output"}  # dump_mode default output


@pytest.mark.parametrize(
    "option, section, key",
    [
        ("acl_json", {"dump": {"dump_path": ".", "dump_list": [], "dump_pth": "."}}, "dump.dump_pth"),
        ("acl_json", {"profiler": {"switch": "on", "outputs": "."}}, "profiler.outputs"),
        ("acl_dump_config", {"dump": {"dump_path": ".", "dump_list": [], "dump_mod": "all"}}, "dump.dump_mod"),
    ],
)
def test_an_unknown_key_under_dump_or_profiler_is_refused_at_prepare_time(built, tmp_path, option, section, key):
    """Unknown profiler keys fail acl.init (prof_acl_mgr.cpp 2081-2091); unknown dump keys are ignored
    by CANN (dump_config_converter.cpp reads only its keys), which would hide a typo: both refused."""
    config = write_json(tmp_path / "config.json", section)
    with pytest.raises(ConfigError, match=rf"parameter '{option}': .*{re.escape(key)}"):
        prepare_options({option: str(config)}, built["dir"])


def test_acl_json_profiling_or_dump_and_the_engines_own_are_refused_together(built, tmp_path):
    """acl.json profiling on + acl_profiling_dir: acl.prof.init would fail with 100042
    (prof_acl_mgr.cpp 525-536, 1853-1863); acl.json dump on + acl_dump_config: set_dump would replace
    the acl.json config and finalize_dump switch all dump off (dump_manager.cpp 306-380)."""
    folder = tmp_path / "out"
    folder.mkdir()
    model = built["dir"] / "batch.om"
    profiling_on = write_json(tmp_path / "prof_on.json", {"profiler": {"switch": "on", "output": str(folder)}})
    with pytest.raises(ConfigError, match="parameters 'acl_json' and 'acl_profiling_dir' cannot be combined.*100042"):
        prepare_options({"acl_json": str(profiling_on), "acl_profiling_dir": str(folder)}, model.parent)
    profiling_off = write_json(tmp_path / "prof_off.json", {"profiler": {"switch": "off"}})
    prepare_options({"acl_json": str(profiling_off), "acl_profiling_dir": str(folder)}, model.parent)
    dump = {"dump": {"dump_path": str(folder), "dump_list": [{"model_name": "m"}]}}
    dump_on = write_json(tmp_path / "dump_on.json", dump)
    own = write_json(tmp_path / "own_dump.json", dump)
    with pytest.raises(ConfigError, match="parameters 'acl_json' and 'acl_dump_config' cannot be combined"):
        prepare_options({"acl_json": str(dump_on), "acl_dump_config": str(own)}, model.parent)
    nothing_dumped = write_json(tmp_path / "dump_off.json", {"dump": {"dump_path": str(folder)}})
    prepare_options({"acl_json": str(nothing_dumped), "acl_dump_config": str(own)}, model.parent)


@pytest.fixture
def fresh_simulator():
    """An uninitialised simulator (acl.init reads acl.json only the first time); engines opened
    later re-initialise it (AclRuntime.start)."""
    assert sim.live() == []
    sim.get_simulator().reset()
    yield sim.get_acl()
    sim.get_simulator().reset()


def test_acl_init_answers_as_cann_for_a_bad_dump_and_an_unknown_profiler_key(tmp_path, fresh_simulator):
    """Bad dump -> 100009 (dump.cpp 67-72; dump_manager.cpp 306-322); unknown profiler key -> 100000
    (prof_acl_mgr.cpp 2081-2091, profiling.cpp 100-109); missing file -> 100003
    (acl_rt_impl_base.cpp 154-182); unknown dump and top-level keys are ignored (acl.cpp 271-545)."""
    acl = fresh_simulator
    folder = tmp_path / "out"
    folder.mkdir()
    cases = [
        ({"dump": {"dump_path": str(folder), "dump_list": [{}], "dump_mode": "everything"}}, 100009),
        ({"dump": {"dump_path": str(tmp_path / "missing"), "dump_list": [{}]}}, 100009),
        ({"profiler": {"switch": "on", "output": str(folder), "aicpu_typo": "on"}}, 100000),
        ({"err_msg_mode": "2"}, 100000),
    ]
    for index, (data, ret) in enumerate(cases):
        assert acl.init(str(write_json(tmp_path / f"bad{index}.json", data))) == ret, data
    assert acl.init(str(tmp_path / "none.json")) == 100003
    ignored = {"dump": {"dump_path": str(folder), "dump_list": [{}], "dump_pth": "x"}, "no_such_section": {}}
    assert acl.init(str(write_json(tmp_path / "ignored.json", ignored))) == 0
    assert acl.finalize() == 0


# --- f. data dump and profiling windows ----------------------------------------------------------


def test_dump_follows_the_documented_call_order_and_dumps_each_run(built, tmp_path, monkeypatch):
    """18_dump_configuration.md 53-72: init_dump -> set_dump -> load -> execute -> finalize_dump -> unload."""
    folder = tmp_path / "dump"
    config = write_json(
        tmp_path / "dump.json", {"dump": {"dump_path": str(folder), "dump_list": [{"model_name": "m"}]}}
    )
    acl = sim.get_acl()
    order = []
    for namespace, name in (
        (acl.mdl, "init_dump"),
        (acl.mdl, "set_dump"),
        (acl.mdl, "load_from_file_with_mem"),
        (acl.mdl, "load_from_file"),
        (acl.mdl, "execute_async"),
        (acl.mdl, "finalize_dump"),
        (acl.mdl, "unload"),
    ):
        original = getattr(namespace, name)

        def record(*args, original=original, name=name):
            order.append(name)
            return original(*args)

        monkeypatch.setattr(namespace, name, record)
    engine = open_sim(built["dir"] / "batch.om", slots=2, acl_dump_config=str(config))
    try:
        engine.bind_thread()
        for batch in (1, 8, 2):
            run_and_compare(engine, built["matmul"], {"x": (batch, 4)}, batch)
    finally:
        engine.close()
    collapsed = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert collapsed == [
        "init_dump",
        "set_dump",
        "load_from_file_with_mem",
        "execute_async",
        "finalize_dump",
        "unload",
    ]
    assert order.count("load_from_file_with_mem") == order.count("unload") == 2
    assert len((folder / DUMP_MARKER).read_text().splitlines()) == 3  # one line per execution


def markers(folder: Path) -> list[str]:
    path = folder / PROFILING_MARKER
    return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []


def test_profiling_the_first_batches_starts_at_load_and_stops_after_them(built, tmp_path):
    """aclprofInit before any load, Start before execution, Stop after (19-01_data_profiling_apis.md 19-44)."""
    folder = tmp_path / "prof"
    engine = open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(folder), acl_profiling_batches=3)
    try:
        assert markers(folder) == ["start"]
        engine.bind_thread()
        for batch in range(1, 6):
            run_and_compare(engine, built["matmul"], {"x": (2, 4)}, batch)
            engine.after_batch()  # what the runner calls after each batch
            assert markers(folder) == (["start"] if batch < 3 else ["start", "stop"])
    finally:
        engine.close()
    assert markers(folder) == ["start", "stop"]


def test_dynamic_profiling_mode_refuses_the_profiling_api(built, tmp_path, monkeypatch):
    """PROFILING_MODE=dynamic: aclprofInit returns 200006 (prof_acl_api.cpp 37-46); the engine
    says which parameter and which variable clash, and leaves nothing behind."""
    folder = tmp_path / "prof"
    folder.mkdir()
    monkeypatch.setenv("PROFILING_MODE", "dynamic")
    with Context() as acl:
        assert acl.prof.init(str(folder)) == 200006
    with pytest.raises(ConfigError, match="'acl_profiling_dir' cannot take effect: the environment has PROFILING_MODE"):
        open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(folder), acl_profiling_batches=3)
    assert sim.get_simulator().live() == []
    assert markers(folder) == []


def test_a_profiling_window_of_seconds_closes_on_time_without_another_batch(built, tmp_path):
    folder = tmp_path / "prof"
    engine = open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(folder), acl_profiling_seconds=0.2)
    try:
        assert markers(folder) == ["start"]
        deadline = time.monotonic() + 5
        while markers(folder) != ["start", "stop"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert markers(folder) == ["start", "stop"]  # no batch ran: the timer closed it
        assert sim.get_simulator().profiling.running == set()
    finally:
        engine.close()
    assert markers(folder) == ["start", "stop"]


def test_engines_of_one_process_share_profiling_and_one_window_per_device(built, tmp_path):
    """acl.prof.init runs once per process (a second returns 100002, prof_acl_mgr.cpp 537-543); a
    start with a device another window profiles fails (19-01_data_profiling_apis.md 19-44): the
    second engine shares the session and the first engine's window covers its batches."""
    folder = tmp_path / "prof"
    first = open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(folder), acl_profiling_batches=2)
    try:
        second = open_sim(built["dir"] / "range.om", acl_profiling_dir=str(folder), acl_profiling_batches=2)
        try:
            assert markers(folder) == ["start"]
            with pytest.raises(ConfigError, match=r"parameter 'acl_profiling_dir': .* already profiles into"):
                open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(tmp_path / "other"))
        finally:
            second.close()
        assert sim.get_simulator().profiling.folder is not None  # the first engine still profiles
    finally:
        first.close()
    assert sim.get_simulator().profiling.folder is None and markers(folder) == ["start", "stop"]


def test_engines_of_one_process_share_the_dump_and_refuse_another_dump_config(built, tmp_path):
    """init_dump is once per process (a second returns 100002, dump.cpp 115-121): engines share it;
    the last one to close finalizes it, before its models unload (18_dump_configuration.md 59-60)."""
    folder = tmp_path / "dump"
    section = {"dump": {"dump_path": str(folder), "dump_list": [{"model_name": "m"}]}}
    config = write_json(tmp_path / "dump.json", section)
    same = write_json(tmp_path / "same.json", section)
    other = write_json(tmp_path / "other.json", {"dump": {**section["dump"], "dump_mode": "input"}})
    before = dict(sim.get_simulator().calls)
    first = open_sim(built["dir"] / "batch.om", acl_dump_config=str(config))
    try:
        second = open_sim(built["dir"] / "batch.om", acl_dump_config=str(same))
        try:
            with pytest.raises(ConfigError, match=r"parameter 'acl_dump_config': .*other.json.* already dumps with"):
                open_sim(built["dir"] / "batch.om", acl_dump_config=str(other))
            second.bind_thread()
            run_and_compare(second, built["matmul"], {"x": (2, 4)}, 0)
        finally:
            second.close()
        assert sim.get_simulator().dumps.initialized  # the first engine still dumps
    finally:
        first.close()
    calls = calls_since(before)
    assert calls["init_dump"] == calls["set_dump"] == calls["finalize_dump"] == 1
    assert len((folder / DUMP_MARKER).read_text().splitlines()) == 1


def test_the_pid_for_msprof_is_logged_at_every_load(built, caplog):
    caplog.set_level(logging.INFO, logger="ge_python_backend.engines.acl.engine")
    engine = open_sim(built["dir"] / "batch.om")
    engine.close()
    assert f"pid {os.getpid()}: for msprof --dynamic=on --pid={os.getpid()}" in caplog.text


TOKEN = "letmein-0123456789abcdef"


def tokens_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "profiling-tokens"
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)
    return path


def test_profiling_on_demand_needs_an_allowed_token(built, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ge_python_backend.engines.acl.engine")
    folder = tmp_path / "prof"
    tokens = tokens_file(tmp_path, "# ops team", "", TOKEN)
    engine = open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(folder), acl_profiling_tokens_file=str(tokens))
    runner = runner_for(engine)
    x = np.ones((1, 4), np.float32)
    try:
        assert markers(folder) == []  # no window at load without batches or seconds
        for refused in ("guess", "guess:2", f"{TOKEN}x", "# ops team", f"{TOKEN}:many"):
            outputs, error = answer(runner, x, {"acl_profile": refused})
            assert outputs is None and isinstance(error, InputError) and "acl_profile" in str(error)
            assert TOKEN not in str(error)
        assert markers(folder) == []
        for _ in range(2):
            outputs, error = answer(runner, x, {"acl_profile": f"{TOKEN}:2"} if not markers(folder) else {}, "req-7")
            assert error is None
        assert markers(folder) == ["start", "stop"]  # two batches, then stopped
        assert "profiling started (2 batches, at most 60 s) for request 'req-7'" in caplog.text
        assert answer(runner, x, {"acl_profile": TOKEN})[1] is None
        assert markers(folder) == ["start", "stop", "start"]  # TOKEN alone: 100 batches
        assert "profiling started (100 batches, at most 60 s) for a request" in caplog.text
    finally:
        runner.close()
        engine.close()
    assert markers(folder) == ["start", "stop", "start", "stop"]
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("count", ["99999999999999999999", "-5", "1_000", "\u0663", "0", "1001", " 5", "5 ", "+5"])
def test_profiling_batches_on_demand_are_ascii_digits_up_to_the_cap(built, tmp_path, count):
    """Finding: 99999999999999999999 opened a window that never closed; -5, 1_000 and
    the Arabic-Indic digit three were taken by int()."""
    folder = tmp_path / "prof"
    engine = open_sim(
        built["dir"] / "batch.om",
        acl_profiling_dir=str(folder),
        acl_profiling_tokens_file=str(tokens_file(tmp_path, TOKEN)),
    )
    try:
        with pytest.raises(InputError, match=r"is not an integer from 1 to 1000 in ASCII digits"):
            engine.batch_settings({"acl_profile": f"{TOKEN}:{count}"}, {"x": (1, 4)})
        assert markers(folder) == []
        engine.batch_settings({"acl_profile": f"{TOKEN}:1000"}, {"x": (1, 4)})  # the cap itself
        assert markers(folder) == ["start"]
    finally:
        engine.close()


def test_a_window_opened_on_demand_closes_after_its_seconds_with_batches_left(built, tmp_path):
    folder = tmp_path / "prof"
    engine = open_sim(
        built["dir"] / "batch.om",
        acl_profiling_dir=str(folder),
        acl_profiling_tokens_file=str(tokens_file(tmp_path, TOKEN)),
        acl_profiling_max_seconds=0.2,
    )
    try:
        engine.batch_settings({"acl_profile": f"{TOKEN}:1000"}, {"x": (1, 4)})
        deadline = time.monotonic() + 10
        while markers(folder) != ["start", "stop"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert markers(folder) == ["start", "stop"]  # no batch ran: the timer closed it
    finally:
        engine.close()


def test_profiling_tokens_live_in_a_file_not_in_the_config(built, tmp_path):
    """Triton returns config parameters to any client that may read model configs."""
    from ge_python_backend.engines.acl.options import PARAMETERS

    (retired,) = [p for p in PARAMETERS if p.name == "acl_profiling_tokens"]
    with pytest.raises(ConfigError, match="write them to a file") as refused:
        retired.read("k7Qe2-secret")
    assert "k7Qe2-secret" not in str(refused.value)
    with pytest.raises(ConfigError, match="'acl_profiling_tokens' is retired"):
        open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(tmp_path), acl_profiling_tokens=("k7Qe2",))
    for lines, problem in (
        ((), "holds no token"),
        (("# only a comment",), "holds no token"),
        (("short",), "line 1 is not a token"),
        ((TOKEN, "with:colon-0123456789"), "line 2 is not a token"),
    ):
        with pytest.raises(ConfigError, match=problem) as refused:
            open_sim(
                built["dir"] / "batch.om",
                acl_profiling_dir=str(tmp_path),
                acl_profiling_tokens_file=str(tokens_file(tmp_path, *lines)),
            )
        assert "with:colon" not in str(refused.value)
    tokens_file(tmp_path, TOKEN).chmod(0o666)
    with pytest.raises(ConfigError, match="writable by every user"):
        open_sim(
            built["dir"] / "batch.om",
            acl_profiling_dir=str(tmp_path),
            acl_profiling_tokens_file=str(tmp_path / "profiling-tokens"),
        )
    with pytest.raises(ConfigError, match="No such file"):
        open_sim(built["dir"] / "batch.om", acl_profiling_dir=str(tmp_path), acl_profiling_tokens_file="missing")


def test_profiling_on_demand_without_a_profiling_folder_is_an_input_error(built):
    engine = open_sim(built["dir"] / "batch.om")
    try:
        with pytest.raises(InputError, match="this model allows no profiling on demand"):
            engine.batch_settings({"acl_profile": "anything"}, {"x": (1, 4)})
    finally:
        engine.close()


def test_profiling_parameters_without_a_folder_are_refused(built):
    with pytest.raises(ConfigError, match="need acl_profiling_dir"):
        open_sim(built["dir"] / "batch.om", acl_profiling_batches=5)


# --- g. gears set only when they change -----------------------------------------------------------


def test_a_dims_gear_is_set_only_when_it_changes(built):
    """set_input_dynamic_dims writes the gear into ascend_mbatch_shape_data's buffer and the dataset,
    which execute reads every time (ge_executor.cc 548-582, model.cpp 727-730): it stays set."""
    engine = open_sim(built["dir"] / "dims.om")
    try:
        engine.bind_thread()
        run_and_compare(engine, built["three"], DIMS_SHAPES[1], 0)
        before = dict(sim.get_simulator().calls)
        for seed in range(5):
            run_and_compare(engine, built["three"], DIMS_SHAPES[1], seed)
        assert calls_since(before).get("set_input_dynamic_dims", 0) == 0
        before = dict(sim.get_simulator().calls)
        for seed in range(6):  # alternating: a change every run
            run_and_compare(engine, built["three"], DIMS_SHAPES[seed % 2], seed)
        assert calls_since(before)["set_input_dynamic_dims"] == 6
        assert calls_since(before)["execute_async"] == 6
    finally:
        engine.close()


def test_every_run_returns_with_nothing_in_flight_so_the_synchronous_setters_never_race(built):
    """set_dynamic_* and set_input_aipp write the dataset buffer with a synchronous aclrtMemcpy at the
    call (ge_executor.cc 424, 486-501, 572, 686-699), not on the slot's stream: the engine is safe only
    because every run waits for its stream before returning, so the next run's setters never meet an
    execute still reading the buffer. After each run nothing of the slot's model is in flight."""
    engine = open_sim(built["dir"] / "batch.om", slots=1)
    try:
        engine.bind_thread()
        for batch in (2, 8, 1, 8):
            run_and_compare(engine, built["matmul"], {"x": (batch, 4)}, batch)
            (model,) = sim.get_simulator().models.values()
            assert sum(model.running.values()) == 0, f"an execute is still queued after the batch of {batch}"
    finally:
        engine.close()


def test_a_batch_gear_is_set_only_when_it_changes(built):
    """set_dynamic_batch_size copies the batch into the dataset buffer (ge_executor.cc 375-432, 424) and
    onto the dataset (model.cpp 1839-1877), which every execute reads (model.cpp 727-730)."""
    engine = open_sim(built["dir"] / "batch.om", slots=2)
    try:
        engine.bind_thread()
        before = dict(sim.get_simulator().calls)
        for slot, batch in ((0, 2), (0, 2), (1, 2), (1, 2), (0, 8), (0, 8), (0, 2)):
            run_and_compare(engine, built["matmul"], {"x": (batch, 4)}, batch, slot=slot)
        # slot 0: 2 (set), 2, 8 (set), 8, 2 (set); slot 1, its own model copy and dataset: 2 (set), 2
        assert calls_since(before)["set_dynamic_batch_size"] == 4
    finally:
        engine.close()
