"""A model's inputs, outputs and gears as the pyACL model description reports them.

Shared by the acl engine (which reads it from ``acl.mdl`` desc queries) and the simulator
(which reads it from a simulated .om). It answers the questions both ask: which input shapes
are runnable, the concrete shapes at each gear, the output shapes at each gear, what
``set_input_dynamic_dims`` takes, and the ``ModelSpec`` a client sees.

Gear kinds:
  - ``""``: static model, one implicit gear;
  - ``"batch"``: gears are ``(batch,)``; axis 0 of every input whose axis 0 is -1;
  - ``"hw"``: gears are ``(height, width)``; the two -1 axes of each image input;
  - ``"dims"``: a gear holds the values of the -1 axes of the inputs named in ATC's
    ``--input_shape``, in that order (``shape_order``), as ATC stores it (``_pred_value_<i>`` on the
    ``ascend_mbatch_shape_case`` op, hicann/ge compiler/graph/passes/multi_batch/multi_batch_clone_pass.cc
    413-453). The runtime speaks another layout: ``get_input_dynamic_dims`` returns, and
    ``set_input_dynamic_dims`` takes, the *full* dims of every input in ``shape_order``, static
    inputs and axes included (hicann/ge api/acl/acl_model/model/model_om2.cpp 1876-1921;
    docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDynamicDims.md 42-66). ``runtime_dims`` and
    ``gear_of_runtime_dims`` convert between the two;
  - ``"range"``: no gears; each -1 axis takes any size within the axis's range
    (``get_input_dims_range``), set per run with ``set_dataset_tensor_desc``.

Inputs whose shape is set per run rather than by a gear ("free" inputs: every input of a range
model, and an image behind dynamic AIPP) are matched by their ranges or their buffer size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ge_python_backend.ascend.aipp import AippConfig, AippMode
from ge_python_backend.ascend.constants import AclDataType
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import (
    NUMPY_DTYPES,
    UNBOUNDED,
    BatchSupport,
    ModelSpec,
    ShapeGear,
    TensorSpec,
    format_shape,
    range_problem,
    ranges_text,
)

Shape = tuple[int, ...]
GearKind = Literal["", "batch", "hw", "dims", "range"]
GEAR_KINDS: tuple[GearKind, ...] = ("", "batch", "hw", "dims", "range")


@dataclass(frozen=True)
class LayoutTensor:
    """One model input or output.

    ``dims`` are what the buffer holds, as ``get_input_dims_v2`` reports them (-1 on gear axes and
    dynamic axes; outputs at the largest gear). For an AIPP input they differ from the image's own
    dims, ``image_dims`` (V1; aclmdlGetInputDims.md 31-61 vs aclmdlGetInputDimsV2.md 31-61): a YUV420SP image
    of h x w is V1 [n, h, w, 3] but V2 [n, 1.5h, w, 1], and only V2's product is its byte size.
    ``size`` is ``get_*_size_by_index``: the bytes of the largest shape (0 when unbounded).
    """

    name: str
    data_type: AclDataType
    format: str
    dims: Shape
    size: int
    image_dims: Shape = ()
    #: shape-range models: (min, max) per axis, max UNBOUNDED when there is none
    ranges: tuple[tuple[int, int], ...] = ()
    aipp: AippConfig | None = None

    @property
    def v1_dims(self) -> Shape:
        return self.image_dims or self.dims

    @property
    def dynamic_aipp(self) -> bool:
        return self.aipp is not None and self.aipp.aipp_mode is AippMode.DYNAMIC

    @property
    def free(self) -> bool:
        """Its shape is set per run (a range input, a dynamic-AIPP image), not by a gear."""
        return bool(self.ranges) or self.dynamic_aipp

    def byte_size(self, shape: Shape) -> int:
        """Bytes of this tensor at a concrete ``shape`` (0 when the type has no Triton equivalent)."""
        dtype = NUMPY_DTYPES.get(self.data_type.triton)
        return math.prod(shape) * dtype.itemsize if dtype is not None else 0

    def range_problem(self, shape: Sequence[int]) -> str | None:
        """Why ``shape`` is outside this tensor's ranges (None when it fits)."""
        return range_problem(self.name, self.ranges, tuple(shape))

    def largest_shape(self) -> Shape | None:
        """The largest shape of a range tensor (None when an axis is unbounded)."""
        if not self.ranges:
            return self.dims if all(d >= 0 for d in self.dims) else None
        if any(high == UNBOUNDED for _, high in self.ranges):
            return None
        return tuple(high for _, high in self.ranges)

    def tensor_spec(self, shape: Shape) -> TensorSpec:
        preprocessing = self.aipp.preprocessing() if self.aipp is not None else None
        return TensorSpec(
            self.name,
            self.data_type.triton,
            shape,
            self.format,
            native_type=self.data_type.native_name,
            ranges=self.ranges,
            preprocessing=preprocessing,
        )


@dataclass(frozen=True)
class ModelLayout:
    """Client inputs (no ``ascend_mbatch_shape_data``, no dynamic-AIPP parameter input), outputs, gears.

    ``gear_outputs[g]`` holds every output's shape at gear ``g``; a static or range model has
    exactly one entry (range: the largest output dims, -1 where unknown) and no ``gears``.
    """

    inputs: tuple[LayoutTensor, ...]
    outputs: tuple[LayoutTensor, ...]
    kind: GearKind = ""
    gears: tuple[Shape, ...] = ()
    gear_outputs: tuple[tuple[Shape, ...], ...] = ()
    #: dims models: the inputs named in ATC's --input_shape, in that order (static ones included)
    shape_order: tuple[str, ...] = ()
    _by_shapes: dict[tuple[Shape, ...], int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in GEAR_KINDS:
            raise ConfigError(f"unknown gear kind {self.kind!r}; expected one of {GEAR_KINDS}")
        if (self.kind in ("batch", "hw", "dims")) != bool(self.gears):
            raise ConfigError(f"gear kind {self.kind or 'static'!r} with {len(self.gears)} gear(s)")
        if self.gear_outputs and len(self.gear_outputs) != self.gear_count:
            raise ConfigError(f"{len(self.gear_outputs)} output shape sets for {self.gear_count} gear(s)")
        if self.kind == "dims" and not self.shape_order:
            # Files that predate the order: the dynamic inputs in model order (what ATC does when
            # --input_shape lists exactly them in that order).
            object.__setattr__(self, "shape_order", tuple(t.name for t in self.inputs if -1 in t.dims))
        self._check_dynamic_axes()
        for g in range(self.gear_count):
            self._by_shapes[self._key(self._concrete_inputs(g))] = g

    @property
    def gear_count(self) -> int:
        return max(1, len(self.gears))

    def input(self, name: str) -> LayoutTensor:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        raise ConfigError(f"the model has no input {name!r}; inputs: {[t.name for t in self.inputs]}")

    def _check_dynamic_axes(self) -> None:
        for tensor in self.inputs:
            problem = self._input_problem(tensor)
            if problem:
                raise ConfigError(f"input {tensor.name!r} {format_shape(tensor.dims)} {problem}")
        if self.kind == "dims":
            self._check_dims_order()

    def _input_problem(self, tensor: LayoutTensor) -> str:
        """Why ``tensor``'s dynamic axes do not fit the gear kind ("" when they do)."""
        free = [axis for axis, d in enumerate(tensor.dims) if d < 0]
        if tensor.ranges and len(tensor.ranges) != len(tensor.dims):
            return f"has {len(tensor.ranges)} shape ranges for rank {len(tensor.dims)}"
        if tensor.dynamic_aipp:
            ok = self.kind in ("", "batch", "range")
            return (
                ""
                if ok
                else (
                    "has dynamic AIPP beside image-size or dims gears, which is not served (dynamic AIPP is, on "
                    "static, dynamic-batch and shape-range models)"
                )
            )
        if not free:
            return ""
        problems = {
            "range": "" if tensor.ranges else "has dynamic axes but no shape ranges",
            "": "has dynamic axes but the model has neither gears nor shape ranges",
            "batch": "" if free == [0] else "may be dynamic only on axis 0 in a dynamic-batch model",
            "hw": ""
            if len(free) == 2
            else "must have exactly two dynamic axes (height, width) in a dynamic-image-size model",
            "dims": ""
            if tensor.name in self.shape_order
            else "is dynamic but not named in the model's --input_shape order",
        }
        return problems[self.kind]

    def _check_dims_order(self) -> None:
        names = [t.name for t in self.inputs]
        unknown = [n for n in self.shape_order if n not in names]
        if unknown:
            raise ConfigError(f"the dims order names {unknown}, which are not model inputs ({names})")
        want = sum(self.input(n).dims.count(-1) for n in self.shape_order)
        for gear in self.gears:
            if len(gear) != want:
                raise ConfigError(
                    f"dims gear {list(gear)} has {len(gear)} values; the -1 axes of "
                    f"{list(self.shape_order)} (--input_shape order) need {want}"
                )

    # -- concrete shapes ---------------------------------------------------------------------

    def _concrete_inputs(self, g: int) -> list[Shape]:
        """Every input's shape at gear ``g`` (free inputs keep their -1 axes)."""
        if self.kind in ("", "range"):
            return [t.dims for t in self.inputs]
        gear = self.gears[g]
        if self.kind == "batch":
            return [(gear[0],) + t.dims[1:] if t.dims and t.dims[0] < 0 else t.dims for t in self.inputs]
        if self.kind == "hw":
            return [_fill(t.dims, gear) if -1 in t.dims and not t.free else t.dims for t in self.inputs]
        filled = {}
        values = iter(gear)
        for name in self.shape_order:
            filled[name] = tuple(next(values) if d < 0 else d for d in self.input(name).dims)
        return [filled.get(t.name, t.dims) for t in self.inputs]

    def _key(self, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
        """What picks the gear: the fixed inputs' shapes, and the batch axis of a dynamic-AIPP image
        in a dynamic-batch model (its batch follows the gear; only its image size is free)."""
        return tuple(
            s if not t.free else s[:1]
            for s, t in zip(shapes, self.inputs)
            if not t.free or (self.kind == "batch" and t.dynamic_aipp and t.dims and t.dims[0] < 0)
        )

    def input_shapes(self, g: int) -> dict[str, Shape]:
        """Every input's shape at gear ``g`` (a free input: its declared dims, with -1)."""
        return dict(zip((t.name for t in self.inputs), self._concrete_inputs(g)))

    def output_shapes(self, g: int) -> tuple[Shape, ...]:
        """Every output's shape at gear ``g`` (the largest-gear dims when unknown)."""
        if self.gear_outputs:
            return self.gear_outputs[g]
        return tuple(t.dims for t in self.outputs)

    def runtime_dims(self, g: int) -> Shape:
        """What ``set_input_dynamic_dims`` takes at dims gear ``g``: the full shapes of the inputs in
        ``shape_order``, concatenated (aclmdlSetInputDynamicDims.md 44)."""
        shapes = self.input_shapes(g)
        return tuple(d for name in self.shape_order for d in shapes[name])

    def gear_of_runtime_dims(self, dims: Sequence[int]) -> Shape:
        """The gear values (the -1 axes) of a runtime dims layout; ValueError saying what is wrong, in
        the order GE checks it (ge_executor.cc GetCurDynamicDims: the count, then each static value)."""
        declared = [d for name in self.shape_order for d in self.input(name).dims]
        if len(dims) != len(declared):
            raise ValueError(
                f"{len(dims)} dims given; the inputs {list(self.shape_order)} (--input_shape order) have "
                f"{len(declared)} dims in all"
            )
        for position, (value, want) in enumerate(zip(dims, declared)):
            if want >= 0 and value != want:
                raise ValueError(f"dim {position} is {value}, but that axis is static ({want}) in the model")
        return tuple(int(v) for v, want in zip(dims, declared) if want < 0)

    def find_gear(self, shapes: Mapping[str, Sequence[int]]) -> int:
        """The gear whose input shapes are exactly ``shapes`` (free inputs: within their ranges or
        buffer); ValueError listing what the model runs otherwise."""
        names = [t.name for t in self.inputs]
        if set(shapes) != set(names):
            raise ValueError(f"expected shapes for the inputs {names}, got {sorted(shapes)}")
        concrete = [tuple(int(d) for d in shapes[name]) for name in names]
        for tensor, shape in zip(self.inputs, concrete):
            problem = self._free_problem(tensor, shape)
            if problem:
                raise ValueError(f"the model cannot run {problem}")
        try:
            return self._by_shapes[self._key(concrete)]
        except KeyError:
            asked = ", ".join(
                f"{n} {format_shape(s)}"
                for n, s, t in zip(names, concrete, self.inputs)
                if not t.free or (self.kind == "batch" and t.dynamic_aipp)
            )
            raise ValueError(f"the model cannot run {asked}; it runs {self.runnable()}") from None

    def _free_problem(self, tensor: LayoutTensor, shape: Shape) -> str | None:
        problem = tensor.range_problem(shape) if tensor.ranges else None
        if problem:
            return problem
        if tensor.dynamic_aipp:
            if len(shape) != len(tensor.dims):
                return f"{tensor.name!r} with shape {format_shape(shape)} (rank {len(tensor.dims)} expected)"
            if tensor.byte_size(shape) > tensor.size:
                return (
                    f"{tensor.name!r} {format_shape(shape)}: {tensor.byte_size(shape)} bytes, more than the "
                    f"{tensor.size} its dynamic AIPP takes (max_src_image_size)"
                )
        return None

    def runnable(self) -> str:
        """The runnable input shapes, for messages."""
        if self.kind == "batch":
            return f"batch sizes {[g[0] for g in self.gears]} of {self._declared()}"
        if self.kind == "range":
            return "; ".join(f"{t.name} in {ranges_text(t.ranges)}" for t in self.inputs if t.ranges)
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
        return "shape range" if self.kind == "range" else "static"

    # -- what a client sees --------------------------------------------------------------------

    def spec(self, source: str, facts: Mapping[str, str] | None = None) -> ModelSpec:
        """The client-facing description: -1 on every axis that differs between gears."""
        in_shapes = [list(self.input_shapes(g).values()) for g in range(self.gear_count)]
        out_shapes = [list(self.output_shapes(g)) for g in range(self.gear_count)]
        inputs = tuple(
            t.tensor_spec(t.dims if self.kind in ("batch", "", "range") else _merge(s[i] for s in in_shapes))
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
        if self.kind == "range":
            return self._range_batch()
        shapes = [s for shape_set in shape_sets for s in shape_set]
        first_axes = {s[0] for s in shapes if s}
        if all(shapes) and len(first_axes) == 1:
            return BatchSupport("static", (first_axes.pop(),))
        return BatchSupport("none")

    def _range_batch(self) -> BatchSupport:
        return range_batch([t.ranges for t in self.inputs], [t.dims for t in self.outputs])


def range_batch(input_ranges: Sequence[tuple[tuple[int, int], ...]], output_shapes: Sequence[Shape]) -> BatchSupport:
    """How a shape-range model batches: along axis 0 when every input's axis 0 is dynamic with the
    same range, which starts at 1 or below, and every output's axis 0 is dynamic too."""
    axes = [ranges[0] for ranges in input_ranges if ranges]
    outputs_dynamic = all(shape and shape[0] < 0 for shape in output_shapes)
    if len(axes) != len(input_ranges) or len(set(axes)) != 1 or not outputs_dynamic:
        return BatchSupport("none")
    low, high = axes[0]
    if low > 1 or high == 1:
        return BatchSupport("none")
    return BatchSupport("dynamic", limit=None if high == UNBOUNDED else high)


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
