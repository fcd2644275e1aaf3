"""Devices, contexts, memory, streams and events (fidelity.md sections 2-4, row 103)."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ge_python_backend.ascend.constants import ACL_HBM_MEM, ACL_SUCCESS, MallocPolicy, MemcpyKind
from ge_python_backend.ascend.limits import SOC_VERSIONS, device_limits, platform_npu_arch
from ge_python_backend.engines.acl.runtime import log_failure
from ge_python_backend.engines.offline import model_resources
from ge_python_backend.ops.conformance.build import STATIC_ROWS
from ge_python_backend.ops.conformance.probes import UNKNOWN, ProbeContext, Skip, close, probe

INVALID_PARAM = 100000
CONTEXT_NULL = 107002
STREAM_CONTEXT = 107003
MODEL_CONTEXT = 107004
ADDRESS_UNALIGNED = 107008
NO_EVENT, NO_STREAM = 207007, 207008
EVENT_NOT_RECORDED = 507000


def in_thread(function: Callable[[], Any]) -> Any:
    """``function``'s result, run in a fresh thread (no current context there)."""
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(function()), name="conformance-probe")
    worker.start()
    worker.join()
    return found[0]


def aligned(size: int) -> np.ndarray:
    """``size`` zero bytes of plain (not page-locked) numpy memory starting on a 64-byte boundary."""
    raw = np.zeros(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + size]


def host_copies(context: ProbeContext) -> int:
    """A device and a stream for a probe of host-to-device copies (none in device run mode)."""
    context.open_device()
    if context.device_run_mode:
        raise Skip("device run mode: no host-to-device copies")
    return context.stream()


def run_mode(context: ProbeContext) -> int:
    mode, ret = context.acl.rt.get_run_mode()
    context.need(ret, "acl.rt.get_run_mode")
    return int(mode)


@probe(
    "P-run-mode", "17", "acl.rt.get_run_mode answers (mode, 0): 1 on a PCIe host, 0 where the app runs on the device"
)
def run_mode_probe(context: ProbeContext) -> None:
    context.open_device()
    mode, ret = context.acl.rt.get_run_mode()
    context.expect("ret", ret, 0)
    context.expect("run mode (0 ACL_DEVICE, 1 ACL_HOST)", mode, UNKNOWN)


@probe("P-device-refcount", "18", "set_device twice and reset once: the device stays usable")
def device_refcount(context: ProbeContext) -> None:
    acl = context.acl
    context.need(acl.rt.set_device(context.device), "acl.rt.set_device")
    context.at_exit("acl.rt.reset_device", acl.rt.reset_device, context.device)
    context.need(acl.rt.set_device(context.device), "acl.rt.set_device")
    context.expect("reset_device (count 2 -> 1)", acl.rt.reset_device(context.device), 0)
    handle, ret = acl.rt.create_context(context.device)
    context.expect("create_context after it", ret, 0)
    if context.keep(ret, "acl.rt.destroy_context", acl.rt.destroy_context, handle) == ACL_SUCCESS:
        stream, ret = acl.rt.create_stream()
        context.expect("create_stream after it", ret, 0)
        if ret == ACL_SUCCESS:
            context.expect("destroy_stream", acl.rt.destroy_stream(stream), 0)


@probe("P-context-per-thread", "19, 20", "a thread without a current context gets 107002 from acl.rt.malloc")
def context_per_thread(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()

    def malloc_elsewhere() -> int:
        ptr, ret = acl.rt.malloc(64, MallocPolicy.HUGE_FIRST)
        if ret == ACL_SUCCESS:
            log_failure(acl, acl.rt.free(ptr), "acl.rt.free")
        return ret

    context.expect("malloc in another thread", in_thread(malloc_elsewhere), CONTEXT_NULL)


@probe("P-context-default", "21", "the default context cannot be destroyed with destroy_context")
def default_context(context: ProbeContext) -> None:
    acl = context.acl

    def destroy_default() -> bool:
        if acl.rt.set_device(context.device) != ACL_SUCCESS:
            return False
        try:
            default, ret = acl.rt.get_context()
            return ret == ACL_SUCCESS and acl.rt.destroy_context(default) != ACL_SUCCESS
        finally:
            log_failure(acl, acl.rt.reset_device(context.device), "acl.rt.reset_device")

    context.expect("destroy_context(default) refused", in_thread(destroy_default), True)


@probe("P-foreign-handles", "22", "a stream of another context: 107003; a model of another context: 107004")
def foreign_handles(context: ProbeContext) -> None:
    acl = context.acl
    first = context.open_device()
    first_stream = context.stream()
    first_model = context.load("static")
    first_io = context.io(first_model)
    context.at_exit("acl.rt.set_context", acl.rt.set_context, first)
    second, ret = acl.rt.create_context(context.device)
    context.need(ret, "acl.rt.create_context")
    context.at_exit("acl.rt.destroy_context", acl.rt.destroy_context, second)
    second_stream = context.stream()
    model = context.load("static")
    inputs, outputs = context.io(model)
    context.at_exit("acl.rt.set_context", acl.rt.set_context, second)
    ret = acl.mdl.execute_async(model.model_id, inputs.handle, outputs.handle, first_stream)
    context.expect("execute_async on the first context's stream", ret, STREAM_CONTEXT, note="inferred (row 22)")
    ret = acl.mdl.execute_async(first_model.model_id, first_io[0].handle, first_io[1].handle, second_stream)
    context.expect("execute_async of the first context's model", ret, MODEL_CONTEXT, note="inferred (row 22)")
    context.need(acl.rt.synchronize_stream(second_stream), "acl.rt.synchronize_stream")


@probe("P-malloc", "23", "acl.rt.malloc returns 64-byte-aligned starts; size 0 is refused")
def malloc_alignment(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    starts = [context.malloc(size) for size in (1, 7, 33, 63, 65, 100, 1000, 4095, 4097, 65537)]
    context.expect("every start % 64 == 0", all(p % 64 == 0 for p in starts), True)
    ptr, ret = acl.rt.malloc(0, MallocPolicy.HUGE_FIRST)
    context.expect("malloc(0)", context.keep(ret, "acl.rt.free", acl.rt.free, ptr), INVALID_PARAM)


@probe("P-malloc-policy", "24", "acl.rt.malloc with policy 8 (outside aclrtMemMallocPolicy)")
def malloc_policy(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    ptr, ret = acl.rt.malloc(16, 8)
    context.expect(
        "malloc(16, 8)",
        context.keep(ret, "acl.rt.free", acl.rt.free, ptr),
        0,
        simulated=INVALID_PARAM,
        note="the docs: handled as the default; the simulator refuses",
    )


@probe("P-malloc-host", "25, 26", "acl.rt.malloc_host: 64-byte aligned on a PCIe host; not promised in device run mode")
def malloc_host_alignment(context: ProbeContext) -> None:
    context.open_device()
    starts = [context.malloc_host(size) for size in (1, 7, 100, 4097)]
    aligned = all(p % 64 == 0 for p in starts)
    if run_mode(context) == 1:
        context.expect("every start % 64 == 0 (host run mode)", aligned, True)
    else:
        context.expect("every start % 64 == 0 (device run mode)", aligned, UNKNOWN, simulated=False)


@probe("P-device-mode-io", "27", "in device run mode the model's device buffers are written directly, no copies")
def device_mode_io(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    if run_mode(context) != 0:
        raise Skip("host run mode: the application does not run on the device")
    model = context.load("static")
    inputs, outputs = context.io(model)
    x = np.random.default_rng(27).standard_normal((STATIC_ROWS, 4)).astype(np.float32)
    ctypes.memmove(inputs.addresses[0], x.ctypes.data, x.nbytes)
    context.need(acl.mdl.execute(model.model_id, inputs.handle, outputs.handle), "acl.mdl.execute")
    y = np.empty((STATIC_ROWS, 3), np.float32)
    ctypes.memmove(y.ctypes.data, outputs.addresses[0], y.nbytes)
    context.expect("outputs match ONNX Runtime", close(y, context.reference("static", {"x": x})["y"]), True)


@probe("P-memcpy-unaligned", "28", "memcpy_async from an address 4 bytes past a 64-byte boundary")
def memcpy_unaligned(context: ProbeContext) -> None:
    acl = context.acl
    stream = host_copies(context)
    host, device = context.malloc_host(128), context.malloc(64)
    ret = acl.rt.memcpy_async(device, 64, host + 4, 12, MemcpyKind.HOST_TO_DEVICE, stream)
    context.expect(
        "memcpy_async(host + 4)",
        ret,
        ADDRESS_UNALIGNED,
        note="CANN 8.5/9.0 docs require 64-byte alignment; 9.1 drops it",
    )
    context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")


@probe("P-memcpy-unpinned", "29", "memcpy_async from plain host memory returns after the copy")
def memcpy_unpinned(context: ProbeContext) -> None:
    acl = context.acl
    stream = host_copies(context)
    device = context.malloc(64)
    data, back = aligned(64), aligned(64)  # plain numpy memory, 64-byte aligned for CANN 8.5/9.0 (row 28)
    data[:] = np.arange(64, dtype=np.uint8)
    ret = acl.rt.memcpy_async(device, 64, data.ctypes.data, 64, MemcpyKind.HOST_TO_DEVICE, stream)
    context.expect("memcpy_async(numpy memory)", ret, 0)
    ret = acl.rt.memcpy(back.ctypes.data, 64, device, 64, MemcpyKind.DEVICE_TO_HOST)
    context.expect("memcpy back before any synchronize", ret, 0)
    context.expect("the bytes arrived", bool((back == data).all()), True)
    context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")


@probe("P-memcpy-kind", "30", "acl.rt.memcpy with kind 6 returns 100000")
def memcpy_kind(context: ProbeContext) -> None:
    context.open_device()
    first, second = context.malloc(64), context.malloc(64)
    context.expect("memcpy(kind 6)", context.acl.rt.memcpy(second, 64, first, 64, 6), INVALID_PARAM)


@probe("P-mem-info", "31", "acl.rt.get_mem_info(ACL_HBM_MEM) answers free <= total, both > 0")
def mem_info(context: ProbeContext) -> None:
    context.open_device()
    free, total, ret = context.acl.rt.get_mem_info(ACL_HBM_MEM)
    context.expect("ret", ret, 0)
    context.expect("0 < free <= total", 0 < free <= total, True)
    context.expect("free, total", [free, total], UNKNOWN)


def _available_streams(context: ProbeContext) -> int:
    if not hasattr(context.acl.rt, "get_stream_available_num"):
        raise Skip("this pyACL has no acl.rt.get_stream_available_num")
    count, ret = context.acl.rt.get_stream_available_num()
    context.need(ret, "acl.rt.get_stream_available_num")
    return int(count)


@probe(
    "P-stream-limit", "33", "creating streams until one fails: 207008 once the SoC's streams are used", exhausts=True
)
def stream_limit(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    available = _available_streams(context)
    limits = device_limits(acl.get_soc_name())
    created, ret = 0, ACL_SUCCESS
    while ret == ACL_SUCCESS and created <= available:
        stream, ret = acl.rt.create_stream()
        if context.keep(ret, "acl.rt.destroy_stream", acl.rt.destroy_stream, stream) == ACL_SUCCESS:
            created += 1
    context.expect("the failing create_stream", ret, NO_STREAM)
    context.expect("streams created = get_stream_available_num before", created, available)
    context.expect("the SoC's limit (ascend/limits.py)", limits.streams if limits else None, UNKNOWN)


@probe("P-event-limit", "34", "creating and recording events until one fails: 207007", exhausts=True)
def event_limit(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    limits = device_limits(acl.get_soc_name())
    if limits is None:
        raise Skip(f"no event limit is known for {acl.get_soc_name()}")
    stream = context.stream()
    made: list[int] = []
    ret, where = ACL_SUCCESS, "create_event"
    while ret == ACL_SUCCESS and len(made) <= limits.events:
        event, ret = acl.rt.create_event()
        if context.keep(ret, "acl.rt.destroy_event", acl.rt.destroy_event, event) == ACL_SUCCESS:
            made.append(event)
    if ret == ACL_SUCCESS:  # "resources are taken at aclrtRecordEvent" (07_event_management.md 79-107)
        where = "record_event"
        for event in made:
            ret = acl.rt.record_event(event, stream)
            if ret != ACL_SUCCESS:
                break
        context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
    context.expect("the failing call's ret", ret, NO_EVENT)
    context.expect("where it failed", where, UNKNOWN, simulated="create_event")
    context.expect("events created", len(made), UNKNOWN)


@probe("P-model-streams", "35", "a load takes the streams the file's stream_num says (get_stream_available_num)")
def model_streams(context: ProbeContext) -> None:
    context.open_device()
    before = _available_streams(context)
    model = context.load("static")
    after = _available_streams(context)
    context.expect("streams the load took", before - after, model_resources(model.path).streams)


@probe("P-soc-name", "36", "acl.get_soc_name is a SoC CANN's platform files name")
def soc_name(context: ProbeContext) -> None:
    soc = context.acl.get_soc_name()
    context.expect("known to the platform tables", soc in SOC_VERSIONS, True)
    context.expect("SoC, short version, NpuArch", [soc, SOC_VERSIONS.get(soc), platform_npu_arch(soc)], UNKNOWN)


@probe("P-soc-version", "134", "acl.get_soc_name: device 0's SoC, as --soc_version spells it; acl.get_version")
def soc_version(context: ProbeContext) -> None:
    acl = context.acl
    soc = acl.get_soc_name()
    context.expect("acl.get_soc_name() is a name", isinstance(soc, str) and bool(soc), True, note=repr(soc))
    count, ret = acl.rt.get_device_count()
    context.need(ret, "acl.rt.get_device_count")
    if count > 1:  # with several devices it names device 0's, whichever device the thread is on
        last = count - 1
        context.need(acl.rt.set_device(last), f"acl.rt.set_device({last})")
        context.at_exit("acl.rt.reset_device", acl.rt.reset_device, last)
        other, ret = acl.rt.create_context(last)
        context.need(ret, f"acl.rt.create_context({last})")
        context.at_exit("acl.rt.destroy_context", acl.rt.destroy_context, other)
        context.expect(f"acl.get_soc_name() on device {last}", acl.get_soc_name(), soc)
    model = context.models.om("static")
    if model is not None:  # ATC took the name as --soc_version and recorded it
        from ge_python_backend.engines.offline import read_model_spec
        from ge_python_backend.engines.registry import detect_format

        model_format = detect_format(model)
        facts = read_model_spec(model, model_format).facts if model_format is not None else {}
        context.expect(
            "the static model's soc_version (compiled --soc_version=<that name>)", facts.get("soc_version"), soc
        )
    major, minor, patch, ret = acl.get_version()
    version = [major, minor, patch]
    context.expect(
        "acl.get_version(): (major, minor, patch, 0)",
        [all(isinstance(v, int) and v >= 0 for v in version), ret],
        [True, 0],
    )
    context.expect("the ACL version", version, UNKNOWN)


@probe("P-event-timing", "37", "events recorded around an execute give (ms, 0) after synchronize")
def event_timing(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    stream = context.stream()
    events = [context.event(), context.event()]
    model = context.load("static")
    inputs, outputs = context.io(model)
    context.need(acl.rt.record_event(events[0], stream), "acl.rt.record_event")
    context.need(acl.mdl.execute_async(model.model_id, inputs.handle, outputs.handle, stream), "acl.mdl.execute_async")
    context.need(acl.rt.record_event(events[1], stream), "acl.rt.record_event")
    context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
    ms, ret = acl.rt.event_elapsed_time(events[0], events[1])
    context.expect("ret", ret, 0)
    context.expect("ms >= 0", ms >= 0, True)


@probe("P-event-unrecorded", "38", "event_elapsed_time of events never recorded returns 507000")
def event_unrecorded(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    events = [context.event(), context.event()]
    _, ret = acl.rt.event_elapsed_time(events[0], events[1])
    context.expect("event_elapsed_time(fresh, fresh)", ret, EVENT_NOT_RECORDED)


@probe("P-error-message-thread", "103", "acl.get_recent_err_msg is per thread")
def error_message_thread(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    context.acl.get_recent_err_msg()  # clear this thread's
    ptr, ret = acl.rt.malloc(0, MallocPolicy.HUGE_FIRST)
    context.keep(ret, "acl.rt.free", acl.rt.free, ptr)
    context.expect("another thread's message after a failure here", in_thread(acl.get_recent_err_msg), None)
    context.expect("this thread's message", bool(acl.get_recent_err_msg()), UNKNOWN, simulated=True)


#: executions per stream of the stream-scaling probe
SCALING_RUNS = 40


def _run_streams(context: ProbeContext, copies: list[tuple[int, Any, Any, int]], runs: int) -> float:
    """Seconds of wall time for ``runs`` executions on each (model, inputs, outputs, stream), queued
    in turn on all streams, then waited for."""
    import time

    acl = context.acl
    started = time.perf_counter()
    for _ in range(runs):
        for model_id, inputs, outputs, stream in copies:
            context.need(
                acl.mdl.execute_async(model_id, inputs.handle, outputs.handle, stream), "acl.mdl.execute_async"
            )
    for *_, stream in copies:
        context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
    return time.perf_counter() - started


@probe(
    "P-stream-scaling", "150, 152", "two streams of one model against one: throughput ratio, the cores it leaves idle"
)
def stream_scaling(context: ProbeContext) -> None:
    """What the simulator's shared device cannot know (fidelity row 152: inferred): how much a
    second stream of a model adds on one device. Two copies of the model (a model id runs on one
    stream at a time, row 46), each with its stream; the same executions on one stream, then on
    both. A ratio near 1 means the model keeps every core busy (acl_sim_core_busy 1); near 2 that
    half its time leaves them idle (acl_sim_core_busy 1/ratio). A small model's ratio is its launch
    gaps'; run ``ge-triton bench`` on your own model for its figure."""
    acl = context.acl
    context.open_device()
    copies = []
    for _ in range(2):
        loaded = context.load("static")
        inputs, outputs = context.io(loaded)
        copies.append((loaded.model_id, inputs, outputs, context.stream()))
    events = [context.event(), context.event()]
    stream = copies[0][3]
    context.need(acl.rt.record_event(events[0], stream), "acl.rt.record_event")
    one = _run_streams(context, copies[:1], SCALING_RUNS)  # also warms the copies up
    context.need(acl.rt.record_event(events[1], stream), "acl.rt.record_event")
    context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
    ms, ret = acl.rt.event_elapsed_time(events[0], events[1])
    context.need(ret, "acl.rt.event_elapsed_time")
    # each the fastest of two runs: a pause of the host in one run does not set the ratio
    one = min(one, _run_streams(context, copies[:1], SCALING_RUNS))
    two = min(_run_streams(context, copies, SCALING_RUNS) for _ in range(2))
    ratio = round(2 * one / two, 2)
    context.expect("device ms per execution on one stream (events)", round(ms / SCALING_RUNS, 4), UNKNOWN)
    context.expect("throughput of two streams / one stream", ratio, UNKNOWN)
    context.expect("acl_sim_core_busy that models it (1 / ratio, at most 1)", round(min(1.0, 1 / ratio), 2), UNKNOWN)
