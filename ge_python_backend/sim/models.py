"""Loaded simulated models, model descs, datasets and data buffers, and how a model executes.

Execution reads the gear the dynamic tensor holds (``set_dynamic_*`` wrote it into the
device buffer, as GE does), reads exactly that gear's input bytes from device memory, runs the
embedded ONNX model on ONNX Runtime and writes the outputs into the output device buffers.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ret_code
from ge_python_backend.ascend.simom import SimOm
from ge_python_backend.sim.signature import AclFail
from ge_python_backend.specs import numpy_dtype

MODEL_EXECUTE = ret_code("ACL_ERROR_RT_MODEL_EXECUTE")
#: Key of a synchronous ``execute`` in ``LoadedModel.running``.
SYNC = "execute"


@dataclass
class DataBuffer:
    handle: int
    addr: int
    size: int


@dataclass
class Dataset:
    handle: int
    buffers: list[int] = field(default_factory=list)


@dataclass
class LoadedModel:
    """One ``load_from_file``: its own id, context, current gear and in-flight executions."""

    model_id: int
    path: str
    om: SimOm
    session: Any
    context: int
    device: int
    work_size: int
    weight_size: int
    current_gear: int | None = None
    #: stream handle (or SYNC) -> executions queued or running there
    running: Counter = field(default_factory=Counter)

    @property
    def dynamic_index(self) -> int | None:
        return len(self.om.layout.inputs) if self.om.layout.kind else None

    def busy_elsewhere(self, stream: int | str | None) -> int | str | None:
        """Another stream (or SYNC) on which this model is executing, if any (``stream`` None: any one)."""
        return next((s for s, n in self.running.items() if n > 0 and s != stream), None)


@dataclass
class ModelDesc:
    handle: int
    model: LoadedModel | None = None


def model_costs(om: SimOm) -> tuple[int, int]:
    """Nominal (work, weight) device bytes of a model: its I/O at the largest gear, and its weights."""
    work = sum(t.size for t in om.all_inputs) + sum(t.size for t in om.layout.outputs)
    return work, len(om.onnx)


def encode_gear(kind: str, gear: tuple[int, ...], capacity: int) -> bytes:
    """The bytes set_dynamic_* writes into the dynamic tensor (uint64 when there is room, like GE)."""
    wide = capacity >= 8 * len(gear)
    return struct.pack(f"<{len(gear)}{'Q' if wide else 'I'}", *gear)


def decode_gear(data: bytes, count: int) -> tuple[int, ...]:
    wide = len(data) >= 8 * count
    return struct.unpack_from(f"<{count}{'Q' if wide else 'I'}", data)


def gear_of(model: LoadedModel, dynamic_bytes: bytes) -> int:
    """The gear index the dynamic tensor's bytes select; AclFail when they select none."""
    layout = model.om.layout
    value = decode_gear(dynamic_bytes, len(layout.gears[0]))
    try:
        return layout.gears.index(value)
    except ValueError:
        raise AclFail(
            MODEL_EXECUTE,
            f"model {model.model_id}: the dynamic input {ACL_DYNAMIC_TENSOR_NAME!r} "
            f"holds {list(value)}, which is not a gear ({[list(g) for g in layout.gears]}); "
            f"call set_dynamic_batch_size/set_dynamic_hw_size/set_input_dynamic_dims "
            f"before executing",
        ) from None


def run_session(model: LoadedModel, gear: int, inputs: list[bytes]) -> list[np.ndarray]:
    """Run the ONNX model at ``gear`` on the given input bytes; check the output shapes."""
    layout = model.om.layout
    feeds = {}
    for tensor, shape, data in zip(layout.inputs, layout.input_shapes(gear).values(), inputs):
        if not tensor.data_type.triton:
            raise AclFail(
                MODEL_EXECUTE, f"input {tensor.name!r} has type {tensor.data_type.name}, which the simulator cannot run"
            )
        feeds[tensor.name] = np.frombuffer(data, numpy_dtype(tensor.data_type.triton)).reshape(shape)
    try:
        results = model.session.run([t.name for t in layout.outputs], feeds)
    except Exception as exc:  # ONNX Runtime raises several private exception types
        raise AclFail(
            MODEL_EXECUTE, f"model {model.model_id} at {layout.gear_label(gear)}: ONNX Runtime failed: {exc}"
        ) from None
    for tensor, want, result in zip(layout.outputs, layout.output_shapes(gear), results):
        if tuple(result.shape) != want:
            raise AclFail(
                MODEL_EXECUTE,
                f"output {tensor.name!r} came out {list(result.shape)}, "
                f"the model declares {list(want)} at {layout.gear_label(gear)}",
            )
    return [np.ascontiguousarray(r) for r in results]


def modelled_seconds(model: LoadedModel, gear: int, device_ms: float, row_ms: float) -> float:
    """Device time one execution takes: fixed ms plus ms per row of the batch axis."""
    if not device_ms and not row_ms:
        return 0.0
    first = next(iter(model.om.layout.input_shapes(gear).values()), ())
    rows = first[0] if first else 1
    return (device_ms + row_ms * rows) / 1000.0


def pad_to(started: float, seconds: float) -> None:
    """Sleep (without the GIL) until ``seconds`` have passed since ``started``."""
    remaining = started + seconds - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)
