"""The acl engine: a CANN offline model (.om) on an Ascend NPU through pyACL (``import acl``).

The engine drives whatever pyACL module its registry entry names: CANN's own for ``acl``, the
simulator's for ``acl-sim`` (registered by ``ge_python_backend.sim``). pyACL is imported only
when an engine opens.

Each slot loads its own copy of the model (one model_id must never execute on two streams at
once) over its own work memory and one weight buffer all copies share, with a stream, device
buffers of the largest gear, staging memory and (optionally) timing events; nothing is allocated
on the execute path. At load the engine also applies an acl.json, data dump and a profiling
window when the config asks for them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.aipp import REQUEST_FIELDS, AippConfig, AippMode, request_overrides
from ge_python_backend.ascend.constants import ACL_DEVICE, ACL_HBM_MEM, ACL_SUCCESS, MallocPolicy
from ge_python_backend.ascend.layout import Shape
from ge_python_backend.ascend.limits import DEVICE_DEFAULT_STREAMS, DeviceLimits, device_limits
from ge_python_backend.ascend.resources import ModelResources
from ge_python_backend.engines import compile as compile_at_load
from ge_python_backend.engines.acl import preflight
from ge_python_backend.engines.acl.busy import DeviceBusy
from ge_python_backend.engines.acl.options import PARAMETERS as ACL_PARAMETERS
from ge_python_backend.engines.acl.options import AclOptions, ProfilingSettings
from ge_python_backend.engines.acl.preflight import (
    aipp_config_problem,
    checked_options,
    max_shapes_problems,
)
from ge_python_backend.engines.acl.runtime import AclError, AclRuntime, check, log_failure
from ge_python_backend.engines.acl.slot import AclSlot, SlotSetup, aipp_batch, dynamic_aipp_config
from ge_python_backend.engines.base import CompileTarget, Engine, RequestSettings, Shapes, Slot
from ge_python_backend.engines.offline import model_resources
from ge_python_backend.engines.registry import EngineDriver, EngineInfo, EngineLoad
from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.specs import ModelSpec

LOG = logging.getLogger(__name__)

__all__ = ["DRIVER", "PARAMETERS", "AclDriver", "AclEngine"]

#: the engine's own parameters and those of the compile at load (an .onnx or .pb under this engine).
#: No per-stream core limit: acl.rt.set_stream_res_limit does not reach an .om's tasks (fidelity.md
#: row 132); the cores are ATC's --aicore_num, through atc_flags.
PARAMETERS = ACL_PARAMETERS + compile_at_load.PARAMETERS

#: streams and events a slot uses besides the model's own (stream_num / event_num of the file,
#: ascend/resources.py): its stream, and four timing events
SLOT_STREAMS, SLOT_EVENTS = 1, 4
#: the stream a dynamic-shape (RT2) load creates and destroys again (model.cpp 216-233)
RT2_LOAD_STREAMS = 1
#: a request parameter that starts an on-demand profiling window: TOKEN or TOKEN:BATCHES
PROFILE_PARAMETER = "acl_profile"
_DEFAULT_ON_DEMAND_BATCHES = 100
_MAX_DIGITS = 9


def instance_streams(limits: DeviceLimits, model: ModelResources, slots: int, device_mode: bool) -> int:
    """Streams one instance (a process) of an acl engine with ``slots`` model copies holds on its
    device: the device's default stream, its context's, and per copy the slot's stream and the
    model's own; plus, for a dynamic-shape model, the stream its load makes while it runs."""
    loading = RT2_LOAD_STREAMS if model.dynamic else 0
    return (
        DEVICE_DEFAULT_STREAMS + limits.context_streams(device_mode) + slots * (SLOT_STREAMS + model.streams) + loading
    )


def copy_events(model: ModelResources, timing_events: bool) -> int:
    """Events one model copy holds: the model's own and the slot's timing events."""
    return (SLOT_EVENTS if timing_events else 0) + model.events


class AclEngine(Engine):
    """An .om model on one device, with ``slots`` model copies that can run concurrently."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        acl: Any,
        name: str = "acl",
        device_id: int = 0,
        slots: int = 1,
        options: AclOptions | None = None,
        peers: int = 1,
    ):
        if slots < 1:
            raise ConfigError(f"streams (slots) must be >= 1, got {slots}")
        self.name = name
        self._acl = acl
        self._device_id = device_id
        self._options = options or AclOptions()
        self._runtime = AclRuntime.of(acl)
        self._lock = threading.Lock()
        self._started = False
        self._context = 0
        self._slots: list[AclSlot] = []
        self._weights = 0
        self._model_bytes = (0, 0)
        #: a dynamic-shape model: the runtime holds each copy's weights and work memory
        self._system_managed = False
        self._dumping = False
        self._profiling: _ProfilingWindow | None = None
        #: the device's busy seconds, counted once over every instance on it (busy.py)
        self._busy: DeviceBusy | None = None
        path = str(model_path)
        try:
            self._runtime.start(self, device_id, self._options.acl_json)
            self._started = True
            context, ret = acl.rt.create_context(device_id)
            check(acl, ret, "acl.rt.create_context", f"opening device {device_id}")
            self._context = context
            self.device_mode = self._runtime.run_mode() == ACL_DEVICE
            resources = model_resources(Path(model_path))
            self._check_limits(resources, slots, peers)
            self._start_dump()
            self._profiling = self._start_profiling()
            self._busy = DeviceBusy(device_id)
            setup = self._slot_setup(path, resources)
            first = AclSlot(0, acl, setup, None)
            self._slots.append(first)
            self._slots.extend(AclSlot(i, acl, setup, first.description) for i in range(1, slots))
        except BaseException:
            self.close()
            raise
        self.layout = first.description.layout
        # a request's parameters may set dynamic-AIPP values or start a profiling window; with
        # dynamic AIPP a request without any still has settings (the aipp_config file's values)
        dynamic_aipp = any(t.dynamic_aipp for t in self.layout.inputs)
        self.request_settings = RequestSettings.ALWAYS if dynamic_aipp else RequestSettings.WITH_PARAMETERS
        # the pid msprof's on-demand profiling attaches to (docs/profiling.md, mode e)
        LOG.info("pid %d: for msprof --dynamic=on --pid=%d", os.getpid(), os.getpid())
        soc = acl.get_soc_name()
        self.spec = self.layout.spec("acl", {"engine": self.name, "device_id": str(device_id), "soc_name": soc or ""})
        found = max_shapes_problems(self.spec, self._options.max_shapes)
        aipp = aipp_config_problem(self._options.aipp, self.spec)
        if found or aipp:
            self.close()
            raise ConfigError("; ".join(found + ([aipp] if aipp else [])))
        self._aipp_defaults = {self.layout.inputs[c.related_input_rank].name: c for c in self._options.aipp}
        if self._profiling is not None:
            self._profiling.loaded()

    # -- load ----------------------------------------------------------------------------------

    def _check_limits(self, model: ModelResources, slots: int, peers: int) -> None:
        """Refuse a config that asks for more streams or events than the device has, naming the
        limit, the count and the parameter to lower (06_stream_management.md 81-96,
        07_event_management.md 81-107). Each of the ``peers`` instances is a process of its own
        with the device's default stream and this engine's context, whose streams count too
        (04_device_management.md 86, 05_context_management.md 67-78), and per model copy its
        slot's stream and the streams and events the model creates at load: stream_num / event_num
        of the file (model_utils.cc 1321-1324, davinci_model.cc 1460-1509), one stream and no events
        when it records none; plus the timing events. A dynamic-shape (RT2) load also creates a
        stream of its own and destroys it when the load is done (model.cpp 216-233): one more per
        instance, whose copies load one after another."""
        limits = device_limits(self._acl.get_soc_name())
        if limits is None:
            return
        copies = slots * peers
        timing = SLOT_EVENTS if self._options.timing_events else 0
        context = limits.context_streams(self.device_mode)
        loading = RT2_LOAD_STREAMS if model.dynamic else 0
        per_instance = instance_streams(limits, model, slots, self.device_mode)
        need_streams = peers * per_instance
        need_events = copies * copy_events(model, self._options.timing_events)
        where = f"{peers} instance(s) x {slots} stream(s) on device {self._device_id} ({limits.family})"
        if need_streams > limits.streams:
            during = f", and the {loading} stream a dynamic-shape load makes while it runs" if loading else ""
            raise ConfigError(
                f"{where} need {need_streams} streams ({per_instance} per instance: the device's default "
                f"stream, {context} of its context, and each model copy its own stream and the model's "
                f"{model.describe()}{during}); the device has {limits.streams}: lower parameter 'streams' or the "
                "instance count"
            )
        if need_events > limits.events:
            raise ConfigError(
                f"{where} need {need_events} events ({timing} timing events per copy and the model's "
                f"{model.describe()}); the device has {limits.events}: lower parameter 'streams' or the instance "
                "count" + (", or set acl_timing_events false" if timing else "")
            )

    def _slot_setup(self, path: str, model: ModelResources) -> SlotSetup:
        """Sizes and the shared weight buffer: S copies cost S x (work + I/O) + 1 x weights
        (aclmdlLoadFromFileWithMem.md 45-48). A dynamic-shape (RT2) model is loaded with
        system-managed memory, every copy with load_from_file, as the docs require for a model whose
        input shapes are not fixed (aclmdlQuerySize.md 31); query_size still answers for it (work 0,
        model_manager.cc 2404-2409), but RT2 ignores the work memory (model.cpp 1332-1335) and
        silently allocates weights of its own when the buffer it gets is short (sink_weight_assigner.cc
        86-93), so a shared weight buffer would be unverifiable."""
        acl, options = self._acl, self._options
        if model.dynamic:
            self._system_managed = True
            LOG.info(
                "%s is a dynamic-shape model: every copy loads with system-managed memory (load_from_file), "
                "so the copies do not share weights",
                path,
            )
            return SlotSetup(
                path,
                self.device_mode,
                options.timing_events,
                options.timing_every,
                None,
                0,
                options.max_shapes,
                self._busy,
            )
        work, weight, ret = acl.mdl.query_size(path)
        weights = None
        if ret != ACL_SUCCESS:
            LOG.info(
                "acl.mdl.query_size does not apply to %s (%s): every copy loads its own weights",
                path,
                AclError("acl.mdl.query_size", ret, None),
            )
            work = weight = 0
        elif options.share_weights and weight:
            ptr, ret = acl.rt.malloc(weight, MallocPolicy.HUGE_FIRST)
            check(acl, ret, "acl.rt.malloc", f"allocating {weight} bytes for the shared weights")
            self._weights = ptr
            weights = (ptr, weight)
        self._model_bytes = (work, weight)
        return SlotSetup(
            path,
            self.device_mode,
            options.timing_events,
            options.timing_every,
            weights,
            work if weights else 0,
            options.max_shapes,
            self._busy,
        )

    def _start_dump(self) -> None:
        """Data dump for the models loaded from now on: init_dump, set_dump, then load
        (18_dump_configuration.md 53-89, 147-159); once per process, shared by the runtime."""
        path = self._options.dump_config
        if path is None:
            return
        self._runtime.start_dump(path)
        self._dumping = True

    def _start_profiling(self) -> _ProfilingWindow | None:
        profiling = self._options.profiling
        if profiling is None:
            return None
        self._runtime.start_profiling(profiling.folder)
        LOG.info("profiling into %s", profiling.folder)
        return _ProfilingWindow(self._runtime, profiling, self._device_id, self._bind_quietly)

    def _bind_quietly(self) -> None:
        """Make the engine's context current in a helper thread (the profiling timer); never raises."""
        with self._lock:
            if self._context:
                log_failure(self._acl, self._acl.rt.set_context(self._context), "acl.rt.set_context")

    # -- serving ---------------------------------------------------------------------------

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(self._slots)

    def bind_thread(self) -> None:
        """Make this engine's context current in the calling thread (set_context is per thread)."""
        acl = self._acl
        ret = acl.rt.set_context(self._context)
        check(acl, ret, "acl.rt.set_context", "binding a thread to the engine's context")

    def batch_settings(self, parameters: Mapping[str, Any], shapes: Shapes, request_id: str = "") -> Hashable:
        """A request's settings: each dynamic-AIPP image's config (the aipp_config file's values, then
        request parameters named like aipp_op fields), checked as set_input_aipp checks it; and the
        on-demand profiling trigger. Requests with equal settings share a batch."""
        if PROFILE_PARAMETER in parameters:
            self._profile_on_demand(str(parameters[PROFILE_PARAMETER]), request_id)
        found: list[tuple[str, AippConfig]] = []
        for tensor in self.layout.inputs:
            if not tensor.dynamic_aipp:
                continue
            try:
                overrides = request_overrides(parameters, self._aipp_defaults.get(tensor.name, AippConfig()))
            except ConfigError as exc:
                raise InputError(str(exc)) from None
            shape = tuple(shapes[tensor.name])
            config = dynamic_aipp_config(
                overrides.applied_to(self._aipp_defaults.get(tensor.name, AippConfig())), shape
            )
            self._check_aipp(tensor.name, config, shape)
            found.append((tensor.name, config))
        return tuple(found) or None

    def _check_aipp(self, name: str, config: AippConfig, shape: Shape) -> None:
        """What set_input_aipp refuses, as an input error (acl_aipp.cpp 107-312; aipp_param_check.cpp
        28-395): values within their ranges, always; the images within the buffer
        (max_src_image_size); the AIPP output the network's H x W where GE checks it, an NCHW/NHWC
        network input (acl_aipp.cpp:107-170) without shape ranges (acl_aipp.cpp:184-188)."""
        description = self._slots[0].description
        network = description.aipp_networks.get(name)
        tensor = self.layout.input(name)
        images = aipp_batch(description, name, shape)
        found = config.field_problems()
        if network is not None:
            found = AippConfig(**{**config.__dict__, "aipp_mode": AippMode.STATIC}).problems(
                (images, network[1], network[2], network[3]), model_output=not tensor.ranges
            )
        fmt = config.input_format
        if fmt is not None:
            size = fmt.byte_size(images, config.src_image_size_h, config.src_image_size_w)
            if size > tensor.size:
                each = fmt.byte_size(1, config.src_image_size_h, config.src_image_size_w)
                why = " (an AIPP set covers the largest batch gear)" if images != shape[0] else ""
                found.append(
                    f"{size} bytes of {fmt.name} images ({images} x {each} bytes of {config.src_image_size_w}x"
                    f"{config.src_image_size_h}{why}), above the {tensor.size} (max_src_image_size) the model takes"
                )
        if found:
            raise InputError(
                f"input {name!r}: the dynamic AIPP cannot run this request: "
                + "; ".join(found)
                + f" (request parameters named like aipp_op fields set it: {', '.join(REQUEST_FIELDS[:8])}, ...)"
            )

    def _profile_on_demand(self, value: str, request_id: str) -> None:
        """TOKEN[:BATCHES]: a token from acl_profiling_tokens_file, BATCHES ASCII digits from 1 to
        acl_profiling_max_batches; messages never show the token."""
        token, _, count = value.partition(":")
        window = self._profiling
        if window is None or not window.settings.tokens:
            raise InputError(
                f"request parameter {PROFILE_PARAMETER!r}: this model allows no profiling on demand (it needs "
                "parameters acl_profiling_dir and acl_profiling_tokens_file)"
            )
        if not window.settings.allows(token):
            raise InputError(
                f"request parameter {PROFILE_PARAMETER!r}: profiling on demand is not allowed with "
                "that token (the model's acl_profiling_tokens_file)"
            )
        most = window.settings.max_batches
        if not count:
            batches = min(_DEFAULT_ON_DEMAND_BATCHES, most)
        elif count.isascii() and count.isdigit() and len(count) <= _MAX_DIGITS:  # no '-5', '1_000', '٣'
            batches = int(count)
        else:
            batches = 0  # refused below
        if not 1 <= batches <= most:
            raise InputError(
                f"request parameter {PROFILE_PARAMETER!r}: BATCHES {count[:20]!r} is not an integer from 1 to {most} "
                "in ASCII digits (TOKEN[:BATCHES]; the model's acl_profiling_max_batches)"
            )
        window.request(batches, request_id)

    def after_batch(self) -> None:
        if self._profiling is not None:
            self._profiling.batch_done()

    def device_memory(self) -> tuple[int, int] | None:
        """(free, total) of the device's memory (get_mem_info; free excludes system-reserved memory),
        from any thread (it binds the engine's context first); None when it cannot be read."""
        acl = self._acl
        with self._lock:
            if not self._context or acl.rt.set_context(self._context) != ACL_SUCCESS:
                return None
            free, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
        if ret != ACL_SUCCESS:
            return None
        return int(free), int(total)

    # -- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        """Release slots, weights, dump, profiling, context and device; safe from any thread, idempotent."""
        with self._lock:
            acl = self._acl
            if self._context:
                log_failure(acl, acl.rt.set_context(self._context), "acl.rt.set_context")
            if self._profiling is not None:
                self._profiling.close()
                self._profiling = None
            if self._dumping:  # before unload (18_dump_configuration.md 53-72); the last user finalizes
                self._runtime.stop_dump()
                self._dumping = False
            for slot in reversed(self._slots):
                slot.release()
            self._slots = []
            if self._weights:  # after every copy using it is unloaded
                log_failure(acl, acl.rt.free(self._weights), "acl.rt.free")
                self._weights = 0
            if self._context:
                log_failure(acl, acl.rt.destroy_context(self._context), "acl.rt.destroy_context")
                self._context = 0
            if self._started:
                self._started = False
                self._runtime.stop(self, self._device_id)
            if self._busy is not None:
                self._busy.close()
                self._busy = None

    def describe(self) -> str:
        count = len(self._slots)
        if not count:
            return f"{self.name} engine (closed)"
        work, weight = self._model_bytes
        buffers = self._slots[0].device_bytes - (work if self._weights else 0)
        mode = "device run mode: no host staging, no copies" if self.device_mode else "host run mode"
        if self._system_managed:
            memory = (
                f"device memory {size_text(count * buffers)} = {count} x I/O buffers {size_text(buffers)}, plus "
                "the weights and work memory the runtime allocates for each copy (a dynamic-shape model loads "
                "with system-managed memory)"
            )
        elif self._weights:
            total = count * (work + buffers) + weight
            memory = (
                f"device memory {size_text(total)} = {count} x (work {size_text(work)} + I/O buffers "
                f"{size_text(buffers)}) + 1 x weights {size_text(weight)} (shared)"
            )
        else:
            total = count * (work + weight + buffers)
            memory = (
                f"device memory {size_text(total)} = {count} x (work {size_text(work)} + weights "
                f"{size_text(weight)} + I/O buffers {size_text(buffers)})"
            )
        return (
            f"{self.name} engine on device {self._device_id} ({mode}): {count} slot(s), each a model copy with "
            f"its own stream; {memory}; pinned host memory {size_text(self._slots[0].host_bytes * count)}"
        )


class _ProfilingWindow:
    """An acl.prof session: started for the first N batches or S seconds after load, or on demand.

    The runtime starts and stops it (create_config, start, stop, destroy_config: acl_prof.h
    175-230), one per device; prof.init (before any model loads) and finalize are the runtime's,
    once per process. A window of S seconds closes on a timer, with or without batches."""

    def __init__(
        self, runtime: AclRuntime, settings: ProfilingSettings, device_id: int, bind: Callable[[], None]
    ) -> None:
        self._runtime = runtime
        self.settings = settings
        self._device_id = device_id
        self._bind = bind
        self._config = 0
        self._left: int | None = None  # batches until stop (None: by time or not running)
        self._until = 0.0
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def loaded(self) -> None:
        if self.settings.batches or self.settings.seconds:
            self._start(self.settings.batches or None, self.settings.seconds)

    def request(self, batches: int, request_id: str) -> None:
        """A window opened on demand: ``batches``, closed after max_seconds at the latest."""
        self._start(
            batches, self.settings.max_seconds, f" for request {request_id[:128]!r}" if request_id else " for a request"
        )

    def _start(self, batches: int | None, seconds: float, why: str = "") -> None:
        with self._lock:
            if self._config:
                return  # a window is open: it goes on
            config = self._runtime.open_window(self._device_id, self.settings.aicore_metrics, self.settings.data_types)
            if config is None:
                LOG.info(
                    "profiling: device %d is already being profiled by another model's window, which "
                    "covers this model's batches too",
                    self._device_id,
                )
                return
            self._config = config
            self._left = batches
            self._until = time.monotonic() + seconds if seconds else 0.0
            if seconds:
                self._timer = threading.Timer(seconds, self._expire)
                self._timer.daemon = True
                self._timer.name = f"acl-profiling-window-{self._device_id}"
                self._timer.start()
            length = [f"{batches} batches"] if batches else []
            if seconds:
                length.append(f"{seconds:g} s" if not batches else f"at most {seconds:g} s")
            LOG.info("profiling started (%s)%s", ", ".join(length), why)

    def _expire(self) -> None:
        self._bind()
        self._stop()

    def batch_done(self) -> None:
        with self._lock:
            if not self._config:
                return
            if self._left is not None:
                self._left -= 1
            done = (self._left is not None and self._left <= 0) or (self._until and time.monotonic() >= self._until)
        if done:
            self._stop()

    def _stop(self) -> None:
        with self._lock:
            if not self._config:
                return
            self._runtime.close_window(self._device_id, self._config)
            timer, self._timer = self._timer, None
            self._config, self._left, self._until = 0, None, 0.0
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        LOG.info("profiling stopped; results in %s", self.settings.folder)

    def close(self) -> None:
        self._stop()
        self._runtime.stop_profiling()


def size_text(nbytes: int) -> str:
    """``nbytes`` for people: 1.6 GiB, 98.0 MiB, 512 B."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def prepare_options(options: Mapping[str, Any], version_dir: Path) -> AclOptions:
    """The engine's options (files relative to ``version_dir``) as ``preflight.checked_options``
    checks them (what ``ge-triton check`` reports too), with their output folders created and writable."""
    parsed, folders = checked_options(options, version_dir)
    for what, folder in folders:
        _writable(folder, what)
    return parsed


def _writable(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {folder} is not writable")


class AclDriver(EngineDriver):
    """Engines ``acl`` and ``acl-sim``: the pyACL ``EngineInfo.pyacl`` names (CANN's, or the simulator's)."""

    parameters = PARAMETERS

    def open(self, load: EngineLoad) -> AclEngine:
        """``slots`` streams on ``device_id``; the files the options name lie in ``version_dir``."""
        parsed = prepare_options(load.options, load.version_dir)
        info = load.info
        return AclEngine(
            load.model_path,
            acl=info.load_pyacl(),
            name=info.name,
            device_id=load.device_id,
            slots=load.slots,
            options=parsed,
            peers=load.peers,
        )

    def available(self, info: EngineInfo, options: Mapping[str, Any]) -> tuple[bool, str]:
        """Whether ``info`` can run here (its pyACL imports and sees a device), and why (not)."""
        try:
            acl_json = AclOptions.read(options, Path(".")).acl_json
            count = AclRuntime.of(info.load_pyacl()).device_count(acl_json)
        except (ConfigError, AclError) as exc:
            return False, str(exc).split(". ")[0]
        if count < 1:
            return False, "pyACL sees no Ascend device"
        return True, f"{count} Ascend device(s) ({info.name})"

    def compile_target(self, info: EngineInfo, options: Mapping[str, Any], version_dir: Path) -> CompileTarget:
        """What an .om compiled at load is for: ``acl.get_soc_name()`` (ATC's --soc_version, the name
        without "Ascend" that ``npu-smi info`` shows) and ``acl.get_version()``, the ACL version of the
        toolkit (acl_rt.h aclrtGetVersion), both asked after pyACL is initialised."""
        acl = info.load_pyacl()
        acl_json = AclOptions.read(options, version_dir).acl_json  # the engine inits with the same file
        AclRuntime.of(acl).device_count(acl_json)
        soc = acl.get_soc_name()
        if not soc:
            raise ConfigError(f"acl.get_soc_name() names no SoC ({info.name}); ATC needs --soc_version to compile")
        major, minor, patch, ret = acl.get_version()
        check(acl, ret, "acl.get_version")
        return CompileTarget(str(soc), f"{info.name} {major}.{minor}.{patch}")

    def offline_problems(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        return preflight.offline_problems(options, version_dir, spec)

    def generated_parameters(self, spec: ModelSpec, max_batch_size: int, given: Mapping[str, str]) -> dict[str, str]:
        return preflight.generated_parameters(spec, max_batch_size, given)


DRIVER = AclDriver()
