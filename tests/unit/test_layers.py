"""The folder tree is the architecture: dependencies point one way, and this test keeps it so.

The layers, and which modules may import the simulator, Triton's ``triton_python_backend_utils``
and CANN's ``acl``, are import-linter contracts in ``pyproject.toml`` (``lint-imports``, which
``tools/lint.sh`` runs too). Here besides: every top-level package is in a layer, no two modules
import each other (directly or around a circle), and no module imports the package root. Every
import counts: module level, deferred and type-only alike.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

import ge_python_backend

ROOT = "ge_python_backend"
PACKAGE = Path(ge_python_backend.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"
CONTRACTS = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(ROOT)


def test_the_import_contracts_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[done.stdout.find("Contracts") :] + done.stderr


def test_the_tree_has_only_known_layers(graph):
    (layers,) = (c["layers"] for c in CONTRACTS if c["type"] == "layers")
    known = {name.strip() for layer in layers for name in layer.replace("|", ":").split(":")}
    tops = {m.split(".")[1] for m in graph.modules if m.count(".") >= 1} - {"__main__"}
    assert sorted(tops - known) == [], (
        f"modules outside every layer of pyproject.toml's layers contract: {tops - known}"
    )


def test_no_import_circles(graph):
    circles = sorted(
        f"{module} -> {target} -> ... -> {module}"
        for module in graph.modules
        for target in graph.find_modules_directly_imported_by(module)
        if target != module and target.startswith(ROOT) and graph.chain_exists(importer=target, imported=module)
    )
    assert circles == [], "import circles:\n" + "\n".join(circles)


def test_no_module_imports_the_package_root(graph):
    found = sorted(graph.find_modules_that_directly_import(ROOT) - {f"{ROOT}.__main__"})
    assert found == [], f"these import the package root (import what you need from its module): {found}"


def test_the_checks_catch_what_they_should():
    """An upward import breaks the layers contract, naming the module and the line."""
    module = PACKAGE / "serving" / "_upward_import_probe.py"
    module.write_text("from ge_python_backend.triton import settings  # noqa: F401\n", encoding="utf-8")
    try:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
            cwd=PACKAGE.parent,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        module.unlink()
    assert done.returncode != 0
    said = " ".join(done.stdout.split())  # lint-imports wraps long lines
    assert "ge_python_backend.serving._upward_import_probe -> ge_python_backend.triton.settings (l.1)" in said
