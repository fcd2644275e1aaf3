"""A model's inputs, outputs and gears, from MODEL_INOUT_INFO or else from MODEL_DEF graph 0.

Both sources follow GE's own ``ModelIntroduction`` rules (hicann/ge base/common/model/
model_introduction.cc 67-137 inputs, 138-222 outputs, 223-283 gears): inputs are the
Data ops ordered by their ``index`` attribute; an input's dims are ``_dynamic_aipp_input_dims``,
else ``_mbatch_origin_input_dims``, else its input_desc shape; outputs are the NetOutput op's
inputs, named by the model attribute ``attr_model_out_nodes_name`` when it has one entry per
output, else ``output_<i>_<src_name>_<src_index>``; gears come from the ``Case`` op.

Runtime-internal inputs are reported apart, never as client inputs: ``ascend_mbatch_shape_data``
(the gear selector) and the dynamic-AIPP parameter input (``ascend_dynamic_aipp_data``).
AIPP is read from the Data ops of MODEL_DEF graph 0 in both cases (MODEL_INOUT_INFO does not
carry it): an AIPP input is described by its buffer, as ``get_input_dims_v2`` reports it
(``input_dims``; hicann/ge base/common/model/model_introduction.cc:67-105), with its
``DevicePreprocessing``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ge_python_backend.ascend.aipp import DYNAMIC_AIPP_INPUT, AippConfig, AippMode
from ge_python_backend.ascend.om.aippinfo import (
    DYNAMIC_AIPP,
    DYNAMIC_AIPP_CONF,
    STATIC_AIPP,
    AippTensor,
    DataAipp,
    buffer_dims,
    data_aipp,
)
from ge_python_backend.ascend.om.enums import format_name, ge_type_name, proto_type_name, triton_type
from ge_python_backend.ascend.om.gears import BATCH, DIMS, HW, Gears
from ge_python_backend.ascend.om.inout import InoutInfo, InoutTensor
from ge_python_backend.ascend.om.modeldef import GraphDef, ModelDef, OpDef, TensorDesc
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import TensorSpec

DYNAMIC_SHAPE_INPUT = "ascend_mbatch_shape_data"
DATA_OP_TYPES = ("Data", "AippData", "AnnData")
_DYNAMIC_TYPES = {1: BATCH, 2: HW, 3: DIMS}
#: RuntimeInput roles (the names simom.InputRole uses)
DYNAMIC_SHAPE_ROLE, AIPP_DATA_ROLE = "dynamic_shape", "aipp_data"


@dataclass(frozen=True)
class RuntimeInput:
    """An input the runtime takes that no client sends: the gear selector or dynamic-AIPP parameters."""

    name: str
    #: position among all the model's inputs (the runtime's input index)
    index: int
    role: str
    #: aipp_data: the image input whose AIPP it configures ("" when the file does not say)
    image: str = ""


@dataclass(frozen=True)
class ModelIO:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    gears: Gears
    dynamic_input: str | None
    runtime_inputs: tuple[RuntimeInput, ...] = ()
    aipp: Mapping[str, AippConfig] = field(default_factory=dict)
    aipp_notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aipp_network: Mapping[str, AippTensor] = field(default_factory=dict)


def _tensor(name: str, native: str, shape: tuple[int, ...], layout: str) -> TensorSpec:
    return TensorSpec(name=name, dtype=triton_type(native), shape=shape, format=layout, native_type=native)


@dataclass(frozen=True)
class _Entry:
    """One model input before it is sorted into client and runtime inputs."""

    spec: TensorSpec  # V1 dims
    aipp: DataAipp
    dims_v2: tuple[int, ...] | None = None  # MODEL_INOUT_INFO's dimsV2


def _is_aipp_data(entry: _Entry) -> bool:
    name = entry.spec.name
    # old files without _data_related_aipp_mode: the runtime goes by the name
    # (hicann/ge api/acl/acl_model/model/acl_aipp.cpp:289-300)
    return (
        entry.aipp.mode == DYNAMIC_AIPP_CONF or name == DYNAMIC_AIPP_INPUT or name.startswith(DYNAMIC_AIPP_INPUT + "_")
    )


def _assemble(entries: list[_Entry], outputs: tuple[TensorSpec, ...], gears: Gears) -> ModelIO:
    by_name = {e.spec.name: e for e in entries}
    clients: list[TensorSpec] = []
    runtime: list[RuntimeInput] = []
    configs: dict[str, AippConfig] = {}
    notes: dict[str, tuple[str, ...]] = {}
    network: dict[str, AippTensor] = {}
    for index, entry in enumerate(entries):
        name, info = entry.spec.name, entry.aipp
        if name == DYNAMIC_SHAPE_INPUT:
            runtime.append(RuntimeInput(name, index, DYNAMIC_SHAPE_ROLE))
            continue
        if _is_aipp_data(entry):
            image = info.linked or next((e.spec.name for e in entries if e.aipp.linked == name), "")
            runtime.append(RuntimeInput(name, index, AIPP_DATA_ROLE, image))
            continue
        spec, config, found = _aipp_input(entry, by_name)
        clients.append(spec)
        if config is not None:
            configs[name] = config
        if found:
            notes[name] = found
        if info.network is not None and info.mode:
            network[name] = info.network
    dynamic_input = DYNAMIC_SHAPE_INPUT if DYNAMIC_SHAPE_INPUT in by_name else None
    return ModelIO(tuple(clients), outputs, gears, dynamic_input, tuple(runtime), configs, notes, network)


def _aipp_input(entry: _Entry, by_name: Mapping[str, _Entry]) -> tuple[TensorSpec, AippConfig | None, tuple[str, ...]]:
    """The client-facing spec of an input with AIPP: the buffer's V2 dims and its DevicePreprocessing."""
    spec, info = entry.spec, entry.aipp
    if info.mode not in (STATIC_AIPP, DYNAMIC_AIPP):
        return spec, None, ()
    notes = list(info.notes)
    config = info.config
    if config is None and info.mode == DYNAMIC_AIPP and info.linked in by_name:
        config = by_name[info.linked].aipp.config  # ATC writes the same attribute on the AippData op
    v2 = info.input_dims
    if v2 is None and entry.dims_v2 is not None and entry.dims_v2 != spec.shape:
        v2 = entry.dims_v2
    if config is None:
        notes.append(f"{info.mode} without an 'aipp' attribute: the AIPP config is not recorded")
        if info.mode == STATIC_AIPP:
            return replace(spec, shape=v2 if v2 is not None else spec.shape), None, tuple(notes)
        config = AippConfig(aipp_mode=AippMode.DYNAMIC)
    if v2 is None:
        v2 = buffer_dims(config, spec.shape) if config.aipp_mode is AippMode.STATIC else spec.shape
    return replace(spec, shape=v2, preprocessing=config.preprocessing()), config, tuple(notes)


def _data_ops_by_name(model: ModelDef | None) -> dict[str, OpDef]:
    if model is None or not model.graphs:
        return {}
    return {op.name: op for op in model.graphs[0].ops if op.type in DATA_OP_TYPES}


# ----- MODEL_INOUT_INFO


def io_from_inout(info: InoutInfo, model: ModelDef | None = None) -> ModelIO:
    """Inputs, outputs and gears from MODEL_INOUT_INFO; AIPP from ``model``'s graph 0 when given."""

    def spec(t: InoutTensor) -> TensorSpec:
        return _tensor(t.name, ge_type_name(t.dtype), t.dims, format_name(t.format))

    ops = _data_ops_by_name(model)
    entries = [_Entry(spec(t), data_aipp(ops[t.name]) if t.name in ops else DataAipp(), t.dims_v2) for t in info.inputs]
    kinds = [(BATCH, tuple((b,) for b in info.batch_gears)), (HW, info.hw_gears), (DIMS, info.dims_gears)]
    present = [(kind, values) for kind, values in kinds if values]
    if len(present) > 1:
        raise OmFormatError(
            f"MODEL_INOUT_INFO records gears of more than one kind ({', '.join(k for k, _ in present)})"
        )
    gears = Gears(*present[0], info.shape_order) if present else Gears()
    return _assemble(entries, tuple(spec(t) for t in info.outputs), gears)


# ----- MODEL_DEF


def io_from_model_def(model: ModelDef) -> ModelIO:
    if not model.graphs:
        raise OmFormatError(f"MODEL_DEF of model {model.name!r} has no graph")
    graph = model.graphs[0]
    entries = [_Entry(_data_input(op), data_aipp(op)) for op in _data_ops(graph)]
    return _assemble(entries, tuple(_outputs(graph, model)), _case_gears(graph))


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
