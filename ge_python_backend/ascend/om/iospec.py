"""A model's inputs, outputs and gears, from MODEL_INOUT_INFO or else from MODEL_DEF graph 0.

Both sources follow GE's own ``ModelIntroduction`` rules (om-format.md §2a): inputs are the
Data ops ordered by their ``index`` attribute; an input's dims are ``_dynamic_aipp_input_dims``,
else ``_mbatch_origin_input_dims``, else its input_desc shape; outputs are the NetOutput op's
inputs, named by the model attribute ``attr_model_out_nodes_name`` when it has one entry per
output, else ``output_<i>_<src_name>_<src_index>``; gears come from the ``Case`` op.
The runtime-internal ``ascend_mbatch_shape_data`` input is reported apart, not as an input.
"""

from __future__ import annotations

from dataclasses import dataclass

from ge_python_backend.ascend.om.enums import format_name, ge_type_name, proto_type_name, triton_type
from ge_python_backend.ascend.om.gears import BATCH, DIMS, HW, Gears
from ge_python_backend.ascend.om.inout import InoutInfo, InoutTensor
from ge_python_backend.ascend.om.modeldef import GraphDef, ModelDef, OpDef, TensorDesc
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import TensorSpec

DYNAMIC_SHAPE_INPUT = "ascend_mbatch_shape_data"
DATA_OP_TYPES = ("Data", "AippData", "AnnData")
_DYNAMIC_TYPES = {1: BATCH, 2: HW, 3: DIMS}


@dataclass(frozen=True)
class ModelIO:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    gears: Gears
    dynamic_input: str | None


def _tensor(name: str, native: str, shape: tuple[int, ...], layout: str) -> TensorSpec:
    return TensorSpec(name=name, dtype=triton_type(native), shape=shape, format=layout, native_type=native)


def _split_inputs(inputs: list[TensorSpec]) -> tuple[tuple[TensorSpec, ...], str | None]:
    user = tuple(t for t in inputs if t.name != DYNAMIC_SHAPE_INPUT)
    return user, (DYNAMIC_SHAPE_INPUT if len(user) != len(inputs) else None)


# ----- MODEL_INOUT_INFO


def io_from_inout(info: InoutInfo) -> ModelIO:
    def spec(t: InoutTensor) -> TensorSpec:
        return _tensor(t.name, ge_type_name(t.dtype), t.dims, format_name(t.format))

    inputs, dynamic_input = _split_inputs([spec(t) for t in info.inputs])
    kinds = [(BATCH, tuple((b,) for b in info.batch_gears)), (HW, info.hw_gears), (DIMS, info.dims_gears)]
    present = [(kind, values) for kind, values in kinds if values]
    if len(present) > 1:
        raise OmFormatError(
            f"MODEL_INOUT_INFO records gears of more than one kind ({', '.join(k for k, _ in present)})"
        )
    gears = Gears(*present[0], info.shape_order) if present else Gears()
    return ModelIO(inputs, tuple(spec(t) for t in info.outputs), gears, dynamic_input)


# ----- MODEL_DEF


def io_from_model_def(model: ModelDef) -> ModelIO:
    if not model.graphs:
        raise OmFormatError(f"MODEL_DEF of model {model.name!r} has no graph")
    graph = model.graphs[0]
    inputs, dynamic_input = _split_inputs([_data_input(op) for op in _data_ops(graph)])
    outputs = tuple(_outputs(graph, model))
    return ModelIO(inputs, outputs, _case_gears(graph), dynamic_input)


def _data_ops(graph: GraphDef) -> list[OpDef]:
    by_index: dict[int, OpDef] = {}
    counter = 0
    for op in graph.ops:
        if op.type not in DATA_OP_TYPES:
            continue
        index = op.attrs.get("index", counter)
        counter += 1
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise OmFormatError(f"{op.type} op {op.name!r}: attribute 'index' is {index!r}, expected an int >= 0")
        if index in by_index:
            raise OmFormatError(f"{op.type} ops {by_index[index].name!r} and {op.name!r} both have input index {index}")
        by_index[index] = op
    return [by_index[i] for i in sorted(by_index)]


def _first_desc(op: OpDef) -> TensorDesc:
    if not op.input_desc:
        raise OmFormatError(f"{op.type} op {op.name!r} has no input_desc")
    return op.input_desc[0]


def _int_list_attr(op: OpDef, name: str) -> tuple[int, ...] | None:
    value = op.attrs.get(name)
    if value is None:
        return None
    if not isinstance(value, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        raise OmFormatError(f"{op.type} op {op.name!r}: attribute {name!r} is {value!r:.80}, expected a list of ints")
    return value


def _data_input(op: OpDef) -> TensorSpec:
    desc = _first_desc(op)
    dims = _int_list_attr(op, "_dynamic_aipp_input_dims")
    if dims is None:
        dims = _int_list_attr(op, "_mbatch_origin_input_dims")
    return _tensor(op.name, proto_type_name(desc.dtype), desc.shape if dims is None else dims, desc.layout)


def _outputs(graph: GraphDef, model: ModelDef):
    out_names = model.attrs.get("attr_model_out_nodes_name")
    for op in graph.ops:
        if op.type != "NetOutput":
            continue
        count = len(op.input_desc)
        if len(op.src_name) < count or len(op.src_index) < count:
            raise OmFormatError(
                f"NetOutput op {op.name!r} has {count} inputs but {len(op.src_name)} src_name and "
                f"{len(op.src_index)} src_index entries"
            )
        for i, desc in enumerate(op.input_desc):
            if isinstance(out_names, tuple) and len(out_names) == count:
                name = str(out_names[i])
                name = name if ":" in name else f"{name}:{op.src_index[i]}"
            else:
                name = f"output_{i}_{op.src_name[i]}_{op.src_index[i]}"
            shape = desc.shape
            if desc.layout == "FRACTAL_Z" and len(shape) == 4:  # GE reports these as HWCK
                k, c, h, w = shape
                shape = (h, w, c, k)
            yield _tensor(name, proto_type_name(desc.dtype), shape, desc.layout)


def _case_gears(graph: GraphDef) -> Gears:
    cases = [op for op in graph.ops if op.type == "Case"]
    if not cases:
        return Gears()
    case = cases[-1]  # GE keeps the last Case op it meets
    count = case.attrs.get("_batch_num")
    if count is None:
        return Gears()
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise OmFormatError(f"Case op {case.name!r}: _batch_num is {count!r}, expected a gear count")
    values = []
    for i in range(count):
        gear = _int_list_attr(case, f"_pred_value_{i}")
        if gear is None:
            raise OmFormatError(f"Case op {case.name!r}: _batch_num is {count} but _pred_value_{i} is missing")
        values.append(gear)
    dynamic_type = case.attrs.get("mbatch_dynamic_type", -1)
    if dynamic_type == -1:
        return Gears()
    if dynamic_type not in _DYNAMIC_TYPES:
        raise OmFormatError(
            f"Case op {case.name!r}: mbatch_dynamic_type is {dynamic_type!r}, "
            "expected 1 (batch), 2 (image size) or 3 (dims)"
        )
    order = case.attrs.get("user_designate_shape_order", ())
    if not isinstance(order, tuple) or not all(isinstance(n, str) for n in order):
        raise OmFormatError(f"Case op {case.name!r}: user_designate_shape_order is {order!r:.80}, expected names")
    # int(): the membership test also passes a bool or float equal to a key (True, 2.0), which int() maps onto it
    return Gears(_DYNAMIC_TYPES[int(dynamic_type)], tuple(values), order)
