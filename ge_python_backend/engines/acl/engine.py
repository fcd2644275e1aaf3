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

from ge_python_backend.ascend.acljson import AclJson, ignored_keys, problems, read_acl_json
from ge_python_backend.ascend.aipp import REQUEST_FIELDS, AippConfig, AippMode, request_overrides
from ge_python_backend.ascend.constants import ACL_DEVICE, ACL_SUCCESS, MallocPolicy
from ge_python_backend.ascend.layout import Shape
from ge_python_backend.ascend.limits import DEVICE_DEFAULT_STREAMS, device_limits
from ge_python_backend.ascend.resources import model_resources
from ge_python_backend.engines.acl.options import PARAMETERS, AclOptions, ProfilingPlan
from ge_python_backend.engines.acl.runtime import AclError, AclRuntime, check, log_failure
from ge_python_backend.engines.acl.slot import AclSlot, SlotSetup, aipp_batch, dynamic_aipp_config
from ge_python_backend.engines.base import Engine, Shapes, Slot
from ge_python_backend.engines.registry import EngineInfo
from ge_python_backend.errors import ConfigError, InputError

LOG = logging.getLogger(__name__)

__all__ = ["PARAMETERS", "AclEngine", "available", "open_engine"]

#: aclrtMemAttr ACL_HBM_MEM: falls back to DDR on devices without HBM (11-01_device_memory_malloc_and_free.md 687-737)
ACL_HBM_MEM = 1
#: streams and events a slot uses besides the model's own (stream_num / event_num of the file,
#: ascend/resources.py): its stream, and four timing events
SLOT_STREAMS, SLOT_EVENTS = 1, 4
#: a request parameter that starts an on-demand profiling window: TOKEN or TOKEN:BATCHES
PROFILE_PARAMETER = "acl_profile"
_DEFAULT_ON_DEMAND_BATCHES = 100
_MAX_DIGITS = 9


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
        self._dumping = False
        self._profiling: _ProfilingWindow | None = None
        path = str(model_path)
        try:
            self._runtime.start(self, device_id, self._options.acl_json)
            self._started = True
            context, ret = acl.rt.create_context(device_id)
            check(acl, ret, "acl.rt.create_context", f"opening device {device_id}")
            self._context = context
            self.device_mode = self._runtime.run_mode() == ACL_DEVICE
            self._check_limits(path, slots, peers)
            self._start_dump()
            self._profiling = self._start_profiling()
            setup = self._slot_setup(path)
            first = AclSlot(0, acl, setup, None)
            self._slots.append(first)
            self._slots.extend(AclSlot(i, acl, setup, first.plan) for i in range(1, slots))
        except BaseException:
            self.close()
            raise
        self.layout = first.plan.layout
        self._dynamic_aipp = any(t.dynamic_aipp for t in self.layout.inputs)
        # the pid msprof's on-demand profiling attaches to (docs/profiling.md, mode e)
        LOG.info("pid %d: for msprof --dynamic=on --pid=%d", os.getpid(), os.getpid())
        soc = acl.get_soc_name()
        self.spec = self.layout.spec("acl", {"engine": self.name, "device_id": str(device_id), "soc_name": soc or ""})
        self._aipp_defaults = self._aipp_defaults_by_image()
        if self._profiling is not None:
            self._profiling.loaded()

    # -- load ----------------------------------------------------------------------------------

    def _check_limits(self, path: str, slots: int, peers: int) -> None:
        """Refuse a config that asks for more streams or events than the device has, naming the
        limit, the count and the parameter to lower (06_stream_management.md 81-96,
        07_event_management.md 81-107). Each of the ``peers`` instances is a process of its own
        with the device's default stream and this engine's context, whose streams count too
        (04_device_management.md 86, 05_context_management.md 67-78), and per model copy its
        slot's stream and the streams and events the model creates at load: stream_num / event_num
        of the file (model_utils.cc 1321-1324, davinci_model.cc 1460-1509), one stream and no events
        when it records none; plus the timing events."""
        limits = device_limits(self._acl.get_soc_name())
        if limits is None:
            return
        model = model_resources(path)
        copies = slots * peers
        timing = SLOT_EVENTS if self._options.timing_events else 0
        context = limits.context_streams(self.device_mode)
        per_instance = DEVICE_DEFAULT_STREAMS + context + slots * (SLOT_STREAMS + model.streams)
        need_streams = peers * per_instance
        need_events = copies * (timing + model.events)
        where = f"{peers} instance(s) x {slots} stream(s) on device {self._device_id} ({limits.family})"
        if need_streams > limits.streams:
            raise ConfigError(
                f"{where} need {need_streams} streams ({per_instance} per instance: the device's default "
                f"stream, {context} of its context, and each model copy its own stream and the model's "
                f"{model.describe()}); the device has {limits.streams}: lower parameter 'streams' or the instance count"
            )
        if need_events > limits.events:
            raise ConfigError(
                f"{where} need {need_events} events ({timing} timing events per copy and the model's "
                f"{model.describe()}); the device has {limits.events}: lower parameter 'streams' or the instance "
                "count" + (", or set acl_timing_events false" if timing else "")
            )

    def _slot_setup(self, path: str) -> SlotSetup:
        """Sizes and the shared weight buffer: S copies cost S x (work + I/O) + 1 x weights
        (aclmdlLoadFromFileWithMem.md 45-48). For a dynamic (shape-range) model query_size answers
        work 0 and the weights (model_manager.cc 2390-2409) and the RT2 load ignores work memory
        (model.cpp 1332-1335): no work memory is allocated for it, only the shared weights."""
        acl, options = self._acl, self._options
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
        )

    def _aipp_defaults_by_image(self) -> dict[str, AippConfig]:
        """The aipp_config file's blocks by image input: related_input_rank counts the model's own
        inputs, as in ATC's --insert_op_conf (config_file_template.md 93-96); each must name a dynamic-AIPP image."""
        inputs = self.layout.inputs
        found = {}
        for config in self._options.aipp:
            rank = config.related_input_rank
            if rank >= len(inputs) or not inputs[rank].dynamic_aipp:
                images = [f"{i} ({t.name})" for i, t in enumerate(inputs) if t.dynamic_aipp] or ["none"]
                raise ConfigError(
                    f"parameter 'aipp_config': related_input_rank {rank} is not an input with dynamic "
                    f"AIPP; the model's are: {', '.join(images)}"
                )
            found[inputs[rank].name] = config
        return found

    def _start_dump(self) -> None:
        """Data dump for the models loaded from now on: init_dump, set_dump, then load
        (18_dump_configuration.md 53-89, 147-159); once per process, shared by the runtime."""
        path = self._options.dump_config
        if path is None:
            return
        self._runtime.start_dump(path)
        self._dumping = True

    def _start_profiling(self) -> _ProfilingWindow | None:
        plan = self._options.profiling
        if plan is None:
            return None
        self._runtime.start_profiling(plan.folder)
        LOG.info("profiling into %s", plan.folder)
        return _ProfilingWindow(self._runtime, plan, self._device_id, self._bind_quietly)

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

    @property
    def settings_without_parameters(self) -> bool:
        """Only dynamic-AIPP inputs have settings a request without parameters still gets (the
        aipp_config file's values): otherwise the runner need not call batch_settings for it."""
        return self._dynamic_aipp

    def _check_aipp(self, name: str, config: AippConfig, shape: Shape) -> None:
        """What set_input_aipp refuses, as an input error: the images must fit the buffer
        (max_src_image_size) and the AIPP output must be the network's H x W (acl_aipp.cpp 107-312;
        aipp_param_check.cpp 28-395)."""
        plan = self._slots[0].plan
        network = plan.aipp_networks.get(name)
        found = []
        if network is not None:
            batch = aipp_batch(plan, name, shape)
            found = AippConfig(**{**config.__dict__, "aipp_mode": AippMode.STATIC}).problems(
                (batch, network[1], network[2], network[3])
            )
        tensor = self.layout.input(name)
        fmt = config.input_format
        if fmt is not None:
            size = fmt.byte_size(aipp_batch(plan, name, shape), config.src_image_size_h, config.src_image_size_w)
            if size > tensor.size:
                found.append(
                    f"{size} bytes of {fmt.name} images, above the {tensor.size} (max_src_image_size) the model takes"
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
        if window is None or not window.plan.allows(token):
            raise InputError(
                f"request parameter {PROFILE_PARAMETER!r}: profiling on demand is not allowed with "
                "that token (the model's acl_profiling_tokens_file)"
            )
        most = window.plan.max_batches
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

    def describe(self) -> str:
        count = len(self._slots)
        if not count:
            return f"{self.name} engine (closed)"
        work, weight = self._model_bytes
        buffers = self._slots[0].device_bytes - (work if self._weights else 0)
        mode = "device run mode: no host staging, no copies" if self.device_mode else "host run mode"
        if self._weights:
            total = count * (work + buffers) + weight
            memory = (
                f"device memory {_size_text(total)} = {count} x (work {_size_text(work)} + I/O buffers "
                f"{_size_text(buffers)}) + 1 x weights {_size_text(weight)} (shared)"
            )
        else:
            total = count * (work + weight + buffers)
            memory = (
                f"device memory {_size_text(total)} = {count} x (work {_size_text(work)} + weights "
                f"{_size_text(weight)} + I/O buffers {_size_text(buffers)})"
            )
        return (
            f"{self.name} engine on device {self._device_id} ({mode}): {count} slot(s), each a model copy with "
            f"its own stream; {memory}; pinned host memory {_size_text(self._slots[0].host_bytes * count)}"
        )


class _ProfilingWindow:
    """An acl.prof session: started for the first N batches or S seconds after load, or on demand.

    The runtime starts and stops it (create_config, start, stop, destroy_config: acl_prof.h
    175-230), one per device; prof.init (before any model loads) and finalize are the runtime's,
    once per process. A window of S seconds closes on a timer, with or without batches."""

    def __init__(self, runtime: AclRuntime, plan: ProfilingPlan, device_id: int, bind: Callable[[], None]) -> None:
        self._runtime = runtime
        self.plan = plan
        self._device_id = device_id
        self._bind = bind
        self._config = 0
        self._left: int | None = None  # batches until stop (None: by time or not running)
        self._until = 0.0
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def loaded(self) -> None:
        if self.plan.batches or self.plan.seconds:
            self._start(self.plan.batches or None, self.plan.seconds)

    def request(self, batches: int, request_id: str) -> None:
        """A window opened on demand: ``batches``, closed after max_seconds at the latest."""
        self._start(
            batches, self.plan.max_seconds, f" for request {request_id[:128]!r}" if request_id else " for a request"
        )

    def _start(self, batches: int | None, seconds: float, why: str = "") -> None:
        with self._lock:
            if self._config:
                return  # a window is open: it goes on
            config = self._runtime.open_window(self._device_id, self.plan.aicore_metrics, self.plan.data_types)
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
        LOG.info("profiling stopped; results in %s", self.plan.folder)

    def close(self) -> None:
        self._stop()
        self._runtime.stop_profiling()


def _size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def prepare_options(options: Mapping[str, Any], model_path: Path) -> AclOptions:
    """The engine's options, with acl.json and the dump config checked against the keys CANN reads
    (a mistake is a load error naming the key), their output folders created and writable, and the
    combinations CANN refuses or silently overrides refused up front."""
    parsed = AclOptions.read(options, model_path.parent)
    for name, path, sections in (("acl_json", parsed.acl_json, None), ("acl_dump_config", parsed.dump_config, "dump")):
        if path is None:
            continue
        config = read_acl_json(path)
        if name == "acl_json":
            _refuse_combinations(config, parsed)
        found = [str(p) for p in problems(config) if sections is None or p.key.startswith(sections)]
        found += [f"{key}: is not a key CANN reads (it would be ignored)" for key in ignored_keys(config)]
        if found:
            raise ConfigError(f"parameter {name!r}: {path}: " + "; ".join(found))
        for key, folder in config.output_folders():
            _writable(folder, f"parameter {name!r}: {path}: {key}")
    if parsed.profiling is not None:
        _writable(parsed.profiling.folder, "parameter 'acl_profiling_dir'")
    return parsed


def _refuse_combinations(config: AclJson, parsed: AclOptions) -> None:
    """acl.json profiling that is on puts msprof in command mode (SetModeToCmd, prof_acl_mgr.cpp
    1853-1863, reached only with "switch": "on", 2102-2105 and msprofiler_impl.cpp 121-123), and
    acl.prof.init then returns 100042 (ProfInitPrecheck, prof_acl_mgr.cpp 525-536). acl.json dump
    that is on and acl_dump_config share one dump manager: the docs say init_dump then fails with
    100044 (18_dump_configuration.md 84); the current code accepts it (dump.cpp 103-137, the dump
    server is reference counted, adx_datadump_server.cpp 57-63), but set_dump replaces the acl.json
    config and finalize_dump switches every opened dump off (dump_manager.cpp 306-380). Either way
    one setting would undo the other."""
    if config.profiles and parsed.profiling is not None:
        raise ConfigError(
            f"parameters 'acl_json' and 'acl_profiling_dir' cannot be combined: {config.path} switches "
            'profiling on ("profiler": {"switch": "on"}), and acl.prof.init then fails with 100042 '
            "(ACL_ERROR_PROF_ALREADY_RUN); use one of them"
        )
    if config.dumps and parsed.dump_config is not None:
        raise ConfigError(
            f"parameters 'acl_json' and 'acl_dump_config' cannot be combined: {config.path} switches dump on, "
            "and acl_dump_config's set_dump would replace that config (finalize_dump then switches all dump "
            "off; older CANN refuses init_dump with 100044); put the dump section in one of them"
        )


def _writable(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {folder} is not writable")


def open_engine(
    model_path: Path, *, info: EngineInfo, device_id: int, slots: int, options: Mapping[str, Any], peers: int = 1
) -> AclEngine:
    """Open ``model_path`` with ``slots`` streams on ``device_id``, on the pyACL ``info`` names."""
    parsed = prepare_options(options, Path(model_path))
    return AclEngine(
        model_path, acl=info.load_pyacl(), name=info.name, device_id=device_id, slots=slots, options=parsed, peers=peers
    )


def available(info: EngineInfo, options: Mapping[str, Any] | None = None) -> tuple[bool, str]:
    """Whether ``info`` can run here (its pyACL imports and sees a device), and why (not)."""
    try:
        acl_json = AclOptions.read(options or {}, Path(".")).acl_json
        count = AclRuntime.of(info.load_pyacl()).device_count(acl_json)
    except (ConfigError, AclError) as exc:
        return False, str(exc).split(". ")[0]
    if count < 1:
        return False, "pyACL sees no Ascend device"
    return True, f"{count} Ascend device(s) ({info.name})"
