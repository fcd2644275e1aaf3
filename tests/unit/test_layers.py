"""The folder tree is the architecture: dependencies point one way, and this test keeps it so.

Every ``import`` in the package (module level, deferred and type-only alike) is read with ``ast``.
A module may import its own layer package and the layers below it, never one above; no two
modules import each other, directly or around a circle; only ``triton/`` and ``testing/`` touch
Triton's ``triton_python_backend_utils``; only the acl engine's runtime imports CANN's ``acl``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import ge_python_backend

PACKAGE = Path(ge_python_backend.__file__).parent
ROOT = "ge_python_backend"

#: Top to bottom. A module may import modules of its own layer and of the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("ops", "testing"),
    ("repository",),
    ("hooks",),
    ("triton",),
    ("modelconfig",),
    ("serving",),
    ("sim",),
    ("engines",),
    ("ascend",),
    ("errors", "specs", "params", "version", "hostshm"),
)
RANK = {top: rank for rank, names in enumerate(LAYERS) for top in names}

#: (importer layer, imported module prefix, the only modules of that prefix it may import)
NARROW_EDGES = (("sim", "engines", ("engines.registry",)),)

#: The simulator is a plug-in: only these layers import it (the package serves without it:
#: test_engine_plugins.py).
SIM_IMPORTERS = ("sim", "ops", "cli")
PB_UTILS = "triton_python_backend_utils"
PB_UTILS_LAYERS = ("triton", "testing")
ACL_IMPORTERS = ("engines.acl.runtime",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    return module.split(".")[0]


def imports(module: str) -> Iterator[tuple[int, str]]:
    """(line, imported name) of every import in ``module``: package modules relative to the
    package root ("" is the root itself), other modules by their full name."""
    path = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, _relative(alias.name)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (use absolute imports)"
            target = _relative(node.module or "")
            for alias in node.names:
                inner = f"{target}.{alias.name}" if target else alias.name
                yield node.lineno, inner if target is not None and inner in MODULES else target


def _relative(name: str) -> str:
    if name == ROOT:
        return ""
    if name.startswith(ROOT + "."):
        return name[len(ROOT) + 1 :]
    return "!" + name  # not ours


def package_edges() -> dict[str, set[str]]:
    return {m: {t for _, t in imports(m) if not t.startswith("!") and t != m} for m in MODULES}


def test_the_tree_has_only_known_layers():
    unknown = sorted({layer_of(m) for m in MODULES if m and m != "__main__"} - set(RANK))
    assert unknown == [], f"modules outside every layer of LAYERS: {unknown}"


@pytest.mark.parametrize("module", [m for m in MODULES if m and m != "__main__"])
def test_imports_point_down(module):
    mine = RANK[layer_of(module)]
    wrong = []
    for line, target in imports(module):
        if target.startswith("!"):
            continue
        where = f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}"
        if target == "":
            wrong.append(f"{where} imports the package root (import what you need from its module)")
            continue
        if RANK[layer_of(target)] < mine:
            wrong.append(f"{where} ({layer_of(module)}) imports {target} from a layer above it")
        for importer, prefix, allowed in NARROW_EDGES:
            if layer_of(module) == importer and layer_of(target) == prefix and target not in allowed:
                wrong.append(f"{where} imports {target}; {importer}/ may use only {', '.join(allowed)} of {prefix}/")
    assert wrong == [], "\n".join(wrong)


def test_no_import_circles():
    edges = package_edges()
    circles = [c for c in _strongly_connected(edges) if len(c) > 1]
    named = [" -> ".join(sorted(c)) for c in circles]
    assert named == [], "import circles:\n" + "\n".join(named)


def test_only_the_triton_layer_touches_pb_utils():
    found = [
        f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}"
        for m in MODULES
        for line, target in imports(m)
        if target == "!" + PB_UTILS and layer_of(m) not in PB_UTILS_LAYERS
    ]
    assert found == [], f"{PB_UTILS} imported outside {PB_UTILS_LAYERS}: {found}"


def test_only_the_plugins_users_import_the_simulator():
    found = [
        f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}"
        for m in MODULES
        for line, target in imports(m)
        if layer_of(target) == "sim" and layer_of(m) not in SIM_IMPORTERS
    ]
    assert found == [], f"the simulator imported outside {SIM_IMPORTERS}: {found}"


def test_only_the_acl_runtime_imports_cann():
    found = [
        f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}"
        for m in MODULES
        for line, target in imports(m)
        if target == "!acl" and m not in ACL_IMPORTERS
    ]
    assert found == [], f"`import acl` outside {ACL_IMPORTERS}: {found}"


def test_the_checks_catch_what_they_should(tmp_path):
    """The detectors themselves: an upward import and a circle are found."""
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}, {"d"}]
    assert RANK["serving"] > RANK["triton"]  # serving is below triton: importing triton from it is upward


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm over ``edges`` (targets missing from the keys are leaves)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            found.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
