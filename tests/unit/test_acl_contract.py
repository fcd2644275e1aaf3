"""The engine and the simulator against the pyACL contract, with a table written from pyacl.md.

CONTRACT lists, for each pyACL function, its PyArg_ParseTuple format (which gives the number of
positional arguments) and the names of its results as pyacl.md writes them: ``("ret",)`` for a
function returning only ret, one name for a plain value, ``(outputs..., "ret")`` for a tuple.
It is copied from pyacl.md §2-§6 by hand. The engine's source is scanned with ``ast`` for every
call through the acl module object, so the engine cannot drift from pyacl.md (argument count,
keywords, how the result is unpacked, ret last); the simulator's declared signatures are
checked against the same table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ge_python_backend.engines.acl as acl_package
from ge_python_backend.sim import Simulator
from ge_python_backend.sim.api import signatures

#: function -> (format, result names). From pyacl.md, not from the simulator. Formats that
#: pyacl.md quotes are used as quoted; the others follow its §1.2/§1.8 rules: handles, pointers,
#: sizes and indexes "k", model_id "I", device ids "i", batch/height/width "K"; a dict or a bytes
#: object (checked after parsing, ValueError) is "O", a path or tensor name "s".
CONTRACT: dict[str, tuple[str, tuple[str, ...]]] = {
    # §2 top level
    "acl.init": ("|s", ("ret",)),
    "acl.finalize": ("", ("ret",)),
    "acl.get_recent_err_msg": ("", ("msg",)),
    "acl.get_version": ("", ("major", "minor", "patch", "ret")),
    "acl.get_soc_name": ("", ("name",)),
    "acl.create_data_buffer": ("kk", ("buf",)),
    "acl.destroy_data_buffer": ("k", ("ret",)),
    "acl.get_data_buffer_addr": ("k", ("addr",)),
    "acl.get_data_buffer_size": ("k", ("size",)),
    "acl.get_data_buffer_size_v2": ("k", ("size",)),
    "acl.update_data_buffer": ("kkk", ("ret",)),
    "acl.data_type_size": ("i", ("n",)),
    # §3 runtime
    "acl.rt.set_device": ("i", ("ret",)),
    "acl.rt.reset_device": ("i", ("ret",)),
    "acl.rt.get_device": ("", ("device_id", "ret")),
    "acl.rt.get_device_count": ("", ("count", "ret")),
    "acl.rt.get_run_mode": ("", ("run_mode", "ret")),
    "acl.rt.create_context": ("i", ("context", "ret")),
    "acl.rt.destroy_context": ("k", ("ret",)),
    "acl.rt.set_context": ("k", ("ret",)),
    "acl.rt.get_context": ("", ("context", "ret")),
    "acl.rt.create_stream": ("", ("stream", "ret")),
    "acl.rt.destroy_stream": ("k", ("ret",)),
    "acl.rt.synchronize_stream": ("k", ("ret",)),
    "acl.rt.synchronize_stream_with_timeout": ("ki", ("ret",)),
    "acl.rt.synchronize_device": ("", ("ret",)),
    "acl.rt.malloc": ("ki", ("dev_ptr", "ret")),
    "acl.rt.free": ("k", ("ret",)),
    "acl.rt.malloc_host": ("k", ("host_ptr", "ret")),
    "acl.rt.free_host": ("k", ("ret",)),
    "acl.rt.memset": ("kkik", ("ret",)),
    "acl.rt.memset_async": ("kkikk", ("ret",)),
    "acl.rt.memcpy": ("kkkki", ("ret",)),
    "acl.rt.memcpy_async": ("kkkkik", ("ret",)),
    "acl.rt.get_mem_info": ("i", ("free", "total", "ret")),
    "acl.rt.create_event": ("", ("event", "ret")),
    "acl.rt.record_event": ("kk", ("ret",)),
    "acl.rt.synchronize_event": ("k", ("ret",)),
    "acl.rt.destroy_event": ("k", ("ret",)),
    "acl.rt.event_elapsed_time": ("kk", ("ms", "ret")),
    # §4 model
    "acl.mdl.load_from_file": ("s", ("model_id", "ret")),
    "acl.mdl.load_from_mem": ("kk", ("model_id", "ret")),
    "acl.mdl.query_size": ("s", ("work_size", "weight_size", "ret")),
    "acl.mdl.unload": ("I", ("ret",)),
    "acl.mdl.create_desc": ("", ("model_desc",)),
    "acl.mdl.get_desc": ("kI", ("ret",)),
    "acl.mdl.destroy_desc": ("k", ("ret",)),
    "acl.mdl.get_num_inputs": ("k", ("n",)),
    "acl.mdl.get_num_outputs": ("k", ("n",)),
    "acl.mdl.get_input_size_by_index": ("kk", ("size",)),
    "acl.mdl.get_output_size_by_index": ("kk", ("size",)),
    "acl.mdl.get_input_dims": ("kk", ("dims", "ret")),
    "acl.mdl.get_input_dims_v2": ("kk", ("dims", "ret")),
    "acl.mdl.get_output_dims": ("kk", ("dims", "ret")),
    "acl.mdl.get_cur_output_dims": ("kk", ("dims", "ret")),
    "acl.mdl.get_input_name_by_index": ("kk", ("name",)),
    "acl.mdl.get_output_name_by_index": ("kk", ("name",)),
    "acl.mdl.get_input_index_by_name": ("ks", ("index", "ret")),
    "acl.mdl.get_output_index_by_name": ("ks", ("index", "ret")),
    "acl.mdl.get_input_format": ("kk", ("fmt",)),
    "acl.mdl.get_output_format": ("kk", ("fmt",)),
    "acl.mdl.get_input_data_type": ("kk", ("dt",)),
    "acl.mdl.get_output_data_type": ("kk", ("dt",)),
    "acl.mdl.get_dynamic_batch": ("k", ("batch_info", "ret")),
    "acl.mdl.get_dynamic_hw": ("kk", ("hw_info", "ret")),
    "acl.mdl.set_dynamic_batch_size": ("IkkK", ("ret",)),
    "acl.mdl.set_dynamic_hw_size": ("IkkKK", ("ret",)),
    "acl.mdl.get_input_dynamic_gear_count": ("kk", ("gear_count", "ret")),
    "acl.mdl.get_input_dynamic_dims": ("kkk", ("dims_list", "ret")),
    "acl.mdl.set_input_dynamic_dims": ("IkkO", ("ret",)),
    "acl.mdl.create_dataset": ("", ("dataset",)),
    "acl.mdl.destroy_dataset": ("k", ("ret",)),
    "acl.mdl.add_dataset_buffer": ("kk", ("dataset", "ret")),
    "acl.mdl.get_dataset_buffer": ("kk", ("data_buffer",)),
    "acl.mdl.get_dataset_num_buffers": ("k", ("n",)),
    "acl.mdl.execute": ("Ikk", ("ret",)),
    "acl.mdl.execute_async": ("Ikkk", ("ret",)),
    # §6 util
    "acl.util.ptr_to_bytes": ("kk", ("b",)),
    "acl.util.bytes_to_ptr": ("O", ("ptr",)),
}


def arity(fmt: str) -> tuple[int, int]:
    """(minimum, maximum) positional arguments of a PyArg_ParseTuple format."""
    letters = fmt.replace("|", "")
    return (fmt.index("|") if "|" in fmt else len(letters)), len(letters)


ENGINE_FILES = sorted(Path(acl_package.__file__).parent.glob("*.py"))
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
        return [f"{function} is not a pyACL function in pyacl.md"]
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
        return problems + [f"the result of {function} must be assigned: {spelled}"]
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
    } <= found


@pytest.mark.parametrize(
    "file, function, call, parent", ENGINE_CALLS, ids=[f"{f}:{c.lineno}:{fn}" for f, fn, c, _ in ENGINE_CALLS]
)
def test_engine_calls_follow_pyacl_md(file, function, call, parent):
    assert call_problems(function, call, parent) == [], f"{file}:{call.lineno}"


def test_the_scan_accepts_the_calls_pyacl_md_writes():
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
        ("ret = acl.mdl.get_num_inputs(desc)", "returns n, not ret"),
        ("context, ret = acl.rt.create_context(device_id=0)", "positional arguments only"),
        ("ptr, ret = acl.rt.malloc(size)", "takes 2..2 arguments, 1 given"),
        ("ptr, ret = acl.rt.malloc(*args)", "not with *"),
        ("check(acl, acl.rt.free(ptr))", "must be assigned"),
        ("ret = acl.rt.nope()", "not a pyACL function"),
    ],
)
def test_the_scan_reports_each_misuse(source, problem):
    found = scan(source)
    assert any(problem in p for p in found), found


def _result_kind(results: tuple[str, ...]) -> str:
    if len(results) > 1:
        return f"{len(results) - 1} output(s) + ret"
    return "ret" if results == ("ret",) else "value"


def test_simulator_signatures_agree_with_the_table():
    declared = signatures(Simulator().acl)
    engine_functions = {function for _, function, _, _ in ENGINE_CALLS}
    assert engine_functions <= set(declared), "the simulator lacks functions the engine calls"
    for function, signature in declared.items():
        assert function in CONTRACT, f"the simulator defines {function}, which pyacl.md does not list"
        fmt, results = CONTRACT[function]
        assert signature.fmt == fmt, f"{function}: the simulator parses {signature.fmt!r}, pyacl.md says {fmt!r}"
        if signature.value:
            kind = "value"
        elif signature.outputs is None:
            kind = "ret"
        else:
            kind = f"{len(signature.outputs)} output(s) + ret"
        assert kind == _result_kind(results), function


@pytest.mark.parametrize("function", sorted(CONTRACT))
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
