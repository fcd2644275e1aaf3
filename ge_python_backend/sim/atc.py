"""``python -m ge_python_backend.sim.atc``: the simulator's ATC, for the acl-sim engine's compile at load.

It takes what CANN's ``atc`` takes and answers the way it does (hicann/ge api/atc/main_impl.cc):
"ATC start working now, please wait for a moment." first, before the flags are read (:2349);
``--name=value`` flags from ATC's own list (``--name value`` too, except for the two bool flags,
whose argument is optional); an unknown one: ``ERROR: unknown command line flag`` on stderr
(cmd_flag_info.cc:484-486), then the failure lines with no error message (:2352-2355,
OutputErrMessageToStdout :2202-2212); ``--help``: the usage, listing every flag, and exit 0
(cmd_flag_info.cc:494-499); the model written to ``--output`` + ``.om`` (:2026-2033), or, for a
model with dynamic shapes (shape ranges), ``--output`` + ``_<os>_<cpu>.om`` with the OS and CPU of
``--host_env_os`` / ``--host_env_cpu`` or this host's (base/common/helper/model_helper.cc:549-572,
base/common/model/ge_root_model.cc:463-486, compiler/api/aclgrph/option_utils.cc:1721-1737); then
"ATC run success, welcome to the next use." and exit 0, or "ATC run failed, ..." followed by the
error lines, each ``Ennnnn: message``, and a non-zero exit (:2215-2246). The checks it makes with
ATC's own codes:

- E10001 / E10006 / E10010: a value outside the range ATC's flag parser allows for that flag
  (cmd_flag_info.cc:30-55, PrintValueError :175-190), E10003 a bool flag's value that is not one;
- E10032 / E10055: a ``--raw_ge_options`` file that is not ``{"compile options": {level: {...}}}``,
  or names a GE option ATC's table does not map to a flag (main_impl.cc:265-440; the simulator's
  table is ``ascend/atcflags.py:GE_OPTION_FLAGS``, part of ATC's ``atc_option_map.cc``); a mapped
  option sets its flag unless the command line gives it, and is checked as that flag;
- E10004: ``--model`` or ``--output`` empty;
- E10001: a ``--framework`` other than 5 (the simulator reads ONNX only; ATC also takes 3,
  TensorFlow), an ``--aicore_num`` that is not "N|M" (--aicore_num.md; stricter than ATC, which
  takes 0 and a value without "|", fidelity.md row 131);
- E10056: ``--precision_mode`` together with ``--precision_mode_v2`` (option_utils.cc:1359-1371);
- E16002: a node whose operator type has no ONNX parser, i.e. is not an ONNX standard operator,
  named as ATC names it, ``domain::opset::type`` (parser/parser/onnx/onnx_parser.cc:412-455).

What else sim-compile refuses (gears, shapes, AIPP) comes as E19999 with the simulator's
message: ATC refuses the same things with codes of its own per check. Tuning flags are
accepted and change nothing the simulation computes. With ``DUMP_GE_GRAPH`` set it writes a graph
dump where ATC writes its dumps (``DUMP_GRAPH_PATH``; ``_dump_graph``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from ge_python_backend.ascend import atc as atc_rules
from ge_python_backend.ascend.atcflags import ATC_FLAGS, GE_OPTION_FLAGS, parse_aicore_num
from ge_python_backend.ascend.limits import ai_cores
from ge_python_backend.errors import ConfigError

STARTED = "ATC start working now, please wait for a moment."
SUCCEEDED = "ATC run success, welcome to the next use."
FAILED = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"
#: what ATC prints after FAILED when no error message was reported (main_impl.cc:2205-2208)
NO_MESSAGE = ("E19999: Internal Error!", "        An unknown error occurred. Please check the log.")
ONNX_FRAMEWORK = atc_rules.FRAMEWORKS[".onnx"]
#: ATC's two DEFINE_bool flags (atc_flags.cc:32, 128-130): an optional argument, "--help" alone
BOOL_FLAGS = frozenset({"help", "raw_ge_options_ignore_unsupported"})
#: the values ATC's flag parser allows (cmd_flag_info.cc:30-55); another is refused at parsing
VALUE_RANGES: dict[str, tuple[str, ...]] = {
    "sparsity": ("0", "1"),
    "dump_mode": ("0", "1"),
    "virtual_type": ("0", "1"),
    "status_check": ("0", "1"),
    "deterministic": ("0", "1"),
    "deterministic_level": ("0", "1", "2", "3"),
    "external_weight": ("0", "1", "2"),
    "display_model_info": ("0", "1"),
    "atomic_clean_policy": ("0", "1"),
    "disable_reuse_memory": ("0", "1"),
    "framework": ("0", "1", "3", "5"),
    "op_debug_level": ("0", "1", "2", "3", "4"),
    "mode": ("0", "1", "3", "5", "6", "7", "30"),
    "jit_compile": ("0", "1", "2"),
    "core_type": ("AiCore", "VectorCore"),
    "log": ("debug", "info", "warning", "error", "null"),
    "op_compiler_cache_mode": ("enable", "disable", "force"),
    "buffer_optimize": ("l1_optimize", "l2_optimize", "off_optimize"),
    "shape_generalized_build_mode": ("shape_generalized", "shape_precise"),
    "op_select_implmode": ("high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all"),
    "precision_mode": atc_rules.PRECISION_MODE,
    "precision_mode_v2": atc_rules.PRECISION_MODE_V2,
}
#: flags whose refused value is E10006 ("must be either 1 or 0", cmd_flag_info.cc:176-180)
_ONE_OR_ZERO = frozenset(
    {
        "status_check",
        "deterministic",
        "external_weight",
        "display_model_info",
        "atomic_clean_policy",
        "dump_mode",
        "disable_reuse_memory",
        "sparsity",
    }
)
#: what StringToBool takes (cmd_flag_info.cc:224-239), case-insensitively; "" is true
_TRUE, _FALSE = ("", "1", "t", "true", "y", "yes"), ("0", "f", "false", "n", "no")
#: the levels of a --raw_ge_options file, in the order they are read (later ones win, main_impl.cc:350-359)
RAW_LEVELS = ("global", "session", "graph")
#: flags a --raw_ge_options file cannot set (main_impl.cc:200)
_COMMAND_LINE_ONLY = frozenset({"model", "output", "framework", "soc_version"})


class AtcFailure(Exception):
    """One of ATC's error messages: its code and text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")


def _invalid(value: str, flag: str, reason: str) -> AtcFailure:
    return AtcFailure("E10001", f"Value [{value}] for parameter [--{flag}] is invalid. Reason: {reason}")


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """``--name=value`` or ``--name value`` (gflags' two spellings; a bool flag takes only the
    first); ValueError naming an unknown flag."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        name, sep, value = token.removeprefix("--").partition("=")
        if not token.startswith("--") or name not in ATC_FLAGS:
            raise ValueError(f"unknown command line flag '{name if token.startswith('--') else token}'")
        if not sep and name not in BOOL_FLAGS:
            if index + 1 >= len(argv):
                raise ValueError(f"flag '--{name}' is missing its argument")
            index += 1
            value = argv[index]
        flags[name] = value
        index += 1
    return flags


def _check_value(flag: str, value: str) -> None:
    """The flag parser's check of one value (CmdFlagInfo::CheckValue, cmd_flag_info.cc:193-214)."""
    accepted = VALUE_RANGES.get(flag)
    if accepted is not None and value not in accepted:
        if flag in _ONE_OR_ZERO:
            raise AtcFailure(
                "E10006", f"Value {value} for parameter --{flag} is invalid. The value must be either 1 or 0."
            )
        if flag == "log":
            raise AtcFailure("E10010", f"Value {value} for parameter --log is invalid.")
        valid = " ".join(f"[{v}]" for v in sorted(accepted))
        raise _invalid(value, flag, f"The value is not within the range of values. The valid range is {valid} .")
    if flag in BOOL_FLAGS and value.lower() not in _TRUE + _FALSE:
        raise AtcFailure(
            "E10003", f"Value {value} for parameter --{flag} is invalid. Reason: The value type must be [bool]."
        )


def _raw_options(flags: dict[str, str], given: frozenset[str]) -> None:
    """Set the flags a ``--raw_ge_options`` file maps its GE options to (main_impl.cc:265-440)."""
    path = flags.get("raw_ge_options", "")
    if not path:
        return
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError:
        raise AtcFailure("E13001", f"Failed to open file {path}. Reason: Open file failed.") from None
    except ValueError:
        raise AtcFailure("E10032", f"Failed to parse JSON file {path}. Reason: Invalid JSON format.") from None
    levels = found.get("compile options") if isinstance(found, dict) else None
    if not isinstance(levels, dict) or any(level not in RAW_LEVELS for level in levels):
        raise AtcFailure(
            "E10032",
            f"Failed to parse JSON file {path}. Reason: The options JSON file must contain an object under the key "
            "(key=compile options) with the levels global, session and graph.",
        )
    ignore = flags.get("raw_ge_options_ignore_unsupported", "false").lower() in _TRUE
    for level in (lvl for lvl in RAW_LEVELS if lvl in levels):
        for option, value in dict(levels[level]).items():
            flag = GE_OPTION_FLAGS.get(option)
            if flag is None:
                if ignore:
                    continue
                raise AtcFailure(
                    "E10055",
                    f"The operation is not supported. Reason: RawGeOptions[{option}:{value}] in level [{level}] is "
                    "not supported in ATC. Please do not set it.",
                )
            _check_value(flag, str(value))
            if flag in _COMMAND_LINE_ONLY:
                raise _invalid(str(value), flag, "This option must be set explicitly by command line.")
            if flag not in given:
                flags[flag] = str(value)


def _check_options(flags: dict[str, str]) -> None:
    for flag in ("model", "output"):
        if not flags.get(flag):
            raise AtcFailure("E10004", f"Value for --{flag} is empty.")
    framework = flags.get("framework", "")
    if framework != ONNX_FRAMEWORK:
        raise _invalid(framework, "framework", "the simulator compiles ONNX models only (--framework=5)")
    if flags.get("precision_mode") and flags.get("precision_mode_v2"):
        raise AtcFailure(
            "E10056",
            "Cannot configure both parameters ge.exec.precision_mode and ge.exec.precision_mode_v2 simultaneously.",
        )
    if flags.get("aicore_num"):
        try:
            cores = parse_aicore_num(flags["aicore_num"])[0]
        except ConfigError as exc:
            raise _invalid(flags["aicore_num"], "aicore_num", str(exc)) from None
        # at most the SoC's AI Cores (core_num_utils.cc 80-104; the count from its platform ini)
        most = ai_cores(flags.get("soc_version"))
        if most is not None and cores > most:
            raise _invalid(str(cores), "aicore_num", f"It is out of range, value must be in range (0, {most}].")


def _check_operators(model_path: Path) -> None:
    """E16002 for an operator type without an ONNX parser (not an ONNX standard operator), named
    ``domain::opset::type`` (onnx_parser.cc:412-431); E19999 for a domain without an opset."""
    import onnx

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, OSError
        raise AtcFailure("E16001", f"Failed to parse the ONNX model {model_path}: {exc}") from None
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    for node in model.graph.node:
        if onnx.defs.has(node.op_type, node.domain):
            continue
        domain = node.domain or "ai.onnx"
        if domain not in opsets:
            raise AtcFailure("E19999", f"The opset of domain[{domain}] has no responding version.")
        raise AtcFailure(
            "E16002", f"No ONNX parser is registered for optype {domain}::{opsets[domain]}::{node.op_type}."
        )


def compile_with(flags: dict[str, str]) -> Path:
    """Check ``flags`` as ATC does and write ``--output``.om (``_<os>_<cpu>.om`` for a model with
    shape ranges); AtcFailure otherwise."""
    from ge_python_backend.sim.compile import sim_compile

    _check_options(flags)
    model = Path(flags["model"])
    _check_operators(model)
    output = Path(flags["output"] + ".om")
    try:
        spec = sim_compile(
            model,
            output,
            batch_gears=flags.get("dynamic_batch_size", ""),
            input_shapes=flags.get("input_shape") or None,
            dynamic_image_size=flags.get("dynamic_image_size", ""),
            dynamic_dims=flags.get("dynamic_dims", ""),
            input_format=flags.get("input_format") or None,
            insert_op_conf=flags.get("insert_op_conf") or None,
            soc_version=flags.get("soc_version", ""),
            aicore_num=flags.get("aicore_num", ""),
        )
    except ConfigError as exc:
        raise AtcFailure("E19999", f"{exc} (acl-sim)") from None
    _dump_graph(model, flags.get("device_id") or "0")
    if any(t.ranges for t in spec.inputs):  # the op-tiling .so's go into the file: named for their OS and CPU
        host = f"_{flags.get('host_env_os') or 'linux'}_{flags.get('host_env_cpu') or platform.machine()}"
        output = output.rename(Path(flags["output"] + host + ".om"))
    return output


def _dump_graph(model: Path, device_id: str) -> None:
    """With ``DUMP_GE_GRAPH`` set, write the parsed graph where ATC writes its graph dumps:
    ``$DUMP_GRAPH_PATH/pid_<pid>_deviceid_<id>/`` (created if missing), else the working directory
    (GE docs/zh/user_guides/env_vars/DUMP_GRAPH_PATH.md:5-18). ATC writes a file per compile stage
    and format (``DUMP_GRAPH_LEVEL``, ``DUMP_GRAPH_FORMAT``); the simulator one text file,
    ``ge_sim_<model>.txt``, so that where the dump goes is what is simulated."""
    if not os.environ.get("DUMP_GE_GRAPH"):
        return
    import onnx

    root = os.environ.get("DUMP_GRAPH_PATH")
    folder = Path(root) / f"pid_{os.getpid()}_deviceid_{device_id}" if root else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    graph = onnx.load(str(model), load_external_data=False).graph
    (folder / f"ge_sim_{model.stem}.txt").write_text(onnx.helper.printable_graph(graph) + "\n", encoding="utf-8")


def usage() -> str:
    """What ``--help`` prints: every flag, one per line, as ATC's usage lists them."""
    return "\n".join(["usage: atc <args>", *(f"  --{name}" for name in sorted(ATC_FLAGS))])


def main(argv: Sequence[str] | None = None) -> int:
    print(STARTED, flush=True)
    try:
        flags = parse_flags(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"ERROR: {exc}", file=sys.stderr, flush=True)
        print("\n".join((FAILED, *NO_MESSAGE)), flush=True)
        return 1
    try:
        for flag, value in flags.items():
            _check_value(flag, value)
        if "help" in flags and flags["help"].lower() in _TRUE:
            print(usage(), flush=True)
            return 0
        _raw_options(flags, frozenset(flags))
        compile_with(flags)
    except AtcFailure as failure:
        print(FAILED)
        print(failure, flush=True)
        return 1
    print(SUCCEEDED, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
