"""``python -m ge_python_backend.sim.atc``: the simulator's ATC, for the acl-sim engine's compile at load.

It takes what CANN's ``atc`` takes and answers the way it does (hicann/ge api/atc/main_impl.cc):
``--name=value`` flags from ATC's own list (an unknown one: ``ERROR: unknown command line flag``
on stderr, cmd_flag_info.cc:484-486), "ATC start working now, please wait for a moment." first
(:2349), the model written to ``--output`` + ``.om``, then "ATC run success, welcome to the next
use." and exit 0, or "ATC run failed, ..." followed by the error lines, each ``Ennnnn: message``,
and a non-zero exit (:2230-2246, OutputErrMessageToStdout :2202-2212). The checks it makes with
ATC's own codes:

- E10004: ``--model`` or ``--output`` empty;
- E10001: a ``--framework`` other than 5 (the simulator reads ONNX only; ATC also takes 3,
  TensorFlow), a ``--precision_mode`` / ``--precision_mode_v2`` value ATC does not accept
  (compiler/api/aclgrph/option_utils.cc:1316-1356), an ``--aicore_num`` that is not "N|M"
  (--aicore_num.md);
- E10056: ``--precision_mode`` together with ``--precision_mode_v2`` (option_utils.cc:1359-1371);
- E16002: a node whose operator type has no ONNX parser, i.e. is not an ONNX standard operator
  (parser/parser/onnx/onnx_parser.cc:451-455).

What else sim-compile refuses (gears, shapes, AIPP) comes as E19999 with the simulator's
message: ATC refuses the same things with codes of its own per check. Tuning flags are
accepted and change nothing the simulation computes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ge_python_backend.ascend import atc as atc_rules
from ge_python_backend.ascend.atcflags import ATC_FLAGS, parse_aicore_num
from ge_python_backend.errors import ConfigError

STARTED = "ATC start working now, please wait for a moment."
SUCCEEDED = "ATC run success, welcome to the next use."
FAILED = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"
ONNX_FRAMEWORK = atc_rules.FRAMEWORKS[".onnx"]


class AtcFailure(Exception):
    """One of ATC's error messages: its code and text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")


def _invalid(value: str, flag: str, reason: str) -> AtcFailure:
    return AtcFailure("E10001", f"Value [{value}] for parameter [--{flag}] is invalid. Reason: {reason}")


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """``--name=value`` or ``--name value`` (gflags' two spellings); ValueError naming an unknown flag."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        name, sep, value = token.removeprefix("--").partition("=")
        if not token.startswith("--") or name not in ATC_FLAGS:
            raise ValueError(f"unknown command line flag '{name if token.startswith('--') else token}'")
        if not sep:
            if index + 1 >= len(argv):
                raise ValueError(f"flag '--{name}' is missing its argument")
            index += 1
            value = argv[index]
        flags[name] = value
        index += 1
    return flags


def _check_options(flags: dict[str, str]) -> None:
    for flag in ("model", "output"):
        if not flags.get(flag):
            raise AtcFailure("E10004", f"Value for --{flag} is empty.")
    framework = flags.get("framework", "")
    if framework != ONNX_FRAMEWORK:
        raise _invalid(framework, "framework", "the simulator compiles ONNX models only (--framework=5)")
    precision, precision_v2 = flags.get("precision_mode", ""), flags.get("precision_mode_v2", "")
    if precision and precision_v2:
        raise AtcFailure(
            "E10056",
            "Cannot configure both parameters ge.exec.precision_mode and ge.exec.precision_mode_v2 simultaneously.",
        )
    for flag, value, accepted in (
        ("precision_mode", precision, atc_rules.PRECISION_MODE + ("cube_fp16in_fp32out",)),
        ("precision_mode_v2", precision_v2, atc_rules.PRECISION_MODE_V2),
    ):
        if value and value not in accepted:
            raise _invalid(value, flag, f"The current value is not within the valid range: {', '.join(accepted)}.")
    if flags.get("aicore_num"):
        try:
            parse_aicore_num(flags["aicore_num"])
        except ConfigError as exc:
            raise _invalid(flags["aicore_num"], "aicore_num", str(exc)) from None


def _check_operators(model_path: Path) -> None:
    """E16002 for an operator type without an ONNX parser (not an ONNX standard operator)."""
    import onnx

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, OSError
        raise AtcFailure("E16001", f"Failed to parse the ONNX model {model_path}: {exc}") from None
    for node in model.graph.node:
        if not onnx.defs.has(node.op_type, node.domain):
            raise AtcFailure("E16002", f"No ONNX parser is registered for optype {node.op_type}.")


def compile_with(flags: dict[str, str]) -> Path:
    """Check ``flags`` as ATC does and write ``--output``.om; AtcFailure otherwise."""
    from ge_python_backend.sim.compile import sim_compile

    _check_options(flags)
    model = Path(flags["model"])
    _check_operators(model)
    output = Path(flags["output"] + ".om")
    try:
        sim_compile(
            model,
            output,
            batch_gears=flags.get("dynamic_batch_size", ""),
            input_shapes=flags.get("input_shape") or None,
            dynamic_image_size=flags.get("dynamic_image_size", ""),
            dynamic_dims=flags.get("dynamic_dims", ""),
            input_format=flags.get("input_format") or None,
            insert_op_conf=flags.get("insert_op_conf") or None,
            soc_version=flags.get("soc_version", ""),
        )
    except ConfigError as exc:
        raise AtcFailure("E19999", f"{exc} (acl-sim)") from None
    return output


def main(argv: Sequence[str] | None = None) -> int:
    try:
        flags = parse_flags(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    print(STARTED, flush=True)
    try:
        compile_with(flags)
    except AtcFailure as failure:
        print(FAILED)
        print(failure, flush=True)
        return 1
    print(SUCCEEDED, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
