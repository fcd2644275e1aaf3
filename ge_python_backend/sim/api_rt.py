"""``acl.rt``: devices, contexts, streams, memory, copies and events (pyacl.md §3)."""

from __future__ import annotations

from ge_python_backend.ascend.constants import ACL_HOST, MALLOC_FLAGS, MallocPolicy, MemcpyKind, ret_code
from ge_python_backend.sim.memory import is_device_address
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import BAD_HANDLE, INVALID_PARAM, STREAM_CONTEXT, Context, DeviceState
from ge_python_backend.sim.streams import Event, Stream

MEMORY_ALLOCATION = ret_code("ACL_ERROR_RT_MEMORY_ALLOCATION")

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
        return ACL_HOST

    @acl_function("i", outputs=(0,))
    def create_context(self, device_id):
        sim = self._sim
        sim.check_device_id(device_id)
        context = sim.add(sim.contexts, lambda handle: Context(handle, device_id, default=False))
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
                f"and streams and unload its models first (pyacl.md §10)",
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
        context = self._sim.current_context()
        return self._sim.add(self._sim.streams, lambda handle: Stream(handle, context.handle))

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
        for stream in streams:
            stream.synchronize()

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
        self._sim.current_context()
        self._sim.device_memory.free(dev_ptr)

    @acl_function("k", outputs=(0,))
    def malloc_host(self, size):
        self._sim.current_context()
        if size == 0:
            raise AclFail(INVALID_PARAM, "size 0")
        return self._sim.host_memory.allocate(size).addr

    @acl_function("k")
    def free_host(self, host_ptr):
        self._sim.current_context()
        self._sim.host_memory.free(host_ptr)

    @acl_function("i", outputs=(0, 0))
    def get_mem_info(self, attr):
        device = self._sim.current_context().device
        total = self._sim.config.device_memory
        return total - self._sim.device_used(device), total

    def _fill(self, dev_ptr, max_count, value, count):
        """Check a memset; return the work that performs it."""
        if count > max_count:
            raise AclFail(INVALID_PARAM, f"count {count} exceeds max_count {max_count}")
        device = is_device_address(dev_ptr)
        self._sim.check_range(dev_ptr, count, device, "memset destination")
        data = bytes([value & 0xFF]) * count

        def work():
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

    def _copy(self, dst, dest_max, src, count, kind, pinned: bool):
        """Check a copy at call time; return the work that performs it."""
        sim = self._sim
        if kind == MemcpyKind.DEFAULT:
            kind_sides = (is_device_address(src), is_device_address(dst))
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
        if pinned:
            for addr, device, side in ((src, src_device, "source"), (dst, dst_device, "destination")):
                if not device:
                    sim.host_memory.check_pinned(addr, count, f"{label} {side}")

        def work():
            with sim.lock:
                sim.check_device()
                data = sim.read(src, count, src_device, f"{label} source")
                sim.write(dst, data, dst_device, f"{label} destination")

        return work

    @acl_function("kkkki")
    def memcpy(self, dst, dest_max, src, count, kind):
        self._sim.current_context()
        self._copy(dst, dest_max, src, count, kind, pinned=False)()

    @acl_function("kkkkik")
    def memcpy_async(self, dst, dest_max, src, count, kind, stream):
        self._stream_of(stream).submit("memcpy_async", self._copy(dst, dest_max, src, count, kind, pinned=True))

    # --- events ---------------------------------------------------------------------------------

    @acl_function("", outputs=(0,))
    def create_event(self):
        context = self._sim.current_context()
        return self._sim.add(self._sim.events, lambda handle: Event(handle, context.handle))

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
        found.arm()
        target.submit("record_event", found.fire)

    @acl_function("k", locked=False)
    def synchronize_event(self, event):
        with self._sim.lock:
            self._sim.current_context()
            found = self._sim.lookup(self._sim.events, event, "event")
        if found.recorded:
            found.done.wait()

    @acl_function("k")
    def destroy_event(self, event):
        self._sim.current_context()
        self._sim.remove(self._sim.events, event, "event")

    @acl_function("kk", outputs=(0.0,))
    def event_elapsed_time(self, start, end):
        self._sim.current_context()
        first = self._sim.lookup(self._sim.events, start, "event")
        last = self._sim.lookup(self._sim.events, end, "event")
        for event in (first, last):
            if not (event.recorded and event.done.is_set()):
                raise AclFail(
                    BAD_HANDLE,
                    f"event {event.handle:#x} has not completed (record it and synchronize its stream first)",
                )
        return (last.time - first.time) * 1000.0
