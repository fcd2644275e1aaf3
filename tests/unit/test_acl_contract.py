"""The engine and the simulator against the pyACL contract, with a table written from pyacl.md.

CONTRACT lists, for each pyACL function, the number of positional arguments and the number of
names its result unpacks into (1 for ``ret`` alone or a plain value; ``outputs + ret`` for tuples),
copied from pyacl.md §2-§6 by hand. The engine's source is scanned with ``ast`` for every call
through the acl module object, so the engine cannot drift from pyacl.md; the simulator's declared
signatures are checked against the same table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ge_python_backend.engines as engines_package
from ge_python_backend.sim import Simulator
from ge_python_backend.sim.api import signatures

#: function -> ((min args, max args), result names). From pyacl.md, not from the simulator.
CONTRACT: dict[str, tuple[tuple[int, int], int]] = {
    # §2 top level
    "acl.init": ((0, 1), 1),
    "acl.finalize": ((0, 0), 1),
    "acl.get_recent_err_msg": ((0, 0), 1),
    "acl.get_version": ((0, 0), 4),
    "acl.get_soc_name": ((0, 0), 1),
    "acl.create_data_buffer": ((2, 2), 1),
    "acl.destroy_data_buffer": ((1, 1), 1),
    "acl.get_data_buffer_addr": ((1, 1), 1),
    "acl.get_data_buffer_size": ((1, 1), 1),
    "acl.get_data_buffer_size_v2": ((1, 1), 1),
    "acl.update_data_buffer": ((3, 3), 1),
    "acl.data_type_size": ((1, 1), 1),
    # §3 runtime
    "acl.rt.set_device": ((1, 1), 1),
    "acl.rt.reset_device": ((1, 1), 1),
    "acl.rt.get_device": ((0, 0), 2),
    "acl.rt.get_device_count": ((0, 0), 2),
    "acl.rt.get_run_mode": ((0, 0), 2),
    "acl.rt.create_context": ((1, 1), 2),
    "acl.rt.destroy_context": ((1, 1), 1),
    "acl.rt.set_context": ((1, 1), 1),
    "acl.rt.get_context": ((0, 0), 2),
    "acl.rt.create_stream": ((0, 0), 2),
    "acl.rt.destroy_stream": ((1, 1), 1),
    "acl.rt.synchronize_stream": ((1, 1), 1),
    "acl.rt.synchronize_stream_with_timeout": ((2, 2), 1),
    "acl.rt.synchronize_device": ((0, 0), 1),
    "acl.rt.malloc": ((2, 2), 2),
    "acl.rt.free": ((1, 1), 1),
    "acl.rt.malloc_host": ((1, 1), 2),
    "acl.rt.free_host": ((1, 1), 1),
    "acl.rt.memset": ((4, 4), 1),
    "acl.rt.memset_async": ((5, 5), 1),
    "acl.rt.memcpy": ((5, 5), 1),
    "acl.rt.memcpy_async": ((6, 6), 1),
    "acl.rt.get_mem_info": ((1, 1), 3),
    "acl.rt.create_event": ((0, 0), 2),
    "acl.rt.record_event": ((2, 2), 1),
    "acl.rt.synchronize_event": ((1, 1), 1),
    "acl.rt.destroy_event": ((1, 1), 1),
    "acl.rt.event_elapsed_time": ((2, 2), 2),
    # §4 model
    "acl.mdl.load_from_file": ((1, 1), 2),
    "acl.mdl.load_from_mem": ((2, 2), 2),
    "acl.mdl.query_size": ((1, 1), 3),
    "acl.mdl.unload": ((1, 1), 1),
    "acl.mdl.create_desc": ((0, 0), 1),
    "acl.mdl.get_desc": ((2, 2), 1),
    "acl.mdl.destroy_desc": ((1, 1), 1),
    "acl.mdl.get_num_inputs": ((1, 1), 1),
    "acl.mdl.get_num_outputs": ((1, 1), 1),
    "acl.mdl.get_input_size_by_index": ((2, 2), 1),
    "acl.mdl.get_output_size_by_index": ((2, 2), 1),
    "acl.mdl.get_input_dims": ((2, 2), 2),
    "acl.mdl.get_input_dims_v2": ((2, 2), 2),
    "acl.mdl.get_output_dims": ((2, 2), 2),
    "acl.mdl.get_cur_output_dims": ((2, 2), 2),
    "acl.mdl.get_input_name_by_index": ((2, 2), 1),
    "acl.mdl.get_output_name_by_index": ((2, 2), 1),
    "acl.mdl.get_input_index_by_name": ((2, 2), 2),
    "acl.mdl.get_output_index_by_name": ((2, 2), 2),
    "acl.mdl.get_input_format": ((2, 2), 1),
    "acl.mdl.get_output_format": ((2, 2), 1),
    "acl.mdl.get_input_data_type": ((2, 2), 1),
    "acl.mdl.get_output_data_type": ((2, 2), 1),
    "acl.mdl.get_dynamic_batch": ((1, 1), 2),
    "acl.mdl.get_dynamic_hw": ((2, 2), 2),
    "acl.mdl.set_dynamic_batch_size": ((4, 4), 1),
    "acl.mdl.set_dynamic_hw_size": ((5, 5), 1),
    "acl.mdl.get_input_dynamic_gear_count": ((2, 2), 2),
    "acl.mdl.get_input_dynamic_dims": ((3, 3), 2),
    "acl.mdl.set_input_dynamic_dims": ((4, 4), 1),
    "acl.mdl.create_dataset": ((0, 0), 1),
    "acl.mdl.destroy_dataset": ((1, 1), 1),
    "acl.mdl.add_dataset_buffer": ((2, 2), 2),
    "acl.mdl.get_dataset_buffer": ((2, 2), 1),
    "acl.mdl.get_dataset_num_buffers": ((1, 1), 1),
    "acl.mdl.execute": ((3, 3), 1),
    "acl.mdl.execute_async": ((4, 4), 1),
    # §6 util
    "acl.util.ptr_to_bytes": ((2, 2), 1),
    "acl.util.bytes_to_ptr": ((1, 1), 1),
}

ENGINE_FILES = sorted(Path(engines_package.__file__).parent.glob("acl*.py"))
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


def acl_calls(path: Path) -> list[tuple[str, ast.Call, ast.AST]]:
    """(pyACL function, call node, parent statement) for every call through the acl module object."""
    tree = ast.parse(path.read_text(), str(path))
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
            found.append(("acl." + ".".join(chain[roots[-1] + 1:]), node, parents[node]))
    return found


def _unpacked_names(call: ast.Call, parent: ast.AST) -> int | None:
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is call:
        target = parent.targets[0]
        return len(target.elts) if isinstance(target, ast.Tuple) else 1
    return None


ENGINE_CALLS = [(path.name, function, call, parent) for path in ENGINE_FILES for function, call, parent in acl_calls(path)]


def test_the_scan_finds_the_engine_calls():
    found = {function for _, function, _, _ in ENGINE_CALLS}
    assert {"acl.init", "acl.rt.memcpy_async", "acl.mdl.execute_async", "acl.rt.event_elapsed_time",
            "acl.mdl.set_dynamic_batch_size", "acl.get_recent_err_msg", "acl.finalize"} <= found


@pytest.mark.parametrize("file, function, call, parent", ENGINE_CALLS,
                         ids=[f"{f}:{c.lineno}:{fn}" for f, fn, c, _ in ENGINE_CALLS])
def test_engine_calls_follow_pyacl_md(file, function, call, parent):
    assert function in CONTRACT, f"{file}:{call.lineno}: {function} is not a pyACL function in pyacl.md"
    (low, high), results = CONTRACT[function]
    assert not call.keywords, f"{file}:{call.lineno}: {function} takes positional arguments only"
    assert not any(isinstance(a, ast.Starred) for a in call.args)
    assert low <= len(call.args) <= high, f"{file}:{call.lineno}: {function} takes {low}..{high} arguments"
    names = _unpacked_names(call, parent)
    assert names == results, (f"{file}:{call.lineno}: the result of {function} must be assigned to "
                              f"{results} name(s), found {names}")


def test_simulator_signatures_agree_with_the_table():
    declared = signatures(Simulator().acl)
    engine_functions = {function for _, function, _, _ in ENGINE_CALLS}
    assert engine_functions <= set(declared), "the simulator lacks functions the engine calls"
    for function, signature in declared.items():
        assert function in CONTRACT, f"the simulator defines {function}, which pyacl.md does not list"
        (low, high), results = CONTRACT[function]
        assert signature.arity == (low, high), function
        assert signature.result_count == results, function


@pytest.mark.parametrize("function", sorted(CONTRACT))
def test_simulator_refuses_keywords_and_wrong_counts(function):
    acl = Simulator().acl
    target = acl
    for part in function.split(".")[1:]:
        target = getattr(target, part)
    (low, high), _ = CONTRACT[function]
    with pytest.raises(TypeError):
        target(*([0] * low), bogus=1)
    with pytest.raises(TypeError):
        target(*([0] * (high + 1)))
