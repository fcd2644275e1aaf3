"""The acl engine: a CANN offline model (.om) on an Ascend NPU through pyACL (``import acl``).

With ``acl-sim`` (or ``GE_ACL_SIMULATOR=1``) the same code runs against the pyACL simulator in
``ge_python_backend.sim``. pyACL is imported lazily, only when an engine opens.

Each slot loads its own copy of the model (one model_id must never execute on two streams at
once, pyacl.md §8.5) and owns a stream, device buffers of the largest gear, pinned host staging
buffers, prebuilt datasets and four timing events; nothing is allocated on the execute path.
See docs/acl-engine.md for the pyACL calls of each phase.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ge_python_backend.errors import ConfigError, EngineError
from ge_python_backend.params import Parameter, parse_bool, parse_float
from ge_python_backend.specs import format_shape, numpy_dtype
from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ACL_SUCCESS, MallocPolicy, MemcpyKind, data_type, format_name
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout, Shape
from ge_python_backend.engines.acl.runtime import AclError, AclRuntime, acl_module, check, check_handle, recent_message
from ge_python_backend.engines.base import Engine, PhaseTimes, Shapes, Slot

LOG = logging.getLogger(__name__)

SIMULATOR_ENV = "GE_ACL_SIMULATOR"
#: get_dynamic_hw / get_input_dynamic_gear_count / get_input_dynamic_dims take a reserved index: -1.
_RESERVED_INDEX = -1


def _parse_faults(raw: str):
    from ge_python_backend.sim.faults import FaultPlan

    return FaultPlan.parse(raw)


PARAMETERS = (
    Parameter(
        "acl_sim_faults",
        _parse_faults,
        None,
        "faults such as 'execute_async:3=507011, malloc:2, memcpy_async:9=lost' (FUNCTION:N[=RET|=lost])",
        "acl-sim only: fail the Nth call of a pyACL function, or lose the device",
    ),
    Parameter(
        "acl_sim_device_ms",
        parse_float(0.0),
        None,
        "milliseconds >= 0",
        "acl-sim only: modelled device time of every execution (the stream is busy that long)",
    ),
    Parameter(
        "acl_sim_row_ms",
        parse_float(0.0),
        None,
        "milliseconds >= 0",
        "acl-sim only: modelled device time per batch row, added to acl_sim_device_ms",
    ),
)


@dataclass(frozen=True)
class _ModelPlan:
    """What every slot needs to know about the model, read once from the first copy's desc."""

    layout: ModelLayout
    #: index and bytes of ascend_mbatch_shape_data; None and 0 for a static model
    dynamic_index: int | None
    dynamic_size: int
    #: per gear, the last argument(s) of its set_dynamic_* call, built once
    gear_arguments: tuple[tuple[Any, ...], ...]

    def model_inputs(self) -> list[tuple[LayoutTensor | None, int]]:
        """(tensor, bytes) of every model input in index order; None is ascend_mbatch_shape_data."""
        inputs: list[tuple[LayoutTensor | None, int]] = [(t, t.size) for t in self.layout.inputs]
        if self.dynamic_index is not None:
            inputs.insert(self.dynamic_index, (None, self.dynamic_size))
        return inputs

    def model_outputs(self) -> list[tuple[LayoutTensor | None, int]]:
        return [(t, t.size) for t in self.layout.outputs]


@dataclass
class _Buffer:
    """One model input or output: its device buffer, data buffer and (for client tensors) pinned host twin.

    Handles stay 0 until allocated, so a slot that fails part-way releases exactly what it made.
    """

    kind: str  # "input" or "output"
    index: int  # model input or output index
    name: str
    dtype: np.dtype | None  # None: ascend_mbatch_shape_data, which has no host twin
    capacity: int
    device: int = 0
    data_buffer: int = 0
    host: int = 0

    def copy_what(self) -> str:
        return f"copying {self.kind} {self.name!r} to the {'device' if self.kind == 'input' else 'host'}"

    def shape_what(self) -> str:
        return f"reading the shape of output {self.name!r}"


def _gear_arguments(kind: str, gears: tuple[Shape, ...]) -> tuple[tuple[Any, ...], ...]:
    """The values each gear passes to set_dynamic_batch_size (batch), set_dynamic_hw_size (h, w)
    or set_input_dynamic_dims (the dims dict, pyacl.md §4.3)."""
    if kind == "dims":
        return tuple(({"dimCount": len(g), "name": "", "dims": list(g)},) for g in gears)
    return gears


def _refuse_unservable(tensors: list[LayoutTensor], kind: str) -> None:
    for tensor in tensors:
        if not tensor.data_type.triton:
            raise ConfigError(
                f"model {kind} {tensor.name!r} has type ACL_{tensor.data_type.name} ({tensor.data_type.code}), "
                f"which cannot be served: it {tensor.data_type.unsupported}"
            )


def _input_tensor(acl: Any, desc: int, index: int) -> LayoutTensor:
    dims, ret = acl.mdl.get_input_dims(desc, index)
    check(acl, ret, "acl.mdl.get_input_dims", f"reading input {index}")
    name = acl.mdl.get_input_name_by_index(desc, index)
    code = acl.mdl.get_input_data_type(desc, index)
    fmt = acl.mdl.get_input_format(desc, index)
    size = acl.mdl.get_input_size_by_index(desc, index)
    return LayoutTensor(name or dims["name"], data_type(code), format_name(fmt), _shape(dims), size)


def _output_tensor(acl: Any, desc: int, index: int) -> LayoutTensor:
    dims, ret = acl.mdl.get_output_dims(desc, index)
    check(acl, ret, "acl.mdl.get_output_dims", f"reading output {index}")
    name = acl.mdl.get_output_name_by_index(desc, index)
    code = acl.mdl.get_output_data_type(desc, index)
    fmt = acl.mdl.get_output_format(desc, index)
    size = acl.mdl.get_output_size_by_index(desc, index)
    return LayoutTensor(name or dims["name"], data_type(code), format_name(fmt), _shape(dims), size)


def _shape(dims: Mapping[str, Any]) -> Shape:
    return tuple(int(d) for d in dims["dims"][: dims["dimCount"]])


def _gears(acl: Any, desc: int) -> tuple[str, tuple[Shape, ...]]:
    """The gear kind and gears of a model that has ascend_mbatch_shape_data.

    A lookup that fails, or answers no gears, means "not this kind": pyacl.md §4.3 only infers
    ret 0 with count 0 for a kind the model lacks, so a runtime may answer with an error code
    instead. Only when none of the three finds gears is the model refused, listing each answer.
    """
    answers = []
    batch, ret = acl.mdl.get_dynamic_batch(desc)
    if ret == ACL_SUCCESS and batch["batchCount"]:
        return "batch", tuple((int(b),) for b in batch["batch"][: batch["batchCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_batch", ret, f"batchCount {batch.get('batchCount')}"))
    hw, ret = acl.mdl.get_dynamic_hw(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and hw["hwCount"]:
        return "hw", tuple((int(h), int(w)) for h, w in hw["hw"][: hw["hwCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_hw", ret, f"hwCount {hw.get('hwCount')}"))
    count, ret = acl.mdl.get_input_dynamic_gear_count(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and count:
        gears, ret = acl.mdl.get_input_dynamic_dims(desc, _RESERVED_INDEX, count)
        check(acl, ret, "acl.mdl.get_input_dynamic_dims", f"reading the model's {count} dims gears")
        return "dims", tuple(_shape(g) for g in gears)
    answers.append(_lookup_answer(acl, "acl.mdl.get_input_dynamic_gear_count", ret, f"gear count {count}"))
    raise ConfigError(f"the model has the input {ACL_DYNAMIC_TENSOR_NAME!r} but no gear lookup found gears: "
                      + "; ".join(answers))


def _lookup_answer(acl: Any, function: str, ret: int, found: str) -> str:
    """How one gear lookup answered (reading the runtime's message, so none is left behind)."""
    if ret == ACL_SUCCESS:
        return f"{function} returned 0 with {found}"
    answer = str(AclError(function, ret, recent_message(acl)))
    LOG.debug("gear lookup: %s (taken as: not this gear kind)", answer)
    return answer


class AclSlot(Slot):
    """One model copy with its stream, buffers, datasets and events."""

    def __init__(self, index: int, acl: Any, model_path: str, plan: _ModelPlan | None) -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._acl = acl
        self._stream = 0
        self._events: list[int] = []
        self._model_id: int | None = None
        self._desc = 0
        self._input_dataset = 0
        self._output_dataset = 0
        self.plan: _ModelPlan | None = None
        #: every device buffer of both datasets, in creation order (what release frees)
        self._buffers: list[_Buffer] = []
        #: the client tensors' buffers, in layout order (what runs copy)
        self._inputs: list[_Buffer] = []
        self._outputs: list[_Buffer] = []
        #: per gear: views of the pinned input buffers, and the bytes each input copies
        self._input_views: tuple[dict[str, np.ndarray], ...] = ()
        self._input_bytes: tuple[tuple[int, ...], ...] = ()
        #: per set of output shapes met so far: views of the pinned output buffers and their bytes
        self._output_views: dict[tuple[Shape, ...], tuple[dict[str, np.ndarray], tuple[int, ...]]] = {}
        self._staged: int | None = None
        try:
            self._open(model_path, plan)
        except BaseException:
            self.release()
            raise

    # --- setup ----------------------------------------------------------------------------------

    def _open(self, model_path: str, plan: _ModelPlan | None) -> None:
        acl = self._acl
        stream, ret = acl.rt.create_stream()
        check(acl, ret, "acl.rt.create_stream", f"opening slot {self.index}")
        self._stream = stream
        for _ in range(4):
            event, ret = acl.rt.create_event()
            check(acl, ret, "acl.rt.create_event")
            self._events.append(event)
        model_id, ret = acl.mdl.load_from_file(model_path)
        check(acl, ret, "acl.mdl.load_from_file", f"loading {model_path} (copy {self.index})")
        self._model_id = model_id
        desc = acl.mdl.create_desc()
        self._desc = check_handle(acl, desc, "acl.mdl.create_desc")
        ret = acl.mdl.get_desc(desc, model_id)
        check(acl, ret, "acl.mdl.get_desc")
        draft = plan or self._read_plan()
        self._input_dataset = self._new_dataset()
        self._fill_dataset(self._input_dataset, "input", draft.model_inputs(), self._inputs)
        self._output_dataset = self._new_dataset()
        self._fill_dataset(self._output_dataset, "output", draft.model_outputs(), self._outputs)
        self.plan = plan or self._probe_gears(draft)
        layout = self.plan.layout
        gear_shapes = [tuple(layout.input_shapes(g).values()) for g in range(layout.gear_count)]
        self._input_views = tuple({b.name: _view(b, s) for b, s in zip(self._inputs, shapes)} for shapes in gear_shapes)
        self._input_bytes = tuple(tuple(_byte_size(b, s) for b, s in zip(self._inputs, shapes)) for shapes in gear_shapes)

    def _read_plan(self) -> _ModelPlan:
        """The model's tensors and gears from the desc (output shapes per gear still unknown)."""
        acl, desc = self._acl, self._desc
        count = acl.mdl.get_num_inputs(desc)
        index, ret = acl.mdl.get_input_index_by_name(desc, ACL_DYNAMIC_TENSOR_NAME)
        dynamic_index = index if ret == ACL_SUCCESS else None
        if dynamic_index is None:  # "no such input" is the documented answer for a static model
            LOG.debug("no %s input (%s): static model", ACL_DYNAMIC_TENSOR_NAME, recent_message(acl))
        inputs = [_input_tensor(acl, desc, i) for i in range(count) if i != dynamic_index]
        output_count = acl.mdl.get_num_outputs(desc)
        outputs = [_output_tensor(acl, desc, i) for i in range(output_count)]
        _refuse_unservable(inputs, "input")
        _refuse_unservable(outputs, "output")
        kind, gears, dynamic_size = "", (), 0
        if dynamic_index is not None:
            kind, gears = _gears(acl, desc)
            dynamic_size = acl.mdl.get_input_size_by_index(desc, dynamic_index)
        layout = ModelLayout(tuple(inputs), tuple(outputs), kind, gears)
        return _ModelPlan(layout, dynamic_index, dynamic_size, _gear_arguments(kind, gears))

    def _new_dataset(self) -> int:
        dataset = self._acl.mdl.create_dataset()
        return check_handle(self._acl, dataset, "acl.mdl.create_dataset")

    def _fill_dataset(self, dataset: int, kind: str, entries: list[tuple[LayoutTensor | None, int]],
                      clients: list[_Buffer]) -> None:
        """One device buffer per (tensor, bytes) entry, largest gear, added to ``dataset`` in order; a
        pinned host twin for each client tensor (None is ascend_mbatch_shape_data: none)."""
        acl = self._acl
        for index, (tensor, size) in enumerate(entries):
            if tensor is None:
                buffer = _Buffer(kind, index, ACL_DYNAMIC_TENSOR_NAME, None, size)
            else:
                buffer = _Buffer(kind, index, tensor.name, numpy_dtype(tensor.data_type.triton), size)
            self._buffers.append(buffer)
            what = f"allocating {kind} {buffer.name!r} ({buffer.capacity} bytes) of slot {self.index}"
            buffer.device, ret = acl.rt.malloc(buffer.capacity, MallocPolicy.HUGE_FIRST)
            check(acl, ret, "acl.rt.malloc", what)
            data_buffer = acl.create_data_buffer(buffer.device, buffer.capacity)
            buffer.data_buffer = check_handle(acl, data_buffer, "acl.create_data_buffer", what)
            _, ret = acl.mdl.add_dataset_buffer(dataset, data_buffer)
            check(acl, ret, "acl.mdl.add_dataset_buffer", what)
            if tensor is not None:
                buffer.host, ret = acl.rt.malloc_host(buffer.capacity)
                check(acl, ret, "acl.rt.malloc_host", what)
                clients.append(buffer)

    def _probe_gears(self, draft: _ModelPlan) -> _ModelPlan:
        """Each gear's output shapes: set the gear, then ask get_cur_output_dims (no execution)."""
        layout = draft.layout
        gear_outputs = []
        for g in range(layout.gear_count):
            if layout.kind:
                self._set_gear(draft, g)
            gear_outputs.append(self._current_output_shapes())
        final = ModelLayout(layout.inputs, layout.outputs, layout.kind, layout.gears, tuple(gear_outputs))
        return replace(draft, layout=final)

    def _set_gear(self, plan: _ModelPlan, g: int) -> None:
        """Select gear ``g`` with the arguments built at load (pyacl.md §9 step 6)."""
        acl, kind, values = self._acl, plan.layout.kind, plan.gear_arguments[g]
        model_id, dataset, index = self._model_id, self._input_dataset, plan.dynamic_index
        if kind == "batch":
            ret = acl.mdl.set_dynamic_batch_size(model_id, dataset, index, values[0])
            function = "acl.mdl.set_dynamic_batch_size"
        elif kind == "hw":
            ret = acl.mdl.set_dynamic_hw_size(model_id, dataset, index, values[0], values[1])
            function = "acl.mdl.set_dynamic_hw_size"
        else:
            ret = acl.mdl.set_input_dynamic_dims(model_id, dataset, index, values[0])
            function = "acl.mdl.set_input_dynamic_dims"
        check(acl, ret, function, lambda: f"selecting {plan.layout.gear_label(g)}")

    def _current_output_shapes(self) -> tuple[Shape, ...]:
        """The output shapes of the gear currently set, from the runtime (pyacl.md §9 step 8)."""
        acl, shapes = self._acl, []
        for buffer in self._outputs:
            dims, ret = acl.mdl.get_cur_output_dims(self._desc, buffer.index)
            check(acl, ret, "acl.mdl.get_cur_output_dims", buffer.shape_what)
            shapes.append(_shape(dims))
        return tuple(shapes)

    @property
    def device_bytes(self) -> int:
        return sum(b.capacity for b in self._buffers)

    @property
    def host_bytes(self) -> int:
        return sum(b.capacity for b in self._inputs + self._outputs)

    # --- execution ------------------------------------------------------------------------------

    def inputs(self, shapes: Shapes) -> dict[str, np.ndarray]:
        """Views of the pinned input buffers in exactly ``shapes`` (no pyACL call: any thread)."""
        try:
            g = self.plan.layout.find_gear(shapes)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        self._staged = g
        return dict(self._input_views[g])

    def run(self) -> dict[str, np.ndarray]:
        """Copy in, select the gear, execute, copy out, all on this slot's stream; then wait.

        Any failure once work may be queued (an AclError, or an output that outgrows its buffer)
        first waits for the stream, so the slot's buffers are quiet when the error is raised.
        """
        g = self._staged
        if g is None:
            raise EngineError(f"slot {self.index}: run() without inputs() first")
        acl, stream, plan = self._acl, self._stream, self.plan
        start, copied_in, executed, copied_out = self._events
        try:
            ret = acl.rt.record_event(start, stream)
            check(acl, ret, "acl.rt.record_event")
            for buffer, size in zip(self._inputs, self._input_bytes[g]):
                ret = acl.rt.memcpy_async(buffer.device, buffer.capacity, buffer.host, size,
                                          MemcpyKind.HOST_TO_DEVICE, stream)
                check(acl, ret, "acl.rt.memcpy_async", buffer.copy_what)
            ret = acl.rt.record_event(copied_in, stream)
            check(acl, ret, "acl.rt.record_event")
            if plan.layout.kind:
                self._set_gear(plan, g)
            ret = acl.mdl.execute_async(self._model_id, self._input_dataset, self._output_dataset, stream)
            check(acl, ret, "acl.mdl.execute_async", lambda: f"running {plan.layout.gear_label(g)}")
            ret = acl.rt.record_event(executed, stream)
            check(acl, ret, "acl.rt.record_event")
            views, sizes = self._outputs_at(self._current_output_shapes())
            for buffer, size in zip(self._outputs, sizes):
                ret = acl.rt.memcpy_async(buffer.host, buffer.capacity, buffer.device, size,
                                          MemcpyKind.DEVICE_TO_HOST, stream)
                check(acl, ret, "acl.rt.memcpy_async", buffer.copy_what)
            ret = acl.rt.record_event(copied_out, stream)
            check(acl, ret, "acl.rt.record_event")
            ret = acl.rt.synchronize_stream(stream)
            check(acl, ret, "acl.rt.synchronize_stream", lambda: f"running {plan.layout.gear_label(g)}")
        except BaseException:
            self._drain()
            raise
        self.last_times = PhaseTimes(
            host_to_device=self._elapsed(start, copied_in),
            execute=self._elapsed(copied_in, executed),
            device_to_host=self._elapsed(executed, copied_out),
        )
        return dict(views)

    def _elapsed(self, first: int, last: int) -> float:
        ms, ret = self._acl.rt.event_elapsed_time(first, last)
        check(self._acl, ret, "acl.rt.event_elapsed_time")
        return ms / 1000.0

    def _outputs_at(self, shapes: tuple[Shape, ...]) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
        """Views of the pinned output buffers in ``shapes`` and the bytes to copy (cached per shape set);
        EngineError when a shape needs more than its buffer holds."""
        found = self._output_views.get(shapes)
        if found is None:
            sizes = tuple(_byte_size(b, s) for b, s in zip(self._outputs, shapes))
            found = self._output_views[shapes] = ({b.name: _view(b, s) for b, s in zip(self._outputs, shapes)}, sizes)
        return found

    def _drain(self) -> None:
        """After a failure: wait for whatever was queued, so the slot's buffers are quiet again."""
        acl = self._acl
        ret = acl.rt.synchronize_stream(self._stream)
        if ret != ACL_SUCCESS:
            LOG.debug("slot %d: draining the stream after a failure: %s", self.index,
                      AclError("acl.rt.synchronize_stream", ret, recent_message(acl)))

    # --- teardown -------------------------------------------------------------------------------

    def release(self) -> None:
        """Free everything in pyacl.md §10 order; log (never raise) failures. Idempotent."""
        acl = self._acl
        self._input_views, self._input_bytes = (), ()
        self._output_views.clear()
        if self._stream:
            ret = acl.rt.synchronize_stream(self._stream)
            _logged(acl, ret, "acl.rt.synchronize_stream")
        for buffer in self._buffers:
            if buffer.data_buffer:
                ret = acl.destroy_data_buffer(buffer.data_buffer)
                _logged(acl, ret, "acl.destroy_data_buffer")
            if buffer.device:
                ret = acl.rt.free(buffer.device)
                _logged(acl, ret, "acl.rt.free")
            if buffer.host:
                ret = acl.rt.free_host(buffer.host)
                _logged(acl, ret, "acl.rt.free_host")
        for dataset in (self._input_dataset, self._output_dataset):
            if dataset:
                ret = acl.mdl.destroy_dataset(dataset)
                _logged(acl, ret, "acl.mdl.destroy_dataset")
        if self._model_id is not None:
            ret = acl.mdl.unload(self._model_id)
            _logged(acl, ret, "acl.mdl.unload")
        if self._desc:
            ret = acl.mdl.destroy_desc(self._desc)
            _logged(acl, ret, "acl.mdl.destroy_desc")
        for event in self._events:
            ret = acl.rt.destroy_event(event)
            _logged(acl, ret, "acl.rt.destroy_event")
        if self._stream:
            ret = acl.rt.destroy_stream(self._stream)
            _logged(acl, ret, "acl.rt.destroy_stream")
        self._buffers, self._inputs, self._outputs, self._events = [], [], [], []
        self._input_dataset, self._output_dataset = 0, 0
        self._model_id, self._desc, self._stream, self._staged = None, 0, 0, None


def _view(buffer: _Buffer, shape: Shape) -> np.ndarray:
    """A numpy array of ``shape`` over the pinned host buffer (no copy)."""
    nbytes = _byte_size(buffer, shape)
    raw = (ctypes.c_uint8 * nbytes).from_address(buffer.host)
    return np.frombuffer(raw, dtype=buffer.dtype).reshape(shape)


def _byte_size(buffer: _Buffer, shape: Shape) -> int:
    nbytes = int(np.prod(shape, dtype=np.int64)) * buffer.dtype.itemsize
    if nbytes > buffer.capacity:
        raise EngineError(f"{buffer.kind} {buffer.name!r} of shape {format_shape(shape)} needs {nbytes} bytes, "
                          f"its buffer holds {buffer.capacity}")
    return nbytes


def _logged(acl: Any, ret: int, function: str) -> None:
    if ret != ACL_SUCCESS:
        LOG.warning("teardown: %s", AclError(function, ret, recent_message(acl)))


class AclEngine(Engine):
    """An .om model on one device, with ``slots`` model copies that can run concurrently."""

    def __init__(self, model_path: str | Path, *, acl: Any, simulated: bool, device_id: int = 0, slots: int = 1):
        if slots < 1:
            raise ConfigError(f"streams (slots) must be >= 1, got {slots}")
        self.name = "acl-sim" if simulated else "acl"
        self._acl = acl
        self._device_id = device_id
        self._runtime = AclRuntime.of(acl)
        self._lock = threading.Lock()
        self._started = False
        self._context = 0
        self._slots: list[AclSlot] = []
        self._model_bytes = (0, 0)
        path = str(model_path)
        try:
            self._runtime.start(self, device_id)
            self._started = True
            context, ret = acl.rt.create_context(device_id)
            check(acl, ret, "acl.rt.create_context", f"opening device {device_id}")
            self._context = context
            work, weight, ret = acl.mdl.query_size(path)
            check(acl, ret, "acl.mdl.query_size", f"reading {path}")
            self._model_bytes = (work, weight)
            first = AclSlot(0, acl, path, None)
            self._slots.append(first)
            self._slots.extend(AclSlot(i, acl, path, first.plan) for i in range(1, slots))
        except BaseException:
            self.close()
            raise
        self.layout = first.plan.layout
        soc = acl.get_soc_name()
        self.spec = self.layout.spec("acl", {"engine": self.name, "device_id": str(device_id), "soc_name": soc or ""})

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(self._slots)

    def bind_thread(self) -> None:
        """Make this engine's context current in the calling thread (pyacl.md §8.2)."""
        acl = self._acl
        ret = acl.rt.set_context(self._context)
        check(acl, ret, "acl.rt.set_context", "binding a thread to the engine's context")

    def close(self) -> None:
        """Release slots, context and device (pyacl.md §10); safe from any thread, idempotent."""
        with self._lock:
            acl = self._acl
            if self._context:
                ret = acl.rt.set_context(self._context)
                _logged(acl, ret, "acl.rt.set_context")
            for slot in reversed(self._slots):
                slot.release()
            self._slots = []
            if self._context:
                ret = acl.rt.destroy_context(self._context)
                _logged(acl, ret, "acl.rt.destroy_context")
                self._context = 0
            if self._started:
                self._started = False
                self._runtime.stop(self, self._device_id)

    def describe(self) -> str:
        count = len(self._slots)
        if not count:
            return f"{self.name} engine (closed)"
        work, weight = self._model_bytes
        buffers = self._slots[0].device_bytes
        per_slot = work + weight + buffers
        return (
            f"{self.name} engine on device {self._device_id}: {count} slot(s), each a model copy with its own "
            f"stream; device memory {_size_text(per_slot * count)} = {count} x (work {_size_text(work)} + weights "
            f"{_size_text(weight)} + I/O buffers {_size_text(buffers)}); pinned host memory "
            f"{_size_text(self._slots[0].host_bytes * count)}"
        )


def _size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def _simulator_requested(name: str) -> bool:
    if name == "acl-sim":
        return True
    raw = os.environ.get(SIMULATOR_ENV, "")
    if not raw:
        return False
    try:
        wanted = parse_bool(raw)
    except ValueError:
        raise ConfigError(f"environment variable {SIMULATOR_ENV}={raw!r}; accepted: 1/0, true/false, yes/no, on/off") from None
    if wanted:
        LOG.warning(
            "!!! %s=%s: engine 'acl' runs on the pyACL SIMULATOR (ONNX Runtime on the CPU), NOT on an Ascend NPU !!!",
            SIMULATOR_ENV, raw,
        )
    return wanted


def _configure_simulator(options: Mapping[str, Any], simulated: bool) -> None:
    given = {p.name: options.get(p.name) for p in PARAMETERS if options.get(p.name) is not None}
    if not given:
        return
    if not simulated:
        raise ConfigError(
            f"parameter {sorted(given)[0]!r} applies only to the simulator (engine 'acl-sim' or "
            f"{SIMULATOR_ENV}=1), not to engine 'acl' on an NPU"
        )
    from ge_python_backend.sim import configure

    configure(faults=given.get("acl_sim_faults"), device_ms=given.get("acl_sim_device_ms"),
              row_ms=given.get("acl_sim_row_ms"))


def open_engine(model_path: Path, *, name: str = "acl", device_id: int, slots: int,
                options: Mapping[str, Any]) -> AclEngine:
    """Open ``model_path`` (an .om; a sim-OM for acl-sim) with ``slots`` streams on ``device_id``."""
    if name not in ("acl", "acl-sim"):
        raise ConfigError(f"engine {name!r} is not an acl engine (expected 'acl' or 'acl-sim')")
    simulated = _simulator_requested(name)
    _configure_simulator(options, simulated)
    return AclEngine(model_path, acl=acl_module(simulated), simulated=simulated, device_id=device_id, slots=slots)


def npu_available() -> tuple[bool, str]:
    """Whether engine 'acl' can run here (pyACL imports and sees a device), and why (not)."""
    try:
        simulated = _simulator_requested("acl")
        acl = acl_module(simulated)
        count = AclRuntime.of(acl).device_count()
    except (ConfigError, AclError) as exc:
        return False, str(exc).split(". ")[0]
    if count < 1:
        return False, "pyACL sees no Ascend device"
    return True, f"{count} Ascend device(s)" + (" on the SIMULATOR" if simulated else "")
