"""A model's inputs, outputs and gears as the pyACL model description reports them.

Shared by the acl engine (which reads it from ``acl.mdl`` desc queries) and the simulator
(which reads it from a simulated .om). It answers the questions both ask: which input shapes
are runnable, the concrete shapes at each gear, the output shapes at each gear, and the
``ModelSpec`` a client sees.

Gear kinds (pyacl.md §4.3, §9):
  - ``""``: static model, one implicit gear;
  - ``"batch"``: gears are ``(batch,)``; axis 0 of every input whose axis 0 is -1;
  - ``"hw"``: gears are ``(height, width)``; the two -1 axes of each image input;
  - ``"dims"``: a gear is the concatenated full shapes of every input that has a -1 axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ge_python_backend.ascend.constants import AclDataType
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import NUMPY_DTYPES, BatchSupport, ModelSpec, ShapeGear, TensorSpec, format_shape

Shape = tuple[int, ...]
GEAR_KINDS = ("", "batch", "hw", "dims")


@dataclass(frozen=True)
class LayoutTensor:
    """One model input or output: dims carry -1 on gear axes (inputs) or the largest gear (outputs)."""

    name: str
    data_type: AclDataType
    format: str
    dims: Shape
    size: int

    def byte_size(self, shape: Shape) -> int:
        """Bytes of this tensor at a concrete ``shape`` (0 when the type has no Triton equivalent)."""
        dtype = NUMPY_DTYPES.get(self.data_type.triton)
        return math.prod(shape) * dtype.itemsize if dtype is not None else 0

    def tensor_spec(self, shape: Shape) -> TensorSpec:
        return TensorSpec(self.name, self.data_type.triton, shape, self.format, native_type=self.data_type.native_name)


@dataclass(frozen=True)
class ModelLayout:
    """Inputs (client-facing only: no ``ascend_mbatch_shape_data``), outputs and gears.

    ``gear_outputs[g]`` holds every output's shape at gear ``g``; a static model has exactly
    one entry and no ``gears``.
    """

    inputs: tuple[LayoutTensor, ...]
    outputs: tuple[LayoutTensor, ...]
    kind: str = ""
    gears: tuple[Shape, ...] = ()
    gear_outputs: tuple[tuple[Shape, ...], ...] = ()
    _by_shapes: dict[tuple[Shape, ...], int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in GEAR_KINDS:
            raise ConfigError(f"unknown gear kind {self.kind!r}; expected one of {GEAR_KINDS}")
        if bool(self.kind) != bool(self.gears):
            raise ConfigError(f"gear kind {self.kind or 'static'!r} with {len(self.gears)} gear(s)")
        if self.gear_outputs and len(self.gear_outputs) != self.gear_count:
            raise ConfigError(f"{len(self.gear_outputs)} output shape sets for {self.gear_count} gear(s)")
        self._check_dynamic_axes()
        for g in range(self.gear_count):
            self._by_shapes[tuple(self._concrete_inputs(g))] = g

    @property
    def gear_count(self) -> int:
        return max(1, len(self.gears))

    @property
    def dynamic_inputs(self) -> tuple[LayoutTensor, ...]:
        return tuple(t for t in self.inputs if -1 in t.dims)

    def _check_dynamic_axes(self) -> None:
        for tensor in self.inputs:
            free = [axis for axis, d in enumerate(tensor.dims) if d < 0]
            problem = ""
            if self.kind == "" and free:
                problem = "has dynamic axes but the model has no gears (dynamic shape ranges are not supported)"
            elif self.kind == "batch" and free not in ([], [0]):
                problem = "may be dynamic only on axis 0 in a dynamic-batch model"
            elif self.kind == "hw" and len(free) not in (0, 2):
                problem = "must have exactly two dynamic axes (height, width) in a dynamic-image-size model"
            if problem:
                raise ConfigError(f"input {tensor.name!r} {format_shape(tensor.dims)} {problem}")
        if self.kind == "dims":
            want = sum(len(t.dims) for t in self.dynamic_inputs)
            for gear in self.gears:
                if len(gear) != want:
                    raise ConfigError(
                        f"dims gear {list(gear)} has {len(gear)} values; the dynamic inputs "
                        f"{[t.name for t in self.dynamic_inputs]} need {want} (their full shapes concatenated)"
                    )

    def _concrete_inputs(self, g: int) -> list[Shape]:
        if not self.kind:
            return [t.dims for t in self.inputs]
        gear = self.gears[g]
        if self.kind == "batch":
            return [(gear[0],) + t.dims[1:] if t.dims and t.dims[0] < 0 else t.dims for t in self.inputs]
        if self.kind == "hw":
            return [_fill(t.dims, gear) if -1 in t.dims else t.dims for t in self.inputs]
        shapes, offset = [], 0
        for t in self.inputs:
            if -1 in t.dims:
                shapes.append(tuple(gear[offset : offset + len(t.dims)]))
                offset += len(t.dims)
            else:
                shapes.append(t.dims)
        return shapes

    def input_shapes(self, g: int) -> dict[str, Shape]:
        """Every input's concrete shape at gear ``g``."""
        return dict(zip((t.name for t in self.inputs), self._concrete_inputs(g)))

    def output_shapes(self, g: int) -> tuple[Shape, ...]:
        """Every output's shape at gear ``g`` (the largest-gear dims when unknown)."""
        if self.gear_outputs:
            return self.gear_outputs[g]
        return tuple(t.dims for t in self.outputs)

    def find_gear(self, shapes: Mapping[str, Sequence[int]]) -> int:
        """The gear whose input shapes are exactly ``shapes``; ValueError listing them otherwise."""
        names = [t.name for t in self.inputs]
        if set(shapes) != set(names):
            raise ValueError(f"expected shapes for the inputs {names}, got {sorted(shapes)}")
        key = tuple(tuple(int(d) for d in shapes[name]) for name in names)
        try:
            return self._by_shapes[key]
        except KeyError:
            asked = ", ".join(f"{n} {format_shape(s)}" for n, s in zip(names, key))
            raise ValueError(f"the model cannot run {asked}; it runs {self.runnable()}") from None

    def runnable(self) -> str:
        """The runnable input shapes, for messages."""
        if self.kind == "batch":
            return f"batch sizes {[g[0] for g in self.gears]} of {self._declared()}"
        return " or ".join(
            "(" + ", ".join(f"{n} {format_shape(s)}" for n, s in self.input_shapes(g).items()) + ")"
            for g in range(self.gear_count)
        )

    def _declared(self) -> str:
        return ", ".join(f"{t.name} {format_shape(t.dims)}" for t in self.inputs)

    def gear_label(self, g: int) -> str:
        if self.kind == "batch":
            return f"batch {self.gears[g][0]}"
        if self.kind == "hw":
            return f"{self.gears[g][0]}x{self.gears[g][1]}"
        if self.kind == "dims":
            return "dims " + ",".join(str(d) for d in self.gears[g])
        return "static"

    def spec(self, source: str, facts: Mapping[str, str] | None = None) -> ModelSpec:
        """The client-facing description: -1 on every axis that differs between gears."""
        in_shapes = [list(self.input_shapes(g).values()) for g in range(self.gear_count)]
        out_shapes = [list(self.output_shapes(g)) for g in range(self.gear_count)]
        inputs = tuple(
            t.tensor_spec(t.dims if self.kind in ("batch", "") else _merge(s[i] for s in in_shapes))
            for i, t in enumerate(self.inputs)
        )
        outputs = tuple(
            t.tensor_spec(self._output_dims(i, _merge(s[i] for s in out_shapes))) for i, t in enumerate(self.outputs)
        )
        shape_gears: tuple[ShapeGear, ...] = ()
        if self.kind in ("hw", "dims"):
            shape_gears = tuple(ShapeGear(self.input_shapes(g), self.gear_label(g)) for g in range(self.gear_count))
        return ModelSpec(
            inputs=inputs,
            outputs=outputs,
            batch=self._batch_support(in_shapes + out_shapes),
            shape_gears=shape_gears,
            gear_kind=self.kind if self.kind in ("hw", "dims") else "",
            source=source,
            facts=dict(facts or {}),
        )

    def _output_dims(self, index: int, merged: Shape) -> Shape:
        """In a batch model, axis 0 of an output that follows the batch gear is -1 (even with one gear)."""
        if self.kind != "batch" or not merged:
            return merged
        follows = all(
            shapes[index] and shapes[index][0] == gear[0] for gear, shapes in zip(self.gears, self.gear_outputs)
        )
        return (-1,) + merged[1:] if follows and self.gear_outputs else merged

    def _batch_support(self, shape_sets: list[list[Shape]]) -> BatchSupport:
        if self.kind == "batch":
            return BatchSupport("gears", tuple(g[0] for g in self.gears))
        shapes = [s for shape_set in shape_sets for s in shape_set]
        first_axes = {s[0] for s in shapes if s}
        if len(first_axes) == 1 and all(shapes):
            return BatchSupport("static", (first_axes.pop(),))
        return BatchSupport("none")


def _fill(dims: Shape, values: Sequence[int]) -> Shape:
    it = iter(values)
    return tuple(next(it) if d < 0 else d for d in dims)


def _merge(shapes) -> Shape:
    """One shape for several: axes that differ become -1."""
    shapes = list(shapes)
    first = shapes[0]
    if any(len(s) != len(first) for s in shapes):
        raise ConfigError(f"gears give different ranks for one tensor: {[format_shape(s) for s in shapes]}")
    return tuple(d if all(s[axis] == d for s in shapes) else -1 for axis, d in enumerate(first))
