"""The one benchmark entry point (python -m tools.bench): every scenario is listed and parses its
options, and a scenario's report comes out in the shared format (JSON + markdown + PNG) with the
quiet-host log. The scenarios that start servers are run by hand (BENCHMARKS.md), not here."""

from __future__ import annotations

import json

import pytest

from ge_python_backend.ops.bench import host
from tools.bench import runner


def test_every_scenario_is_listed_with_its_summary(capsys):
    assert runner.main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(runner.SCENARIOS)
    for name, line in zip(runner.SCENARIOS, listed):
        assert runner.scenario_module(name).SUMMARY in line


@pytest.mark.parametrize("scenario", list(runner.SCENARIOS))
def test_every_scenario_parses_the_shared_options(scenario, tmp_path):
    required = {"ab": ["--b", str(runner.ROOT)], "profile": ["ge"]}.get(scenario, [])
    args = runner.build_parser().parse_args([scenario, *required, "--workdir", str(tmp_path), "--quiet-timeout", "0"])
    assert args.workdir == tmp_path and args.quiet_timeout == 0.0


def test_a_scenario_writes_one_report_with_the_quiet_host_log(tmp_path, monkeypatch, capsys):
    seen = []

    def busy_host(threshold, timeout):
        seen.append((threshold, timeout))
        return 0.5  # never quiet: measured anyway, and said so

    monkeypatch.setattr(host, "wait_quiet", busy_host)
    argv = ["gather", "--seconds", "0.01", "--workdir", str(tmp_path), "--quiet-timeout", "7"]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    assert seen == [(runner.QUIET_BUSY, 7.0)] * 3  # before each of the three cases
    assert "warning: 50% of the CPUs were busy before 8 requests" in out

    document = json.loads((tmp_path / "gather.json").read_text())
    assert document["scenario"] == "gather" and document["command"].startswith("python -m tools.bench gather ")
    assert document["commit"] and document["date"].endswith("UTC")
    assert [entry["before"] for entry in document["quiet"]] == ["8 requests", "7 requests", "5 requests"]
    assert all(entry["busy"] == 0.5 for entry in document["quiet"])
    cases = document["data"]["cases"]
    summary = document["summary"]
    assert summary["header"] == ["ratio", "median", "range", "target", "met"]
    for case, row in zip(cases, summary["rows"]):  # the summary is computed from the measurements
        assert float(row[1]) == pytest.approx(case["gather_pad_scatter_ms"] / case["memcpy_ms"], abs=0.005)
    markdown = (tmp_path / "gather.md").read_text()
    assert markdown.startswith(f"`{document['command']}` (") and "| ratio | median | range | target | met |" in markdown
    assert (tmp_path / "gather.png").read_bytes()[:4] == b"\x89PNG"


def test_code_must_be_a_checkout(tmp_path):
    with pytest.raises(SystemExit, match="holds no ge_python_backend package"):
        runner.main(["execute", "--code", str(tmp_path)])


def test_markdown_cells_cannot_break_the_table():
    table = runner.Table("t", ("a", "b"), [["x|y", "1"]])
    assert table.markdown().splitlines()[2] == "| x\\|y | 1 |"


def test_the_router_scenarios_folders_pass_check(tmp_path):
    """Its routers' members agree (the NPU copy's stand-in has the classifier's inputs and outputs),
    and the BLS baseline is a folder tritonserver loads."""
    from ge_python_backend.repository.check import check_repository
    from ge_python_backend.repository.config import read_config_file
    from tools.bench.scenarios import router

    repo = router.build_repository(tmp_path, row_ms=2.5, same_model=False)
    assert check_repository(repo).errors == ()
    npu, cpu = (read_config_file(repo / name / "config.pbtxt") for name in ("npu", "cpu"))
    assert list(npu.input) == list(cpu.input) and list(npu.output) == list(cpu.output)
    assert npu.parameters["acl_sim_row_ms"].string_value == "2.5"
    assert read_config_file(repo / router.BLS_BASELINE / "config.pbtxt").parameters["member"].string_value == "tiny"
