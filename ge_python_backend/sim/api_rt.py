"""``acl.rt``: devices, contexts, streams, memory, copies and events.

The rules and their sources in hicann/runtime are listed in docs/fidelity.md (sections 2-4).
"""

from __future__ import annotations

from ge_python_backend.ascend.constants import ACL_DEVICE, ACL_HOST, MALLOC_FLAGS, MallocPolicy, MemcpyKind, ret_code
from ge_python_backend.ascend.limits import device_limits
from ge_python_backend.sim.device import Direction
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import INVALID_PARAM, STREAM_CONTEXT, Context, DeviceState
from ge_python_backend.sim.streams import Event, Stream

MEMORY_ALLOCATION = ret_code("ACL_ERROR_RT_MEMORY_ALLOCATION")
ADDR_UNALIGNED = ret_code("ACL_ERROR_RT_ADDR_UNALIGNED")
NO_STREAM = ret_code("ACL_ERROR_RT_NO_STREAM_RESOURCE")
NO_EVENT = ret_code("ACL_ERROR_RT_NO_EVENT_RESOURCE")
INTERNAL_ERROR = ret_code("ACL_ERROR_RT_INTERNAL_ERROR")
TIMESTAMP_INVALID = ret_code("ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID")
#: where device-mode malloc_host memory starts past a 64-byte boundary ("if you need a 64-byte
#: aligned start address, you must handle the alignment yourself", 11-02_host_memory_management.md 71-78)
DEVICE_MODE_HOST_OFFSET = 32

#: memcpy kind -> (source is device, destination is device)
_SIDES = {
    MemcpyKind.HOST_TO_HOST: (False, False),
    MemcpyKind.HOST_TO_DEVICE: (False, True),
    MemcpyKind.DEVICE_TO_HOST: (True, False),
    MemcpyKind.DEVICE_TO_DEVICE: (True, True),
}


def _listed(enum: type[MemcpyKind] | type[MallocPolicy]) -> str:
    return ", ".join(f"{member.value} {member.acl_name}" for member in enum)


class RtApi(Namespace):
    _prefix = "acl.rt"

    # --- devices and contexts -----------------------------------------------------------------

    @acl_function("i")
    def set_device(self, device_id):
        sim = self._sim
        state = sim.device_state(device_id)
        if state is None:
            sim.device_model(device_id)  # the modelled device, shared by every process using it
            context = sim.add(sim.contexts, lambda handle: Context(handle, device_id, default=True))
            state = sim.devices[device_id] = DeviceState(0, context)
        state.refcount += 1
        sim.bind(state.default_context)

    @acl_function("i")
    def reset_device(self, device_id):
        sim = self._sim
        state = sim.device_state(device_id)
        if state is None:
            raise AclFail(INVALID_PARAM, f"device {device_id} is not set (reset_device without set_device)")
        state.refcount -= 1
        if state.refcount == 0:
            del sim.devices[device_id]
            del sim.contexts[state.default_context]
            for context in sim.contexts.values():
                if context.device == device_id:
                    context.device_reset = True

    @acl_function("", outputs=(0,))
    def get_device(self):
        return self._sim.current_context().device

    @acl_function("", outputs=(0,))
    def get_device_count(self):
        return self._sim.config.device_count

    @acl_function("", outputs=(0,))
    def get_run_mode(self):
        return ACL_DEVICE if self._sim.config.run_mode == "device" else ACL_HOST

    @acl_function("i", outputs=(0,))
    def create_context(self, device_id):
        """A context holds streams of its own (05_context_management.md 67-78): 207008 when the
        device has no room for them."""
        sim = self._sim
        sim.check_device_id(device_id)
        limits = device_limits(sim.config.soc_name)
        context = sim.add(sim.contexts, lambda handle: Context(handle, device_id, default=False))
        if limits is not None and sim.streams_in_use(device_id) > limits.streams:
            del sim.contexts[context]
            raise AclFail(
                NO_STREAM,
                f"device {device_id} ({sim.config.soc_name}) has {limits.streams} streams: no room for "
                f"the streams of a new context",
            )
        sim.bind(context)
        return context

    @acl_function("k")
    def destroy_context(self, context):
        sim = self._sim
        sim.current_context()
        found = sim.lookup(sim.contexts, context, "context")
        if found.default:
            raise AclFail(
                INVALID_PARAM,
                f"context {context:#x} is device {found.device}'s default context, "
                f"which reset_device releases; destroy_context cannot",
            )
        owned = sim.owned_by(context)
        if owned:
            raise AclFail(
                INVALID_PARAM,
                f"context {context:#x} still owns {', '.join(owned)}; destroy its events "
                f"and streams and unload its models first",  # a simulator rule (inferred): no source found
            )
        sim.remove(sim.contexts, context, "context")

    @acl_function("k")
    def set_context(self, context):
        found = self._sim.lookup(self._sim.contexts, context, "context")
        if found.device_reset:
            raise AclFail(INVALID_PARAM, f"context {context:#x} cannot be set: device {found.device} was reset")
        self._sim.bind(context)

    @acl_function("", outputs=(0,))
    def get_context(self):
        return self._sim.current_context().handle

    # --- streams --------------------------------------------------------------------------------

    @acl_function("", outputs=(0,))
    def create_stream(self):
        """207008 past the SoC's streams per device, the default stream, each created context's and
        each loaded model's counted (06_stream_management.md 81-96, 05_context_management.md 67-78;
        the simulator gives every model one stream)."""
        sim = self._sim
        context = sim.current_context()
        limits = device_limits(sim.config.soc_name)
        if limits is not None and sim.streams_in_use(context.device) >= limits.streams:
            raise AclFail(
                NO_STREAM,
                f"device {context.device} ({sim.config.soc_name}) has {limits.streams} streams, "
                "all in use (the default stream, each context's and each loaded model's included)",
            )
        return sim.add(sim.streams, lambda handle: Stream(handle, context.handle))

    @acl_function("", outputs=(0,))
    def get_stream_available_num(self):
        """Streams still free on the current context's device (06_stream_management.md 779-820):
        the SoC's limit less every stream in use, counted as create_stream counts them."""
        sim = self._sim
        context = sim.current_context()
        limits = device_limits(sim.config.soc_name)
        if limits is None:
            raise AclFail(INVALID_PARAM, f"the simulator has no stream limit for SoC {sim.config.soc_name!r}")
        return max(limits.streams - sim.streams_in_use(context.device), 0)

    def _stream_of(self, stream: int) -> Stream:
        """``stream``, which must belong to the calling thread's current context."""
        with self._sim.lock:
            return self._sim.stream(stream, self._sim.current_context())

    @acl_function("k", locked=False)
    def destroy_stream(self, stream):
        with self._sim.lock:
            found = self._stream_of(stream)
            del self._sim.streams[stream]
        found.stop()

    @acl_function("k", locked=False)
    def synchronize_stream(self, stream):
        self._stream_of(stream).synchronize()

    @acl_function("ki", locked=False)
    def synchronize_stream_with_timeout(self, stream, timeout_ms):
        self._stream_of(stream).synchronize(None if timeout_ms < 0 else timeout_ms / 1000.0)

    @acl_function("", locked=False)
    def synchronize_device(self):
        with self._sim.lock:
            device = self._sim.current_context().device
            contexts = {h for h, c in self._sim.contexts.items() if c.device == device}
            streams = [s for s in self._sim.streams.values() if s.context in contexts]
        failure = None
        for stream in streams:  # every stream's work, then the first failure
            try:
                stream.synchronize()
            except AclFail as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    # --- memory ---------------------------------------------------------------------------------

    @acl_function("ki", outputs=(0,))
    def malloc(self, size, policy):
        sim = self._sim
        device = sim.current_context().device
        flags = sum(f for f in MALLOC_FLAGS if policy & f)
        if size == 0:
            raise AclFail(INVALID_PARAM, "size 0")
        if policy - flags not in {p.value for p in MallocPolicy}:
            raise AclFail(INVALID_PARAM, f"policy {policy} is not an aclrtMemMallocPolicy ({_listed(MallocPolicy)})")
        free = sim.config.device_memory - sim.device_used(device)
        if size > free:
            raise AclFail(MEMORY_ALLOCATION, f"{size} bytes requested, device {device} has {free} free")
        return sim.device_memory.allocate(size, device).addr

    @acl_function("k")
    def free(self, dev_ptr):
        sim = self._sim
        sim.current_context()
        users = sim.memory_users(dev_ptr)
        if users:
            # "must not be freed while the model is loaded" (aclmdlLoadFromFileWithMem.md 45-48); the real
            # runtime would let it go and fail on the next execute
            ids = ", ".join(str(m.model_id) for m in users)
            raise AclFail(
                INVALID_PARAM,
                f"device memory {dev_ptr:#x} is the work or weight memory of loaded model(s) {ids}: unload them first",
            )
        sim.device_memory.free(dev_ptr)

    @acl_function("k", outputs=(0,))
    def malloc_host(self, size):
        """Pinned, 64-byte aligned host memory; in device run mode device memory on normal pages,
        deliberately not 64-byte aligned (11-02_host_memory_management.md 5, 71-78)."""
        sim = self._sim
        sim.current_context()
        if size == 0:
            raise AclFail(INVALID_PARAM, "size 0")
        offset = DEVICE_MODE_HOST_OFFSET if sim.config.run_mode == "device" else 0
        return sim.host_memory.allocate(size, offset).addr

    @acl_function("k")
    def free_host(self, host_ptr):
        sim = self._sim
        sim.current_context()
        if sim.is_device(host_ptr):
            raise AclFail(INVALID_PARAM, f"{host_ptr:#x} is device memory; free it with acl.rt.free")
        sim.host_memory.free(host_ptr)

    @acl_function("i", outputs=(0, 0))
    def get_mem_info(self, attr):
        device = self._sim.current_context().device
        total = self._sim.config.device_memory
        return total - self._sim.device_used(device), total

    def _fill(self, dev_ptr, max_count, value, count):
        """Check a memset; return the work that performs it."""
        if count > max_count:
            raise AclFail(INVALID_PARAM, f"count {count} exceeds max_count {max_count}")
        device = self._sim.is_device(dev_ptr)
        self._sim.check_range(dev_ptr, count, device, "memset destination")
        data = bytes([value & 0xFF]) * count

        def work(start: float = 0.0) -> None:
            with self._sim.lock:
                self._sim.check_device()
                self._sim.write(dev_ptr, data, device, "memset destination")

        return work

    @acl_function("kkik")
    def memset(self, dev_ptr, max_count, value, count):
        self._sim.current_context()
        self._fill(dev_ptr, max_count, value, count)()

    @acl_function("kkikk")
    def memset_async(self, dev_ptr, max_count, value, count, stream):
        self._stream_of(stream).submit("memset_async", self._fill(dev_ptr, max_count, value, count))

    def _copy(self, dst, dest_max, src, count, kind, asynchronous: bool):
        """Check a copy at call time; return the work that performs it, and whether an asynchronous
        copy must finish before the call returns: host memory that is not from malloc_host is
        accepted and makes the call synchronous (11-03_memory_copy_and_set.md 136-140)."""
        sim = self._sim
        if kind == MemcpyKind.DEFAULT:
            kind_sides = (sim.is_device(src), sim.is_device(dst))
        elif kind in _SIDES:
            kind_sides = _SIDES[kind]
        else:
            raise AclFail(INVALID_PARAM, f"kind {kind} is not an aclrtMemcpyKind ({_listed(MemcpyKind)})")
        src_device, dst_device = kind_sides
        if count > dest_max:
            raise AclFail(INVALID_PARAM, f"count {count} exceeds the destination capacity dest_max {dest_max}")
        label = MemcpyKind(kind).acl_name
        sim.check_range(src, count, src_device, f"{label} source")
        sim.check_range(dst, count, dst_device, f"{label} destination")
        unpinned = False
        if asynchronous:
            for addr, device, side in ((src, src_device, "source"), (dst, dst_device, "destination")):
                if not device:
                    unpinned |= not sim.host_memory.pinned(addr, count, f"{label} {side}")

        # an asynchronous copy between host and device runs on the device's copy engine of its
        # direction (in host run mode: over PCIe), beside the cores (03-01_asynchronous_task_overview.md 31-37)
        directions: dict[tuple[bool, bool], Direction] = {(False, True): "h2d", (True, False): "d2h"}
        direction = directions.get(kind_sides) if asynchronous else None
        on_device = sim.current_context().device if direction and sim.config.run_mode == "host" else None

        def work(start: float = 0.0) -> float | None:
            with sim.lock:
                sim.check_device()
                data = sim.read(src, count, src_device, f"{label} source")
                sim.write(dst, data, dst_device, f"{label} destination")
                if on_device is None or direction is None or not sim.config.copy_gbps:
                    return None
                engine = sim.device_model(on_device)
            return engine.copy(start, count, direction, sim.config.copy_gbps)

        return work, unpinned

    @acl_function("kkkki")
    def memcpy(self, dst, dest_max, src, count, kind):
        self._sim.current_context()
        self._copy(dst, dest_max, src, count, kind, asynchronous=False)[0]()

    @acl_function("kkkkik", locked=False)
    def memcpy_async(self, dst, dest_max, src, count, kind, stream):
        """Both addresses 64-byte aligned, else 107008 (CANN 8.5/9.0 docs/api_docs/aclrtMemcpyAsync.md:44;
        107008 ACL_ERROR_RT_ADDR_UNALIGNED is rt_error_codes.h:29, the runtime's mapping of
        RT_ERROR_MEMORY_ADDRESS_UNALIGNED, errcode_manage.cc:315); host memory not from malloc_host
        makes the call wait for the copy (11-03_memory_copy_and_set.md 136-140)."""
        with self._sim.lock:
            alignment = self._sim.config.memcpy_alignment
            for side, addr in (("destination", dst), ("source", src)):
                if alignment and addr % alignment:
                    raise AclFail(ADDR_UNALIGNED, f"memcpy_async {side} {addr:#x} is not {alignment}-byte aligned")
            target = self._stream_of(stream)
            work, unpinned = self._copy(dst, dest_max, src, count, kind, asynchronous=True)
            target.submit("memcpy_async", work)
        if unpinned:
            target.synchronize()

    # --- events ---------------------------------------------------------------------------------

    @acl_function("", outputs=(0,))
    def create_event(self):
        """207007 past the SoC's events per device (07_event_management.md 81-107)."""
        sim = self._sim
        context = sim.current_context()
        limits = device_limits(sim.config.soc_name)
        if limits is not None and sim.events_in_use(context.device) >= limits.events:
            raise AclFail(
                NO_EVENT, f"device {context.device} ({sim.config.soc_name}) has {limits.events} events, all in use"
            )
        return sim.add(sim.events, lambda handle: Event(handle, context.handle))

    @acl_function("kk")
    def record_event(self, event, stream):
        found = self._sim.lookup(self._sim.events, event, "event")
        target = self._stream_of(stream)
        if found.context != target.context:
            raise AclFail(
                STREAM_CONTEXT,
                f"event {event:#x} belongs to context {found.context:#x}, stream "
                f"{stream:#x} to context {target.context:#x}",
            )
        found.arm(target)
        # the event completes when the stream reaches it, also in a stream in error
        target.submit("record_event", found.fire, in_error=True)

    @acl_function("k", locked=False)
    def synchronize_event(self, event):
        with self._sim.lock:
            self._sim.current_context()
            found = self._sim.lookup(self._sim.events, event, "event")
        if found.recorded:
            found.wait()

    @acl_function("k")
    def destroy_event(self, event):
        self._sim.current_context()
        self._sim.remove(self._sim.events, event, "event")

    @acl_function("kk", outputs=(0.0,))
    def event_elapsed_time(self, start, end):
        """An event never recorded -> 507000 (RT_ERROR_EVENT_RECORDER_NULL, event.cc 1249-1251,
        errcode_manage.cc 197); recorded but not yet complete, its timestamp still unset -> 107006
        (RT_ERROR_EVENT_TIMESTAMP_INVALID, event.cc 1265-1270, errcode_manage.cc 198)."""
        self._sim.current_context()
        first = self._sim.lookup(self._sim.events, start, "event")
        last = self._sim.lookup(self._sim.events, end, "event")
        for event in (first, last):
            if not event.recorded:
                raise AclFail(INTERNAL_ERROR, f"event {event.handle:#x} was never recorded (record_event first)")
        for event in (first, last):
            if not event.done.is_set():
                raise AclFail(
                    TIMESTAMP_INVALID,
                    f"event {event.handle:#x} has not completed yet (synchronize its stream or the event first)",
                )
        return (last.time - first.time) * 1000.0
