"""A deterministic in-memory engine for runner tests: y = x * 2.

Like the acl engine, each slot lends input buffers it keeps, and returns its outputs as views of
a buffer it reuses on the next run: answers that outlive their slot must have been copied.
"""

from __future__ import annotations

import threading

import numpy as np

from ge_python_backend.engines.base import Engine, PhaseTimes, Slot
from ge_python_backend.errors import EngineError
from ge_python_backend.serving.outputs import DeclaredTensor
from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec


class _DoublingSlot(Slot):
    def __init__(self, index: int, engine: DoublingEngine) -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._engine = engine
        self._buffers: dict[tuple, np.ndarray] = {}
        self._staged: dict[str, np.ndarray] = {}

    def _buffer(self, key: tuple) -> np.ndarray:
        if key not in self._buffers:
            self._buffers[key] = np.empty(key[1:], np.float32)
        return self._buffers[key]

    def inputs(self, shapes, settings=None):
        self._staged = {name: self._buffer((name,) + tuple(shape)) for name, shape in shapes.items()}
        return self._staged

    def run(self):
        x = self._staged["x"]
        with self._engine.lock:
            self._engine.batches.append(x.shape[0])
        if (x == self._engine.poison).any():
            raise EngineError("injected failure: poison value in the batch", fatal=self._engine.fatal)
        y = self._buffer(("y",) + x.shape)
        np.multiply(x, 2, out=y)
        return {"y": y}


class DoublingEngine(Engine):
    """x FP32 [batch, 2] -> y FP32 [batch, 2]; a batch containing ``poison`` fails."""

    name = "doubling"

    def __init__(self, batch: BatchSupport, slots: int = 1, poison: float = -999.0, fatal: bool = False) -> None:
        self.spec = ModelSpec(
            inputs=(TensorSpec("x", "FP32", (-1, 2)),), outputs=(TensorSpec("y", "FP32", (-1, 2)),), batch=batch
        )
        self.poison = poison
        self.fatal = fatal
        self.batches: list[int] = []
        self.lock = threading.Lock()
        self._slots = tuple(_DoublingSlot(i, self) for i in range(slots))
        self.closed = False

    @property
    def slots(self):
        return self._slots

    def close(self):
        self.closed = True


def declared(spec: ModelSpec, batching: bool = True, **types: str) -> tuple[DeclaredTensor, ...]:
    """A config's outputs for ``spec``'s outputs (batch axis removed when batching); ``types``
    (output -> API data type) declare other types than the model's."""
    return tuple(
        DeclaredTensor(t.name, types.get(t.name, t.dtype), t.shape[1:] if batching else t.shape) for t in spec.outputs
    )
