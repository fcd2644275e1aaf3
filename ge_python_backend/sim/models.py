"""Loaded simulated models, descs, datasets, data buffers, tensor descs and AIPP sets, and how a
model executes.

Execution reads the gear the dynamic tensor holds (``set_dynamic_*`` wrote it into the device
buffer, as GE does: hicann/ge runtime/v1/executor/ge_executor.cc 375-432, 548-582), each input's
shape (its gear, or the tensor desc set on the dataset for a shape-range model), the dynamic-AIPP
parameters ``set_input_aipp`` wrote, reads exactly those input bytes from device memory, applies
the AIPP, runs the embedded ONNX model on ONNX Runtime and writes the outputs into the output
device buffers.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ge_python_backend.ascend.aipp import AippConfig
from ge_python_backend.ascend.atcflags import parse_aicore_num
from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ret_code
from ge_python_backend.ascend.layout import Shape
from ge_python_backend.sim.aipp import transform
from ge_python_backend.sim.signature import AclFail
from ge_python_backend.sim.simom import InputRole, SimOm
from ge_python_backend.specs import format_shape, numpy_dtype

MODEL_EXECUTE = ret_code("ACL_ERROR_RT_MODEL_EXECUTE")
#: Key of a synchronous ``execute`` in ``LoadedModel.running``.
SYNC = "execute"


@dataclass
class DataBuffer:
    handle: int
    addr: int
    size: int


@dataclass(frozen=True)
class TensorDesc:
    """An ``aclTensorDesc``: a host-side description (type code, dims, format code, name)."""

    handle: int
    data_type: int
    dims: Shape
    format: int
    name: str = ""


@dataclass
class Dataset:
    handle: int
    buffers: list[int] = field(default_factory=list)
    #: index -> a copy of the tensor desc set with set_dataset_tensor_desc (hicann/ge model_om2.cpp 965-990)
    descs: dict[int, TensorDesc] = field(default_factory=dict)


@dataclass
class AippSet:
    """An ``aclmdlAIPP`` from ``create_aipp(batch)``: one head and one entry per batch image
    (var_reci starts at 1.0, everything else at 0: acl_aipp_om2.cpp 330-363)."""

    handle: int
    head: AippConfig
    batches: list[AippConfig]


@dataclass
class LoadedModel:
    """One load: its own id, context, current gear and in-flight executions."""

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
    #: a weight buffer the caller gave load_from_file_with_mem (its device address), else 0
    weight_ptr: int = 0
    work_ptr: int = 0
    #: a shape-range model: input shapes -> the output shapes they give (host_output_shapes)
    output_shapes: dict[tuple[Shape, ...], tuple[Shape, ...]] = field(default_factory=dict)

    @cached_property
    def cores(self) -> int | None:
        """The AI (Cube) Cores each operator runs on: the first part of the ``--aicore_num`` the model
        was compiled with (sim/compile.py records it), None: all the device's."""
        given = self.om.producer.get("aicore_num", "")
        return parse_aicore_num(given)[0] if given else None

    @property
    def dynamic_index(self) -> int | None:
        return self.om.index_of(InputRole.DYNAMIC_SHAPE)

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


def encode_gear(values: tuple[int, ...], capacity: int) -> bytes:
    """The bytes set_dynamic_* writes into the dynamic tensor: each value as uint32, or uint64
    when the buffer has room for that (ge_executor.cc 424, 548-582)."""
    wide = capacity >= 8 * len(values)
    return struct.pack(f"<{len(values)}{'Q' if wide else 'I'}", *values)


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


@dataclass(frozen=True)
class Run:
    """What one execution runs: the gear, each client input's shape and bytes, the AIPP values."""

    gear: int
    shapes: dict[str, Shape]
    data: dict[str, bytes]
    #: client input -> (head, per-batch configs) read from its dynamic-AIPP parameter block
    dynamic_aipp: dict[str, tuple[AippConfig, list[AippConfig]]] = field(default_factory=dict)


def run_session(model: LoadedModel, run: Run) -> list[np.ndarray]:
    """Run the ONNX model on ``run``'s inputs (AIPP applied); check the output shapes."""
    om, layout = model.om, model.om.layout
    feeds = {}
    for tensor in layout.inputs:
        entry = om.client_input(tensor.name)
        shape = run.shapes[tensor.name]
        if tensor.aipp is not None and entry.network is not None:
            batch = shape[0]
            head, per_batch = run.dynamic_aipp.get(tensor.name, (tensor.aipp, None))
            feeds[tensor.name] = transform(head, run.data[tensor.name], batch, entry.network, per_batch)
            continue
        if not tensor.data_type.triton:
            raise AclFail(
                MODEL_EXECUTE, f"input {tensor.name!r} has type {tensor.data_type.name}, which the simulator cannot run"
            )
        feeds[tensor.name] = np.frombuffer(run.data[tensor.name], numpy_dtype(tensor.data_type.triton)).reshape(shape)
    try:
        results = model.session.run([t.name for t in layout.outputs], feeds)
    except Exception as exc:  # ONNX Runtime raises several private exception types
        raise AclFail(
            MODEL_EXECUTE, f"model {model.model_id} at {layout.gear_label(run.gear)}: ONNX Runtime failed: {exc}"
        ) from None
    if layout.kind != "range":
        for tensor, want, result in zip(layout.outputs, layout.output_shapes(run.gear), results):
            if tuple(result.shape) != want:
                raise AclFail(
                    MODEL_EXECUTE,
                    f"output {tensor.name!r} came out {format_shape(tuple(result.shape))}, "
                    f"the model declares {format_shape(want)} at {layout.gear_label(run.gear)}",
                )
    return [np.ascontiguousarray(r) for r in results]


def host_output_shapes(model: LoadedModel, shapes: dict[str, Shape]) -> tuple[Shape, ...] | None:
    """The output shapes a shape-range model gives for these input shapes, known on the host before
    anything runs, as RT2's executor knows them (it infers shapes on the host inside execute, then
    sizes the copy-out: model.cpp 662-671, memory_copy.cc 543-572); from a run on zeros, kept per
    shape set. None where an input has AIPP (its network shape comes from the AIPP parameters)."""
    om = model.om
    if any(t.aipp is not None for t in om.layout.inputs):
        return None
    key = tuple(shapes[t.name] for t in om.layout.inputs)
    found = model.output_shapes.get(key)
    if found is None:
        zeros = Run(0, dict(shapes), {t.name: bytes(t.byte_size(shapes[t.name])) for t in om.layout.inputs})
        found = model.output_shapes[key] = tuple(tuple(r.shape) for r in run_session(model, zeros))
    return found


def modelled_seconds(run: Run, device_ms: float, row_ms: float) -> float:
    """Device time one execution takes alone on the device with all its cores: fixed ms plus ms
    per row of the batch axis."""
    if not device_ms and not row_ms:
        return 0.0
    first = next(iter(run.shapes.values()), ())
    rows = first[0] if first else 1
    return (device_ms + row_ms * rows) / 1000.0
