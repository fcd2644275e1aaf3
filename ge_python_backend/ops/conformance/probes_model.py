"""Load, description, gears, shape ranges and execute (fidelity.md sections 5-8 and 10).

The claims about each model come from its ATC flags in ``build.py`` (the dims layout computed from
``--input_shape`` and ``--dynamic_dims`` here, independently of the engine's code) and from the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ACL_SUCCESS
from ge_python_backend.engines.offline import model_resources
from ge_python_backend.ops.conformance.build import STATIC_ROWS
from ge_python_backend.ops.conformance.probes import UNKNOWN, Loaded, ProbeContext, Skip, close, plain, probe, raised

INVALID_PARAM = 100000
GE_PARAM_INVALID = 145000
DYNAMIC_LENGTH, NOT_A_GEAR = 145012, 145013
NOT_SUPPORTED_ON_RT2 = 200001
RESERVED = -1 & 0xFFFFFFFFFFFFFFFF  # (size_t)-1, the index the gear lookups take
GE_FAILURE = 500002
MODEL_EXECUTE = 507011
FLOAT, FLOAT16 = 0, 1
ND = 2


def execute(context: ProbeContext, loaded: Loaded, inputs: Any, outputs: Any) -> int:
    return context.acl.mdl.execute(loaded.model_id, inputs.handle, outputs.handle)


def dims_gears(input_shape: str, gears: str) -> list[list[int]]:
    """What get_input_dynamic_dims lists for an ATC dims model: per gear, the full dims of every input
    named in ``--input_shape``, in that order, each -1 replaced by the gear's next value (row 58)."""
    found = []
    for gear in gears.split(";"):
        values = iter(int(v) for v in gear.split(","))
        dims: list[int] = []
        for entry in input_shape.split(";"):
            dims += [next(values) if d == "-1" else int(d) for d in entry.split(":")[1].split(",")]
        found.append(dims)
    return found


# --- load -------------------------------------------------------------------------------------------


@probe("P-query-size", "41", "query_size of a shape-range model: work 0 and its weights")
def query_size(context: ProbeContext) -> None:
    work, weight, ret = context.acl.mdl.query_size(str(context.model("range")))
    context.expect("ret", ret, 0)
    context.expect("work", work, 0)
    context.expect("weight > 0", weight > 0, True)


@probe("P-shared-weights", "42, 45", "two loads over one weight buffer run on two streams as ONNX Runtime does")
def shared_weights(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    path = str(context.model("static"))
    work, weight, ret = acl.mdl.query_size(path)
    context.need(ret, "acl.mdl.query_size")
    weights = context.malloc(max(weight, 1))
    results = []
    for copy in range(2):
        work_memory = context.malloc(work) if work else 0
        model_id, ret = acl.mdl.load_from_file_with_mem(path, work_memory, work, weights, weight)
        context.expect(f"load_from_file_with_mem (copy {copy})", ret, 0)
        if ret != ACL_SUCCESS:
            return
        context.at_exit("acl.mdl.unload", acl.mdl.unload, model_id)
        loaded = Loaded(model_id, context.desc_of(model_id), context.model("static"))
        inputs, outputs = context.io(loaded)
        x = np.random.default_rng(copy).standard_normal((STATIC_ROWS, 4)).astype(np.float32)
        context.write(inputs.addresses[0], x)
        stream = context.stream()
        context.need(acl.mdl.execute_async(model_id, inputs.handle, outputs.handle, stream), "acl.mdl.execute_async")
        results.append((x, outputs, stream))
    for copy, (x, outputs, stream) in enumerate(results):
        context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
        y = context.read(outputs.addresses[0], np.float32, (STATIC_ROWS, 3))
        context.expect(
            f"copy {copy} answers as ONNX Runtime", close(y, context.reference("static", {"x": x})["y"]), True
        )


@probe("P-weight-short", "43", "an OM1 load over a weight buffer one byte short: 145000")
def weight_short(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    path = str(context.model("static"))
    work, weight, ret = acl.mdl.query_size(path)
    context.need(ret, "acl.mdl.query_size")
    if weight < 2:
        raise Skip(f"the model's weights take {weight} byte(s)")
    work_memory, weights = (context.malloc(work) if work else 0), context.malloc(weight)
    model_id, ret = acl.mdl.load_from_file_with_mem(path, work_memory, work, weights, weight - 1)
    context.keep(ret, "acl.mdl.unload", acl.mdl.unload, model_id)
    context.expect("load_from_file_with_mem(weight - 1)", ret, GE_PARAM_INVALID)


@probe("P-weight-short-range", "43a", "an RT2 load over a weight buffer one byte short loads, with weights of its own")
def weight_short_range(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    path = str(context.model("range"))
    _, weight, ret = acl.mdl.query_size(path)
    context.need(ret, "acl.mdl.query_size")
    weights = context.malloc(max(weight - 1, 1))
    model_id, ret = acl.mdl.load_from_file_with_mem(path, 0, 0, weights, weight - 1)
    context.keep(ret, "acl.mdl.unload", acl.mdl.unload, model_id)
    context.expect("load_from_file_with_mem(range model, weight - 1)", ret, 0)


@probe("P-soc-foreign", "48a", "a model compiled for a SoC of another NpuArch is refused at load")
def soc_foreign(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    path = context.model("foreign")
    model_id, ret = acl.mdl.load_from_file(str(path))
    context.keep(ret, "acl.mdl.unload", acl.mdl.unload, model_id)
    context.expect(
        f"load_from_file(compiled for {context.models.models['foreign'].soc})",
        ret,
        GE_FAILURE,
        note="PARAM_INVALID mapped by ACL_GET_ERRCODE_GE: the code is inferred, the refusal is in the source",
    )


@probe("P-rt2-load-stream", "35a", "an RT2 load needs one stream more than it keeps, while it runs", exhausts=True)
def rt2_load_stream(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    if not hasattr(acl.rt, "get_stream_available_num"):
        raise Skip("this pyACL has no acl.rt.get_stream_available_num")
    streams = model_resources(context.model("range")).streams
    while True:
        available, ret = acl.rt.get_stream_available_num()
        context.need(ret, "acl.rt.get_stream_available_num")
        if available <= streams:
            break
        context.stream()
    model_id, ret = acl.mdl.load_from_file(str(context.model("range")))
    context.keep(ret, "acl.mdl.unload", acl.mdl.unload, model_id)
    context.expect(f"load of a range model with {available} stream(s) free", ret, 207008)


# --- the description ------------------------------------------------------------------------------


@probe("P-dims-batch", "49", "V1 and V2 dims of a batch model's input show -1 on the batch axis")
def dims_batch(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("batch")
    v1, v2 = context.input_dims(loaded, 0)
    context.expect("V1 dims", v1, [-1, 4])
    context.expect("V2 dims", v2, [-1, 4])


@probe("P-sizes", "51", "input sizes: the shape's bytes, a batch model's largest gear, a range's upper bounds")
def sizes(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    for name, size in (("static", STATIC_ROWS * 4 * 4), ("batch", 4 * 4 * 4), ("range", 8 * 4 * 4)):
        loaded = context.load(name)
        context.expect(f"{name}: get_input_size_by_index(0)", acl.mdl.get_input_size_by_index(loaded.desc, 0), size)


@probe("P-mbatch-input", "52", "a gear model's extra input ascend_mbatch_shape_data comes after the user inputs")
def mbatch_input(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    for name, users, values in (("batch", 1, 1), ("hw", 1, 2), ("dims", 3, 3)):
        loaded = context.load(name)
        index, ret = acl.mdl.get_input_index_by_name(loaded.desc, ACL_DYNAMIC_TENSOR_NAME)
        context.expect(f"{name}: its index", [index, ret], [users, 0])
        if ret == ACL_SUCCESS:
            context.expect(f"{name}: its data type (INT32)", acl.mdl.get_input_data_type(loaded.desc, index), 3)
            dims, _ = acl.mdl.get_input_dims(loaded.desc, index)
            context.expect(f"{name}: its dims", dims.get("dims"), [values])


@probe("P-index-missing-name", "53", "get_input_index_by_name of a missing name returns 100000")
def missing_name(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("static")
    _, ret = context.acl.mdl.get_input_index_by_name(loaded.desc, ACL_DYNAMIC_TENSOR_NAME)
    context.expect("on a static model", ret, INVALID_PARAM)


@probe("P-types", "54", "aclDataType of an FP32 input and an FP16 output; the input's aclFormat")
def types(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("static")
    context.expect("input x (FP32)", acl.mdl.get_input_data_type(loaded.desc, 0), FLOAT)
    context.expect("output h (FP16)", acl.mdl.get_output_data_type(loaded.desc, 1), FLOAT16)
    context.expect("input x's format (--input_format=ND)", acl.mdl.get_input_format(loaded.desc, 0), ND)


@probe("P-desc-failure", "55", "a desc getter that fails returns ({}, ret)")
def desc_failure(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("static")
    dims, ret = context.acl.mdl.get_input_dims(loaded.desc, 99)
    context.expect("get_input_dims(desc, 99)", [dims, ret], [{}, INVALID_PARAM])


# --- gears ----------------------------------------------------------------------------------------


@probe(
    "P-gear-lookups", "56, 57", "gear lookups of a kind the model lacks answer empty; a non-reserved index is 100000"
)
def gear_lookups(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("dims")
    found, ret = acl.mdl.get_dynamic_batch(loaded.desc)
    context.expect("get_dynamic_batch on a dims model", [found.get("batchCount"), found.get("batch"), ret], [0, [], 0])
    batch = context.load("batch")
    found, ret = acl.mdl.get_dynamic_batch(batch.desc)
    context.expect("get_dynamic_batch on the batch model", [found.get("batch"), ret], [[1, 2, 4], 0])
    hw = context.load("hw")
    found, ret = acl.mdl.get_dynamic_hw(hw.desc, 0)
    context.expect("get_dynamic_hw on the hw model", [found.get("hw"), ret], [[[6, 8], [10, 12]], 0])
    count, ret = acl.mdl.get_input_dynamic_gear_count(loaded.desc, 0)
    context.expect("get_input_dynamic_gear_count(desc, 0)", [count, ret], [0, INVALID_PARAM])


@probe("P-static-beside-batch", "136", "batch gears beside a static input: its dims stay [2, 3]; the gears are 1, 2, 4")
def static_beside_batch(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("static_batch")
    for name, dims in (("s", [2, 3]), ("b", [-1, 6]), ("a", [-1, 4])):
        v1, _ = context.input_dims(loaded, context.input_index(loaded, name))
        context.expect(f"V1 dims of {name}", v1, dims)
    found, ret = context.acl.mdl.get_dynamic_batch(loaded.desc)
    context.expect("get_dynamic_batch", [found.get("batch"), ret], [[1, 2, 4], 0])


@probe("P-dims-layout", "58, 59", "get_input_dynamic_dims lists each gear as the full dims in --input_shape order")
def dims_layout(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("dims")
    flags = context.models.models["dims"].recipe.flags
    count, ret = acl.mdl.get_input_dynamic_gear_count(loaded.desc, RESERVED)
    context.expect("gear count", [count, ret], [3, 0])
    gears, ret = acl.mdl.get_input_dynamic_dims(loaded.desc, RESERVED, 3)
    listed = [g.get("dims")[: g.get("dimCount", 0)] for g in gears] if gears else gears
    context.expect("the gears", [listed, ret], [dims_gears(flags.input_shape, flags.dynamic_dims), 0])


@probe("P-dims-binding", "60", "get_input_dynamic_dims with gear_count 4097 returns (None, 100000)")
def dims_binding(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("dims")
    dims, ret = context.acl.mdl.get_input_dynamic_dims(loaded.desc, RESERVED, 4097)
    context.expect("(dims, ret)", [dims, ret], [None, INVALID_PARAM])


@probe(
    "P-set-batch", "61", "set_dynamic_batch_size: 3 on gears 1,2,4 and any batch on a static model: 145013; 0: 100000"
)
def set_batch(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("batch")
    inputs, _ = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    context.expect("batch 3", acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, 3), NOT_A_GEAR)
    context.expect("batch 0", acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, 0), INVALID_PARAM)
    context.expect("batch 4", acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, 4), 0)
    static = context.load("static")
    static_inputs, _ = context.io(static)
    ret = acl.mdl.set_dynamic_batch_size(static.model_id, static_inputs.handle, 0, 2)
    context.expect("a static model (not 100019)", ret, NOT_A_GEAR)


@probe("P-set-batch-length-first", "61a", "a 2-byte gear buffer is 145012, also on a model without batch gears")
def set_batch_length_first(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    batch = context.load("batch")
    index = context.input_index(batch, ACL_DYNAMIC_TENSOR_NAME)
    inputs, _ = context.io(batch, {("input", index): 2})
    ret = acl.mdl.set_dynamic_batch_size(batch.model_id, inputs.handle, index, 2)
    context.expect("batch model, a 2-byte ascend_mbatch_shape_data buffer", ret, DYNAMIC_LENGTH)
    static = context.load("static")
    tiny = context.dataset([2])
    ret = acl.mdl.set_dynamic_batch_size(static.model_id, tiny.handle, 0, 2)
    context.expect("static model, a 2-byte buffer (145013 when the length is long enough)", ret, DYNAMIC_LENGTH)


@probe("P-set-hw", "62", "set_dynamic_hw_size of a size that is not a gear: 145013")
def set_hw(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("hw")
    inputs, _ = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    context.expect("6 x 12", acl.mdl.set_dynamic_hw_size(loaded.model_id, inputs.handle, index, 6, 12), NOT_A_GEAR)
    context.expect("10 x 12", acl.mdl.set_dynamic_hw_size(loaded.model_id, inputs.handle, index, 10, 12), 0)


@probe("P-set-dims", "63, 64", "set_input_dynamic_dims: a changed static value is 145012; a tuple of dims a TypeError")
def set_dims(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("dims")
    inputs, _ = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    flags = context.models.models["dims"].recipe.flags
    gear = dims_gears(flags.input_shape, flags.dynamic_dims)[1]
    wrong = [gear[0] + 1, *gear[1:]]  # s is 2,3 in every gear
    ret = acl.mdl.set_input_dynamic_dims(loaded.model_id, inputs.handle, index, {"dimCount": len(wrong), "dims": wrong})
    context.expect("a static value changed", ret, DYNAMIC_LENGTH)
    ret = acl.mdl.set_input_dynamic_dims(loaded.model_id, inputs.handle, index, {"dimCount": len(gear), "dims": gear})
    context.expect("gear 2", ret, 0)
    setter = acl.mdl.set_input_dynamic_dims
    as_tuple = {"dimCount": len(gear), "dims": tuple(gear)}
    context.expect(
        "dims as a tuple", raised(lambda: setter(loaded.model_id, inputs.handle, index, as_tuple)), "TypeError"
    )


def _run_batch(context: ProbeContext, loaded: Loaded, inputs: Any, outputs: Any, x: np.ndarray) -> np.ndarray:
    """``x`` (rows x 4) into the batch model's input, execute, output y (rows x 3)."""
    context.write(inputs.addresses[0], x)
    context.need(execute(context, loaded, inputs, outputs), "acl.mdl.execute")
    return context.read(outputs.addresses[0], np.float32, (x.shape[0], 3))


@probe("P-gear-persists", "66", "a gear set once serves three executes of the same dataset")
def gear_persists(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("batch")
    inputs, outputs = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    context.need(acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, 4), "set_dynamic_batch_size")
    rng = np.random.default_rng(66)
    for run in range(3):
        x = rng.standard_normal((4, 4)).astype(np.float32)
        y = _run_batch(context, loaded, inputs, outputs, x)
        context.expect(
            f"execute {run + 1} answers as ONNX Runtime", close(y, context.reference("batch", {"x": x})["y"]), True
        )


@probe("P-cur-output-dims", "67", "get_cur_output_dims follows the gear set, without executing; 200001 on RT2")
def cur_output_dims(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("batch")
    inputs, _ = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    for batch in (1, 2, 4):
        context.need(
            acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, batch), "set_dynamic_batch_size"
        )
        dims, ret = acl.mdl.get_cur_output_dims(loaded.desc, 0)
        context.expect(f"output y at batch {batch}", [dims.get("dims"), ret], [[batch, 3], 0])
    ranged = context.load("range")
    _, ret = acl.mdl.get_cur_output_dims(ranged.desc, 0)
    context.expect("on a shape-range model", ret, NOT_SUPPORTED_ON_RT2)


@probe("P-no-gear-set", "68", "executing a batch model whose gear input was never set")
def no_gear_set(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("batch")
    inputs, outputs = context.io(loaded)
    ret = execute(context, loaded, inputs, outputs)
    context.expect(
        "execute without a set call", ret, UNKNOWN, simulated=MODEL_EXECUTE, note="ATC docs: the largest gear"
    )


# --- shape ranges ---------------------------------------------------------------------------------


@probe("P-dims-range", "71, 72", "get_input_dims_range of x:1~8,4 and of x:-1,4")
def dims_range(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    for name, ranges in (("range", [[1, 8], [4, 4]]), ("range_unbounded", [[0, -1], [4, 4]])):
        loaded = context.load(name)
        found, ret = acl.mdl.get_input_dims_range(loaded.desc, 0)
        context.expect(f"{name}", [found.get("rangeCount"), found.get("range"), ret], [2, ranges, 0])
    batch = context.load("batch")
    found, ret = acl.mdl.get_input_dims_range(batch.desc, 0)
    context.expect("a gear model's rangeCount", [found.get("rangeCount"), ret], [0, 0])


@probe("P-dims-v2-range", "72a", "on RT2, V2 dims of an input without AIPP are its Data's shape (V1 for ND)")
def dims_v2_range(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("range")
    v1, v2 = context.input_dims(loaded, 0)
    context.expect("V2 dims", v2, v1)


@probe("P-size-unbounded", "73", "get_input/output_size_by_index of an unbounded range is 0")
def size_unbounded(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("range_unbounded")
    context.expect("input x", acl.mdl.get_input_size_by_index(loaded.desc, 0), 0)
    context.expect("output y", acl.mdl.get_output_size_by_index(loaded.desc, 0), 0)


@probe("P-tensor-desc-tuple", "74", "create_tensor_desc takes a list: a tuple of dims is a TypeError")
def tensor_desc_tuple(context: ProbeContext) -> None:
    create = context.acl.create_tensor_desc
    context.expect("create_tensor_desc(0, (1, 2), 2)", raised(lambda: create(FLOAT, (1, 2), ND)), "TypeError")


def _range_io(context: ProbeContext, rows: int, out_bytes: int | None = None) -> tuple[Loaded, Any, Any]:
    """The range model with a batch of ``rows`` set on its input dataset."""
    loaded = context.load("range")
    sizes = {} if out_bytes is None else {("output", 0): out_bytes}
    inputs, outputs = context.io(loaded, sizes)
    desc = context.tensor_desc(FLOAT, [rows, 4], ND)
    _, ret = context.acl.mdl.set_dataset_tensor_desc(inputs.handle, desc, 0)
    context.need(ret, "acl.mdl.set_dataset_tensor_desc")
    return loaded, inputs, outputs


def _output_shape(context: ProbeContext, outputs: Any, index: int) -> list[int]:
    acl = context.acl
    desc = acl.mdl.get_dataset_tensor_desc(outputs.handle, index)
    if not desc:
        return []
    dims = []
    for axis in range(acl.get_tensor_desc_num_dims(desc)):
        dim, ret = acl.get_tensor_desc_dim_v2(desc, axis)
        context.need(ret, "acl.get_tensor_desc_dim_v2")
        dims.append(int(dim))
    return dims


@probe("P-range-run", "75, 77", "a range model at two batch sizes: the output descs carry each run's shape")
def range_run(context: ProbeContext) -> None:
    context.open_device()
    rng = np.random.default_rng(77)
    for rows in (3, 8):
        loaded, inputs, outputs = _range_io(context, rows)
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        context.write(inputs.addresses[0], x)
        context.need(execute(context, loaded, inputs, outputs), "acl.mdl.execute")
        context.expect(f"batch {rows}: output y's desc", _output_shape(context, outputs, 0), [rows, 3])
        y = context.read(outputs.addresses[0], np.float32, (rows, 3))
        context.expect(
            f"batch {rows} answers as ONNX Runtime", close(y, context.reference("range", {"x": x})["y"]), True
        )


@probe("P-range-outside", "76", "a desc of batch 9 on a 1~8 model: 100000 at execute")
def range_outside(context: ProbeContext) -> None:
    context.open_device()
    loaded, inputs, outputs = _range_io(context, 9)
    context.expect("execute", execute(context, loaded, inputs, outputs), INVALID_PARAM)


@probe("P-range-output-short", "78, 102", "a range model's 4-byte output buffer: execute_async fails with 500002")
def range_output_short(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    stream = context.stream()
    loaded, inputs, outputs = _range_io(context, 8, out_bytes=4)
    ret = acl.mdl.execute_async(loaded.model_id, inputs.handle, outputs.handle, stream)
    context.expect("execute_async", ret, GE_FAILURE)
    context.expect("synchronize_stream after it", acl.rt.synchronize_stream(stream), 0)


@probe("P-input-short", "99", "a static model's input buffer 32 bytes short")
def input_short(context: ProbeContext) -> None:
    context.open_device()
    loaded = context.load("static")
    size = context.acl.mdl.get_input_size_by_index(loaded.desc, 0)
    if size <= 32:
        raise Skip(f"the input has only {size} bytes")
    inputs, outputs = context.io(loaded, {("input", 0): size - 32})
    ret = execute(context, loaded, inputs, outputs)
    context.expect("execute", ret, 0, simulated=100017, note="GE allows 64 bytes short; the simulator refuses any")


@probe("P-execute-shape", "98", "execute_async returns ret only (the GIL is kept: a benchmark matter)")
def execute_shape(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    stream = context.stream()
    loaded = context.load("static")
    inputs, outputs = context.io(loaded)
    context.write(inputs.addresses[0], np.ones((STATIC_ROWS, 4), np.float32))
    result = acl.mdl.execute_async(loaded.model_id, inputs.handle, outputs.handle, stream)
    context.expect("execute_async's result", plain(result), 0)
    context.need(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
