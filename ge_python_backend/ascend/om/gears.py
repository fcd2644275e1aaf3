"""Turn an OM's compiled gears into the spec's batch support and shape gears.

ATC's multi-batch pass compiles one branch per gear into the ``ascend_mbatch_shape_case`` Case op
(hicann/ge compiler/graph/passes/multi_batch/multi_batch_clone_pass.cc 36, 394-453: ``batch_num``,
``_pred_value_<i>``):

- dynamic batch (``--dynamic_batch_size``): each gear is one batch size;
- dynamic image size (``--dynamic_image_size``): each gear is (h, w) for the H and W axes of
  every input that has them dynamic;
- dynamic dims (``--dynamic_dims``): each gear (``_pred_value_<i>``) lists only the values of the
  -1 axes of the inputs named in ATC's ``--input_shape``, in that order (static inputs may be
  named too; they take no values), input by input and axis by axis. The order is the Case op's
  ``user_designate_shape_order`` (MODEL_DESIGNATE_SHAPE_ORDER), which ATC keeps as the user wrote
  it for offline models (hicann/ge compiler/graph/passes/multi_batch/multi_batch_clone_pass.cc:
  223-228, 413-453; compiler/graph/preprocess/multi_batch_options.cc:47-60, 560-605;
  docs/zh/user_guides/atc_tools/CLI_options/--dynamic_dims.md:31). Files without an order: the
  inputs with -1 axes in model order. A gear's ShapeGear maps every input of the order to its full
  shape; inputs outside the order keep their static shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import BatchSupport, ShapeGear, TensorSpec, batch_support_from_shapes

BATCH, HW, DIMS = "batch", "hw", "dims"


@dataclass(frozen=True)
class Gears:
    """Gears as recorded: ``kind`` is "batch", "hw", "dims" or "" (none); one tuple per gear."""

    kind: str = ""
    values: tuple[tuple[int, ...], ...] = ()
    order: tuple[str, ...] = ()


@dataclass(frozen=True)
class GearSupport:
    batch: BatchSupport
    outputs: tuple[TensorSpec, ...]
    shape_gears: tuple[ShapeGear, ...] = ()
    gear_kind: str = ""


def gear_support(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], gears: Gears) -> GearSupport:
    """Batch support and shape gears of a model whose user inputs and outputs are given."""
    if gears.kind == BATCH:
        return _batch_gears(outputs, gears)
    if gears.kind == HW:
        return GearSupport(batch_support_from_shapes(inputs, outputs), outputs, _hw_gears(inputs, gears), HW)
    if gears.kind == DIMS:
        shape_gears = _dims_gears(inputs, gears, dims_order(inputs, gears))
        batched = {t.name for t in inputs if t.shape and t.shape[0] == -1}
        batches = {shape[0] for g in shape_gears for name, shape in g.shapes.items() if name in batched}
        batch = BatchSupport("gears", tuple(batches)) if batches else batch_support_from_shapes(inputs, outputs)
        return GearSupport(batch, outputs, shape_gears, DIMS)
    return GearSupport(batch_support_from_shapes(inputs, outputs), outputs)


def _batch_gears(outputs: tuple[TensorSpec, ...], gears: Gears) -> GearSupport:
    sizes = []
    for i, gear in enumerate(gears.values):
        if len(gear) != 1 or gear[0] <= 0:
            raise OmFormatError(f"dynamic batch gear {i} is {list(gear)}, expected one positive batch size")
        sizes.append(gear[0])
    if not sizes:
        raise OmFormatError("the model is marked dynamic-batch but records no batch gears")
    # axis 0 of every output is the batch axis that the chosen gear decides
    batched = tuple(_with_axis(t, 0, -1) if t.shape else t for t in outputs)
    return GearSupport(BatchSupport("gears", tuple(sizes)), batched)


def dims_order(inputs: tuple[TensorSpec, ...], gears: Gears) -> tuple[str, ...]:
    """The --input_shape order of a dims model (() for other kinds): the recorded one, else the
    inputs with -1 axes in model order."""
    if gears.kind != DIMS:
        return ()
    return gears.order or tuple(t.name for t in inputs if t.is_dynamic and not t.dynamic_aipp)


def _hw_gears(inputs: tuple[TensorSpec, ...], gears: Gears) -> tuple[ShapeGear, ...]:
    dynamic = [(t, axes) for t in inputs if not t.dynamic_aipp and (axes := _hw_axes(t)) is not None]
    if not dynamic:
        raise OmFormatError("the model has dynamic image size gears but no input with dynamic H and W axes")
    result = []
    for i, gear in enumerate(gears.values):
        if len(gear) != 2 or min(gear) <= 0:
            raise OmFormatError(f"dynamic image size gear {i} is {list(gear)}, expected positive (h, w)")
        h, w = gear
        shapes = {t.name: _with_axis(_with_axis(t, axes[0], _buffer_h(t, h)), axes[1], w).shape for t, axes in dynamic}
        result.append(ShapeGear(shapes, f"{h}x{w}"))
    return tuple(result)


def _hw_axes(tensor: TensorSpec) -> tuple[int, int] | None:
    """Positions of H and W when both are dynamic: by layout for 4-D NCHW/NHWC, else the last two -1 axes."""
    shape = tensor.shape
    if len(shape) == 4 and tensor.format in ("NCHW", "NHWC"):
        axes = (2, 3) if tensor.format == "NCHW" else (1, 2)
        return axes if all(shape[a] == -1 for a in axes) else None
    unknown = [a for a, d in enumerate(shape) if d == -1 and a > 0]
    return (unknown[-2], unknown[-1]) if len(unknown) >= 2 else None


def _buffer_h(tensor: TensorSpec, h: int) -> int:
    """The H of a static-AIPP buffer for an image of height ``h``: YUV420SP holds 1.5 h rows, YUV422SP
    2 h (aclmdlGetInputDimsV2.md 31-61; inferred for image-size gears, which no sample file shows)."""
    fmt = tensor.preprocessing.pixel_format if tensor.preprocessing is not None else ""
    return {"YUV420SP_U8": h * 3 // 2, "YUV422SP_U8": 2 * h}.get(fmt, h)


def _dims_gears(inputs: tuple[TensorSpec, ...], gears: Gears, order: tuple[str, ...]) -> tuple[ShapeGear, ...]:
    if len(set(order)) != len(order):
        raise OmFormatError(f"the designated shape order {list(order)} names an input twice")
    ordered = [_input(inputs, name) for name in order]
    missing = [t.name for t in inputs if t.is_dynamic and t.name not in order and not t.dynamic_aipp]
    if missing:
        # ATC refuses this ("All dynamic nodes must be set in --input_shape", multi_batch_clone_pass.cc:300-307)
        raise OmFormatError(
            f"inputs {missing} have -1 axes but the designated shape order {list(order)} does not name them"
        )
    slots = sum(t.shape.count(-1) for t in ordered)
    result = []
    for i, gear in enumerate(gears.values):
        if len(gear) != slots or any(v <= 0 for v in gear):
            raise OmFormatError(
                f"dynamic dims gear {i} is {list(gear)}: expected {slots} positive values, one per -1 axis "
                f"of the inputs {list(order)} (--input_shape order)"
            )
        values = iter(gear)
        shapes = {t.name: tuple(next(values) if d == -1 else d for d in t.shape) for t in ordered}
        result.append(ShapeGear(shapes, ",".join(str(v) for v in gear)))
    return tuple(result)


def _input(inputs: tuple[TensorSpec, ...], name: str) -> TensorSpec:
    for tensor in inputs:
        if tensor.name == name:
            return tensor
    raise OmFormatError(
        f"the designated shape order names input {name!r}, which the model does not have "
        f"(inputs: {[t.name for t in inputs]})"
    )


def _with_axis(tensor: TensorSpec, axis: int, size: int) -> TensorSpec:
    shape = list(tensor.shape)
    shape[axis] = size
    return replace(tensor, shape=tuple(shape))
