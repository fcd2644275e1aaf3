"""The engine and the simulator against the pyACL binding's own source.

``tests/support/pyacl_binding.json`` lists every function of CANN's pyACL binding (hicann/runtime
``python/pyACL/``, commit 134e2edb), read from its C++ source: the PyArg_ParseTuple format (which
gives the positional arguments), what it returns (ret only; one plain value; N outputs then ret)
and the file and line of the wrapper. The engine's source is scanned with ``ast`` for every call
through the acl module object, so the engine cannot drift from the binding (argument count,
keywords, how the result is unpacked, ret last); the simulator's declared signatures are checked
against the same table.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import ge_python_backend.engines.acl as acl_package
from ge_python_backend.sim import Simulator
from ge_python_backend.sim.api import signatures

_TABLE = json.loads((Path(__file__).parents[1] / "support" / "pyacl_binding.json").read_text())["functions"]


def _names(entry: dict) -> tuple[str, ...]:
    """Result names for messages: ("ret",), one value's name, or (outputs..., "ret")."""
    if entry["result"] == "ret":
        return ("ret",)
    if entry["result"] in ("value", "none"):
        name = entry["names"][0]
        return ("value",) if name in ("ret", "None") else (name,)
    return tuple(entry["names"][:-1]) + ("ret",)


#: function -> (format, result names), from the binding's source.
CONTRACT: dict[str, tuple[str, tuple[str, ...]]] = {name: (e["format"], _names(e)) for name, e in _TABLE.items()}
#: function -> "ret" | "value" | "none" | "N+ret"
RESULTS: dict[str, str] = {name: e["result"] for name, e in _TABLE.items()}


def arity(fmt: str) -> tuple[int, int]:
    """(minimum, maximum) positional arguments of a PyArg_ParseTuple format."""
    letters = fmt.replace("|", "")
    return (fmt.index("|") if "|" in fmt else len(letters)), len(letters)


PACKAGE = Path(acl_package.__file__).parents[2]
#: every file that calls pyACL: the engine, and the conformance probes and doctor, which call it directly
ENGINE_FILES = sorted(
    path for folder in ("engines/acl", "ops/conformance", "ops/doctor") for path in (PACKAGE / folder).glob("*.py")
)
_ACL_NAMES = {"acl", "_acl"}


def _chain(node: ast.AST) -> list[str] | None:
    """``self._acl.rt.malloc`` -> ["self", "_acl", "rt", "malloc"]; None if not a plain attribute chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def acl_calls(source: str, filename: str) -> list[tuple[str, ast.Call, ast.AST]]:
    """(pyACL function, call node, parent node) for every call through the acl module object."""
    tree = ast.parse(source, filename)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        chain = _chain(node.func)
        if not chain:
            continue
        roots = [i for i, part in enumerate(chain[:-1]) if part in _ACL_NAMES]
        if roots:
            found.append(("acl." + ".".join(chain[roots[-1] + 1 :]), node, parents[node]))
    return found


def _target_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def call_problems(function: str, call: ast.Call, parent: ast.AST) -> list[str]:
    """How one call breaks the contract: arguments, and how its result is unpacked (empty when it does not)."""
    if function not in CONTRACT:
        return [f"{function} is not a function of the pyACL binding"]
    fmt, results = CONTRACT[function]
    low, high = arity(fmt)
    spelled = f"{', '.join(results)} = {function}(...)"
    problems = []
    if call.keywords:
        problems.append(f"{function} takes positional arguments only")
    if any(isinstance(a, ast.Starred) for a in call.args):
        problems.append(f"{function}: pass its arguments one by one, not with *")
    elif not low <= len(call.args) <= high:
        problems.append(f"{function} takes {low}..{high} arguments, {len(call.args)} given")
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is call):
        if isinstance(parent, ast.Expr) and "ret" in results:
            return problems + [f"the ret of {function} is discarded: {spelled}"]
        if len(results) > 1:  # a tuple passed on whole is unpacked nowhere this test can see
            return problems + [f"the result of {function} must be unpacked where it is called: {spelled}"]
        return problems  # one value, used in an expression (e.g. check(acl, acl.rt.free(p), ...))
    target = parent.targets[0]
    names = (
        [_target_name(t) for t in target.elts] if isinstance(target, (ast.Tuple, ast.List)) else [_target_name(target)]
    )
    if len(names) != len(results):
        problems.append(f"{function} returns {len(results)} value(s), unpacked into {len(names)}: {spelled}")
    elif len(results) > 1:
        if names[-1] not in ("ret", "_"):
            problems.append(
                f"{function} returns ret last, so the last name must be ret or _, found {names[-1]!r}: {spelled}"
            )
        if "ret" in names[:-1]:
            problems.append(
                f"{function} returns ret last, but 'ret' is unpacked from position {names.index('ret') + 1}: {spelled}"
            )
    elif results != ("ret",) and names[0] == "ret":
        problems.append(f"{function} returns {results[0]}, not ret: {spelled}")
    return problems


def scan(source: str, filename: str = "<source>") -> list[str]:
    return [
        f"{filename}:{call.lineno}: {problem}"
        for function, call, parent in acl_calls(source, filename)
        for problem in call_problems(function, call, parent)
    ]


ENGINE_CALLS = [
    (path.name, function, call, parent)
    for path in ENGINE_FILES
    for function, call, parent in acl_calls(path.read_text(), str(path))
]


def test_the_scan_finds_the_engine_calls():
    found = {function for _, function, _, _ in ENGINE_CALLS}
    assert {
        "acl.init",
        "acl.rt.memcpy_async",
        "acl.mdl.execute_async",
        "acl.rt.event_elapsed_time",
        "acl.mdl.set_dynamic_batch_size",
        "acl.get_recent_err_msg",
        "acl.finalize",
        "acl.rt.get_stream_available_num",
        "acl.mdl.set_aipp_by_input_index",
    } <= found


@pytest.mark.parametrize(
    "file, function, call, parent", ENGINE_CALLS, ids=[f"{f}:{c.lineno}:{fn}" for f, fn, c, _ in ENGINE_CALLS]
)
def test_engine_calls_follow_the_binding(file, function, call, parent):
    assert call_problems(function, call, parent) == [], f"{file}:{call.lineno}"


def test_the_scan_accepts_the_calls_the_binding_takes():
    assert (
        scan(
            "model_id, ret = acl.mdl.load_from_file(path)\n"
            "_, ret = acl.mdl.add_dataset_buffer(dataset, buffer)\n"
            "self._stream, ret = self._acl.rt.create_stream()\n"
            "work, weight, ret = acl.mdl.query_size(path)\n"
            "n = acl.mdl.get_num_inputs(desc)\n"
            "ret = acl.init()\n"
        )
        == []
    )


@pytest.mark.parametrize(
    "source, problem",
    [
        ("ret, model_id = acl.mdl.load_from_file(path)", "the last name must be ret or _, found 'model_id'"),
        ("ret, model_id = acl.mdl.load_from_file(path)", "'ret' is unpacked from position 1"),
        ("ret, _ = acl.mdl.load_from_file(path)", "'ret' is unpacked from position 1"),
        ("model_id, desc = acl.mdl.load_from_file(path)", "found 'desc'"),
        ("model_id = acl.mdl.load_from_file(path)", "returns 2 value(s), unpacked into 1"),
        ("ret = acl.mdl.get_num_inputs(desc)", "returns value, not ret"),
        ("context, ret = acl.rt.create_context(device_id=0)", "positional arguments only"),
        ("ptr, ret = acl.rt.malloc(size)", "takes 2..2 arguments, 1 given"),
        ("ptr, ret = acl.rt.malloc(*args)", "not with *"),
        ("acl.rt.free(ptr)", "the ret of acl.rt.free is discarded"),
        ("use(acl.rt.malloc(size, 0))", "must be unpacked where it is called"),
        ("ret = acl.rt.nope()", "not a function of the pyACL binding"),
    ],
)
def test_the_scan_reports_each_misuse(source, problem):
    found = scan(source)
    assert any(problem in p for p in found), found


def test_simulator_signatures_agree_with_the_binding():
    declared = signatures(Simulator().acl)
    engine_functions = {function for _, function, _, _ in ENGINE_CALLS}
    assert engine_functions <= set(declared), "the simulator lacks functions the engine calls"
    for function, signature in declared.items():
        assert function in CONTRACT, f"the simulator defines {function}, which the pyACL binding does not have"
        fmt = CONTRACT[function][0]
        assert signature.fmt == fmt, f"{function}: the simulator parses {signature.fmt!r}, the binding {fmt!r}"
        if signature.value:
            kind = "value"
        elif signature.outputs is None:
            kind = "ret"
        else:
            kind = f"{len(signature.outputs)}+ret"
        assert kind == RESULTS[function].replace("none", "value"), function


SIMULATED = sorted(signatures(Simulator().acl))


@pytest.mark.parametrize("function", SIMULATED)
def test_simulator_refuses_keywords_and_wrong_counts(function):
    acl = Simulator().acl
    target = acl
    for part in function.split(".")[1:]:
        target = getattr(target, part)
    low, high = arity(CONTRACT[function][0])
    with pytest.raises(TypeError):
        target(*([0] * low), bogus=1)
    with pytest.raises(TypeError):
        target(*([0] * (high + 1)))
