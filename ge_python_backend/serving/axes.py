"""Where each engine tensor keeps its batch axis.

Most models batch on axis 0, but a recurrent state is often laid out ``[layers, batch, hidden]``
and some inputs are not batched at all (a scalar setting shared by every row). The runner works
on *batch-first* views: ``to_batch_first`` moves a tensor's batch axis to the front (a view, no
copy) and ``engine_shape`` puts it back where the engine wants it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec, TensorSpec, batch_support_from_shapes


@dataclass(frozen=True)
class Layout:
    """Batch axis per engine tensor: an int (default 0), or None for an unbatched input."""

    axes: Mapping[str, int | None] = field(default_factory=dict)

    @classmethod
    def of(cls, unbatched: Iterable[str] = (), states: Iterable = (), state_axis: int = 0) -> Layout:
        """The layout GEModel's parameters describe: ``unbatched`` inputs have no batch axis;
        both tensors of every state pair (``.input``/``.output``) batch on ``state_axis``."""
        axes: dict[str, int | None] = {name: None for name in unbatched}
        for pair in states:
            axes[pair.input] = axes[pair.output] = state_axis
        return cls(axes)

    def axis(self, name: str) -> int | None:
        return self.axes.get(name, 0)

    def unbatched(self, spec: ModelSpec) -> tuple[str, ...]:
        return tuple(t.name for t in spec.inputs if self.axis(t.name) is None)

    def check(self, spec: ModelSpec) -> None:
        """Every named tensor exists and every batch axis is within its rank."""
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

    def _moved(self, tensor: TensorSpec) -> TensorSpec:
        axis = self.axis(tensor.name)
        if not axis:
            return tensor
        shape = list(tensor.shape)
        shape.insert(0, shape.pop(axis))
        return replace(tensor, shape=tuple(shape))

    def batch_first_spec(self, spec: ModelSpec) -> ModelSpec:
        """``spec`` with every batched tensor's batch axis first and unbatched inputs left out.

        For a model whose batch axes are not all 0, batch support is re-derived from the moved
        shapes (the model file's own derivation only looks at axis 0).
        """
        inputs = tuple(self._moved(t) for t in spec.inputs if self.axis(t.name) is not None)
        outputs = tuple(self._moved(t) for t in spec.outputs)
        moved = replace(spec, inputs=inputs, outputs=outputs)
        if (any(self.axes.values()) or self.unbatched(spec)) and spec.batch.kind in ("dynamic", "none", "static"):
            moved = replace(moved, batch=batch_support_from_shapes(inputs, outputs))
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
