"""The ``acl.json`` that ``acl.init`` reads: the keys CANN knows, and the checks it applies.

Sources (hicann/runtime): the top-level handlers of ``src/acl/aclrt_impl/acl.cpp`` 271-545 (unknown
top-level keys are ignored); the ``dump`` keys of
``src/dfx/adump/adump/impl/dump_config_converter.h`` 22-72 and ``.cpp`` 29-1010 (a bad value is
100009 ACL_ERROR_INVALID_DUMP_CONFIG; unknown keys inside ``dump`` are ignored); the ``profiler``
keys of ``src/dfx/msprof/collector/dvvp/msprof/engine/include/prof_acl_mgr.h`` 53-81 (any other key
makes ``acl.init`` fail with 100000) and the values the dvvp collector checks (``prof_acl_mgr.cpp``
243-317, 2081-2101, ``task_handle/src/prof_params_adapter.cpp`` 139-167, ``common/validation/
param_validation.cpp``). The dvvp collector is the one every product but Ascend035 builds: the
lighter ``collector/avp`` (``domain/param/profile_param.c``) is built only for PRODUCT ascend035
(``src/dfx/msprof/collector/CMakeLists.txt`` 10-14). Checks that depend on the platform's profiling
features (``Platform::CheckIfSupport``) are not made here. The engine checks a model's acl.json
with these rules at load, so a mistake is a load error naming the key, not a silent no-op; the
simulator's ``acl.init`` answers the codes CANN answers.
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
#: keys whose value must be a JSON integer (IsFreqConfig; prof_acl_mgr.cpp 261-266, 292-298)
PROFILER_INTEGERS = tuple(k for k in PROFILER_KEYS if k.endswith("_freq"))
#: *_freq key -> (min, max) of CheckFreqIsValid (param_validation.cpp 1074-1097); sys_hardware_mem_freq
#: allows up to 10000 on platforms with PLATFORM_SYS_DEVICE_US (1085-1086), the larger bound here.
#: instr_profiling_freq skips this check (prof_acl_mgr.cpp 270-273)
PROFILER_FREQ_RANGES = {
    "sys_hardware_mem_freq": (1, 10000),
    "sys_io_sampling_freq": (1, 100),
    "sys_interconnection_freq": (1, 50),
    "sys_cpu_freq": (1, 50),
    "dvpp_freq": (1, 100),
    "host_sys_usage_freq": (1, 50),
    "sys_lp_freq": (1, 100),
}
#: on/off keys (CheckParamEmptyInvalid, param_validation.cpp 515-531: "", "on" or "off")
PROFILER_SWITCHES = (
    "switch",
    "aicpu",
    "l2",
    "hccl",
    "msproftx",
    "instr_profiling",
    "task_tsfw",
    "ascendcl",
    "runtime_api",
    "task_memory",
)
#: key -> accepted values ("" accepted too) of CheckParamL0L1Invalid (param_validation.cpp 479-513);
#: l3 only where the platform has PLATFORM_TASK_TRACE_L3
PROFILER_LEVELS = {"ge_api": ("l0", "l1", "off"), "task_time": ("l0", "l1", "l2", "l3", "on", "off")}
#: aic_metrics names (METRIC_FEATURE_MAP, profimpl/platform/platform_interface.h 173-185), or
#: "Custom:" and PMU events; at most 70 characters (MAX_PARAMS_LEN, common/config/config.h 78)
AIC_METRICS = (
    "ArithmeticUtilization",
    "PipeUtilization",
    "PipeUtilizationExct",
    "PipelineExecuteUtilization",
    "ResourceConflictRatio",
    "PipeStallCycle",
    "Memory",
    "MemoryL0",
    "MemoryUB",
    "L2Cache",
    "ScalarRatio",
    "MemoryAccess",
)
#: comma-separated lists (CheckHostSysOptionsIsValid / CheckHostSysUsageOptionsIsValid,
#: param_validation.cpp 887-944; names from common/config/config.h 239-244)
PROFILER_LISTS = {
    "host_sys": ("cpu", "mem", "disk", "network", "osrt", "numa"),
    "host_sys_usage": ("cpu", "mem"),
}
#: characters profiler.output must not hold (Utils::CheckPathWithInvalidChar, common/utils/utils.cpp 1625-1638)
_OUTPUT_INVALID = ("\n", "\f", "\r", "\b", "\t", "\v", "\x7f", '"', "'", "\\", "%", ">", "<", "|", "&", "$", ";", "`")
_STORAGE_LIMIT = re.compile(r"^(\d{1,10})MB$")
_CUSTOM_EVENT = re.compile(r"^(0x)?[0-9a-fA-F]+$")
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
#: dump_step intervals at most (MAX_DUMP_STEP_INTERVAL_COUNT, dump_config_converter.h 77)
MAX_DUMP_STEPS = 100


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


def read_acl_json(path: Path, what: str = "acl.json") -> AclJson:
    """Parse ``path``; ConfigError naming ``what`` it is (e.g. the parameter that names it) and the
    file when it cannot be read or is not a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # UnicodeDecodeError included: a binary file
        raise ConfigError(f"{what} {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a JSON object, found {type(data).__name__}")
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
    if isinstance(step, str) and step:
        found += [("dump_step", m) for m in _step_problems(step)]
    return found


def _step_problems(step: str) -> list[str]:
    """CheckDumpStep (dump_config_converter.cpp 566-609): at most 100 intervals joined by "|", each N
    or N-M of decimal digits (no spaces) with N <= M."""
    intervals = step.split("|")
    if len(intervals) > MAX_DUMP_STEPS:
        return [f"has {len(intervals)} intervals; at most {MAX_DUMP_STEPS}"]
    for interval in intervals:
        steps = interval.split("-")
        if len(steps) > 2 or not all(s.isdigit() and s.isascii() for s in steps):
            return [f"{interval!r} is not N or N-M (decimal digits, no spaces); steps are joined by |"]
        if int(steps[0]) > int(steps[-1]):
            return [f"{interval!r} runs backwards; N-M needs N <= M"]
    return []


def _dump_lists(dump: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    stats = dump.get("dump_stats")
    if stats is not None:
        if not isinstance(stats, list) or not stats or any(s not in DUMP_STATS for s in stats):
            found.append(("dump_stats", f"must be a non-empty list of {', '.join(DUMP_STATS)}"))
        elif dump.get("dump_data", "tensor") == "tensor":
            # a missing dump_data counts as "tensor" (dump_config_converter.cpp 840-845)
            given = 'is "tensor"' if "dump_data" in dump else 'is not set, which counts as "tensor"'
            found.append(("dump_stats", f'needs dump_data "stats"; dump_data {given}'))
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
    """The keys and values CheckAclJsonConfigInvalid refuses (prof_acl_mgr.cpp 2081-2101, each key
    through CheckAclJsonItemConfigInvalid 286-317), then the later checks of output, storage_limit and
    optype (2027-2032, 2048-2077); every failure makes acl.init return 100000."""
    if not isinstance(profiler, Mapping):
        return [("", "must be an object")]
    found = [
        (k, "is not a profiler key CANN reads (acl.init fails with 100000)") for k in profiler if k not in PROFILER_KEYS
    ]
    for key, value in profiler.items():
        if key not in PROFILER_KEYS:
            continue
        if key in PROFILER_INTEGERS:
            if not isinstance(value, int) or isinstance(value, bool):
                found.append((key, f"must be an integer, found {value!r}"))
            elif (
                key in PROFILER_FREQ_RANGES
                and not PROFILER_FREQ_RANGES[key][0] <= value <= PROFILER_FREQ_RANGES[key][1]
            ):
                low, high = PROFILER_FREQ_RANGES[key]
                found.append((key, f"is {value}; accepted {low}..{high}"))
        elif not isinstance(value, str):
            found.append((key, f"must be a string, found {value!r}"))
        else:
            problem = _profiler_value(key, value)
            if problem:
                found.append((key, problem))
    return found


def _profiler_value(key: str, value: str) -> str:
    """Why a string value is refused ("" when it is not)."""
    if key in PROFILER_SWITCHES and value not in ("", "on", "off"):
        return f"is {value!r}; accepted: on, off"
    if key in PROFILER_LEVELS and value and value not in PROFILER_LEVELS[key]:
        return f"is {value!r}; accepted: {', '.join(PROFILER_LEVELS[key])}"
    if key in PROFILER_LISTS:
        items = value.split(",")
        if any(item not in PROFILER_LISTS[key] for item in items):
            return f"is {value!r}; accepted a comma-separated list of {', '.join(PROFILER_LISTS[key])}"
    if key == "aic_metrics":
        return _aic_metrics_problem(value)
    if key == "llc_profiling" and value not in ("read", "write"):  # CheckLlcConfigValid 1149-1165
        return f"is {value!r}; accepted: read, write"
    if key == "sys_mem_serviceflow" and not value:  # CheckMemServiceflowValid 1106-1113
        return "must not be empty"
    if key == "output" and any(c in value for c in _OUTPUT_INVALID):
        return f"{value!r} holds a character CANN refuses in a path ({' '.join(repr(c) for c in _OUTPUT_INVALID)})"
    if key == "storage_limit" and value:  # CheckStorageLimitInner, param_validation.cpp 966-1017
        match = _STORAGE_LIMIT.match(value)
        if match is None or not 200 <= int(match[1]) <= 0xFFFFFFFF:
            return f"is {value!r}; accepted NMB with N in 200..4294967295"
    if key == "optype" and value and (len(value) > 256 or "" in value.split(",")):  # param_validation.cpp 294-330
        return "must be at most 256 characters of comma-separated op types, none empty"
    return ""


def _aic_metrics_problem(value: str) -> str:
    """CheckAicoreMetricsIsValid (param_validation.cpp 175-210): "" (the default), a metric name, or
    "Custom:" and comma-separated PMU events, hexadecimal or decimal; at most 70 characters."""
    if not value:
        return ""
    if len(value) > 70:
        return f"is {len(value)} characters long; at most 70"
    if value.startswith("Custom:"):
        events = value[len("Custom:") :].split(",")
        if events == [""] or not all(_CUSTOM_EVENT.match(e) for e in events):
            return f"is {value!r}; Custom: needs comma-separated PMU events (hexadecimal or decimal)"
        return ""
    if value not in AIC_METRICS:
        return f"is {value!r}; accepted: {', '.join(AIC_METRICS)}, or Custom:EVENTS"
    return ""
