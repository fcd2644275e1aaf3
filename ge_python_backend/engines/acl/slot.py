"""One execution slot of the acl engine: a model copy with its stream, buffers, datasets and events.

Everything is allocated when the slot opens; ``inputs`` hands out views of pinned host memory
and ``run`` queues copy-in, gear selection, execute and copy-out on the slot's stream, then
waits once. See docs/acl-engine.md for the pyACL calls of each phase.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ACL_SUCCESS, MallocPolicy, MemcpyKind
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout, Shape
from ge_python_backend.engines.acl.description import ModelPlan, read_plan, shape_of
from ge_python_backend.engines.acl.runtime import AclError, check, check_handle, log_failure, recent_message
from ge_python_backend.engines.base import PhaseTimes, Shapes, Slot
from ge_python_backend.errors import EngineError
from ge_python_backend.specs import format_shape, numpy_dtype

LOG = logging.getLogger(__name__)


@dataclass
class Buffer:
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

    @property
    def host_dtype(self) -> np.dtype:
        """The dtype of the pinned host twin; only client tensors (never ascend_mbatch_shape_data) get views."""
        assert self.dtype is not None, f"{self.name} has no host twin"
        return self.dtype


class AclSlot(Slot):
    """One model copy with its stream, buffers, datasets and events."""

    def __init__(self, index: int, acl: Any, model_path: str, plan: ModelPlan | None) -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._acl = acl
        self._stream = 0
        self._events: list[int] = []
        self._model_id: int | None = None
        self._desc = 0
        self._input_dataset = 0
        self._output_dataset = 0
        #: every device buffer of both datasets, in creation order (what release frees)
        self._buffers: list[Buffer] = []
        #: the client tensors' buffers, in layout order (what runs copy)
        self._inputs: list[Buffer] = []
        self._outputs: list[Buffer] = []
        #: per gear: views of the pinned input buffers, and the bytes each input copies
        self._input_views: tuple[dict[str, np.ndarray], ...] = ()
        self._input_bytes: tuple[tuple[int, ...], ...] = ()
        #: per set of output shapes met so far: views of the pinned output buffers and their bytes
        self._output_views: dict[tuple[Shape, ...], tuple[dict[str, np.ndarray], tuple[int, ...]]] = {}
        self._staged: int | None = None
        try:
            # Set only by a successful open (a slot that fails to open is never handed out).
            self.plan = self._open(model_path, plan)
        except BaseException:
            self.release()
            raise

    # --- setup ----------------------------------------------------------------------------------

    def _open(self, model_path: str, plan: ModelPlan | None) -> ModelPlan:
        """Allocate everything; return the slot's plan: ``plan``, else the model's, with its gears probed."""
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
        draft = plan or read_plan(self._acl, self._desc)
        self._input_dataset = self._new_dataset()
        self._fill_dataset(self._input_dataset, "input", draft.model_inputs(), self._inputs)
        self._output_dataset = self._new_dataset()
        self._fill_dataset(self._output_dataset, "output", draft.model_outputs(), self._outputs)
        final = plan or self._probe_gears(draft)
        layout = final.layout
        gear_shapes = [tuple(layout.input_shapes(g).values()) for g in range(layout.gear_count)]
        self._input_views = tuple({b.name: _view(b, s) for b, s in zip(self._inputs, shapes)} for shapes in gear_shapes)
        self._input_bytes = tuple(
            tuple(_byte_size(b, s) for b, s in zip(self._inputs, shapes)) for shapes in gear_shapes
        )
        return final

    def _new_dataset(self) -> int:
        dataset = self._acl.mdl.create_dataset()
        return check_handle(self._acl, dataset, "acl.mdl.create_dataset")

    def _fill_dataset(
        self, dataset: int, kind: str, entries: list[tuple[LayoutTensor | None, int]], clients: list[Buffer]
    ) -> None:
        """One device buffer per (tensor, bytes) entry, largest gear, added to ``dataset`` in order; a
        pinned host twin for each client tensor (None is ascend_mbatch_shape_data: none)."""
        acl = self._acl
        for index, (tensor, size) in enumerate(entries):
            if tensor is None:
                buffer = Buffer(kind, index, ACL_DYNAMIC_TENSOR_NAME, None, size)
            else:
                buffer = Buffer(kind, index, tensor.name, numpy_dtype(tensor.data_type.triton), size)
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

    def _probe_gears(self, draft: ModelPlan) -> ModelPlan:
        """Each gear's output shapes: set the gear, then ask get_cur_output_dims (no execution)."""
        layout = draft.layout
        gear_outputs = []
        for g in range(layout.gear_count):
            if layout.kind:
                self._set_gear(draft, g)
            gear_outputs.append(self._current_output_shapes())
        final = ModelLayout(layout.inputs, layout.outputs, layout.kind, layout.gears, tuple(gear_outputs))
        return replace(draft, layout=final)

    def _set_gear(self, plan: ModelPlan, g: int) -> None:
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
            shapes.append(shape_of(dims))
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
                ret = acl.rt.memcpy_async(
                    buffer.device, buffer.capacity, buffer.host, size, MemcpyKind.HOST_TO_DEVICE, stream
                )
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
                ret = acl.rt.memcpy_async(
                    buffer.host, buffer.capacity, buffer.device, size, MemcpyKind.DEVICE_TO_HOST, stream
                )
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
            LOG.debug(
                "slot %d: draining the stream after a failure: %s",
                self.index,
                AclError("acl.rt.synchronize_stream", ret, recent_message(acl)),
            )

    # --- teardown -------------------------------------------------------------------------------

    def release(self) -> None:
        """Free everything in pyacl.md §10 order; log (never raise) failures. Idempotent."""
        acl = self._acl
        self._input_views, self._input_bytes = (), ()
        self._output_views.clear()
        if self._stream:
            ret = acl.rt.synchronize_stream(self._stream)
            log_failure(acl, ret, "acl.rt.synchronize_stream")
        for buffer in self._buffers:
            if buffer.data_buffer:
                ret = acl.destroy_data_buffer(buffer.data_buffer)
                log_failure(acl, ret, "acl.destroy_data_buffer")
            if buffer.device:
                ret = acl.rt.free(buffer.device)
                log_failure(acl, ret, "acl.rt.free")
            if buffer.host:
                ret = acl.rt.free_host(buffer.host)
                log_failure(acl, ret, "acl.rt.free_host")
        for dataset in (self._input_dataset, self._output_dataset):
            if dataset:
                ret = acl.mdl.destroy_dataset(dataset)
                log_failure(acl, ret, "acl.mdl.destroy_dataset")
        if self._model_id is not None:
            ret = acl.mdl.unload(self._model_id)
            log_failure(acl, ret, "acl.mdl.unload")
        if self._desc:
            ret = acl.mdl.destroy_desc(self._desc)
            log_failure(acl, ret, "acl.mdl.destroy_desc")
        for event in self._events:
            ret = acl.rt.destroy_event(event)
            log_failure(acl, ret, "acl.rt.destroy_event")
        if self._stream:
            ret = acl.rt.destroy_stream(self._stream)
            log_failure(acl, ret, "acl.rt.destroy_stream")
        self._buffers, self._inputs, self._outputs, self._events = [], [], [], []
        self._input_dataset, self._output_dataset = 0, 0
        self._model_id, self._desc, self._stream, self._staged = None, 0, 0, None


def _view(buffer: Buffer, shape: Shape) -> np.ndarray:
    """A numpy array of ``shape`` over the pinned host buffer (no copy)."""
    nbytes = _byte_size(buffer, shape)
    raw = (ctypes.c_uint8 * nbytes).from_address(buffer.host)
    # A ctypes array has the buffer protocol, which numpy's stubs do not accept as such.
    return np.frombuffer(cast(memoryview, raw), dtype=buffer.host_dtype).reshape(shape)


def _byte_size(buffer: Buffer, shape: Shape) -> int:
    nbytes = int(np.prod(shape, dtype=np.int64)) * buffer.host_dtype.itemsize
    if nbytes > buffer.capacity:
        raise EngineError(
            f"{buffer.kind} {buffer.name!r} of shape {format_shape(shape)} needs {nbytes} bytes, "
            f"its buffer holds {buffer.capacity}"
        )
    return nbytes
