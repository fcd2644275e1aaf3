"""ascend/constants.py RET_CODES against CANN's headers, and the SoC tables of ascend/limits.py
against CANN's platform files, re-read from a hicann/runtime mirror (skipped without one).

The mirror is a bare git repository; GE_CANN_RUNTIME_MIRROR names another one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ge_python_backend.ascend.constants import RET_CODES, describe_ret
from ge_python_backend.ascend.limits import AI_CORES, NPU_ARCH, SOC_VERSIONS, device_limits, npu_arch, short_soc_version

MIRROR = Path(os.environ.get("GE_CANN_RUNTIME_MIRROR", "/work/.mirror/hicann+runtime/repo"))


def _show(path: str) -> str:
    if not MIRROR.is_dir() or shutil.which("git") is None:
        pytest.skip(f"no hicann/runtime mirror at {MIRROR}")
    done = subprocess.run(["git", "--git-dir", str(MIRROR), "show", f"HEAD:{path}"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"{path} is not in the mirror at {MIRROR}")
    return done.stdout


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) with backslash continuations joined."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start, line = index, lines[index]
        while line.endswith("\\") and index + 1 < len(lines):
            index += 1
            line = line[:-1] + " " + lines[index].strip()
        yield start + 1, line
        index += 1


def _header_codes() -> dict[int, str]:
    found: dict[int, str] = {}
    patterns = (
        ("include/external/acl/error_codes/rt_error_codes.h", r"#define (ACL_\w+)\s+(\d+)"),
        ("include/external/acl/acl_base_rt.h", r"static const int (ACL_\w+) = (\d+);"),
        ("include/external/acl/error_codes/ge_error_codes.h", r"static const uint32_t (ACL_ERROR_\w+) = (\d+)U;"),
    )
    for path, pattern in patterns:
        for _, line in _logical_lines(_show(path)):
            match = re.match(pattern, line)
            if match and match[1] not in ("ACL_RT_SUCCESS", "ACL_ERROR_NONE"):
                found.setdefault(int(match[2]), match[1])
    return found


def test_every_header_code_is_listed_with_its_name():
    headers = _header_codes()
    assert {c: RET_CODES[c][0] for c in headers if c in RET_CODES} == headers
    assert sorted(set(headers) - set(RET_CODES)) == []
    assert sorted(set(RET_CODES) - set(headers)) == []


def test_a_define_continued_on_the_next_line_is_listed():
    """rt_error_codes.h:62-63 spreads 107041 over two lines."""
    assert describe_ret(107041).startswith("107041 ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC (")


def test_100037_means_a_repeated_finalize_only():
    """aclFinalize without aclInit returns 0 (aclFinalizeFlag starts false, acl.cpp 42, 630-646)."""
    meaning = RET_CODES[100037][1]
    assert "again after a finalize" in meaning and "without any acl.init returns 0" in meaning


def _platform_files() -> dict[str, tuple[str, int, int]]:
    listing = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "ls-tree", "-r", "--name-only", "HEAD", "src/platform/platform_config"],
        capture_output=True,
        text=True,
    ).stdout.split()
    found = {}
    for path in listing:
        if not re.search(r"/cann(-dev)?/Ascend[^/]*\.ini$", path):
            continue
        text = _show(path)
        values = dict(re.findall(r"^(SoC_version|Short_SoC_version|NpuArch|ai_core_cnt)=(\S+)", text, re.M))
        found[values["SoC_version"]] = (values["Short_SoC_version"], int(values["NpuArch"]), int(values["ai_core_cnt"]))
    return found


def test_the_soc_tables_are_the_platform_files():
    _show("src/platform/platform_config/cann/Ascend310P3.ini")
    files = _platform_files()
    assert {
        soc: (SOC_VERSIONS[soc], NPU_ARCH[SOC_VERSIONS[soc]], AI_CORES[soc]) for soc in files if soc in SOC_VERSIONS
    } == files
    assert sorted(set(files) ^ set(SOC_VERSIONS)) == []


def test_soc_names_map_to_their_short_version_arch_and_limits():
    assert (short_soc_version("Ascend310P3"), npu_arch("Ascend310P3")) == ("Ascend310P", 2002)
    assert (short_soc_version("Ascend310B1"), npu_arch("Ascend310B1")) == ("Ascend310B", 3002)
    # Ascend910B.ini is a training-series 910 (Short_SoC_version Ascend910, NpuArch 1001), not an A2
    assert (short_soc_version("Ascend910B"), npu_arch("Ascend910B")) == ("Ascend910", 1001)
    assert device_limits("Ascend910B").streams == 2048
    assert device_limits("Ascend910B3").family == "Atlas A2"
    assert device_limits("Ascend910_9391").family == "Atlas A3"
    assert device_limits("Ascend950PR_9579").streams == 1984
    # a name no platform file has: the longest short version it starts with (inferred)
    assert short_soc_version("Ascend310P9") == "Ascend310P" and device_limits("Ascend310P9").events == 1023
    assert short_soc_version("Ascend910B9") == "Ascend910B"
    assert device_limits("Ascend035") is None and device_limits("Kirin9030") is None and npu_arch(None) is None
