"""What a loaded model is, read once from its pyACL model description.

``read_description`` asks the runtime for every input and output (names, types, formats, V1 and V2 dims,
sizes, shape ranges, AIPP), finds the runtime's own inputs (``ascend_mbatch_shape_data``, the
dynamic-AIPP parameter inputs), reads the gears and returns the ``ModelDescription`` every slot of an
engine shares. Calls and their sources are listed in docs/fidelity.md.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode
from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ACL_SUCCESS, data_type, format_name
from ge_python_backend.ascend.layout import GearKind, LayoutTensor, ModelLayout, Shape
from ge_python_backend.engines.acl.runtime import AclError, check, recent_message
from ge_python_backend.errors import ConfigError, OmFormatError
from ge_python_backend.specs import UNBOUNDED

LOG = logging.getLogger(__name__)

#: get_input_dynamic_gear_count / get_input_dynamic_dims take a reserved index: (size_t)-1, which
#: GE checks (model_om2.cpp 1846-1921); get_dynamic_hw ignores its index (model_om2.cpp 1818).
_RESERVED_INDEX = -1
#: aclmdlInputAippType (acl_mdl.h 132-137)
WITHOUT_AIPP, WITH_STATIC_AIPP, WITH_DYNAMIC_AIPP, DYNAMIC_AIPP_NODE = 0, 1, 2, 3


@dataclass(frozen=True)
class RuntimeInput:
    """One model input as the runtime indexes it: a client tensor, or one of the runtime's own."""

    index: int
    size: int
    tensor: LayoutTensor | None = None  # None: ascend_mbatch_shape_data or a dynamic-AIPP parameter input
    #: a dynamic-AIPP parameter input: the client input it configures
    aipp_of: str = ""

    @property
    def name(self) -> str:
        if self.tensor is not None:
            return self.tensor.name
        return f"dynamic AIPP parameters of {self.aipp_of!r}" if self.aipp_of else ACL_DYNAMIC_TENSOR_NAME


@dataclass(frozen=True)
class ModelDescription:
    """What every slot needs to know about the model."""

    layout: ModelLayout
    #: every model input in index order, and every output
    inputs: tuple[RuntimeInput, ...]
    output_sizes: tuple[int, ...]
    #: index of ascend_mbatch_shape_data (None: no gears)
    dynamic_index: int | None
    #: client input -> index of its dynamic-AIPP parameter input
    aipp_inputs: Mapping[str, int] = field(default_factory=dict)
    #: dynamic-AIPP image -> (N, C, H, W) of the network input behind it (absent when not 4-D NCHW/NHWC)
    aipp_networks: Mapping[str, tuple[int, int, int, int]] = field(default_factory=dict)

    def gear_argument(self, g: int) -> Any:
        """The last argument(s) of gear ``g``'s set_dynamic_* call."""
        layout = self.layout
        if layout.kind == "dims":  # the runtime's layout (aclmdlSetInputDynamicDims.md 44)
            dims = layout.runtime_dims(g)
            return {"dimCount": len(dims), "name": "", "dims": list(dims)}
        return layout.gears[g]


def shape_of(dims: Mapping[str, Any]) -> Shape:
    return tuple(int(d) for d in dims["dims"][: dims["dimCount"]])


def _signed(value: int) -> int:
    """get_input_dynamic_dims builds dims with "k" (unsigned): -1 comes back as 2**64-1 (mdl_wrap.cpp 1088-1141)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def read_description(acl: Any, desc: int, model_id: int, model_path: Path) -> ModelDescription:
    """The model's tensors and gears from the desc (output shapes per gear still unknown)."""
    count = acl.mdl.get_num_inputs(desc)
    index, ret = acl.mdl.get_input_index_by_name(desc, ACL_DYNAMIC_TENSOR_NAME)
    dynamic_index = index if ret == ACL_SUCCESS else None
    if dynamic_index is None:  # "no such input" (100000) is the answer for a model without gears
        LOG.debug("no %s input (%s): no gears", ACL_DYNAMIC_TENSOR_NAME, recent_message(acl))
    inputs: list[RuntimeInput] = []
    parameter_inputs: dict[int, int] = {}  # index -> size of each dynamic-AIPP parameter input
    attached: dict[int, str] = {}  # parameter input index -> the image input it belongs to
    networks: dict[str, tuple[int, int, int, int]] = {}
    for i in range(count):
        size = acl.mdl.get_input_size_by_index(desc, i)
        if i == dynamic_index:
            inputs.append(RuntimeInput(i, size))
            continue
        aipp_kind, attached_index = _aipp_type(acl, model_id, i)
        if aipp_kind == DYNAMIC_AIPP_NODE:
            parameter_inputs[i] = size
            continue
        tensor = _input_tensor(acl, desc, model_id, i, aipp_kind, size)
        if aipp_kind == WITH_DYNAMIC_AIPP:
            attached[attached_index] = tensor.name
            network = _aipp_network(acl, model_id, i)
            if network is not None:
                networks[tensor.name] = network
        inputs.append(RuntimeInput(i, size, tensor))
    orphans = sorted(set(parameter_inputs) - set(attached))
    if orphans:
        raise ConfigError(f"model inputs {orphans} are dynamic-AIPP parameter inputs that no image input names")
    inputs += [RuntimeInput(i, size, aipp_of=attached[i]) for i, size in parameter_inputs.items()]
    inputs.sort(key=lambda r: r.index)
    clients = [r.tensor for r in inputs if r.tensor is not None]
    outputs = [_output_tensor(acl, desc, i) for i in range(acl.mdl.get_num_outputs(desc))]
    _refuse_unservable(clients, "input")
    _refuse_unservable(outputs, "output")
    kind: GearKind = ""
    gears: tuple[Shape, ...] = ()
    order: tuple[str, ...] = ()
    if dynamic_index is not None:
        kind, gears = _gears(acl, desc)
        if kind == "dims":
            order, gears = _dims_order(gears, clients, model_path)
    elif any(-1 in t.dims and not t.dynamic_aipp for t in clients) or any(-1 in t.dims for t in outputs):
        # without gears, a -1 beyond a dynamic-AIPP image's own (an image's V2 dims are -1 in any model),
        # on an input or an output, is a shape range (a static model's outputs are static)
        kind = "range"
        ranged = {t.name: _with_ranges(acl, desc, inputs, t) for t in clients}
        clients = list(ranged.values())
        # the buffers are made from ``inputs``: they must carry the ranges too (a range input is
        # sized by its largest shape and viewed per run, never at its -1 dims)
        inputs = [replace(r, tensor=ranged[r.tensor.name]) if r.tensor is not None else r for r in inputs]
    layout = ModelLayout(tuple(clients), tuple(outputs), kind, gears, shape_order=order)
    aipp_inputs = {r.aipp_of: r.index for r in inputs if r.aipp_of}
    return ModelDescription(layout, tuple(inputs), tuple(t.size for t in outputs), dynamic_index, aipp_inputs, networks)


def _aipp_type(acl: Any, model_id: int, index: int) -> tuple[int, int]:
    """(AIPP type, attached index) of input ``index``; (0, -) when pyACL has no AIPP calls."""
    if not hasattr(acl.mdl, "get_aipp_type"):
        return WITHOUT_AIPP, 0
    kind, attached, ret = acl.mdl.get_aipp_type(model_id, index)
    check(acl, ret, "acl.mdl.get_aipp_type", f"reading input {index}")
    return int(kind), int(attached)


def _input_tensor(acl: Any, desc: int, model_id: int, index: int, aipp_kind: int, size: int) -> LayoutTensor:
    """One client input. Its buffer is sized and copied by V2 dims, which differ from V1 for an AIPP
    input (aclmdlGetInputDimsV2.md: the product of V2 equals get_input_size_by_index)."""
    v1, ret = acl.mdl.get_input_dims(desc, index)
    check(acl, ret, "acl.mdl.get_input_dims", f"reading input {index}")
    v2 = v1
    if hasattr(acl.mdl, "get_input_dims_v2"):
        v2, ret = acl.mdl.get_input_dims_v2(desc, index)
        check(acl, ret, "acl.mdl.get_input_dims_v2", f"reading input {index}")
    name = acl.mdl.get_input_name_by_index(desc, index)
    name = name or v1["name"]
    code = acl.mdl.get_input_data_type(desc, index)
    fmt = acl.mdl.get_input_format(desc, index)
    aipp = None
    if aipp_kind == WITH_STATIC_AIPP:
        aipp = _static_aipp(acl, model_id, index)
    elif aipp_kind == WITH_DYNAMIC_AIPP:
        aipp = AippConfig(aipp_mode=AippMode.DYNAMIC, related_input_rank=index, max_src_image_size=size)
    dims_v1, dims_v2 = shape_of(v1), shape_of(v2)
    image = dims_v1 if dims_v1 != dims_v2 else ()
    return LayoutTensor(name, data_type(code), format_name(fmt), dims_v2, size, image_dims=image, aipp=aipp)


#: aclFormat codes of the network inputs an AIPP check applies to (hicann/runtime acl_base_rt.h:171-192)
_NCHW, _NHWC = 0, 1


def _aipp_network(acl: Any, model_id: int, index: int) -> tuple[int, int, int, int] | None:
    """(N, C, H, W) of the network input behind a dynamic-AIPP image, as set_input_aipp checks it:
    the largest outDims[i].srcDims (the AIPP output's origin shape, insert_aipp_op_util.cc 675-690)
    read in srcFormat (acl_aipp.cpp 117-170). For dynamic AIPP only these fields are valid
    (aclmdlGetFirstAippInfo.md 29). None where GE skips the check: neither NCHW nor NHWC."""
    info, ret = acl.mdl.get_first_aipp_info(model_id, index)
    check(acl, ret, "acl.mdl.get_first_aipp_info", f"reading the dynamic AIPP of input {index}")
    entries = info["outDims"]
    # the gear of the largest byte size, the first of equals (model_common.cpp 788-799)
    largest = max(range(len(entries)), key=lambda i: (int(entries[i]["srcSize"]), -i)) if entries else None
    dims = shape_of(entries[largest]["srcDims"]) if largest is not None else ()
    layout = int(info["srcFormat"])
    if layout not in (_NCHW, _NHWC):
        return None
    if len(dims) != 4:  # GE reads N, H, W as 0 then, so every set is refused
        return (0, 0, 0, 0)
    n, a, b, c = dims
    return (n, a, b, c) if layout == _NCHW else (n, c, a, b)


def _static_aipp(acl: Any, model_id: int, index: int) -> AippConfig:
    """The static AIPP config as get_first_aipp_info reports it (acl_aipp.cpp 502-595). The binding
    exports six of the nine matrix entries (mdl_wrap.cpp 656-823): the others read as 0 here, which
    only reports use; the device applies the full matrix compiled into the model."""
    info, ret = acl.mdl.get_first_aipp_info(model_id, index)
    check(acl, ret, "acl.mdl.get_first_aipp_info", f"reading the AIPP of input {index}")
    m = {
        key: int(info.get(key, 0))
        for key in (
            "matrixR0C0",
            "matrixR0C1",
            "matrixR0C2",
            "matrixR1C0",
            "matrixR1C1",
            "matrixR1C2",
            "matrixR2C0",
            "matrixR2C1",
            "matrixR2C2",
        )
    }
    try:
        fmt: AippInputFormat | None = AippInputFormat(int(info["inputFormat"]))
    except ValueError:
        fmt = None
    return AippConfig(
        aipp_mode=AippMode.STATIC,
        related_input_rank=index,
        input_format=fmt,
        src_image_size_w=int(info["srcImageSizeW"]),
        src_image_size_h=int(info["srcImageSizeH"]),
        crop=bool(info["cropSwitch"]),
        load_start_pos_w=int(info["loadStartPosW"]),
        load_start_pos_h=int(info["loadStartPosH"]),
        crop_size_w=int(info["cropSizeW"]),
        crop_size_h=int(info["cropSizeH"]),
        padding=bool(info["paddingSwitch"]),
        left_padding_size=int(info["leftPaddingSize"]),
        right_padding_size=int(info["rightPaddingSize"]),
        top_padding_size=int(info["topPaddingSize"]),
        bottom_padding_size=int(info["bottomPaddingSize"]),
        csc_switch=bool(info["cscSwitch"]),
        rbuv_swap_switch=bool(info["rbuvSwapSwitch"]),
        ax_swap_switch=bool(info["axSwapSwitch"]),
        matrix=(
            (m["matrixR0C0"], m["matrixR0C1"], m["matrixR0C2"]),
            (m["matrixR1C0"], m["matrixR1C1"], m["matrixR1C2"]),
            (m["matrixR2C0"], m["matrixR2C1"], m["matrixR2C2"]),
        )
        if info["cscSwitch"]
        else (),
        input_bias=(int(info["inputBias0"]), int(info["inputBias1"]), int(info["inputBias2"])),
        output_bias=(int(info["outputBias0"]), int(info["outputBias1"]), int(info["outputBias2"])),
        mean_chn=(int(info["meanChn0"]), int(info["meanChn1"]), int(info["meanChn2"]), int(info["meanChn3"])),
        min_chn=(float(info["minChn0"]), float(info["minChn1"]), float(info["minChn2"]), float(info["minChn3"])),
        var_reci_chn=(
            float(info["varReciChn0"]),
            float(info["varReciChn1"]),
            float(info["varReciChn2"]),
            float(info["varReciChn3"]),
        ),
    )


def _output_tensor(acl: Any, desc: int, index: int) -> LayoutTensor:
    dims, ret = acl.mdl.get_output_dims(desc, index)
    check(acl, ret, "acl.mdl.get_output_dims", f"reading output {index}")
    name = acl.mdl.get_output_name_by_index(desc, index)
    code = acl.mdl.get_output_data_type(desc, index)
    fmt = acl.mdl.get_output_format(desc, index)
    size = acl.mdl.get_output_size_by_index(desc, index)
    return LayoutTensor(name or dims["name"], data_type(code), format_name(fmt), shape_of(dims), size)


def _with_ranges(acl: Any, desc: int, inputs: Sequence[RuntimeInput], tensor: LayoutTensor) -> LayoutTensor:
    """A shape-range input with its per-axis [min, max] (get_input_dims_range; model_om2.cpp 471-543)."""
    index = next(r.index for r in inputs if r.tensor is tensor)
    found, ret = acl.mdl.get_input_dims_range(desc, index)
    check(acl, ret, "acl.mdl.get_input_dims_range", f"reading the shape ranges of input {tensor.name!r}")
    ranges = tuple(
        (int(lo), int(hi) if int(hi) >= 0 else UNBOUNDED) for lo, hi in found["range"][: found["rangeCount"]]
    )
    if len(ranges) != len(tensor.dims):
        raise ConfigError(
            f"input {tensor.name!r} {list(tensor.dims)} has dynamic axes but get_input_dims_range gives "
            f"{len(ranges)} range(s); a model with -1 axes needs gears or shape ranges"
        )
    return LayoutTensor(
        tensor.name, tensor.data_type, tensor.format, tensor.dims, tensor.size, tensor.image_dims, ranges, tensor.aipp
    )


def _refuse_unservable(tensors: list[LayoutTensor], kind: str) -> None:
    for tensor in tensors:
        if not tensor.data_type.triton:
            raise ConfigError(
                f"model {kind} {tensor.name!r} has type ACL_{tensor.data_type.name} ({tensor.data_type.code}), "
                f"which cannot be served: it {tensor.data_type.unsupported}"
            )


def _gears(acl: Any, desc: int) -> tuple[GearKind, tuple[Shape, ...]]:
    """The gear kind and gears of a model that has ascend_mbatch_shape_data (dims: in the runtime's
    full layout, as get_input_dynamic_dims returns them).

    A lookup that answers no gears (ret 0, count 0: model_om2.cpp 1803-1807) means "not this kind";
    a lookup that fails is taken the same way, since a runtime may answer so. Only when none of the
    three finds gears is the model refused, listing each answer.
    """
    answers = []
    batch, ret = acl.mdl.get_dynamic_batch(desc)
    if ret == ACL_SUCCESS and batch["batchCount"]:
        return "batch", tuple((int(b),) for b in batch["batch"][: batch["batchCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_batch", ret, f"batchCount {batch.get('batchCount')}"))
    hw, ret = acl.mdl.get_dynamic_hw(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and hw["hwCount"]:
        return "hw", tuple((int(h), int(w)) for h, w in hw["hw"][: hw["hwCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_hw", ret, f"hwCount {hw.get('hwCount')}"))
    count, ret = acl.mdl.get_input_dynamic_gear_count(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and count:
        gears, ret = acl.mdl.get_input_dynamic_dims(desc, _RESERVED_INDEX, count)
        check(acl, ret, "acl.mdl.get_input_dynamic_dims", f"reading the model's {count} dims gears")
        return "dims", tuple(tuple(_signed(d) for d in shape_of(g)) for g in gears)
    answers.append(_lookup_answer(acl, "acl.mdl.get_input_dynamic_gear_count", ret, f"gear count {count}"))
    raise ConfigError(
        f"the model has the input {ACL_DYNAMIC_TENSOR_NAME!r} but no gear lookup found gears: " + "; ".join(answers)
    )


def _lookup_answer(acl: Any, function: str, ret: int, found: str) -> str:
    """How one gear lookup answered (reading the runtime's message, so none is left behind)."""
    if ret == ACL_SUCCESS:
        return f"{function} returned 0 with {found}"
    answer = str(AclError(function, ret, recent_message(acl)))
    LOG.debug("gear lookup: %s (taken as: not this gear kind)", answer)
    return answer


# -- the --input_shape order of a dims model ------------------------------------------------------


def _dims_order(
    runtime_gears: tuple[Shape, ...], inputs: list[LayoutTensor], model_path: Path
) -> tuple[tuple[str, ...], tuple[Shape, ...]]:
    """The inputs get_input_dynamic_dims walks (ATC's --input_shape order) and the gears as their -1
    values. The runtime does not name them (dims[i].name is not written, aclmdlGetInputDynamicDims.md 54),
    so they are read from the model file (user_designate_shape_order on the ascend_mbatch_shape_case
    op, multi_batch_clone_pass.cc 413-453) and checked against the gears, or else found from the
    gears themselves when only one order fits."""
    from_file = _file_order(model_path)
    candidates = (
        [from_file] if from_file and _fits(from_file, runtime_gears, inputs) else _orders(runtime_gears, inputs)
    )
    if not candidates:
        raise ConfigError(
            f"the dims gears {[list(g) for g in runtime_gears]} match no order of the inputs "
            f"{[f'{t.name} {list(t.dims)}' for t in inputs]} (each gear holds the full dims of the inputs named in "
            "ATC's --input_shape, in that order)"
        )
    distinct = {_meaning(order, runtime_gears, inputs) for order in candidates}
    if len(distinct) > 1:
        raise ConfigError(
            f"the dims gears fit several input orders ({', '.join('/'.join(o) for o in candidates[:4])}) and "
            f"{model_path.name} does not say which --input_shape listed: recompile it, or name the order in its "
            "model file"
        )
    order = candidates[0]
    by_name = {t.name: t for t in inputs}
    declared = [d for name in order for d in by_name[name].dims]
    gears = tuple(tuple(v for v, want in zip(gear, declared) if want < 0) for gear in runtime_gears)
    return order, gears


def _file_order(model_path: Path) -> tuple[str, ...]:
    """The --input_shape order recorded in the model file (() when it cannot be read, or the file
    does not record it: the readers then offer a guess, which the gears must decide instead)."""
    from ge_python_backend.engines.offline import read_record

    try:
        return read_record(model_path).shape_order
    except (OSError, OmFormatError, ConfigError) as exc:
        LOG.debug("the --input_shape order of %s is not readable (%s); finding it from the gears", model_path, exc)
        return ()


def _fits(order: Sequence[str], gears: tuple[Shape, ...], inputs: list[LayoutTensor]) -> bool:
    by_name = {t.name: t for t in inputs}
    if any(name not in by_name for name in order):
        return False
    declared = [d for name in order for d in by_name[name].dims]
    dynamic = {t.name for t in inputs if -1 in t.dims}
    if not dynamic <= set(order):
        return False
    return all(len(g) == len(declared) and all(w < 0 or v == w for v, w in zip(g, declared)) for g in gears)


def _orders(gears: tuple[Shape, ...], inputs: list[LayoutTensor]) -> list[tuple[str, ...]]:
    """Every order of a subset of the inputs (all dynamic ones included) that fits every gear."""
    found = []
    total = len(gears[0])
    names = [t.name for t in inputs]
    for size in range(1, len(names) + 1):
        for order in itertools.permutations(names, size):
            if sum(len(next(t for t in inputs if t.name == n).dims) for n in order) == total and _fits(
                order, gears, inputs
            ):
                found.append(order)
        if len(found) > 64:
            break
    return found


def _meaning(order: Sequence[str], gears: tuple[Shape, ...], inputs: list[LayoutTensor]) -> tuple:
    """Every input's shape at every gear under ``order`` (two orders that agree here are the same)."""
    by_name = {t.name: t for t in inputs}
    result = []
    for gear in gears:
        position, shapes = 0, {}
        for name in order:
            width = len(by_name[name].dims)
            shapes[name] = tuple(gear[position : position + width])
            position += width
        result.append(tuple(sorted(shapes.items())))
    return tuple(result)
