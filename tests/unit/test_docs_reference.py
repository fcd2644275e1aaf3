"""The reference pages under docs/reference/ are generated from the code (tools/reference.py):
they are current, they name everything the code declares, and a stale page is caught."""

from __future__ import annotations

import argparse

from ge_python_backend.cli import build_parser
from ge_python_backend.engines.registry import engine_parameters
from ge_python_backend.hooks import CLASSIFICATION_PARAMETERS
from ge_python_backend.triton.metrics import METRICS
from ge_python_backend.triton.settings import CORE_PARAMETERS, TRITON_PARAMETERS
from tools import reference


def test_generated_pages_are_current():
    stale = reference.stale()
    assert not stale, f"stale generated pages {stale}: regenerate them with `{reference.COMMAND}` and commit them"


def test_a_changed_page_is_stale_and_the_check_names_the_command(tmp_path, capsys, monkeypatch):
    for path, text in reference.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert reference.stale(tmp_path) == []
    (tmp_path / "docs/reference/cli.md").write_text("# edited by hand\n")
    (tmp_path / "docs/reference/metrics.md").unlink()
    assert reference.stale(tmp_path) == ["docs/reference/cli.md", "docs/reference/metrics.md"]
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    assert reference.main(["--check"]) == 1
    assert f"docs/reference/cli.md is stale: regenerate it with `{reference.COMMAND}`" in capsys.readouterr().err


def test_every_declared_parameter_has_a_row():
    page = reference.parameters_page()
    for parameter in CORE_PARAMETERS + engine_parameters() + CLASSIFICATION_PARAMETERS:
        assert f"| `{parameter.name}` |" in page, parameter.name
    for name in TRITON_PARAMETERS:
        assert f"`{name}`" in page
    # the classification template's --set options, and its model.py's declared parameters
    assert "## Template classification" in page and "| `labels` | required |" in page
    assert "| `acl_sim_faults` | unset |" in page  # under the simulator's own section
    assert page.index("## Engine acl-sim") < page.index("`acl_sim_faults`")


def test_every_verb_and_flag_is_in_the_cli_page():
    page = reference.cli_page()
    (verbs,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb, parser in verbs.choices.items():
        section = page.split(f"## ge-triton {verb}\n", 1)[1].split("\n## ge-triton ", 1)[0]
        for action in parser._actions:
            if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            name = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
            assert name in section, f"{verb}: {name}"


def test_every_metric_is_in_the_metrics_page():
    page = reference.metrics_page()
    for name, (kind, _, _) in METRICS.items():
        assert f"| `{name}` | {kind} |" in page


def test_cells_cannot_break_a_table_or_open_markup():
    assert reference.cell("a | b <tag> *x*\n  c") == "a \\| b &lt;tag> \\*x\\* c"
    assert reference.shown(("A", "B")) == "A,B" and reference.shown(None) == "unset" and reference.shown(0.5) == "0.5"
