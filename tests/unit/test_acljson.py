"""The acl.json checks of ascend/acljson.py, one rule at a time, against the code CANN's dump
converter (hicann/runtime src/dfx/adump/adump/impl/dump_config_converter.cpp) and the dvvp
profiling collector (src/dfx/msprof/collector/dvvp/) answer; the simulator's acl.init answers the
same codes (100009 for dump, 100000 for profiler)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ge_python_backend.ascend.acljson import AclJson, problems
from ge_python_backend.sim import Simulator


def found(data):
    return {p.key: p for p in problems(AclJson(Path("acl.json"), data))}


def dump(folder="/tmp", **keys):
    return {"dump": {"dump_path": folder, "dump_list": [{"model_name": "m"}], **keys}}


# --- dump ------------------------------------------------------------------------------------------


def test_dump_stats_needs_dump_data_stats_and_a_missing_dump_data_counts_as_tensor():
    """CheckDumpStats: GetStringOrDefault(dump_data, "tensor") == "tensor" refuses dump_stats
    (dump_config_converter.cpp 829-847)."""
    missing = found(dump(dump_stats=["Max"]))
    assert "dump.dump_stats" in missing and 'not set, which counts as "tensor"' in missing["dump.dump_stats"].message
    assert missing["dump.dump_stats"].ret == 100009
    assert "dump.dump_stats" in found(dump(dump_stats=["Max"], dump_data="tensor"))
    assert found(dump(dump_stats=["Max", "L2norm"], dump_data="stats")) == {}
    assert "dump.dump_stats" in found(dump(dump_stats=[], dump_data="stats"))  # empty (835-838)


@pytest.mark.parametrize(
    "step, ok",
    [
        ("0", True),
        ("1|3-5|10", True),
        ("5-5", True),
        ("5-3", False),  # runs backwards (600-606)
        ("1-2-3", False),  # more than two parts (584-589)
        ("1 | 3", False),  # IsDigit: no spaces (591-598)
        ("a", False),
        ("|".join(str(i) for i in range(100)), True),
        ("|".join(str(i) for i in range(101)), False),  # MAX_DUMP_STEP_INTERVAL_COUNT 100 (575-579)
    ],
)
def test_dump_step_is_checked_as_check_dump_step_does(step, ok):
    assert ("dump.dump_step" not in found(dump(dump_step=step))) is ok


def test_dump_debug_excludes_the_op_switch_and_an_exception_scene_excludes_both():
    """CheckDumpDebug / CheckExceptionDumpScene (dump_config_converter.cpp 466-498)."""
    assert "dump.dump_debug" in found(dump(dump_debug="on", dump_op_switch="on"))
    assert "dump.dump_scene" in found(dump(dump_scene="lite_exception", dump_op_switch="on"))
    assert found(dump(dump_debug="on")) == {}


# --- profiler ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, ok",
    [
        ("aicpu", "on", True),
        ("aicpu", "", True),  # CheckParamEmptyInvalid: empty is accepted (param_validation.cpp 522-525)
        ("aicpu", "yes", False),
        ("aicpu", 1, False),  # must be a string (prof_acl_mgr.cpp 243-259)
        ("switch", "maybe", False),
        ("ge_api", "l1", True),
        ("ge_api", "l2", False),  # CheckParamL0L1Invalid: l0, l1, off (495-499)
        ("task_time", "l2", True),
        ("task_time", "on", True),
        ("task_time", "l9", False),
        ("aic_metrics", "PipeUtilization", True),
        ("aic_metrics", "MemoryUB", True),
        ("aic_metrics", "Custom:0x1b,0x2c", True),  # CUSTOM_METRICS (175-196)
        ("aic_metrics", "Custom:", False),
        ("aic_metrics", "PIPE_UTILIZATION", False),  # not a METRIC_FEATURE_MAP name
        ("sys_cpu_freq", 50, True),
        ("sys_cpu_freq", 51, False),  # CheckFreqIsValid: 1..50 (1074-1097)
        ("sys_cpu_freq", 0, False),
        ("sys_cpu_freq", "10", False),  # *_freq must be an integer (261-266)
        ("dvpp_freq", 100, True),
        ("instr_profiling_freq", 5, True),  # skips the common value check (270-273)
        ("llc_profiling", "read", True),
        ("llc_profiling", "both", False),  # CheckLlcConfigValid (1149-1165)
        ("host_sys", "cpu,mem,disk", True),
        ("host_sys", "cpu,gpu", False),  # CheckHostSysOptionsIsValid (887-906)
        ("host_sys_usage", "disk", False),  # CheckHostSysUsageOptionsIsValid: cpu, mem (929-944)
        ("storage_limit", "200MB", True),
        ("storage_limit", "199MB", False),  # CheckStorageLimitInner (966-1017)
        ("storage_limit", "500", False),
        ("output", "/tmp/prof", True),
        ("output", "/tmp/a;b", False),  # CheckPathWithInvalidChar (utils.cpp 1625-1638)
        ("sys_mem_serviceflow", "", False),  # CheckMemServiceflowValid (1106-1113)
        ("optype", "Conv2D,MatMul", True),
        ("optype", "Conv2D,,MatMul", False),  # CheckOpTypeIsValid (294-330)
    ],
)
def test_profiler_values_are_checked_as_the_dvvp_collector_checks_them(key, value, ok):
    result = found({"profiler": {"switch": "on", key: value}})
    assert (f"profiler.{key}" not in result) is ok, result
    assert all(p.ret == 100000 for p in result.values())


def test_an_unknown_profiler_key_stays_a_problem_naming_the_key():
    assert "profiler.aicpu_typo" in found({"profiler": {"switch": "on", "aicpu_typo": "on"}})


def test_the_simulators_acl_init_answers_these_codes(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    cases = [
        (dump(str(folder), dump_stats=["Max"]), 100009),
        (dump(str(folder), dump_step="5-3"), 100009),
        ({"profiler": {"switch": "on", "output": str(folder), "aicpu": "yes"}}, 100000),
        ({"profiler": {"switch": "off", "sys_cpu_freq": 99}}, 100000),  # checked before the switch (2084-2104)
        (dump(str(folder), dump_stats=["Max"], dump_data="stats"), 0),
    ]
    for index, (data, ret) in enumerate(cases):
        path = tmp_path / f"acl{index}.json"
        path.write_text(json.dumps(data))
        simulator = Simulator()
        try:
            assert simulator.acl.init(str(path)) == ret, data
        finally:
            simulator.reset()
