"""The simulator's state: init, devices, per-thread contexts, handles, memory, the ledger.

``SimState`` owns everything; the ``acl``-shaped namespaces (``api.py``) only parse arguments
and call into it. One lock guards the state; stream work (run by the thread that waits for
it) takes it briefly, and nothing blocks (ONNX Runtime, modelled device time, waits) while
holding it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ge_python_backend.ascend.constants import RET_CODES, ret_code
from ge_python_backend.ascend.limits import DEVICE_DEFAULT_STREAMS, ai_cores, device_limits
from ge_python_backend.hostshm import SharedStateError
from ge_python_backend.sim.device import (
    DEFAULT_COPY_GBPS,
    Demand,
    Device,
    SharedDevice,
    StreamDevice,
    execution_demand,
)
from ge_python_backend.sim.dfx import DumpState, ProfilingState
from ge_python_backend.sim.faults import DEVICE_CALLS, DEVICE_LOST_RET, FaultSchedule, FaultState
from ge_python_backend.sim.memory import DeviceMemory, HostMemory, read_host, write_host
from ge_python_backend.sim.models import (
    AippSet,
    DataBuffer,
    Dataset,
    LoadedModel,
    ModelDesc,
    Run,
    TensorDesc,
    modelled_seconds,
)
from ge_python_backend.sim.signature import AclFail, Signature, shape_result
from ge_python_backend.sim.streams import Event, Stream

LOG = logging.getLogger(__name__)
LEDGER_ENV = "GE_ACL_SIM_LEDGER_FILE"

INVALID_PARAM = ret_code("ACL_ERROR_INVALID_PARAM")
UNINITIALIZED = ret_code("ACL_ERROR_UNINITIALIZE")
CONTEXT_NULL = ret_code("ACL_ERROR_RT_CONTEXT_NULL")
STREAM_CONTEXT = ret_code("ACL_ERROR_RT_STREAM_CONTEXT")
MODEL_CONTEXT = ret_code("ACL_ERROR_RT_MODEL_CONTEXT")
INVALID_DEVICE = ret_code("ACL_ERROR_RT_INVALID_DEVICEID")
BAD_HANDLE = ret_code("ACL_ERROR_RT_PARAM_INVALID")
INVALID_MODEL = ret_code("ACL_ERROR_INVALID_MODEL_ID")
INTERNAL = ret_code("ACL_ERROR_RT_INTERNAL_ERROR")

_HANDLE_BASE = 0x5A00_0000_0000


RunMode = Literal["host", "device"]


@dataclass
class SimConfig:
    """Simulated hardware and modelled device time (sim/device.py: cores and copy engines shared by
    every stream of every process on a device)."""

    device_count: int = 8
    device_memory: int = 32 << 30
    #: Fixed device time of one execution alone on the device with all its cores, in ms.
    device_ms: float = 0.0
    #: Device time per row of the batch axis, in ms.
    row_ms: float = 0.0
    #: Share of an execution's device time its cores are busy; the rest are gaps other streams use
    core_busy: float = 1.0
    #: Share of the busy time that starts cores (grows with them; the rest shrinks with them)
    launch_share: float = 0.0
    #: Bandwidth of each copy engine (host to device, device to host), GB/s; 0: copies take no time
    copy_gbps: float = DEFAULT_COPY_GBPS
    #: one device per device id for every stream and process of the scope (hostshm); False: every
    #: stream is a device of its own (the host measured alone)
    shared_device: bool = True
    #: What get_dynamic_batch / get_dynamic_hw / get_input_dynamic_gear_count / get_input_dynamic_dims
    #: return for a gear kind the model lacks: 0 answers "no gears" (ret 0, count 0, as GE does:
    #: model_om2.cpp 1803-1807, 1830-1834, 1866-1870); any other code makes them fail with that code
    #: instead (to test an engine against a runtime that answers otherwise).
    absent_gears_ret: int = 0
    #: where the application runs: "host" (a PCIe card, ACL_HOST) or "device" (ACL_DEVICE: Atlas
    #: 200/500, 310P open form), where malloc_host is device memory and not 64-byte aligned
    run_mode: RunMode = "host"
    #: what acl.get_soc_name answers; its stream and event limits apply (ascend/limits.py)
    soc_name: str = "Ascend310P3"
    #: memcpy_async wants both addresses 64-byte aligned (CANN 8.5/9.0 aclrtMemcpyAsync.md 44-45;
    #: 9.1 and later only for on-chip copies): 0 turns the rule off
    memcpy_alignment: int = 64


@dataclass
class Context:
    handle: int
    device: int
    default: bool
    #: its device's set_device count dropped to 0: it can no longer be set or used
    device_reset: bool = False


@dataclass
class DeviceState:
    refcount: int
    default_context: int


class SimState:
    """The state of a simulated CANN runtime: what every simulated pyACL call reads and changes."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.lock = threading.RLock()
        self._tls = threading.local()
        self._handles = itertools.count(_HANDLE_BASE, 0x40)
        self._model_ids = itertools.count(0)
        self.faults = FaultState()
        self.calls: Counter[str] = Counter()
        self.sessions: dict[str, Any] = {}
        self._clear_state()
        self.initialized = False
        #: acl.finalize ran (a second one is 100037)
        self.finalized = False
        #: (path, content) of the first successful acl.init: a later init must read the same content
        self.first_init: tuple[str, bytes] | None = None
        #: (device id, shared) -> the modelled device, opened on first use, kept for the process
        self._device_models: dict[tuple[int, bool], Device] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    def _clear_state(self) -> None:
        self.devices: dict[int, DeviceState] = {}
        self.contexts: dict[int, Context] = {}
        self.streams: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}
        self.device_memory = DeviceMemory(addressable=self.config.run_mode == "device")
        self.host_memory = HostMemory()
        self.models: dict[int, LoadedModel] = {}
        self.descs: dict[int, ModelDesc] = {}
        self.datasets: dict[int, Dataset] = {}
        self.buffers: dict[int, DataBuffer] = {}
        #: tensor descs the caller created (create_tensor_desc), and the copies datasets own
        self.tensor_descs: dict[int, TensorDesc] = {}
        self.dataset_descs: dict[int, TensorDesc] = {}
        self.aipps: dict[int, AippSet] = {}
        self.dumps = DumpState()
        self.profiling = ProfilingState()

    def configure(
        self,
        *,
        faults: FaultSchedule | str | None = None,
        device_ms: float | None = None,
        row_ms: float | None = None,
        device_count: int | None = None,
        device_memory: int | None = None,
        absent_gears_ret: int | None = None,
        run_mode: RunMode | None = None,
        soc_name: str | None = None,
        memcpy_alignment: int | None = None,
        core_busy: float | None = None,
        launch_share: float | None = None,
        copy_gbps: float | None = None,
        shared_device: bool | None = None,
    ) -> None:
        """Change the simulated hardware. ``faults`` installs a new schedule (fresh counters, device back);
        the run mode changes only while no memory is allocated."""
        if absent_gears_ret is not None and absent_gears_ret not in RET_CODES:
            raise ValueError(f"absent_gears_ret {absent_gears_ret} is not a code the CANN headers define")
        if run_mode is not None and run_mode not in ("host", "device"):
            raise ValueError(f"run_mode {run_mode!r}: expected 'host' or 'device'")
        if core_busy is not None and not 0.0 < core_busy <= 1.0:
            raise ValueError(f"core_busy {core_busy}: expected a share in (0, 1]")
        if launch_share is not None and not 0.0 <= launch_share < 1.0:
            raise ValueError(f"launch_share {launch_share}: expected a share in [0, 1)")
        if copy_gbps is not None and copy_gbps < 0:
            raise ValueError(f"copy_gbps {copy_gbps}: expected GB/s >= 0")
        with self.lock:
            if run_mode is not None and run_mode != self.config.run_mode:
                if self.device_memory.live or self.host_memory.live:
                    raise ValueError("the run mode cannot change while device or host memory is allocated")
                self.config.run_mode = run_mode
                self.device_memory = DeviceMemory(addressable=run_mode == "device")
            if faults is not None:
                schedule = FaultSchedule.parse(faults) if isinstance(faults, str) else faults
                self.faults = FaultState(schedule)
            for name, value in (
                ("device_ms", device_ms),
                ("row_ms", row_ms),
                ("device_count", device_count),
                ("device_memory", device_memory),
                ("absent_gears_ret", absent_gears_ret),
                ("soc_name", soc_name),
                ("memcpy_alignment", memcpy_alignment),
                ("core_busy", core_busy),
                ("launch_share", launch_share),
                ("copy_gbps", copy_gbps),
                ("shared_device", shared_device),
            ):
                if value is not None:
                    setattr(self.config, name, value)

    def lose_device(self, reason: str = "lost (Simulator.lose_device)") -> None:
        """From now on every device call fails, until a new fault schedule is installed."""
        self.faults.lose_device(reason)

    def finalize(self) -> None:
        """Tear everything down like acl.finalize; leftovers are logged and written to the ledger file."""
        with self.lock:
            streams = list(self.streams.values())
        for stream in streams:  # queued work runs before the memory it writes is released
            stream.stop()
        with self.lock:
            leftovers = self.live()
            self._clear_state()
            self.initialized = False
            self.finalized = True
        if leftovers:
            LOG.warning("acl.finalize (simulated) with %d live resource(s): %s", len(leftovers), "; ".join(leftovers))
            self.set_error(f"acl.finalize: {len(leftovers)} resource(s) were still alive: {'; '.join(leftovers)}")
        self.write_ledger("finalize", leftovers)

    def reset(self) -> None:
        """Back to a fresh, uninitialised simulator with default settings (for tests)."""
        if self.initialized:
            self.finalize()
        with self.lock:
            self.config = SimConfig()
            self.faults = FaultState()
            self.calls.clear()
            self.first_init = None  # as CANN's resetAclJsonHash (acl.cpp 225)

    def write_ledger(self, when: str, live: list[str]) -> None:
        path = os.environ.get(LEDGER_ENV)
        if not path:
            return
        line = json.dumps({"pid": os.getpid(), "when": when, "live": live})
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def at_exit(self) -> None:
        if self.initialized:
            self.write_ledger("exit", self.live())

    # --- calls ----------------------------------------------------------------------------------

    def call(self, short: str, qualified: str, signature: Signature, body: Callable[[], Any]) -> Any:
        """Run one API function body with the common checks; shape its result; record failures."""
        produced = None
        try:
            if signature.needs_init and not self.initialized:
                raise AclFail(UNINITIALIZED, "acl.init has not been called (or acl.finalize already ran)")
            if signature.locked:  # one lock round for the count, the checks and the body
                with self.lock:
                    self.calls[short] += 1
                    if short in DEVICE_CALLS:
                        self._device_checks(short)
                    produced = body()
            else:
                with self.lock:
                    self.calls[short] += 1
                if short in DEVICE_CALLS:
                    self._device_checks(short)
                produced = body()
            ret = 0
        except AclFail as exc:
            ret = exc.ret
            self.set_error(f"{qualified}: {exc.message}")
        return shape_result(signature, produced, ret)

    def _device_checks(self, short: str) -> None:
        if self.faults.device_lost:
            raise AclFail(DEVICE_LOST_RET, f"the device is gone: {self.faults.device_lost}")
        fault = self.faults.check(short)
        if fault is not None:
            what = "device lost" if fault.lose_device else "failure"
            raise AclFail(fault.code, f"injected {what} (fault {fault})")

    def check_device(self) -> None:
        """For work already queued on a stream: fail once the device is lost."""
        if self.faults.device_lost:
            raise AclFail(DEVICE_LOST_RET, f"the device is gone: {self.faults.device_lost}")

    def set_error(self, message: str) -> None:
        self._tls.error = message

    def take_error(self) -> str | None:
        message = getattr(self._tls, "error", None)
        self._tls.error = None
        return message

    def new_handle(self) -> int:
        return next(self._handles)

    def new_model_id(self) -> int:
        return next(self._model_ids)

    # --- devices and contexts -----------------------------------------------------------------

    def check_device_id(self, device: int) -> None:
        if not 0 <= device < self.config.device_count:
            raise AclFail(
                INVALID_DEVICE,
                f"device {device} does not exist; the simulator has devices 0..{self.config.device_count - 1}",
            )

    def device_state(self, device: int) -> DeviceState | None:
        """The set_device state of an existing ``device`` (None while it is not set)."""
        self.check_device_id(device)
        return self.devices.get(device)

    def bind(self, context: int | None) -> None:
        self._tls.context = context

    def current_context(self) -> Context:
        handle = getattr(self._tls, "context", None)
        if handle is None:
            raise AclFail(
                CONTEXT_NULL,
                f"thread {threading.current_thread().name!r} has no current context; "
                f"call acl.rt.set_context or acl.rt.set_device in this thread first",
            )
        context = self.contexts.get(handle)
        if context is None:
            raise AclFail(
                CONTEXT_NULL,
                f"thread {threading.current_thread().name!r}: its current context "
                f"{handle:#x} was destroyed (or its device reset)",
            )
        if context.device_reset:
            raise AclFail(
                CONTEXT_NULL,
                f"thread {threading.current_thread().name!r}: its current context "
                f"{handle:#x} is unusable, device {context.device} was reset",
            )
        return context

    def stream(self, handle: int, context: Context) -> Stream:
        stream = self.streams.get(handle)
        if stream is None:
            raise AclFail(BAD_HANDLE, f"stream {handle:#x} does not exist (never created or destroyed)")
        if stream.context != context.handle:
            raise AclFail(
                STREAM_CONTEXT,
                f"stream {handle:#x} belongs to context {stream.context:#x}, the "
                f"calling thread's current context is {context.handle:#x}",
            )
        return stream

    def model(self, model_id: int, context: Context | None = None) -> LoadedModel:
        model = self.models.get(model_id)
        if model is None:
            raise AclFail(INVALID_MODEL, f"model id {model_id} is not loaded")
        if context is not None and model.context != context.handle:
            raise AclFail(
                MODEL_CONTEXT,
                f"model {model_id} was loaded in context {model.context:#x}, the "
                f"calling thread's current context is {context.handle:#x}",
            )
        return model

    def lookup(self, table: dict[int, Any], handle: int, kind: str) -> Any:
        found = table.get(handle)
        if found is None:
            raise AclFail(INVALID_PARAM, f"{kind} {handle:#x} does not exist (never created or destroyed)")
        return found

    def add(self, table: dict[int, Any], make: Callable[[int], Any]) -> int:
        """Put ``make(new handle)`` into ``table`` (a create_* call); the new handle."""
        handle = self.new_handle()
        table[handle] = make(handle)
        return handle

    def remove(self, table: dict[int, Any], handle: int, kind: str) -> Any:
        """Take ``handle`` out of ``table`` (a destroy_* call); AclFail when it does not exist."""
        found = self.lookup(table, handle, kind)
        del table[handle]
        return found

    def tensor_desc(self, handle: int) -> TensorDesc:
        """A tensor desc the caller created, or a dataset's copy (get_dataset_tensor_desc)."""
        found = self.tensor_descs.get(handle) or self.dataset_descs.get(handle)
        if found is None:
            raise AclFail(INVALID_PARAM, f"tensor desc {handle:#x} does not exist (never created or destroyed)")
        return found

    def set_dataset_desc(self, dataset: Dataset, index: int, desc: TensorDesc | None) -> None:
        """Give ``dataset`` its own copy of ``desc`` at ``index`` (None: none), dropping the old copy."""
        old = dataset.descs.pop(index, None)
        if old is not None:
            self.dataset_descs.pop(old.handle, None)
        if desc is not None:
            copy = TensorDesc(self.new_handle(), desc.data_type, desc.dims, desc.format, desc.name)
            dataset.descs[index] = self.dataset_descs[copy.handle] = copy

    def owned_by(self, context: int) -> list[str]:
        """The streams, events and loaded models that belong to ``context``."""
        return (
            [f"stream {s.handle:#x}" for s in self.streams.values() if s.context == context]
            + [f"event {e.handle:#x}" for e in self.events.values() if e.context == context]
            + [f"model {m.model_id}" for m in self.models.values() if m.context == context]
        )

    # --- the modelled device (sim/device.py) ----------------------------------------------------

    def device_model(self, device: int) -> Device:
        """The modelled device ``device``: shared by the scope's processes, or (``shared_device``
        off) one that gives every caller the device to itself. AclFail when the shared state
        cannot be made (the message says how to do without it)."""
        key = (device, self.config.shared_device)
        found = self._device_models.get(key)
        if found is None:
            try:
                found = SharedDevice(device) if key[1] else StreamDevice()
            except SharedStateError as exc:
                raise AclFail(
                    INTERNAL,
                    f"device {device}: the simulated device is shared by every process using it, through "
                    f"shared memory, which failed: {exc}; set parameter acl_sim_shared_device false (or "
                    "Simulator.configure(shared_device=False)) to give every stream a device of its own",
                ) from None
            found = self._device_models.setdefault(key, found)
        return found

    def execution_demand(self, model: LoadedModel, run: Run) -> Demand:
        """What one execution of ``model`` asks of its device's cores (sim/device.py:execution_demand)."""
        config = self.config
        capacity = ai_cores(config.soc_name)
        model_cores = model.cores if capacity is not None else None
        return execution_demand(
            modelled_seconds(run, config.device_ms, config.row_ms),
            capacity or 1,
            model_cores,
            config.core_busy,
            config.launch_share,
        )

    # --- memory ---------------------------------------------------------------------------------

    def device_used(self, device: int) -> int:
        """Device bytes in use: allocations, plus the work and weight memory the runtime holds for
        models loaded without memory of their own (load_from_file_with_mem's buffers are allocations)."""
        models = sum(
            (0 if m.work_ptr else m.work_size) + (0 if m.weight_ptr else m.weight_size)
            for m in self.models.values()
            if m.device == device
        )
        return self.device_memory.used(device) + models

    def memory_users(self, addr: int) -> list[LoadedModel]:
        """Loaded models whose work or weight memory is the block at ``addr``."""
        return [m for m in self.models.values() if addr in (m.weight_ptr, m.work_ptr)]

    def streams_in_use(self, device: int) -> int:
        """Streams of ``device``: its default stream (bound by set_device, or by the first
        create_context), each created context's own (1, or 2 on the Atlas inference series in EP
        form: 05_context_management.md 67-78), those created and each loaded model's stream_num
        (1 when its file records none; davinci_model.cc 1460-1489)."""
        on_device = [c for c in self.contexts.values() if c.device == device]
        created_contexts = [c for c in on_device if not c.default]
        limits = device_limits(self.config.soc_name)
        per_context = limits.context_streams(self.config.run_mode == "device") if limits is not None else 1
        handles = {c.handle for c in on_device}
        created = sum(1 for s in self.streams.values() if s.context in handles)
        models = sum(m.om.model_streams for m in self.models.values() if m.device == device)
        default = DEVICE_DEFAULT_STREAMS if device in self.devices or created_contexts else 0
        return default + per_context * len(created_contexts) + created + models

    def events_in_use(self, device: int) -> int:
        """Events created on ``device`` and each loaded model's event_num (davinci_model.cc 1503-1509)."""
        contexts = {c.handle for c in self.contexts.values() if c.device == device}
        models = sum(m.om.model_events for m in self.models.values() if m.device == device)
        return sum(1 for e in self.events.values() if e.context in contexts) + models

    def is_device(self, addr: int) -> bool:
        return self.device_memory.contains(addr)

    def read(self, addr: int, count: int, device: bool, what: str) -> bytes:
        """``count`` bytes at ``addr`` of device memory or (any) host memory."""
        if device:
            if not self.is_device(addr):
                raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is host memory, device memory was expected")
            block, offset = self.device_memory.locate(addr, count, what)
            return bytes(block.data[offset : offset + count])
        if self.is_device(addr):
            raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is device memory, host memory was expected")
        self.host_memory.check_not_freed(addr, count, what)
        return read_host(addr, count)

    def write(self, addr: int, data: bytes, device: bool, what: str) -> None:
        if device:
            if not self.is_device(addr):
                raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is host memory, device memory was expected")
            block, offset = self.device_memory.locate(addr, len(data), what)
            block.data[offset : offset + len(data)] = data
            return
        if self.is_device(addr):
            raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is device memory, host memory was expected")
        self.host_memory.check_not_freed(addr, len(data), what)
        write_host(addr, data)

    def check_range(self, addr: int, count: int, device: bool, what: str) -> None:
        """At call time: the range exists (device) or is not device memory (host)."""
        if device:
            if not self.is_device(addr):
                raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is host memory, device memory was expected")
            self.device_memory.locate(addr, count, what)
        elif self.is_device(addr):
            raise AclFail(INVALID_PARAM, f"{what}: {addr:#x} is device memory, host memory was expected")
        elif addr == 0:
            raise AclFail(INVALID_PARAM, f"{what}: NULL host address")
        else:
            self.host_memory.check_not_freed(addr, count, what)

    # --- ledger ---------------------------------------------------------------------------------

    def live(self) -> list[str]:
        """Every resource still held: empty when a program released everything it made."""
        with self.lock:
            found = [f"device {d} set (count {s.refcount})" for d, s in sorted(self.devices.items())]
            found += [f"context {c.handle:#x} (device {c.device})" for c in self.contexts.values() if not c.default]
            found += [f"stream {s.handle:#x} (context {s.context:#x})" for s in self.streams.values()]
            found += [f"event {e.handle:#x}" for e in self.events.values()]
            found += [
                f"device malloc {b.addr:#x} ({b.size} bytes, device {b.device})"
                for b in self.device_memory.live.values()
            ]
            found += [f"host malloc {b.addr:#x} ({b.size} bytes)" for b in self.host_memory.live.values()]
            found += [f"model {m.model_id} ({m.path})" for m in self.models.values()]
            found += [f"model desc {d.handle:#x}" for d in self.descs.values()]
            found += [f"dataset {d.handle:#x} ({len(d.buffers)} buffer(s))" for d in self.datasets.values()]
            found += [f"data buffer {b.handle:#x} (address {b.addr:#x}, {b.size} bytes)" for b in self.buffers.values()]
            found += [f"tensor desc {d.handle:#x} ({list(d.dims)})" for d in self.tensor_descs.values()]
            found += [f"AIPP set {a.handle:#x} ({len(a.batches)} image(s))" for a in self.aipps.values()]
            found += [f"profiling config {h:#x}" for h in self.profiling.configs]
            if self.profiling.folder is not None:
                found.append(f"profiling session in {self.profiling.folder} (acl.prof.init without finalize)")
            if self.dumps.initialized:
                found.append("dump session (acl.mdl.init_dump without finalize_dump)")
            return found
