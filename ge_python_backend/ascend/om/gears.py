"""Turn an OM's compiled gears into the spec's batch support and shape gears.

ATC's multi-batch pass compiles one branch per gear (om-format.md §2b):

- dynamic batch (``--dynamic_batch_size``): each gear is one batch size;
- dynamic image size (``--dynamic_image_size``): each gear is (h, w) for the H and W axes of
  every input that has them dynamic;
- dynamic dims (``--dynamic_dims``): each gear lists values for every -1 axis of the dynamic
  inputs, input by input (in the designated shape order when the model records it, else in
  input order) and axis by axis.
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
class GearPlan:
    batch: BatchSupport
    outputs: tuple[TensorSpec, ...]
    shape_gears: tuple[ShapeGear, ...] = ()
    gear_kind: str = ""


def plan_gears(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], gears: Gears) -> GearPlan:
    """Batch support and shape gears of a model whose user inputs and outputs are given."""
    if gears.kind == BATCH:
        return _batch_plan(outputs, gears)
    if gears.kind == HW:
        return GearPlan(batch_support_from_shapes(inputs, outputs), outputs, _hw_gears(inputs, gears), HW)
    if gears.kind == DIMS:
        shape_gears = _dims_gears(inputs, gears)
        batched = {t.name for t in inputs if t.shape and t.shape[0] == -1}
        batches = {shape[0] for g in shape_gears for name, shape in g.shapes.items() if name in batched}
        batch = BatchSupport("gears", tuple(batches)) if batches else batch_support_from_shapes(inputs, outputs)
        return GearPlan(batch, outputs, shape_gears, DIMS)
    return GearPlan(batch_support_from_shapes(inputs, outputs), outputs)


def _batch_plan(outputs: tuple[TensorSpec, ...], gears: Gears) -> GearPlan:
    sizes = []
    for i, gear in enumerate(gears.values):
        if len(gear) != 1 or gear[0] <= 0:
            raise OmFormatError(f"dynamic batch gear {i} is {list(gear)}, expected one positive batch size")
        sizes.append(gear[0])
    if not sizes:
        raise OmFormatError("the model is marked dynamic-batch but records no batch gears")
    # axis 0 of every output is the batch axis that the chosen gear decides
    batched = tuple(_with_axis(t, 0, -1) if t.shape else t for t in outputs)
    return GearPlan(BatchSupport("gears", tuple(sizes)), batched)


def _hw_gears(inputs: tuple[TensorSpec, ...], gears: Gears) -> tuple[ShapeGear, ...]:
    dynamic = [(t, axes) for t in inputs if (axes := _hw_axes(t)) is not None]
    if not dynamic:
        raise OmFormatError("the model has dynamic image size gears but no input with dynamic H and W axes")
    result = []
    for i, gear in enumerate(gears.values):
        if len(gear) != 2 or min(gear) <= 0:
            raise OmFormatError(f"dynamic image size gear {i} is {list(gear)}, expected positive (h, w)")
        h, w = gear
        shapes = {t.name: _with_axis(_with_axis(t, axes[0], h), axes[1], w).shape for t, axes in dynamic}
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


def _dims_gears(inputs: tuple[TensorSpec, ...], gears: Gears) -> tuple[ShapeGear, ...]:
    if len(set(gears.order)) != len(gears.order):
        raise OmFormatError(f"the designated shape order {list(gears.order)} names an input twice")
    ordered = [_input(inputs, name) for name in gears.order] if gears.order else list(inputs)
    dynamic = [t for t in ordered if t.is_dynamic]
    slots = sum(sum(1 for d in t.shape if d == -1) for t in dynamic)
    result = []
    for i, gear in enumerate(gears.values):
        if len(gear) != slots or any(v <= 0 for v in gear):
            raise OmFormatError(
                f"dynamic dims gear {i} is {list(gear)}: expected {slots} positive values, one per -1 axis "
                f"of the dynamic inputs {[t.name for t in dynamic]}"
            )
        values = iter(gear)
        shapes = {t.name: tuple(next(values) if d == -1 else d for d in t.shape) for t in dynamic}
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
