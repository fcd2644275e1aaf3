"""A deterministic in-memory engine for runner tests: outputs y = x * 2 + slot marker."""

from __future__ import annotations

import threading

import numpy as np

from ge_python_backend.engines.base import Engine, PhaseTimes, Slot
from ge_python_backend.errors import EngineError
from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec


class _DoublingSlot(Slot):
    def __init__(self, index: int, engine: "DoublingEngine") -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._engine = engine
        self._staged: dict[str, np.ndarray] = {}

    def inputs(self, shapes):
        self._staged = {name: np.empty(shape, np.float32) for name, shape in shapes.items()}
        return self._staged

    def run(self):
        x = self._staged["x"]
        with self._engine.lock:
            self._engine.batches.append(x.shape[0])
        if (x == self._engine.poison).any():
            raise EngineError("injected failure: poison value in the batch", fatal=self._engine.fatal)
        return {"y": x * 2}


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
