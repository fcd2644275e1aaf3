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
from pathlib import Path

import pytest

from ge_python_backend.ops.conformance import PROBES, run_conformance
from ge_python_backend.ops.conformance.build import RECIPES, AtcFlags, CompileError, build_models, compile_model
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
    assert report["models"]["dims"]["command"].startswith("ge-triton sim-compile --model=")
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
    built = build_models(tmp_path, "Ascend310P3", None, {r.name: r for r in RECIPES if r.name == "batch"})
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


def test_the_host_atc_gets_the_flags_sim_compile_gets(tmp_path):
    """One function compiles: with a real ATC the command is ATC's own, --output without .om (ATC
    appends it), and the kind's flags exactly as the recipe spells them for sim-compile."""
    (recipe,) = [r for r in RECIPES if r.name == "dims"]
    onnx = recipe.network(tmp_path / "dims.onnx")
    compile_model(None, onnx, tmp_path / "template.om", "Ascend310P3", recipe.flags, None)
    atc = _fake_atc(tmp_path)
    command = compile_model(atc, onnx, tmp_path / "out" / "dims.om", "Ascend910B3", recipe.flags, None)
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
    assert '--dynamic_dims="2,3,1;4,5,2;1,1,3"' in command.shell()
    assert (tmp_path / "out" / "dims.om").is_file()


def test_a_model_atc_refuses_is_recorded_with_what_it_said(tmp_path):
    atc = _fake_atc(tmp_path, exit_code=1)
    refused = r"ATC failed to compile x.onnx \(exit code 1\): E10001: the op is not supported"
    with pytest.raises(CompileError, match=refused):
        compile_model(atc, tmp_path / "x.onnx", tmp_path / "x.om", "Ascend310P3", AtcFlags("x:2,4"), None)
    built = build_models(tmp_path, "Ascend310P3", atc, {r.name: r for r in RECIPES if r.name == "static"})
    assert built.om("static") is None and "E10001" in built.why_missing("static")
