"""The ``acl.json`` that ``acl.init`` reads: the keys CANN knows, and the checks it applies.

Sources (hicann/runtime): the top-level handlers of ``src/acl/aclrt_impl/acl.cpp`` 271-545 (unknown
top-level keys are ignored); the ``dump`` keys of
``src/dfx/adump/adump/impl/dump_config_converter.h`` 22-72 and ``.cpp`` 29-1010 (a bad value is
100009 ACL_ERROR_INVALID_DUMP_CONFIG; unknown keys inside ``dump`` are ignored); the ``profiler``
keys of ``src/dfx/msprof/collector/dvvp/msprof/engine/include/prof_acl_mgr.h`` 53-81 (any other key
makes ``acl.init`` fail with 100000). The engine checks a model's acl.json with these rules at load,
so a mistake is a load error naming the key, not a silent no-op; the simulator's ``acl.init``
answers the codes CANN answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.errors import ConfigError

#: dump key -> accepted values (None: any string); dump_config_converter.cpp 29-67, 516-609
DUMP_VALUES: dict[str, tuple[str, ...] | None] = {
    "dump_path": None,
    "dump_mode": ("input", "output", "all"),
    "dump_data": ("tensor", "stats"),
    "dump_op_switch": ("on", "off"),
    "dump_level": ("op", "kernel", "all"),
    "dump_debug": ("on", "off"),
    "dump_scene": ("lite_exception", "aic_err_brief_dump", "aic_err_norm_dump", "aic_err_detail_dump", "watcher"),
    "dump_kernel_data": None,
    "dump_step": None,
}
DUMP_LISTS = ("dump_list", "dump_stats")
DUMP_STATS = ("Max", "Min", "Avg", "Nan", "Negative Inf", "Positive Inf", "L2norm")
DUMP_KERNEL_DATA = ("all", "printf", "tensor", "assert", "timestamp")
DUMP_LIST_KEYS = ("model_name", "layer", "watcher_nodes", "optype_blacklist", "opname_blacklist", "opname_range")
_EXCEPTION_SCENES = ("lite_exception", "aic_err_brief_dump", "aic_err_norm_dump", "aic_err_detail_dump")

#: prof_acl_mgr.h 53-81 (ACLJSON_CONFIG_VECTOR)
PROFILER_KEYS = (
    "switch",
    "output",
    "aic_metrics",
    "aicpu",
    "l2",
    "storage_limit",
    "hccl",
    "msproftx",
    "instr_profiling",
    "instr_profiling_freq",
    "task_tsfw",
    "ascendcl",
    "task_time",
    "runtime_api",
    "ge_api",
    "task_memory",
    "sys_hardware_mem_freq",
    "sys_mem_serviceflow",
    "llc_profiling",
    "sys_io_sampling_freq",
    "sys_interconnection_freq",
    "sys_cpu_freq",
    "dvpp_freq",
    "host_sys",
    "host_sys_usage",
    "host_sys_usage_freq",
    "sys_lp_freq",
    "optype",
)
#: keys whose value must be a JSON integer (prof_acl_mgr.cpp 243-317)
PROFILER_INTEGERS = tuple(k for k in PROFILER_KEYS if k.endswith("_freq"))
#: the top-level keys acl.init reads (others are ignored: acl.cpp has no whitelist)
TOP_LEVEL_KEYS = (
    "dump",
    "profiler",
    "err_msg_mode",
    "max_opqueue_num",
    "defaultDevice",
    "StackSize",
    "simt_printf_fifo_size",
    "simd_printf_fifo_size_per_core",
    "acl_graph",
)
_STEP = re.compile(r"^\d+(-\d+)?(\|\d+(-\d+)?)*$")


@dataclass(frozen=True)
class AclJson:
    """A parsed acl.json: the raw object and what it switches on."""

    path: Path
    data: Mapping[str, Any]

    @property
    def dump(self) -> Mapping[str, Any] | None:
        value = self.data.get("dump")
        return value if isinstance(value, Mapping) else None

    @property
    def profiler(self) -> Mapping[str, Any] | None:
        value = self.data.get("profiler")
        return value if isinstance(value, Mapping) else None

    @property
    def dumps(self) -> bool:
        """Dump is on with a non-empty dump_list, a switch on, or a scene (dump_config_converter.cpp 995-1010)."""
        dump = self.dump or {}
        return (
            bool(dump.get("dump_list"))
            or dump.get("dump_op_switch") == "on"
            or dump.get("dump_debug") == "on"
            or bool(dump.get("dump_scene"))
        )

    @property
    def profiles(self) -> bool:
        return (self.profiler or {}).get("switch") == "on"

    def output_folders(self) -> list[tuple[str, Path]]:
        """(key, folder) of every output folder it names: dump.dump_path, profiler.output."""
        found = []
        dump_path = (self.dump or {}).get("dump_path")
        if self.dumps and isinstance(dump_path, str):
            found.append(("dump.dump_path", Path(dump_path)))
        output = (self.profiler or {}).get("output")
        if self.profiles and isinstance(output, str):
            found.append(("profiler.output", Path(output)))
        return found


def read_acl_json(path: Path) -> AclJson:
    """Parse ``path``; ConfigError naming the file when it is not a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"acl.json {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"acl.json {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"acl.json {path} must hold a JSON object, found {type(data).__name__}")
    return AclJson(Path(path), data)


@dataclass(frozen=True)
class AclJsonProblem:
    """One thing CANN refuses: the key, why, and the ret ``acl.init`` gives for it."""

    key: str
    message: str
    ret: int

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


INVALID_PARAM, INVALID_DUMP_CONFIG = 100000, 100009


def problems(config: AclJson) -> list[AclJsonProblem]:
    """Every key CANN refuses, with the code ``acl.init`` returns for it."""
    found: list[AclJsonProblem] = []
    mode = config.data.get("err_msg_mode")
    if mode is not None and mode not in ("0", "1"):
        found.append(AclJsonProblem("err_msg_mode", f'is {mode!r}; accepted "0" or "1"', INVALID_PARAM))
    if "dump" in config.data:
        found += [AclJsonProblem(f"dump.{k}", m, INVALID_DUMP_CONFIG) for k, m in _dump_problems(config.data["dump"])]
    if "profiler" in config.data:
        found += [
            AclJsonProblem(f"profiler.{k}", m, INVALID_PARAM) for k, m in _profiler_problems(config.data["profiler"])
        ]
    return found


def ignored_keys(config: AclJson) -> list[str]:
    """Keys under ``dump`` that CANN reads nowhere. acl.init does not refuse them, it ignores them
    (dump_config_converter.cpp reads only the keys of dump_config_converter.h 22-72), so a misspelt
    key silently changes nothing: the engine refuses them at load instead."""
    dump = config.dump
    if dump is None:
        return []
    known = (*DUMP_VALUES, *DUMP_LISTS)
    return [f"dump.{key}" for key in dump if key not in known]


def _dump_problems(dump: Any) -> list[tuple[str, str]]:
    if not isinstance(dump, Mapping):
        return [("", "must be an object")]
    return _dump_values(dump) + _dump_lists(dump) + _dump_combinations(dump)


def _dump_values(dump: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    for key, accepted in DUMP_VALUES.items():
        value = dump.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            found.append((key, f"must be a string, found {type(value).__name__}"))
        elif accepted is not None and value not in accepted:
            found.append((key, f"is {value!r}; accepted: {', '.join(accepted)}"))
    kernel = dump.get("dump_kernel_data")
    if isinstance(kernel, str) and any(p.strip() not in DUMP_KERNEL_DATA for p in kernel.split(",")):
        accepted_kernel = ", ".join(DUMP_KERNEL_DATA)
        found.append(("dump_kernel_data", f"is {kernel!r}; accepted a comma-separated list of {accepted_kernel}"))
    step = dump.get("dump_step")
    if isinstance(step, str) and not _STEP.match(step.replace(" ", "")):
        found.append(("dump_step", f"is {step!r}; accepted steps N or N-M joined by |"))
    return found


def _dump_lists(dump: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    stats = dump.get("dump_stats")
    if stats is not None:
        if not isinstance(stats, list) or not stats or any(s not in DUMP_STATS for s in stats):
            found.append(("dump_stats", f"must be a non-empty list of {', '.join(DUMP_STATS)}"))
        elif dump.get("dump_data") == "tensor":
            found.append(("dump_stats", 'needs dump_data "stats", not "tensor"'))
    entries = dump.get("dump_list")
    if entries is not None:
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            found.append(("dump_list", "must be a list of objects"))
        else:
            for index, entry in enumerate(entries):
                found += [
                    (f"dump_list[{index}].{k}", "is not a key CANN reads") for k in entry if k not in DUMP_LIST_KEYS
                ]
    return found


def _dump_combinations(dump: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    scene = dump.get("dump_scene")
    switches = (dump.get("dump_debug"), dump.get("dump_op_switch"))
    if switches == ("on", "on"):
        found.append(("dump_debug", "cannot be on together with dump_op_switch (dump_config_converter.cpp 482-498)"))
    if scene in _EXCEPTION_SCENES and "on" in switches:
        found.append(("dump_scene", f"{scene!r} excludes dump_debug and dump_op_switch on"))
    dumps = bool(dump.get("dump_list")) or "on" in switches
    if dumps and scene not in _EXCEPTION_SCENES and not isinstance(dump.get("dump_path"), str):
        found.append(("dump_path", "is required when dump is on (an existing, writable folder)"))
    return found


def _profiler_problems(profiler: Any) -> list[tuple[str, str]]:
    if not isinstance(profiler, Mapping):
        return [("", "must be an object")]
    found = [
        (k, "is not a profiler key CANN reads (acl.init fails with 100000)") for k in profiler if k not in PROFILER_KEYS
    ]
    for key, value in profiler.items():
        if key in PROFILER_INTEGERS:
            if not isinstance(value, int):
                found.append((key, f"must be an integer, found {value!r}"))
        elif key in PROFILER_KEYS and not isinstance(value, str):
            found.append((key, f"must be a string, found {value!r}"))
    if profiler.get("switch") not in (None, "on", "off"):
        found.append(("switch", f"is {profiler.get('switch')!r}; accepted: on, off"))
    return found
