"""Process init and finalize, acl.json (fidelity.md section 1).

These run first, in this order, in a process where nothing has initialised pyACL yet: a config
that CANN refuses leaves the process uninitialised, so every refused acl.json can be tried before
the first successful ``acl.init``, whose config content every later init must then repeat (row 3).
They leave pyACL initialised with ``tolerant.json``, which the rest of the run keeps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ge_python_backend.ops.conformance.probes import ProbeContext, ProbeFailure, probe

INVALID_PARAM, REPEAT_INITIALIZE, INVALID_FILE, INVALID_DUMP_CONFIG, REPEAT_FINALIZE = (
    100000,
    100002,
    100003,
    100009,
    100037,
)


def tolerant_config(context: ProbeContext) -> dict:
    """What the run initialises with: an unknown top-level key (row 6), a dump section with only a
    path and a misspelt key (rows 12, 12a), a profiler section that is off (row 15)."""
    dump, profiles = context.workdir / "dump", context.workdir / "profiling"
    dump.mkdir(exist_ok=True)
    profiles.mkdir(exist_ok=True)
    return {
        "bogus": 1,
        "dump": {"dump_path": str(dump), "dump_pth": "x"},
        "profiler": {"switch": "off", "output": str(profiles)},
    }


def _init_with(context: ProbeContext, name: str, config: dict) -> int:
    return context.acl.init(str(context.file(name, json.dumps(config))))


@probe(
    "P-fin-order", "4", "acl.finalize without any init tears down and returns 0; a second returns 100037", phase="first"
)
def finalize_order(context: ProbeContext) -> None:
    acl = context.acl
    context.expect("finalize before any init", acl.finalize(), 0)
    context.expect("finalize again", acl.finalize(), REPEAT_FINALIZE)


@probe("P-init-missing-file", "2", "acl.init with a config path that does not resolve returns 100003", phase="first")
def missing_config(context: ProbeContext) -> None:
    missing = context.workdir / "no-such-folder" / "acl.json"
    context.expect("acl.init(missing file)", context.acl.init(str(missing)), INVALID_FILE)


#: acl.json contents CANN refuses at the first init, and the code it answers (rows 5, 7-11, 13, 14)
REFUSED_CONFIGS = (
    ("5", "err_msg_mode 2", {"err_msg_mode": "2"}, INVALID_PARAM),
    (
        "7",
        "dump_mode both",
        {"dump": {"dump_path": "DUMP", "dump_mode": "both", "dump_op_switch": "on"}},
        INVALID_DUMP_CONFIG,
    ),
    (
        "8",
        "a dump_path that does not exist",
        {"dump": {"dump_path": "MISSING", "dump_op_switch": "on"}},
        INVALID_DUMP_CONFIG,
    ),
    (
        "9",
        "dump_stats without dump_data",
        {"dump": {"dump_path": "DUMP", "dump_stats": ["Max"], "dump_op_switch": "on"}},
        INVALID_DUMP_CONFIG,
    ),
    (
        "10",
        "dump_debug and dump_op_switch both on",
        {"dump": {"dump_path": "DUMP", "dump_debug": "on", "dump_op_switch": "on"}},
        INVALID_DUMP_CONFIG,
    ),
    (
        "11",
        "dump_step 5-3",
        {"dump": {"dump_path": "DUMP", "dump_op_switch": "on", "dump_step": "5-3"}},
        INVALID_DUMP_CONFIG,
    ),
    ("13", "an unknown profiler key", {"profiler": {"switch": "on", "bogus": "x"}}, INVALID_PARAM),
    ("14", "aicpu 1 (not a string)", {"profiler": {"switch": "off", "aicpu": 1}}, INVALID_PARAM),
)


def _config_text(context: ProbeContext, config: dict) -> str:
    text = json.dumps(config)
    text = text.replace('"DUMP"', json.dumps(str(tolerant_config(context)["dump"]["dump_path"])))
    return text.replace('"MISSING"', json.dumps(str(context.workdir / "no-such-dump-folder")))


def first_inits(engine: str, paths: list[Path]) -> list[int]:
    """``acl.init(path)`` of each path as the first init of a process (a child process of this
    interpreter, on the engine's pyACL): a refused config leaves the process uninitialised, so one
    child tries them in turn; one that is accepted sets the config CANN holds the process to
    (acl.cpp 402-416), so the next ones get a fresh child."""
    found: list[int] = []
    while len(found) < len(paths):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, engine, *map(str, paths[len(found) :])],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        answers = [int(line) for line in done.stdout.split()]
        if not answers:
            raise ProbeFailure(f"the child process gave no answer: {done.stderr.strip()[-300:]}")
        found += answers
    return found


#: the child: the first acl.init of each config until one is accepted (then it finalizes and stops)
_CHILD = """
import sys
from ge_python_backend.engines.registry import engine_info
acl = engine_info(sys.argv[1]).load_pyacl()
for path in sys.argv[2:]:
    ret = acl.init(path)
    print(ret, flush=True)
    if ret == 0:
        acl.finalize()
        break
"""


@probe(
    "P-json-refused", "5, 7, 8, 9, 10, 11, 13, 14", "acl.init refuses these acl.json at the first init", phase="first"
)
def refused_configs(context: ProbeContext) -> None:
    paths = [context.file(f"row-{row}.json", _config_text(context, config)) for row, _, config, _ in REFUSED_CONFIGS]
    for (row, what, _, code), ret in zip(REFUSED_CONFIGS, first_inits(context.engine, paths)):
        context.expect(f"row {row}: acl.init(an acl.json with {what})", ret, code)


@probe(
    "P-init-tolerant",
    "6, 12a, 15",
    "acl.init accepts an unknown top-level key, an unknown key under dump and a profiler section that is off",
    phase="first",
)
def tolerant_init(context: ProbeContext) -> None:
    context.expect("acl.init(tolerant.json)", _init_with(context, "tolerant.json", tolerant_config(context)), 0)


@probe(
    "P-init-repeat", "1", "a second acl.init while initialised returns 100002 without reading its file", phase="first"
)
def repeated_init(context: ProbeContext) -> None:
    # the file is one acl.init would refuse (row 5): 100002, not 100000, shows it was not read
    path = context.file("repeat.json", json.dumps({"err_msg_mode": "2"}))
    context.expect("acl.init(a refused config) while initialised", context.acl.init(str(path)), REPEAT_INITIALIZE)


@probe(
    "P-init-rehash",
    "3",
    "after a finalize, an acl.init whose config content differs from the first returns 100000",
    phase="first",
)
def reinit_content(context: ProbeContext) -> None:
    acl = context.acl
    context.expect("acl.finalize", acl.finalize(), 0)
    context.expect("acl.init(other content)", _init_with(context, "other.json", {"bogus": 2}), INVALID_PARAM)
    context.expect("acl.init() (empty content)", acl.init(), INVALID_PARAM)
    context.expect(
        "acl.init(the first content again)", _init_with(context, "tolerant.json", tolerant_config(context)), 0
    )


@probe("P-json-inactive", "12, 15", "nothing is dumped or profiled by the acl.json of the run", phase="last")
def nothing_dumped(context: ProbeContext) -> None:
    config = tolerant_config(context)
    dumped = [p.name for p in Path(config["dump"]["dump_path"]).rglob("*")]
    profiled = [p.name for p in Path(config["profiler"]["output"]).iterdir() if p.name.startswith("PROF")]
    context.expect("files under dump_path (dump section without a switch or list)", dumped, [])
    context.expect("PROF_* folders under output (profiler switch off)", profiled, [])
