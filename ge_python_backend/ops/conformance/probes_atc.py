"""ATC's own rules (fidelity.md rows 125-129, 131, 133, 140 and the refusals of row 136): the flags
it defines, what it prints, the file it writes, its ONNX parser, the values its precision and
core-count flags take, its map of GE options to flags, what ``--dynamic_batch_size`` refuses,
where it reads an ONNX model's external data.

Each probe runs the run's ATC (``ProbeContext.atc``: the host's when there is one, else on acl-sim
the simulator's) and records which. A run that checks a flag's value gives ATC a model with an
operator no ONNX parser takes: every flag is checked before the model is parsed (main_impl.cc:
2347-2377, 2043-2066, 1698-1709), so a value ATC accepts ends in E16002 within seconds, one it
refuses in that flag's own code, and nothing is compiled. Rows 126 and 127 read the runs that
built the conformance models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from ge_python_backend.ascend.atc import PRECISION_MODE, PRECISION_MODE_V2
from ge_python_backend.ascend.atcflags import ATC_FLAGS, GE_OPTION_FLAGS
from ge_python_backend.ops.conformance.atc import AtcRun
from ge_python_backend.ops.conformance.build import BuiltModel
from ge_python_backend.ops.conformance.probes import UNKNOWN, ProbeContext, Skip, probe
from ge_python_backend.sim.atc import FAILED, STARTED, SUCCEEDED, VALUE_RANGES
from ge_python_backend.testing import models as nets

#: what a run whose every flag ATC accepted ends in: the model's operator has no parser (row 128)
PARSED = "E16002"
#: a flag name where ATC's usage lists it: "  --name", or "  --h/help"
_USAGE_FLAG = re.compile(r"^\s+--(?:[a-z]+/)?([a-z][a-z0-9_]*)\b")
_FLAG_NAMED = re.compile(r"--([a-z][a-z0-9_]*)")


def first_error(run: AtcRun) -> str | None:
    """The first error code a run printed (None: none)."""
    return next((code for code in run.codes() if code.startswith("E")), None)


def runs(context: ProbeContext, *flag_sets: Sequence[str], model: Path | None = None) -> list[AtcRun]:
    """The run's ATC once per flag set, on ``model`` (default: the model no parser takes) for the
    device's SoC; Skip when there is no ATC. Records which ATC ran."""
    if context.atc is None:
        raise Skip("no atc on PATH (give --atc, e.g. $ASCEND_HOME_PATH/bin/atc)")
    folder = context.workdir / "atc-probes"
    folder.mkdir(exist_ok=True)
    source = model or nets.custom_operator(folder / "custom.onnx")
    base = [f"--model={source}", "--framework=5", f"--output={folder / 'out'}", f"--soc_version={soc(context)}"]
    if not any(c.name == "the ATC that ran" for c in context.checks):
        context.expect("the ATC that ran", context.atc.name, UNKNOWN)
    return context.atc.run_all([[*base, *flags] for flags in flag_sets], folder)


def soc(context: ProbeContext) -> str:
    return context.acl.get_soc_name() or ""


def expect_atc(context: ProbeContext, name: str, observed: object, claimed: object, simulated: object) -> None:
    """``expect`` for a rule of ATC's where the simulator's ATC answers ``simulated`` on purpose
    (it applies only when that ATC ran)."""
    if context.atc is not None and context.atc.simulator:
        context.expect(name, observed, claimed, simulated=simulated)
    else:
        context.expect(name, observed, claimed)


def built(context: ProbeContext, name: str, compiled: bool = True) -> tuple[BuiltModel, AtcRun]:
    """Model ``name``'s build and its ATC run (Skip when none ran, or with ``compiled`` when it
    did not compile)."""
    context.built_by_the_atc_under_test(name)
    found = context.models.models.get(name)
    if found is None or found.run is None or (compiled and found.om is None):
        raise Skip(context.models.why_missing(name))
    context.expect(f"the ATC that compiled {name}", found.atc, UNKNOWN)
    return found, found.run


@probe("P-atc-flags", "125", "ATC's --help lists no flag we refuse; an unknown flag is refused on stderr")
def atc_flags(context: ProbeContext) -> None:
    (usage,) = runs(context, ["--help"])
    listed = {m.group(1) for line in usage.stdout if (m := _USAGE_FLAG.match(line))}
    context.expect("--help: its exit code", usage.exit_code, 0)
    context.expect("flags --help lists that ATC_FLAGS lacks", sorted(listed - ATC_FLAGS), [])
    unlisted = sorted(ATC_FLAGS - listed)
    context.expect("flags of ATC_FLAGS --help does not list", unlisted, UNKNOWN)
    # every unlisted flag first (a string, int or bool flag takes "0"), then one ATC does not define:
    # only that one may be refused as unknown
    (unknown,) = runs(context, [*(f"--{flag}=0" for flag in unlisted), "--colour=blue"])
    refusals = [line for line in unknown.stderr if "unknown command line flag" in line]
    context.expect("stderr: the unknown flags", refusals, ["ERROR: unknown command line flag 'colour'"])
    context.expect("the first line", unknown.stdout[:1], [STARTED])
    context.expect("exit code 0", unknown.exit_code == 0, False)


@probe("P-atc-messages", "126", "ATC prints its start line, then its success line, or its failure line and E-lines")
def atc_messages(context: ProbeContext) -> None:
    _, success = built(context, "static")
    context.expect("a compiled model: the first line", success.stdout[:1], [STARTED])
    context.expect("a compiled model: the success line after it", SUCCEEDED in success.stdout[1:], True)
    context.expect("a compiled model: exit code", success.exit_code, 0)
    _, failure = built(context, "one_gear", compiled=False)
    context.expect("a refused model: the first line", failure.stdout[:1], [STARTED])
    failed = [i for i, line in enumerate(failure.stdout) if line.startswith(FAILED.split(",")[0])]
    errors = [i for i, line in enumerate(failure.stdout) if line in failure.error_lines()]
    context.expect(
        "a refused model: 'ATC run failed, ...' then Ennnnn lines",
        bool(failed and errors and failed[0] < errors[0]),
        True,
    )
    context.expect("a refused model: exit code 0", failure.exit_code == 0, False)
    context.expect("a refused model: its error lines", failure.error_lines(), UNKNOWN)


@probe("P-atc-output-name", "127", "ATC writes --output + .om; a model with shape ranges as --output_<os>_<cpu>.om")
def atc_output_name(context: ProbeContext) -> None:
    for name in ("static", "batch", "range", "range_unbounded"):
        model, _ = built(context, name)
        written = sorted(p.name for p in model.om.parent.glob("*.om")) if model.om else []
        if model.recipe.flags.shape_ranges:
            shaped = len(written) == 1 and re.fullmatch(rf"{name}_[a-z]+_[a-z0-9_]+\.om", written[0]) is not None
            context.expect(f"{name} (shape ranges): one file {name}_<os>_<cpu>.om", shaped, True)
            context.expect(f"{name}: the files ATC wrote", written, UNKNOWN)
        else:
            context.expect(f"{name}: the files ATC wrote", written, [f"{name}.om"])


@probe("P-atc-parser", "128", "an ONNX operator without a parser: E16002 naming it domain::opset::type")
def atc_parser(context: ProbeContext) -> None:
    (run,) = runs(context, [])
    context.expect("the first error", first_error(run), PARSED)
    message = "No ONNX parser is registered for optype com.example::1::CustomOp."
    context.expect("E16002's message names the operator", any(message in line for line in run.stdout), True)


@probe(
    "P-atc-precision", "129", "ATC takes these --precision_mode(_v2) values, refuses others (E10001) and both (E10056)"
)
def atc_precision(context: ProbeContext) -> None:
    cases = [
        *((f"--precision_mode={v}",) for v in PRECISION_MODE),
        *((f"--precision_mode_v2={v}",) for v in PRECISION_MODE_V2),
        ("--precision_mode=fp32",),
        ("--precision_mode_v2=fp32",),
        ("--precision_mode=force_fp16", "--precision_mode_v2=fp16"),
    ]
    claims = [PARSED] * (len(cases) - 3) + ["E10001", "E10001", "E10056"]
    for flags, claim, run in zip(cases, claims, runs(context, *cases)):
        context.expect(f"{' '.join(flags)}: the first error", first_error(run), claim)


@probe(
    "P-atc-aicore-num",
    "131",
    "--aicore_num: N| and 0| are taken, a non-integer and more cores than the SoC's are E10001",
)
def atc_aicore_num(context: ProbeContext) -> None:
    # (value, ATC's answer, the simulator's: it follows the docs' "N|M, both > 0"; it knows the SoC's cores)
    cases = (
        ("1|", PARSED, PARSED),
        ("0|", PARSED, "E10001"),
        ("1", PARSED, "E10001"),
        ("1a|", "E10001", "E10001"),
        ("100000|", "E10001", "E10001"),
    )
    found = runs(context, *([f"--aicore_num={value}"] for value, _, _ in cases))
    for (value, claim, simulated), run in zip(cases, found):
        expect_atc(context, f"--aicore_num={value}: the first error", first_error(run), claim, simulated)


@probe("P-atc-ge-options", "133", "ATC maps each GE option of GE_OPTION_FLAGS to its flag (--raw_ge_options)")
def atc_ge_options(context: ProbeContext) -> None:
    folder = context.workdir / "atc-probes"
    folder.mkdir(exist_ok=True)
    options = ["ge.bogusOption", *GE_OPTION_FLAGS]
    files = []
    for index, option in enumerate(options):
        path = folder / f"raw-{index}.json"
        path.write_text(json.dumps({"compile options": {"global": {option: "bogus"}}}), encoding="utf-8")
        files.append(path)
    found = runs(context, *([f"--raw_ge_options={path}"] for path in files))
    if any("unknown command line flag 'raw_ge_options'" in line for line in found[0].stderr):
        raise Skip("this ATC has no --raw_ge_options (older than the source read), so its map cannot be seen")
    context.expect("an option ATC does not map (ge.bogusOption): the first error", first_error(found[0]), "E10055")
    for (option, flag), run in zip(GE_OPTION_FLAGS.items(), found[1:]):
        context.expect(f"{option}: mapped (no E10055)", "E10055" not in run.codes(), True)
        if flag in VALUE_RANGES:  # "bogus" is refused by the flag's own value check, which names it
            named = {m for line in run.error_lines() for m in _FLAG_NAMED.findall(line)}
            context.expect(f"{option}: the flag its refusal names", flag in named, True, note=f"--{flag}")


@probe(
    "P-atc-batch-refusals", "136", "--dynamic_batch_size refuses an entry without dims, -1 off axis 0, no -1 on axis 0"
)
def atc_batch_refusals(context: ProbeContext) -> None:
    model = nets.three_inputs(context.workdir / "atc-probes" / "three_inputs.onnx")
    cases = (
        ("s:;b:-1,6;a:-1,4", "E10012"),
        ("s:2,3;b:-1,-1;a:-1,4", "E10018"),
        ("s:2,3;b:2,6;a:2,4", "E10031"),
    )
    shapes = ([f"--input_shape={shape}", "--dynamic_batch_size=1,2,4"] for shape, _ in cases)
    for (shape, code), run in zip(cases, runs(context, *shapes, model=model)):
        expect_atc(context, f"--input_shape={shape}: the first error", first_error(run), code, "E19999")


@probe("P-atc-range-refusals", "71a", "--input_shape ranges compile alone and are refused beside gears (E10040)")
def atc_range_refusals(context: ProbeContext) -> None:
    model = nets.linear(context.workdir / "atc-probes" / "linear.onnx")
    alone, batch, dims = runs(
        context,
        ["--input_shape=x:1~8,4"],
        ["--input_shape=x:1~8,4", "--dynamic_batch_size=1,2"],
        ["--input_shape=x:1~8,4", "--dynamic_dims=1;2"],
        model=model,
    )
    context.expect("--input_shape=x:1~8,4 alone: exit code", alone.exit_code, 0)
    for flag, run in (("--dynamic_batch_size", batch), ("--dynamic_dims", dims)):
        expect_atc(context, f"a range with {flag}: the first error", first_error(run), "E10040", "E19999")


@probe(
    "P-atc-external-data",
    "140",
    "ATC reads an ONNX model's external data beside the model file's real path; without the file it fails",
)
def atc_external_data(context: ProbeContext) -> None:
    import onnx

    folder = context.workdir / "atc-probes" / "external"
    folder.mkdir(parents=True, exist_ok=True)
    source = nets.linear(folder / "linear.onnx")
    (folder / "weights.bin").unlink(missing_ok=True)
    onnx.save(onnx.load(str(source)), str(source), save_as_external_data=True, location="weights.bin", size_threshold=0)
    linked = context.workdir / "atc-probes" / "linked"
    linked.mkdir(exist_ok=True)
    (linked / "model.onnx").unlink(missing_ok=True)
    (linked / "model.onnx").symlink_to(source)
    flags = ["--input_shape=x:1,4"]
    (found,) = runs(context, flags, model=source)
    (through_link,) = runs(context, flags, model=linked / "model.onnx")
    context.expect("weights.bin beside the model: exit code", found.exit_code, 0)
    context.expect("a symlinked model.onnx (weights.bin beside its target): exit code", through_link.exit_code, 0)
    (folder / "weights.bin").unlink()
    (missing,) = runs(context, flags, model=source)
    context.expect("weights.bin removed: exit code 0", missing.exit_code == 0, False)
    context.expect("weights.bin removed: its error lines", missing.error_lines(), UNKNOWN)
