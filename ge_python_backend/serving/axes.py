"""Where each engine tensor keeps its batch axis.

Most models batch on axis 0, but a recurrent state is often laid out ``[layers, batch, hidden]``,
some inputs are not batched at all (a scalar setting shared by every row), and a compiled model
may keep an output's batch elsewhere (``x [N,4]`` -> Transpose -> ``y [4,N]``) or return a value
that does not carry the batch at all (a scalar). The runner works
on *batch-first* views: ``to_batch_first`` moves a tensor's batch axis to the front (a view, no
copy) and ``engine_shape`` puts it back where the engine wants it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec, TensorSpec, batch_support_from_shapes


@dataclass(frozen=True)
class Layout:
    """Batch axis per engine tensor: an int (default 0), or None for an unbatched input.

    ``axes`` come from GEModel's parameters (unbatched inputs, state pairs); ``derived`` are read
    from the model's shapes (``with_model``): the batch axis of each output of a model with batch
    gears (None for an output that does not carry the batch: it is returned whole), and None for
    each input such a model keeps static (not batched)."""

    axes: Mapping[str, int | None] = field(default_factory=dict)
    derived: Mapping[str, int | None] = field(default_factory=dict)

    @classmethod
    def of(cls, unbatched: Iterable[str] = (), states: Iterable = (), state_axis: int = 0) -> Layout:
        """The layout GEModel's parameters describe: ``unbatched`` inputs have no batch axis;
        both tensors of every state pair (``.input``/``.output``) batch on ``state_axis``."""
        axes: dict[str, int | None] = {name: None for name in unbatched}
        for pair in states:
            axes[pair.input] = axes[pair.output] = state_axis
        return cls(axes)

    @cached_property
    def all_first(self) -> bool:
        """Every batch axis is axis 0 (or absent): batch-first views are the arrays themselves."""
        return not any(self.axes.values()) and not any(self.derived.values())

    def axis(self, name: str) -> int | None:
        if name in self.axes:
            return self.axes[name]
        return self.derived.get(name, 0)

    def with_model(self, spec: ModelSpec) -> Layout:
        """This layout plus what the model's shapes say about the tensors the parameters do not
        place: the batch axis of every output (``output_batch_axes``) and the static inputs
        (``static_inputs``)."""
        given = set(self.axes)
        derived = output_batch_axes(spec, given) | dict.fromkeys(static_inputs(spec, given))
        return replace(self, derived=derived)

    def whole_outputs(self, spec: ModelSpec) -> tuple[str, ...]:
        """Outputs that do not carry the batch (returned whole, never split between requests)."""
        return tuple(t.name for t in spec.outputs if self.axis(t.name) is None)

    def moved_outputs(self, spec: ModelSpec) -> dict[str, int]:
        """Client-visible outputs whose batch axis is not axis 0: output -> its batch axis."""
        return {t.name: axis for t in spec.outputs if t.name not in self.axes and (axis := self.axis(t.name))}

    def unbatched(self, spec: ModelSpec) -> tuple[str, ...]:
        return tuple(t.name for t in spec.inputs if self.axis(t.name) is None)

    def check(self, spec: ModelSpec) -> None:
        """Every named tensor exists, every batch axis is within its rank, and a scalar input of a
        model that batches is unbatched."""
        tensors = {t.name: t for t in spec.inputs + spec.outputs}
        for name, axis in self.axes.items():
            if name not in tensors:
                raise ConfigError(
                    f"batch axis given for {name!r}, which the model does not have; it has {sorted(tensors)}"
                )
            if axis is None and name not in {t.name for t in spec.inputs}:
                raise ConfigError(f"output {name!r} cannot be unbatched: every output must carry the batch")
            rank = len(tensors[name].shape)
            if axis is not None and not 0 <= axis < rank:
                raise ConfigError(f"batch axis {axis} of {name!r} is outside its rank {rank}")
        if spec.batch.kind == "none":
            return
        for tensor in spec.inputs:
            if not tensor.shape and not tensor.dynamic_rank and self.axis(tensor.name) is not None:
                raise ConfigError(
                    f"input {tensor.name!r} is a scalar (rank 0), but the model batches its other inputs "
                    f"({spec.batch.kind} batch{' ' + ', '.join(map(str, spec.batch.sizes)) if spec.batch.sizes else ''}"
                    f"), so it has no batch axis to batch on: list it in parameter unbatched_inputs "
                    f"(ge-triton generate --unbatched-inputs {tensor.name}): one value per request"
                )

    def _moved(self, tensor: TensorSpec) -> TensorSpec:
        axis = self.axis(tensor.name)
        if not axis:
            return tensor
        shape, names = list(tensor.shape), list(tensor.dim_names)
        shape.insert(0, shape.pop(axis))
        if names:
            names.insert(0, names.pop(axis))
        return replace(tensor, shape=tuple(shape), dim_names=tuple(names))

    def batch_first_spec(self, spec: ModelSpec) -> ModelSpec:
        """``spec`` with every batched tensor's batch axis first and unbatched inputs left out.

        For a model whose batch axes are not all 0, batch support is re-derived from the moved
        shapes (the model file's own derivation only looks at axis 0).
        """
        inputs = tuple(self._moved(t) for t in spec.inputs if self.axis(t.name) is not None)
        outputs = tuple(self._moved(t) for t in spec.outputs)
        moved = replace(spec, inputs=inputs, outputs=outputs)
        if (any(self.axes.values()) or self.unbatched(spec)) and spec.batch.kind in ("dynamic", "none", "static"):
            batch = batch_support_from_shapes(inputs, outputs)
            if batch.kind == "dynamic":  # a shape range's bound on the batch stays
                batch = replace(batch, limit=spec.batch.limit)
            moved = replace(moved, batch=batch)
        return moved

    def to_batch_first(self, name: str, array: np.ndarray) -> np.ndarray:
        axis = self.axis(name)
        return np.moveaxis(array, axis, 0) if axis else array

    def from_batch_first(self, name: str, array: np.ndarray) -> np.ndarray:
        axis = self.axis(name)
        return np.moveaxis(array, 0, axis) if axis else array

    def engine_shape(self, name: str, batch_first: tuple[int, ...]) -> tuple[int, ...]:
        axis = self.axis(name)
        if not axis:
            return tuple(batch_first)
        shape = list(batch_first[1:])
        shape.insert(axis, batch_first[0])
        return tuple(shape)


def output_batch_axes(spec: ModelSpec, given: Iterable[str] = ()) -> dict[str, int | None]:
    """Where each output of a model with batch gears keeps the batch (outputs in ``given`` are
    placed by the caller and skipped).

    The readers mark with -1 every output axis whose size changes between the gears. Axis 0
    being -1 is the usual batch-first output (not listed); a single other -1 axis holds the
    batch (``[4,-1]``: axis 1); no -1 axis means the output does not change with the batch
    (a scalar, a summary): None. Several -1 axes cannot be told apart: ConfigError, since rows
    could then not be split back per request. The runner checks on every batch that the chosen
    axis has the batch's size, so rows never reach another request even when the guess is wrong.
    Models without gears need nothing here: their batch axis is axis 0 of every tensor by
    construction (``batch_support_from_shapes``) or absent."""
    if spec.batch.kind != "gears":
        return {}
    skip = set(given)
    axes: dict[str, int | None] = {}
    for tensor in spec.outputs:
        if tensor.name in skip or (tensor.shape and tensor.shape[0] == -1):
            continue
        varying = [axis for axis, size in enumerate(tensor.shape) if size == -1]
        if len(varying) > 1:
            raise ConfigError(
                f"output {tensor.name!r} {tensor.shape_text()}: axes {', '.join(map(str, varying))} all change with "
                "the batch gear, so which one holds the batch cannot be told and its rows could not be split "
                "back per request; compile the model with the batch on axis 0 of this output"
            )
        axes[tensor.name] = varying[0] if varying else None
    return axes


def static_inputs(spec: ModelSpec, given: Iterable[str] = ()) -> tuple[str, ...]:
    """The inputs a model with batch gears keeps static: ATC compiles ``--dynamic_batch_size`` over
    the inputs whose axis 0 is -1 and leaves an input with a fixed shape as it is in every gear
    (hicann/ge compiler/graph/passes/multi_batch/multi_batch_clone_pass.cc:1124-1127, "No need to do
    anything for static data"; the option check skips it, compiler/api/aclgrph/option_utils.cc:312-330).
    Such an input is one value per request (as with parameter unbatched_inputs); inputs in ``given``
    are placed by the caller and skipped."""
    if spec.batch.kind != "gears":
        return ()
    skip = set(given)
    return tuple(t.name for t in spec.inputs if t.name not in skip and t.shape and t.shape[0] != -1)
