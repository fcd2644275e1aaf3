"""``ge-triton conformance`` on the simulator: every probe and model kind passes or skips with a reason,
a probe fails when the runtime answers otherwise (what makes the run a differential check), and the
ATC path compiles with exactly the flags sim-compile takes.

The full run needs a process where nothing initialised pyACL: the CLI runs in a child process (as a
user runs it), and the in-process runs use simulators of their own.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend.ops.conformance import PROBES, run_conformance
from ge_python_backend.ops.conformance.atc import Atc, CompileError
from ge_python_backend.ops.conformance.build import RECIPES, AtcFlags, BuiltModels, build_models, compile_model
from ge_python_backend.ops.conformance.probes import ProbeContext, run_probe
from ge_python_backend.ops.conformance.probes_init import first_inits
from ge_python_backend.sim import SimConfig, Simulator

BY_ID = {p.id: p for p in PROBES}


def outcomes(report) -> dict[str, str]:
    return {r.id: r.outcome for r in report.results}


def test_the_cli_on_acl_sim_passes_or_skips_every_probe_with_a_reason(tmp_path):
    """What CI runs: a fresh process, every probe (the resource-exhausting ones too), a JSON report."""
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ge_python_backend",
            "conformance",
            "--engine",
            "acl-sim",
            "--exhaust",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    results = report["results"]
    assert {r["id"] for r in results} == set(BY_ID)
    assert [r["id"] for r in results if r["outcome"] == "fail"] == []
    assert all(r["reason"] for r in results if r["outcome"] == "skip")
    assert report["summary"]["pass"] >= 70
    environment = report["environment"]
    assert (environment["engine"], environment["soc"], environment["run_mode"]) == (
        "acl-sim",
        "Ascend310P3",
        "ACL_HOST",
    )
    assert set(environment) >= {"pyacl_version", "cann", "atc", "ge_python_backend"}
    simulated_atc = "the simulator's ATC (python -m ge_python_backend.sim.atc)"
    assert environment["atc"] == {"models": simulated_atc, "probes": simulated_atc}
    # every observed value is in the report, with the claim it was held to
    checks = {c["name"]: c for r in results for c in r["checks"]}
    assert checks["get_input_size_by_index(image)"] == {
        "name": "get_input_size_by_index(image)",
        "observed": 1440,
        "claimed": "unknown",
        "simulated": 1440,
        "holds": True,
        "note": "max_src_image_size is 1440",
    }
    assert report["models"]["dims"]["command"].startswith("python -m ge_python_backend.sim.atc --model=")
    assert "P-dims-layout" in done.stdout and "pass" in done.stdout.splitlines()[-1]


def test_device_run_mode_runs_the_device_mode_probes(tmp_path):
    """On a simulated device run mode (ACL_DEVICE) the device-mode I/O probe runs and the
    host-to-device copy probes skip; nothing is left allocated."""
    simulator = Simulator(SimConfig(run_mode="device"))
    report = run_conformance(simulator.acl, "acl-sim", tmp_path)
    found = outcomes(report)
    assert found["P-device-mode-io"] == "pass"
    assert found["P-memcpy-unaligned"] == found["P-memcpy-unpinned"] == "skip"
    assert [i for i, o in found.items() if o == "fail"] == []
    assert simulator.live() == []


@pytest.mark.parametrize(
    "config, probe, wrong",
    [
        (
            SimConfig(absent_gears_ret=145000),
            "P-gear-lookups",
            "get_dynamic_batch on a dims model: observed [None, None, 145000]",
        ),
        (SimConfig(memcpy_alignment=0), "P-memcpy-unaligned", "observed 0, claimed 107008"),
        (SimConfig(soc_name="Ascend310B1"), "P-soc-name", None),
    ],
)
def test_a_probe_fails_naming_observed_and_claimed_when_the_runtime_answers_otherwise(tmp_path, config, probe, wrong):
    """The same probes against a runtime that answers otherwise (here the simulator configured as a
    device might behave) fail, saying what was observed against what fidelity.md claims."""
    simulator = Simulator(config)
    report = run_conformance(simulator.acl, "acl-sim", tmp_path, probes=[BY_ID[probe]])
    (result,) = report.results
    if wrong is None:  # a SoC of the tables: still passes
        assert result.outcome == "pass"
        return
    assert result.outcome == "fail"
    assert wrong in result.summary(simulator=True)
    assert simulator.live() == []


def test_on_a_device_without_atc_the_model_probes_skip_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no atc
    simulator = Simulator()
    probes = [BY_ID["P-sizes"], BY_ID["P-malloc"]]
    report = run_conformance(simulator.acl, "acl", tmp_path, probes=probes)
    sizes, malloc = report.results
    assert sizes.outcome == "skip" and "no atc on PATH (give --atc" in sizes.reason
    assert malloc.outcome == "pass"


def test_a_probe_whose_claim_no_source_states_only_records(tmp_path):
    """A device is held to the rows' claims; a value no source states is recorded, not judged: on
    engine acl the probe is then a skip that says so, with the observation in the report."""
    simulator = Simulator()
    assert simulator.acl.init() == 0
    built = build_models(tmp_path, "Ascend310P3", Atc(), {r.name: r for r in RECIPES if r.name == "batch"})
    result = run_probe(BY_ID["P-no-gear-set"], ProbeContext(simulator.acl, "acl", 0, built, tmp_path, False))
    assert result.outcome == "skip" and result.reason.startswith("records only")
    assert result.checks[0].observed == 507011  # the simulator's (stricter) answer, recorded
    assert simulator.live() == []


def test_a_refused_config_and_an_accepted_one_each_get_a_first_init(tmp_path):
    """acl.init of each config as the first of a process: an accepted one (which fixes the process's
    config, acl.cpp 402-416) ends that child, the next config gets a fresh one."""
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps({"err_msg_mode": "2"}))
    accepted = tmp_path / "accepted.json"
    accepted.write_text("{}")
    assert first_inits("acl-sim", [refused, accepted, refused]) == [100000, 0, 100000]


def _fake_atc(folder: Path, exit_code: int = 0) -> Path:
    """An executable that records its arguments and writes --output + .om (a copy of ``template.om``)."""
    script = folder / "atc"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{folder}/argv.txt"\n'
        f"[ {exit_code} -eq 0 ] || {{ echo 'E10001: the op is not supported'; exit {exit_code}; }}\n"
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        f'cp "{folder}/template.om" "$out.om"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_host_atc_gets_the_command_line_the_simulators_atc_gets(tmp_path):
    """One function compiles: the host's ATC gets ATC's own command line, --output without .om (ATC
    appends it), and the kind's flags exactly as the simulator's ATC gets them."""
    (recipe,) = [r for r in RECIPES if r.name == "dims"]
    onnx = recipe.network(tmp_path / "dims.onnx")
    simulated = compile_model(Atc(), onnx, tmp_path / "template.om", "Ascend910B3", recipe.flags, None)
    atc = _fake_atc(tmp_path)
    command = compile_model(Atc(atc), onnx, tmp_path / "out" / "dims.om", "Ascend910B3", recipe.flags, None).command
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv == [
        f"--model={onnx}",
        "--framework=5",
        f"--output={tmp_path / 'out' / 'dims'}",
        "--soc_version=Ascend910B3",
        "--input_format=ND",
        "--input_shape=s:2,3;b:-1,-1;a:-1,4",
        "--dynamic_dims=2,3,1;4,5,2;1,1,3",
    ]
    others = [a for a in argv if not a.startswith("--output=")]
    assert [a for a in simulated.command.arguments[3:] if not a.startswith("--output=")] == others
    assert '--dynamic_dims="2,3,1;4,5,2;1,1,3"' in command.shell()
    assert (tmp_path / "out" / "dims.om").is_file()


def test_a_model_atc_refuses_is_recorded_with_what_it_said(tmp_path):
    atc = _fake_atc(tmp_path, exit_code=1)
    refused = r"ATC failed to compile x.onnx \(exit code 1\): E10001: the op is not supported"
    with pytest.raises(CompileError, match=refused):
        compile_model(Atc(atc), tmp_path / "x.onnx", tmp_path / "x.om", "Ascend310P3", AtcFlags("x:2,4"), None)
    built = build_models(tmp_path, "Ascend310P3", Atc(atc), {r.name: r for r in RECIPES if r.name == "static"})
    assert built.om("static") is None and "E10001" in built.why_missing("static")


# ----- the probes of section 15 and rows 136-139, each shown to fail where CANN's answer is not the row's


def _scripted_atc(folder: Path, body: str) -> Atc:
    """A host ATC that answers as ``body`` says: Python that sees ``args`` (its arguments) and
    ``output`` (--output), prints and exits (exit code 0 when it does not)."""
    script = folder / "scripted-atc"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
        "output = next((a.split('=', 1)[1] for a in args if a.startswith('--output=')), '')\n" + body
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Atc(script)


#: an ATC that takes every flag and value: each run ends where the model is parsed, the operator
#: named without its domain and opset
_TAKES_EVERYTHING = (
    "print('ATC start working now, please wait for a moment.')\n"
    "print('ATC run failed, Please check the detail log')\n"
    "print('E16002: No ONNX parser is registered for optype CustomOp.')\n"
    "sys.exit(1)\n"
)


def _probe_with(simulator: Simulator, probe: str, tmp_path: Path, atc: Atc | None = None, built=None):
    assert simulator.acl.init() in (0, 100002)
    context = ProbeContext(simulator.acl, "acl-sim", 0, built or BuiltModels(), tmp_path, False, atc)
    return run_probe(BY_ID[probe], context)


@pytest.mark.parametrize(
    "probe, wrong",
    [
        (
            "P-atc-flags",
            "stderr: the unknown flags: observed [], claimed [\"ERROR: unknown command line flag 'colour'\"]",
        ),
        ("P-atc-parser", "E16002's message names the operator: observed False, claimed True"),
        ("P-atc-precision", "--precision_mode=fp32: the first error: observed 'E16002', claimed 'E10001'"),
        ("P-atc-aicore-num", "--aicore_num=1a|: the first error: observed 'E16002', claimed 'E10001'"),
        ("P-atc-ge-options", "(ge.bogusOption): the first error: observed 'E16002', claimed 'E10055'"),
        (
            "P-atc-batch-refusals",
            "--input_shape=s:;b:-1,6;a:-1,4: the first error: observed 'E16002', claimed 'E10012'",
        ),
        ("P-atc-range-refusals", "a range with --dynamic_dims: the first error: observed 'E16002', claimed 'E10040'"),
    ],
)
def test_an_atc_that_takes_every_flag_fails_the_atc_probes(tmp_path, probe, wrong):
    """The ATC probes hold the host's ATC (here a script that accepts everything) to the rows'
    claims, not to the simulator's answers, and name the ATC that ran."""
    atc = _scripted_atc(tmp_path, _TAKES_EVERYTHING)
    result = _probe_with(Simulator(), probe, tmp_path, atc)
    assert result.outcome == "fail"
    assert wrong in result.summary(simulator=True)
    assert {"name": "the ATC that ran", "observed": str(atc.path)}.items() <= result.checks[0].to_json(True).items()


def test_the_atc_probes_skip_on_a_device_without_atc(tmp_path):
    simulator = Simulator()
    assert simulator.acl.init() == 0
    result = run_probe(BY_ID["P-atc-precision"], ProbeContext(simulator.acl, "acl", 0, BuiltModels(), tmp_path, False))
    assert result.outcome == "skip" and "no atc on PATH" in result.reason


def test_an_atc_that_prints_no_start_line_and_writes_one_name_for_every_model_fails_rows_126_and_127(tmp_path):
    """Rows 126 and 127 read the runs that built the models: an ATC that writes --output.om for a
    shape-range model too, and prints only its success line, fails both."""
    atc = _scripted_atc(
        tmp_path, "open(output + '.om', 'wb').close()\nprint('ATC run success, welcome to the next use.')\n"
    )
    names = ("static", "batch", "range", "range_unbounded", "one_gear")
    built = build_models(tmp_path / "models", "Ascend310P3", atc, {r.name: r for r in RECIPES if r.name in names})
    messages = _probe_with(Simulator(), "P-atc-messages", tmp_path, built=built)
    assert messages.outcome == "fail"
    assert "a compiled model: the first line: observed ['ATC run success, welcome to the next use.']" in (
        messages.summary(simulator=True)
    )
    named = _probe_with(Simulator(), "P-atc-output-name", tmp_path, built=built)
    assert named.outcome == "fail"
    assert "range (shape ranges): one file range_<os>_<cpu>.om: observed False" in named.summary(simulator=True)


def _built(tmp_path: Path, name: str, soc: str = "Ascend310P3", **flags) -> BuiltModels:
    """Model ``name`` compiled by the simulator's ATC, its recipe's flags changed by ``flags``."""
    (recipe,) = [r for r in RECIPES if r.name == name]
    changed = replace(recipe, flags=replace(recipe.flags, **flags))
    return build_models(tmp_path / "models", soc, Atc(), {name: changed})


@pytest.mark.parametrize(
    "probe, name, soc, flags, wrong",
    [
        # an ATC that compiled other gears than it was given
        (
            "P-static-beside-batch",
            "static_batch",
            "Ascend310P3",
            {"dynamic_batch_size": "1,2,8"},
            "get_dynamic_batch: observed [[1, 2, 8], 0], claimed [[1, 2, 4], 0]",
        ),
        # an ATC that read the range 1~8 as 1~4
        ("K-range-bounds", "range", "Ascend310P3", {"input_shape": "x:1~4,4"}, "observed ['dynamic', 4]"),
        # an ATC that did not compile for the --soc_version it was given
        (
            "P-soc-version",
            "static",
            "Ascend910B3",
            {},
            "the static model's soc_version (compiled --soc_version=<that name>): observed 'Ascend910B3'",
        ),
    ],
)
def test_a_model_compiled_otherwise_fails_its_probe(tmp_path, probe, name, soc, flags, wrong):
    simulator = Simulator()
    result = _probe_with(simulator, probe, tmp_path, built=_built(tmp_path, name, soc, **flags))
    assert result.outcome == "fail"
    assert wrong in result.summary(simulator=True)
    assert simulator.live() == []


def _outputs_changed(monkeypatch, change) -> None:
    """The simulator's device computes ``change(output)`` instead of each output."""
    from ge_python_backend.sim import api_mdl

    computed = api_mdl.run_session
    monkeypatch.setattr(api_mdl, "run_session", lambda model, run: [change(r) for r in computed(model, run)])


def test_a_device_that_computes_otherwise_fails_the_kind_probes_of_rows_130_and_136(tmp_path, monkeypatch):
    """Held to fidelity.md's claim (engine acl), the simulator, which computes FP32 exactly, fails row
    130's default; a device rounding every output to FP16 fails its origin case; wrong values fail
    row 136's comparison with ONNX Runtime."""
    precision = {r.name: r for r in RECIPES if r.name.startswith("precision_")}
    built = build_models(tmp_path / "models", "Ascend310P3", Atc(), precision)
    simulator = Simulator()
    assert simulator.acl.init() == 0

    def judged_as_a_device():
        return run_probe(BY_ID["K-precision-default"], ProbeContext(simulator.acl, "acl", 0, built, tmp_path, False))

    exact = judged_as_a_device()
    assert exact.outcome == "fail"
    assert "precision_default: off ONNX Runtime's FP32 by more than FP32 rounding: observed False" in exact.summary(
        False
    )
    _outputs_changed(monkeypatch, lambda r: r.astype(np.float16).astype(r.dtype))
    rounded = judged_as_a_device()
    assert rounded.outcome == "fail"
    summary = rounded.summary(False)
    assert "precision_origin: off ONNX Runtime's FP32 by more than FP32 rounding: observed True" in summary
    assert "precision_default" not in summary
    _outputs_changed(monkeypatch, lambda r: r + 1)
    static = _probe_with(simulator, "K-static-beside-batch", tmp_path, built=_built(tmp_path, "static_batch"))
    assert static.outcome == "fail" and "output ya as ONNX Runtime: observed False" in static.summary(True)
    assert simulator.live() == []


def test_aipp_setters_that_refuse_a_nan_fail_row_137(tmp_path, monkeypatch):
    """CANN's range check lets a NaN through (log_inner.h:309-316); a runtime whose setter refuses
    it (the simulator before this row was checked against the source) fails the probe."""
    from ge_python_backend.sim import mdl_aipp
    from ge_python_backend.sim.signature import AclFail

    def refusing_nan(name, value, low, high):
        if not low <= value <= high:
            raise AclFail(100000, f"{name} is {value}")

    names = ("dynamic_aipp", "range_aipp")
    built = build_models(tmp_path / "models", "Ascend310P3", Atc(), {r.name: r for r in RECIPES if r.name in names})
    assert _probe_with(Simulator(), "P-aipp-value-ranges", tmp_path, built=built).outcome == "pass"
    monkeypatch.setattr(mdl_aipp, "_within", refusing_nan)
    result = _probe_with(Simulator(), "P-aipp-value-ranges", tmp_path, built=built)
    assert result.outcome == "fail"
    assert "set_aipp_pixel_var_reci(NaN, 1, 1, 1): observed 100000, claimed 0" in result.summary(True)


#: a pyACL whose log module writes one plog file at finalize, under ``ROOT``
_FAKE_ACL = """import os, pathlib, types
def init(*config):
    return 0
def finalize():
    folder = pathlib.Path(ROOT) / "debug" / "plog"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"plog-{os.getpid()}_20250101000000000.log").write_text("[ERROR] RUNTIME(1): malloc size 0")
    return 0
rt = types.SimpleNamespace(set_device=lambda d: 0, malloc=lambda size, policy: (0, 100000), reset_device=lambda d: 0)
mdl = types.SimpleNamespace()
"""


@pytest.mark.parametrize(
    "root, outcome",
    [('os.environ["ASCEND_PROCESS_LOG_PATH"]', "pass"), ('os.environ["HOME"] + "/ascend/log"', "fail")],
)
def test_the_plog_probe_runs_a_child_with_the_variables_set_and_finds_where_the_log_went(
    tmp_path, monkeypatch, root, outcome
):
    """On acl-sim the probe skips (no plog); on a device a child process with ASCEND_PROCESS_LOG_PATH
    set writes its plog: here a stand-in pyACL that writes it where the variable says, or (wrongly)
    under $HOME/ascend/log."""
    assert _probe_with(Simulator(), "P-plog-folder", tmp_path).reason.startswith("the simulator writes no plog")
    package = tmp_path / "fake" / "acl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_FAKE_ACL.replace("ROOT", root))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    simulator = Simulator()
    assert simulator.acl.init() == 0
    result = run_probe(BY_ID["P-plog-folder"], ProbeContext(simulator.acl, "acl", 0, BuiltModels(), tmp_path, False))
    assert result.outcome == outcome, result.summary(False)
    if outcome == "fail":
        assert "under ASCEND_PROCESS_LOG_PATH (not there before): observed False" in result.summary(False)


@pytest.mark.parametrize(("core_busy", "ratio"), [(1.0, 1.0), (0.5, 2.0)])
def test_the_stream_scaling_probe_measures_what_the_device_lets_two_streams_add(tmp_path, core_busy, ratio):
    """Against simulated devices whose model keeps every core busy, or half the time: the probe
    records a throughput ratio of two streams to one near 1 and near 2, and the core_busy that
    models it (the calibration a first real host gets)."""
    simulator = Simulator(SimConfig(device_ms=5.0, core_busy=core_busy))
    report = run_conformance(simulator.acl, "acl-sim", tmp_path, probes=[BY_ID["P-stream-scaling"]])
    (result,) = report.results
    assert result.outcome == "skip" and result.reason.startswith("records only"), result.reason
    found = {c.name: c.observed for c in result.checks}
    assert found["device ms per execution on one stream (events)"] == pytest.approx(5.0, rel=0.05)
    assert found["throughput of two streams / one stream"] == pytest.approx(ratio, abs=0.25)
    assert found["acl_sim_core_busy that models it (1 / ratio, at most 1)"] == pytest.approx(core_busy, abs=0.15)
    assert simulator.live() == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "99"], "--device 99: this host has 8 device(s), ids 0 to 7"),
        (["--device", "-1"], "--device -1: expected a device id >= 0"),
        (["--atc", "/nonexistent/atc"], "--atc /nonexistent/atc: not an executable file"),
        (["--json", "/proc/no-such-folder/report.json"], "--json /proc/no-such-folder/report.json: cannot write it"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2_before_any_probe_runs(tmp_path, argv, message):
    done = subprocess.run(
        [sys.executable, "-m", "ge_python_backend", "conformance", "--engine", "acl-sim", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"ge-triton conformance: error: {message}")
    assert done.stdout == ""  # no table: no probe was reported


def test_rows_of_the_given_atc_skip_where_the_simulators_atc_compiled_the_models(tmp_path):
    """With --engine acl-sim the models are compiled by the simulator's ATC whatever --atc names: the
    rows that read those compiles (70, 83, 126, 127) skip, naming both, rather than pass for --atc."""
    ids = ("P-atc-one-gear", "P-atc-odd-aipp", "P-atc-messages", "P-atc-output-name")
    report = run_conformance(
        Simulator().acl, "acl-sim", tmp_path, atc=Path("/bin/true"), probes=[BY_ID[i] for i in ids]
    )
    for result in report.results:
        assert result.outcome == "skip", (result.probe.id, result.outcome)
        assert "was compiled by the simulator's ATC" in result.reason and "not by /bin/true (--atc)" in result.reason
