"""Process-wide pyACL state shared by every acl engine, and pyACL error reporting.

pyACL is initialised once per process (a second ``acl.init`` only counts and returns 100002,
hicann/runtime src/acl/aclrt_impl/acl.cpp:387-392), each device is ``set_device``'d once however
many engines use it (reference counted here) and ``acl.finalize`` runs once at process exit, after
every engine is closed. Data dump (``init_dump``/``set_dump``) and ``acl.prof.init`` are once per
process too, so engines share them the same way, and one profiling window per device.
Nothing here imports ``acl`` at module level: ``import_pyacl`` does it on demand.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ge_python_backend.ascend.acljson import read_acl_json
from ge_python_backend.ascend.constants import ACL_SUCCESS, DEVICE_FATAL_RETS, describe_ret, ret_code
from ge_python_backend.errors import ConfigError, EngineError

LOG = logging.getLogger(__name__)

REPEAT_INITIALIZE = ret_code("ACL_ERROR_REPEAT_INITIALIZE")
UNINITIALIZED = ret_code("ACL_ERROR_UNINITIALIZE")
FEATURE_UNSUPPORTED = ret_code("ACL_ERROR_FEATURE_UNSUPPORTED")  # acl_base_rt.h:128


class AclError(EngineError):
    """A pyACL call failed: names the function, the ret code and its meaning, and the runtime's message."""

    def __init__(self, function: str, ret: int | None, message: str | None, what: str = "") -> None:
        self.function = function
        self.ret = ret
        self.runtime_message = message or ""
        result = "returned a NULL handle" if ret is None else f"returned {describe_ret(ret)}"
        text = f"{function} {result}"
        if what:
            text += f" while {what}"
        if message:
            text += f"; runtime says: {message}"
        super().__init__(text, fatal=ret in DEVICE_FATAL_RETS)


def recent_message(acl: Any) -> str | None:
    """The runtime's message about the last failure in this thread (never raises)."""
    try:
        message = acl.get_recent_err_msg()
    except Exception as exc:  # a broken binding must not hide the original failure
        return f"(acl.get_recent_err_msg failed: {exc!r})"
    return message


def check(acl: Any, ret: int, function: str, what: str | Callable[[], str] = "") -> None:
    """Raise AclError unless ``ret`` is ACL_SUCCESS. ``what`` may be a zero-argument callable, so
    the execute path builds its message only on failure."""
    if ret != ACL_SUCCESS:
        raise AclError(function, ret, recent_message(acl), what() if callable(what) else what)


def log_failure(acl: Any, ret: int, function: str) -> None:
    """Log (never raise) a failed teardown call."""
    if ret != ACL_SUCCESS:
        LOG.warning("teardown: %s", AclError(function, ret, recent_message(acl)))


def check_handle(acl: Any, handle: int, function: str, what: str = "") -> int:
    """Raise AclError when a handle-returning function gave NULL (0)."""
    if not handle:
        raise AclError(function, None, recent_message(acl), what)
    return handle


def _import_acl() -> Any:
    """``import acl``; CANN's set_env.sh puts pyACL on PYTHONPATH, which Triton's Python 3.11
    stub ignores (isolated interpreter config), so PYTHONPATH entries are tried too."""
    try:
        import acl  # CANN's pyACL; only importable where the CANN toolkit or nnrt is installed
    except ImportError:
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        if not extra:
            raise
        sys.path.extend(extra)
        import acl
    return acl


def import_pyacl() -> Any:
    """CANN's pyACL module (engine ``acl``); ConfigError saying what to install when it is missing."""
    try:
        acl = _import_acl()
    except ImportError as exc:
        raise ConfigError(
            f"engine 'acl' needs CANN's pyACL (`import acl` failed: {exc}). Install the CANN toolkit or nnrt "
            f"and source its set_env.sh, which puts pyACL on PYTHONPATH. The PyPI package named 'pyacl' is "
            f"unrelated and does not provide it. Without an NPU use engine 'acl-sim' (or GE_ACL_SIMULATOR=1)."
        ) from None
    if not (hasattr(acl, "rt") and hasattr(acl, "mdl")):
        raise ConfigError(
            f"the module `acl` at {getattr(acl, '__file__', '?')} is not CANN's pyACL (it has no acl.rt / acl.mdl)"
        )
    return acl


class Closable(Protocol):
    def close(self) -> None: ...


class AclRuntime:
    """Init, devices and finalize for one ``acl`` module object (one per process in practice)."""

    _instances: dict[int, AclRuntime] = {}
    _instances_lock = threading.Lock()

    def __init__(self, acl: Any) -> None:
        self._acl = acl
        self._lock = threading.RLock()
        self._initialized = False
        #: the acl.json the process was initialised with (CANN reads it only at the first acl.init)
        self._config: Path | None = None
        self._devices: Counter[int] = Counter()
        self._engines: list[Closable] = []
        self._profiling_users = 0
        self._profiling_folder: Path | None = None
        #: device -> the acl.prof config of the window profiling it
        self._windows: dict[int, int] = {}
        self._dump_users = 0
        #: (file, its dump section) of the process's set_dump
        self._dump: tuple[Path, Any] | None = None

    @classmethod
    def of(cls, acl: Any) -> AclRuntime:
        with cls._instances_lock:
            runtime = cls._instances.get(id(acl))
            if runtime is None:
                runtime = cls._instances[id(acl)] = cls(acl)
            return runtime

    def _ensure_initialized(self, config: Path | None) -> None:
        if not self._initialized:
            self._init(config)
            atexit.register(self.finalize_at_exit)
        elif config is not None and config != self._config:
            # A second acl.init returns 100002 without reading its file (hicann/runtime acl.cpp 387-392).
            first = self._config or "no acl.json"
            raise ConfigError(
                f"acl.json {config} cannot take effect: pyACL was already initialised in this process with {first}, "
                "and CANN reads acl.json only at the first acl.init; give every model of a process the same acl_json"
            )

    def device_count(self, config: Path | None = None) -> int:
        """Devices pyACL sees (initialising pyACL once for the process if needed)."""
        with self._lock:
            self._ensure_initialized(config)
            count, ret = self._acl.rt.get_device_count()
        check(self._acl, ret, "acl.rt.get_device_count")
        return count

    def run_mode(self) -> int:
        """ACL_DEVICE (0): the application runs on the device (Atlas 200/500, 310P open form), where host
        memory is device memory; ACL_HOST (1): a PCIe card in a host (acl_rt.h 105-108)."""
        acl = self._acl
        mode, ret = acl.rt.get_run_mode()
        check(acl, ret, "acl.rt.get_run_mode")
        return int(mode)

    def start_profiling(self, folder: Path) -> None:
        """``acl.prof.init`` once per process, before any model loads (19-01_data_profiling_apis.md
        19-24; a second init returns 100002, prof_acl_mgr.cpp 537-543): engines share it, reference
        counted; one with another folder is a ConfigError (its results would go to the first)."""
        acl = self._acl
        with self._lock:
            if self._profiling_users == 0:
                ret = acl.prof.init(str(folder))
                if ret == FEATURE_UNSUPPORTED and os.environ.get("PROFILING_MODE") == "dynamic":
                    raise ConfigError(
                        "parameter 'acl_profiling_dir' cannot take effect: the environment has PROFILING_MODE=dynamic, "
                        "where msprof --dynamic drives profiling and CANN refuses acl.prof.init (200006); drop "
                        "acl_profiling_dir or unset PROFILING_MODE"
                    )
                check(acl, ret, "acl.prof.init", f"starting profiling into {folder}")
                self._profiling_folder = folder
            elif _same_path(folder, self._profiling_folder) is False:
                raise ConfigError(
                    f"parameter 'acl_profiling_dir': {folder} cannot take effect: this process already profiles "
                    f"into {self._profiling_folder} (acl.prof.init runs once per process); give every model of a "
                    "process the same acl_profiling_dir"
                )
            self._profiling_users += 1

    def stop_profiling(self) -> None:
        acl = self._acl
        with self._lock:
            if self._profiling_users <= 0:
                return
            self._profiling_users -= 1
            if self._profiling_users == 0:
                log_failure(acl, acl.prof.finalize(), "acl.prof.finalize")
                self._profiling_folder = None

    def open_window(self, device_id: int, aicore_metrics: int, data_types: int) -> int | None:
        """Start profiling ``device_id`` (create_config + start, acl_prof.h 175-230); None when another
        engine's window profiles it already (a start with an overlapping device fails,
        19-01_data_profiling_apis.md 19-44): that window covers this engine's batches too."""
        acl = self._acl
        with self._lock:
            if device_id in self._windows:
                return None
            config = check_handle(
                acl, acl.prof.create_config([device_id], aicore_metrics, 0, data_types), "acl.prof.create_config"
            )
            ret = acl.prof.start(config)
            if ret != ACL_SUCCESS:
                log_failure(acl, acl.prof.destroy_config(config), "acl.prof.destroy_config")
                check(acl, ret, "acl.prof.start", f"profiling into {self._profiling_folder}")
            self._windows[device_id] = config
            return config

    def close_window(self, device_id: int, config: int) -> None:
        acl = self._acl
        with self._lock:
            if self._windows.get(device_id) != config:
                return
            del self._windows[device_id]
            log_failure(acl, acl.prof.stop(config), "acl.prof.stop")
            log_failure(acl, acl.prof.destroy_config(config), "acl.prof.destroy_config")

    def start_dump(self, path: Path) -> None:
        """``init_dump`` then ``set_dump`` for the models loaded from now on (18_dump_configuration.md
        53-89, 147-159), once per process: a second init_dump returns 100002 (dump.cpp 115-121), so
        engines share the dump, reference counted. An engine whose dump section differs is a
        ConfigError: set_dump would change the dump of every model loaded after it."""
        acl = self._acl
        section = read_acl_json(path).dump
        with self._lock:
            if self._dump_users == 0:
                check(acl, acl.mdl.init_dump(), "acl.mdl.init_dump")
                ret = acl.mdl.set_dump(str(path))
                if ret != ACL_SUCCESS:
                    log_failure(acl, acl.mdl.finalize_dump(), "acl.mdl.finalize_dump")
                    check(acl, ret, "acl.mdl.set_dump", f"reading {path}")
                self._dump = (path, section)
            elif self._dump is not None and section != self._dump[1]:
                raise ConfigError(
                    f"parameter 'acl_dump_config': {path} cannot take effect: this process already dumps with "
                    f"{self._dump[0]}, whose dump section differs (init_dump and set_dump are once per process "
                    "for every model loaded after them); give every model of a process the same dump config"
                )
            self._dump_users += 1

    def stop_dump(self) -> None:
        """``finalize_dump`` when the last engine that dumps closes, before its models unload
        (18_dump_configuration.md 59-60)."""
        acl = self._acl
        with self._lock:
            if self._dump_users <= 0:
                return
            self._dump_users -= 1
            if self._dump_users == 0:
                log_failure(acl, acl.mdl.finalize_dump(), "acl.mdl.finalize_dump")
                self._dump = None

    def start(self, engine: Closable, device_id: int, config: Path | None = None) -> None:
        """Initialise pyACL if needed (with ``config``, an acl.json), set ``device_id`` if no engine
        has yet, and track ``engine``."""
        acl = self._acl
        with self._lock:
            self._ensure_initialized(config)
            if self._devices[device_id] == 0:
                ret = acl.rt.set_device(device_id)
                if ret == UNINITIALIZED:  # pyACL was finalized behind our back (e.g. a test reset the simulator)
                    self._init(self._config)
                    ret = acl.rt.set_device(device_id)
                check(acl, ret, "acl.rt.set_device", f"opening device {device_id}")
            self._devices[device_id] += 1
            self._engines.append(engine)

    def _init(self, config: Path | None) -> None:
        acl = self._acl
        ret = acl.init(str(config)) if config is not None else acl.init()
        if ret != REPEAT_INITIALIZE:
            check(acl, ret, "acl.init", f"reading {config}" if config is not None else "")
        self._initialized = True
        self._config = config

    def stop(self, engine: Closable, device_id: int) -> None:
        """Forget ``engine``; reset ``device_id`` when no engine uses it any more."""
        acl = self._acl
        with self._lock:
            if engine in self._engines:
                self._engines.remove(engine)
            if self._devices[device_id] <= 0:
                return
            self._devices[device_id] -= 1
            if self._devices[device_id] == 0:
                del self._devices[device_id]
                ret = acl.rt.reset_device(device_id)
                if ret != ACL_SUCCESS:
                    LOG.warning(
                        "%s", AclError("acl.rt.reset_device", ret, recent_message(acl), f"closing device {device_id}")
                    )

    def finalize_at_exit(self) -> None:
        """Close engines still open, then ``acl.finalize`` (once)."""
        acl = self._acl
        with self._lock:
            engines = list(self._engines)
        for engine in reversed(engines):
            engine.close()
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            ret = acl.finalize()
            if ret != ACL_SUCCESS:
                LOG.warning("%s", AclError("acl.finalize", ret, recent_message(acl)))


def _same_path(a: Path, b: Path | None) -> bool | None:
    """Whether two folders are the same (None when ``b`` is unknown)."""
    if b is None:
        return None
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b
