"""The dump and profiling APIs (fidelity.md sections 12-13), the binding's Python signatures
(section 14) and where CANN writes its logs (row 139). The profiling probe runs before any model
loads (aclprofInit must precede loads, 19-01_data_profiling_apis.md 19-24)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys

import numpy as np

from ge_python_backend.ascend.constants import ACL_SUCCESS
from ge_python_backend.ops.conformance.probes import UNKNOWN, ProbeContext, ProbeFailure, Skip, probe, raised

INVALID_PARAM, REPEAT_INITIALIZE, INVALID_FILE, DUMP_NOT_RUN = 100000, 100002, 100003, 100045


@probe("P-prof-codes", "116, 118", "acl.prof.init: an empty path 100000; a second init 100002", phase="first")
def profiling_codes(context: ProbeContext) -> None:
    acl = context.acl
    folder = context.workdir / "prof-api"
    folder.mkdir(exist_ok=True)
    context.expect('acl.prof.init("")', acl.prof.init(""), INVALID_PARAM)
    ret = acl.prof.init(str(folder))
    context.expect("acl.prof.init(folder)", ret, 0)
    if context.keep(ret, "acl.prof.finalize", acl.prof.finalize) == ACL_SUCCESS:
        context.expect("acl.prof.init again", acl.prof.init(str(folder)), REPEAT_INITIALIZE)


@probe(
    "P-dump-order", "107, 110", "the dump API's order and codes: 100045 before init_dump, 100002 twice, 100003 no file"
)
def dump_order(context: ProbeContext) -> None:
    acl = context.acl
    config = context.file("dump-order.json", json.dumps({"dump": {"dump_path": str(context.workdir)}}))
    context.expect("set_dump before init_dump", acl.mdl.set_dump(str(config)), DUMP_NOT_RUN)
    context.expect("finalize_dump before init_dump", acl.mdl.finalize_dump(), DUMP_NOT_RUN)
    ret = acl.mdl.init_dump()
    context.expect("init_dump", ret, 0)
    if ret != ACL_SUCCESS:
        return
    context.at_exit("acl.mdl.finalize_dump", acl.mdl.finalize_dump)
    context.expect("init_dump again", acl.mdl.init_dump(), REPEAT_INITIALIZE)
    context.expect("set_dump() without a path", acl.mdl.set_dump(), INVALID_PARAM)
    context.expect(
        "set_dump(a file that does not exist)", acl.mdl.set_dump(str(context.workdir / "none.json")), INVALID_FILE
    )


@probe("P-dump-unload-on", "47", "unloading a model while dump is on (before finalize_dump)")
def dump_unload_while_on(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    folder = context.workdir / "dump-on"
    folder.mkdir(exist_ok=True)
    config = context.file("dump-on.json", json.dumps({"dump": {"dump_path": str(folder), "dump_op_switch": "on"}}))
    context.need(acl.mdl.init_dump(), "acl.mdl.init_dump")
    context.at_exit("acl.mdl.finalize_dump", acl.mdl.finalize_dump)
    context.need(acl.mdl.set_dump(str(config)), "acl.mdl.set_dump")
    path = str(context.model("static"))
    model_id, ret = acl.mdl.load_from_file(path)
    context.need(ret, "acl.mdl.load_from_file")
    context.expect("unload with dump on", acl.mdl.unload(model_id), 0, note="the docs' scenarios finalize first")


@probe(
    "P-binding", "121, 122, 123, 124", "the binding's argument parsing: positional, range-checked, lists of exact ints"
)
def binding(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    malloc, set_device, create_tensor_desc = acl.rt.malloc, acl.rt.set_device, acl.create_tensor_desc
    result = malloc(16, 0)
    pair = isinstance(result, tuple) and len(result) == 2
    if pair and result[1] == ACL_SUCCESS:
        context.at_exit("acl.rt.free", acl.rt.free, result[0])
    shape = [type(result).__name__, len(result) if pair else None, result[1] if pair else None]
    context.expect("acl.rt.malloc(16, 0): (ptr, ret)", shape, ["tuple", 2, 0])
    context.expect("acl.rt.malloc(size=16, policy=0)", raised(lambda: malloc(size=16, policy=0)), "TypeError")
    context.expect("acl.rt.set_device(1 << 40)", raised(lambda: set_device(1 << 40)), "OverflowError")
    one = [np.int64(1)]
    context.expect(
        "acl.create_tensor_desc(0, [np.int64(1)], 2)", raised(lambda: create_tensor_desc(0, one, 2)), "TypeError"
    )


#: the child of P-plog-folder: its pid, then a first init, a device and a call CANN logs as an error
_LOGGING_CHILD = """
import os, sys
from ge_python_backend.engines.registry import engine_info
acl = engine_info(sys.argv[1]).load_pyacl()
device = int(sys.argv[2])
print(os.getpid(), flush=True)
if acl.init() == 0 and acl.rt.set_device(device) == 0:
    acl.rt.malloc(0, 0)
    acl.rt.reset_device(device)
acl.finalize()
"""


@probe(
    "P-plog-folder", "139", "CANN's plog goes to ASCEND_PROCESS_LOG_PATH (created), before ASCEND_WORK_PATH and $HOME"
)
def plog_folder(context: ProbeContext) -> None:
    # CANN's log module reads the variables when it starts, in the process that loads it: a child
    if context.simulator:
        raise Skip("the simulator writes no plog (CANN's log module is not simulated)")
    if context.device_run_mode:
        raise Skip(
            "device run mode: ASCEND_PROCESS_LOG_PATH applies in EP mode only (ASCEND_PROCESS_LOG_PATH.md:22-24)"
        )
    folder = context.workdir / "plog"
    shutil.rmtree(folder, ignore_errors=True)  # a kept --workdir: the log folder must not exist yet
    roots = {
        "ASCEND_PROCESS_LOG_PATH": folder / "process" / "new",
        "ASCEND_WORK_PATH": folder / "work",
        "HOME": folder / "home",
    }
    for name in ("ASCEND_WORK_PATH", "HOME"):
        roots[name].mkdir(parents=True, exist_ok=True)
    environment = {
        **os.environ,
        **{k: str(v) for k, v in roots.items()},
        "ASCEND_SLOG_PRINT_TO_STDOUT": "0",
        "PYTHONUSERBASE": os.environ.get("PYTHONUSERBASE", site.getuserbase()),  # HOME moves; user packages stay
    }
    done = subprocess.run(
        [sys.executable, "-c", _LOGGING_CHILD, context.engine, str(context.device)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    if not done.stdout.split():
        raise ProbeFailure(f"the child process gave no pid: {done.stderr.strip()[-300:]}")
    pid = done.stdout.split()[0]
    found = {
        name: sorted(str(p.relative_to(folder)) for p in root.rglob(f"plog-{pid}_*.log"))
        for name, root in (
            ("ASCEND_PROCESS_LOG_PATH", roots["ASCEND_PROCESS_LOG_PATH"]),
            ("ASCEND_WORK_PATH/log", roots["ASCEND_WORK_PATH"] / "log"),
            ("$HOME/ascend/log", roots["HOME"] / "ascend" / "log"),
        )
    }
    context.expect(
        "plog-<pid>_*.log under ASCEND_PROCESS_LOG_PATH (not there before)",
        bool(found["ASCEND_PROCESS_LOG_PATH"]),
        True,
        note=f"the child's pid: {pid}",
    )
    context.expect("... under ASCEND_WORK_PATH/log", found["ASCEND_WORK_PATH/log"], [])
    context.expect("... under $HOME/ascend/log", found["$HOME/ascend/log"], [])
    context.expect("the files", found["ASCEND_PROCESS_LOG_PATH"], UNKNOWN)
