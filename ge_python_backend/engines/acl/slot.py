"""One execution slot of the acl engine: a model copy with its stream, buffers, datasets and events.

Everything is allocated when the slot opens. ``inputs`` hands out numpy views of the memory the
slot stages from; ``run`` queues, on the slot's stream: copy-in, the gear (only when it changes),
the tensor descs of a shape-range model, the dynamic-AIPP parameters, execute and copy-out, then
waits. On a host with a PCIe card (run mode ACL_HOST) requests are staged in pinned host memory
and copied asynchronously; where the application runs on the device (ACL_DEVICE: Atlas 200/500,
310P open form) host memory is device memory, so the views are over the model's own device
buffers and nothing is copied (the GE samples' device-mode pattern,
cblas_api_invoke_operator_sample_code.md 109-158). The pyACL calls and their sources are in
docs/fidelity.md and docs/acl-engine.md.
"""

from __future__ import annotations

import ctypes
import logging
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat
from ge_python_backend.ascend.constants import ACL_SUCCESS, MallocPolicy, MemcpyKind, format_code
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout, Shape
from ge_python_backend.engines.acl.busy import DeviceBusy
from ge_python_backend.engines.acl.description import ModelDescription, RuntimeInput, read_description, shape_of
from ge_python_backend.engines.acl.preflight import rank_problem, unbounded_problem
from ge_python_backend.engines.acl.runtime import AclError, check, check_handle, log_failure, recent_message
from ge_python_backend.engines.base import PhaseTimes, Shapes, Slot
from ge_python_backend.errors import ConfigError, EngineError
from ge_python_backend.specs import format_shape, numpy_dtype

LOG = logging.getLogger(__name__)

#: async copies need 64-byte-aligned addresses (CANN 8.5/9.0 docs/api_docs/aclrtMemcpyAsync.md:44; the
#: HEAD header for on-chip copies, acl_rt.h:2297); malloc and malloc_host promise it, except malloc_host
#: in device mode (11-02_host_memory_management.md 71-78), so every address is checked and aligned.
ALIGNMENT = 64
#: shapes of a free input (a range input, a dynamic-AIPP image) whose views and descs are kept
_SHAPE_CACHE = 16
#: timed batches whose wait latency places the untimed ones
_LATE_SAMPLES = 8


@dataclass(frozen=True)
class SlotSetup:
    """What every slot of an engine shares."""

    model_path: str
    device_mode: bool
    timing_events: bool
    #: with timing events: the first batch of a slot and every Nth after it are timed
    timing_every: int
    #: one weight buffer for every slot (address, bytes), and the work bytes each slot allocates
    weights: tuple[int, int] | None
    work_size: int
    max_shapes: Mapping[str, Shape] = field(default_factory=dict)
    #: the device's busy-time union across instances (None: not counted)
    busy: DeviceBusy | None = None


#: a batch's settings from AclEngine.batch_settings: each dynamic-AIPP image's config
AippSettings = tuple[tuple[str, AippConfig], ...]


@dataclass
class Memory:
    """One allocation: ``raw`` is what malloc returned (freed at release), ``addr`` the aligned start."""

    raw: int = 0
    addr: int = 0


@dataclass
class Buffer:
    """One model input or output: its device memory, data buffer and (host mode, client tensors)
    pinned host twin. Handles stay 0 until allocated, so a slot that fails part-way releases
    exactly what it made."""

    kind: str  # "input" or "output"
    index: int  # model input or output index
    name: str
    tensor: LayoutTensor | None  # None: a runtime input (gear selector, AIPP parameters)
    capacity: int
    device: Memory = field(default_factory=Memory)
    host: Memory = field(default_factory=Memory)
    data_buffer: int = 0

    @property
    def staging(self) -> int:
        """Where requests are written and answers read: the host twin, or the device memory itself."""
        return self.host.addr or self.device.addr

    def view(self, shape: Shape) -> np.ndarray:
        """A numpy array of ``shape`` over the staging memory (no copy)."""
        assert self.tensor is not None, f"{self.name} is a runtime input"
        nbytes = self.byte_size(shape)
        raw = (ctypes.c_uint8 * nbytes).from_address(self.staging)
        # a ctypes array exposes the buffer protocol, which numpy reads; its stubs name only bytes-like types
        dtype = numpy_dtype(self.tensor.data_type.triton)
        return np.frombuffer(cast(memoryview, raw), dtype=dtype).reshape(shape)

    def byte_size(self, shape: Shape) -> int:
        assert self.tensor is not None
        nbytes = self.tensor.byte_size(shape)
        if nbytes > self.capacity:
            hint = " (raise it with parameter acl_max_shapes)" if self.tensor.ranges or self.kind == "output" else ""
            raise EngineError(
                f"{self.kind} {self.name!r} of shape {format_shape(shape)} needs {nbytes} bytes, its buffer holds "
                f"{self.capacity}{hint}"
            )
        return nbytes


def buffer_capacity(tensor: LayoutTensor, size: int, kind: str, max_shapes: Mapping[str, Shape]) -> int:
    """Bytes a tensor's buffer needs: the runtime's size, or, when that is 0 (an unbounded shape-range
    tensor, model_om2.cpp 426-458), its finite upper bounds or the shape given in acl_max_shapes."""
    given = max_shapes.get(tensor.name)
    if given is not None:
        problem = rank_problem(kind, tensor.name, tensor.dims, given)
        if problem:
            raise ConfigError(problem)
        return max(size, tensor.byte_size(given))
    if size:
        return size
    largest = tensor.largest_shape()
    if largest is not None:
        return tensor.byte_size(largest)
    raise ConfigError(unbounded_problem(kind, tensor.name, tensor.dims))


class AclSlot(Slot):
    """One model copy with its stream, buffers, datasets and events."""

    def __init__(self, index: int, acl: Any, setup: SlotSetup, description: ModelDescription | None) -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._acl = acl
        self._setup = setup
        self._stream = 0
        self._events: list[int] = []
        #: batches run since the last timed one (-1: none timed yet), and whether this one is timed
        self._untimed = -1
        self._timed = False
        #: the copies' device seconds (in, back) of the last timed batch: where an untimed batch's
        #: execution starts and ends within its run
        self._copy_seconds = (0.0, 0.0)
        #: of the last timed batches: seconds from the device's end of the run to the wait's
        #: return (wake-up latency and host overhead), which an untimed batch's end leaves out
        self._late: deque[float] = deque(maxlen=_LATE_SAMPLES)
        #: their median, kept when a timed batch adds one (untimed batches, the most, only read it)
        self._late_median = 0.0
        self._model_id: int | None = None
        self._work = Memory()
        self._desc = 0
        self._input_dataset = 0
        self._output_dataset = 0
        #: every buffer of both datasets, in creation order (what release frees)
        self._buffers: list[Buffer] = []
        #: the client tensors' buffers, in layout order (what runs copy)
        self._inputs: list[Buffer] = []
        self._outputs: list[Buffer] = []
        #: per gear: views of the fixed inputs and the bytes each copies
        self._input_views: tuple[dict[str, np.ndarray], ...] = ()
        self._input_bytes: tuple[dict[str, int], ...] = ()
        self._free_views: OrderedDict[tuple[str, Shape], np.ndarray] = OrderedDict()
        self._output_views: dict[tuple[Shape, ...], tuple[dict[str, np.ndarray], tuple[int, ...]]] = {}
        self._tensor_descs: OrderedDict[tuple[str, Shape], int] = OrderedDict()
        self._aipp_sets: OrderedDict[Hashable, int] = OrderedDict()
        #: what the next run runs: gear, each input's shape, batch settings
        self._staged: tuple[int, dict[str, Shape], Hashable] | None = None
        #: the gear last written into ascend_mbatch_shape_data: it stays there between runs
        #: (ge_executor.cc 424 copies it into the dataset buffer; model.cpp 727-730 reads the dataset's)
        self._gear_in_buffer: int | None = None
        try:
            self.description = self._open(description)
        except BaseException:
            self.release()
            raise

    # --- setup ----------------------------------------------------------------------------------

    def _open(self, description: ModelDescription | None) -> ModelDescription:
        acl, setup = self._acl, self._setup
        stream, ret = acl.rt.create_stream()
        check(acl, ret, "acl.rt.create_stream", f"opening slot {self.index}")
        self._stream = stream
        for _ in range(4 if setup.timing_events else 0):
            event, ret = acl.rt.create_event()
            check(acl, ret, "acl.rt.create_event")
            self._events.append(event)
        self._load()
        desc = acl.mdl.create_desc()
        self._desc = check_handle(acl, desc, "acl.mdl.create_desc")
        ret = acl.mdl.get_desc(desc, self._model_id)
        check(acl, ret, "acl.mdl.get_desc")
        assert self._model_id is not None
        draft = description or read_description(acl, self._desc, self._model_id, Path(setup.model_path))
        self._input_dataset = self._new_dataset()
        self._fill_dataset(self._input_dataset, "input", draft)
        self._output_dataset = self._new_dataset()
        self._fill_dataset(self._output_dataset, "output", draft)
        final = description or self._probe_gears(draft)
        layout = final.layout
        fixed = [b for b in self._inputs if b.tensor is not None and not b.tensor.free]
        shapes = [layout.input_shapes(g) for g in range(layout.gear_count)]
        self._input_views = tuple({b.name: b.view(s[b.name]) for b in fixed} for s in shapes)
        self._input_bytes = tuple({b.name: b.byte_size(s[b.name]) for b in fixed} for s in shapes)
        return final

    def _load(self) -> None:
        """One model copy: over its own work memory and the shared weights (load_from_file_with_mem;
        "loads of the same model in several threads may share weightPtr, since weights are read-only
        in inference", aclmdlLoadFromFileWithMem.md 47-48), else with load_from_file."""
        acl, setup = self._acl, self._setup
        if setup.weights is None:
            model_id, ret = acl.mdl.load_from_file(setup.model_path)
            check(acl, ret, "acl.mdl.load_from_file", f"loading {setup.model_path} (copy {self.index})")
        else:
            weight, weight_size = setup.weights
            if setup.work_size:
                self._work = self._malloc(setup.work_size, f"the work memory of slot {self.index}")
            model_id, ret = acl.mdl.load_from_file_with_mem(
                setup.model_path, self._work.addr, setup.work_size, weight, weight_size
            )
            check(acl, ret, "acl.mdl.load_from_file_with_mem", f"loading {setup.model_path} (copy {self.index})")
        self._model_id = model_id

    def _malloc(self, size: int, what: str) -> Memory:
        return _aligned(self._acl, "malloc", size, what)

    def _malloc_host(self, size: int, what: str) -> Memory:
        return _aligned(self._acl, "malloc_host", size, what)

    def _new_dataset(self) -> int:
        dataset = self._acl.mdl.create_dataset()
        return check_handle(self._acl, dataset, "acl.mdl.create_dataset")

    def _fill_dataset(self, dataset: int, kind: str, description: ModelDescription) -> None:
        acl, setup = self._acl, self._setup
        if kind == "input":
            entries: list[tuple[int, LayoutTensor | None, str, int]] = [
                (r.index, r.tensor, r.name, _input_capacity(r, setup.max_shapes)) for r in description.inputs
            ]
        else:
            entries = [
                (i, t, t.name, buffer_capacity(t, size, "output", setup.max_shapes))
                for i, (t, size) in enumerate(zip(description.layout.outputs, description.output_sizes))
            ]
        for index, tensor, name, capacity in entries:
            buffer = Buffer(kind, index, name, tensor, capacity)
            self._buffers.append(buffer)
            buffer.device = self._malloc(capacity, f"{kind} {name!r} of slot {self.index}")
            if tensor is not None and not setup.device_mode:
                buffer.host = self._malloc_host(capacity, f"the host copy of {kind} {name!r} of slot {self.index}")
            data = acl.create_data_buffer(buffer.device.addr, capacity)
            buffer.data_buffer = check_handle(acl, data, "acl.create_data_buffer")
            _, ret = acl.mdl.add_dataset_buffer(dataset, buffer.data_buffer)
            check(acl, ret, "acl.mdl.add_dataset_buffer")
            if tensor is not None:
                (self._inputs if kind == "input" else self._outputs).append(buffer)

    def _probe_gears(self, draft: ModelDescription) -> ModelDescription:
        """Each gear's output shapes: set the gear, then ask get_cur_output_dims (no execution), which
        reads the gear stored on the model (GetCurShape: model.cpp 1978-2039; stored by SetDynamicSize at
        ge_executor.cc 417, 478, 548 into davinci_model.cc 4262-4284)."""
        layout = draft.layout
        if layout.kind == "range":  # output shapes come from the output descs after each run
            return draft
        gear_outputs = []
        for g in range(layout.gear_count):
            if layout.kind:
                self._set_gear(draft, g)
            gear_outputs.append(self._current_output_shapes())
        final = ModelLayout(
            layout.inputs, layout.outputs, layout.kind, layout.gears, tuple(gear_outputs), layout.shape_order
        )
        return replace(draft, layout=final)

    def _set_gear(self, description: ModelDescription, g: int) -> None:
        """Select gear ``g`` (the value is written into ascend_mbatch_shape_data and stays there)."""
        acl, kind, argument = self._acl, description.layout.kind, description.gear_argument(g)
        model_id, dataset, index = self._model_id, self._input_dataset, description.dynamic_index
        if kind == "batch":
            ret = acl.mdl.set_dynamic_batch_size(model_id, dataset, index, argument[0])
            function = "acl.mdl.set_dynamic_batch_size"
        elif kind == "hw":
            ret = acl.mdl.set_dynamic_hw_size(model_id, dataset, index, argument[0], argument[1])
            function = "acl.mdl.set_dynamic_hw_size"
        else:
            ret = acl.mdl.set_input_dynamic_dims(model_id, dataset, index, argument)
            function = "acl.mdl.set_input_dynamic_dims"
        check(acl, ret, function, lambda: f"selecting {description.layout.gear_label(g)}")
        self._gear_in_buffer = g

    def _current_output_shapes(self) -> tuple[Shape, ...]:
        acl, shapes = self._acl, []
        for buffer in self._outputs:
            dims, ret = acl.mdl.get_cur_output_dims(self._desc, buffer.index)
            check(acl, ret, "acl.mdl.get_cur_output_dims", f"reading the shape of output {buffer.name!r}")
            shapes.append(shape_of(dims))
        return tuple(shapes)

    @property
    def device_bytes(self) -> int:
        """Device memory this slot holds: its I/O buffers and its work memory."""
        return sum(b.capacity for b in self._buffers) + (self._setup.work_size if self._work.raw else 0)

    @property
    def host_bytes(self) -> int:
        return sum(b.capacity for b in self._inputs + self._outputs if b.host.raw)

    # --- execution ------------------------------------------------------------------------------

    def inputs(self, shapes: Shapes, settings: Hashable = None) -> dict[str, np.ndarray]:
        """Views of the staging memory in exactly ``shapes`` (no pyACL call: any thread)."""
        layout = self.description.layout
        try:
            g = layout.find_gear(shapes)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        views = dict(self._input_views[g])
        for buffer in self._inputs:
            if buffer.tensor is not None and buffer.tensor.free:
                views[buffer.name] = self._free_view(buffer, tuple(shapes[buffer.name]))
        self._staged = (g, {n: tuple(s) for n, s in shapes.items()}, settings)
        return views

    def _free_view(self, buffer: Buffer, shape: Shape) -> np.ndarray:
        key = (buffer.name, shape)
        view = self._free_views.get(key)
        if view is None:
            view = self._free_views[key] = buffer.view(shape)
            if len(self._free_views) > _SHAPE_CACHE:
                self._free_views.popitem(last=False)
        return view

    def run(self) -> dict[str, np.ndarray]:
        """Run the staged batch on this slot's stream and wait for it.

        Any failure once work may be queued (an AclError, or an output that outgrows its buffer)
        first waits for the stream, so the slot's buffers are quiet when the error is raised.
        """
        if self._staged is None:
            raise EngineError(f"slot {self.index}: run() without inputs() first")
        g, shapes, settings = self._staged
        acl, stream, description = self._acl, self._stream, self.description
        started = time.monotonic()
        first, due = self._untimed < 0, self._untimed >= self._setup.timing_every - 1
        self._timed = bool(self._events) and (first or due)
        try:
            self._record(0)
            copy_in = not self._setup.device_mode
            for buffer in self._inputs:
                if copy_in:
                    self._copy(buffer, self._copy_bytes(buffer, g, shapes), MemcpyKind.HOST_TO_DEVICE)
            self._record(1)
            if description.layout.kind in ("batch", "hw", "dims") and self._gear_in_buffer != g:
                self._set_gear(description, g)
            if description.layout.kind == "range":
                self._set_input_descs(shapes)
            for image, index in description.aipp_inputs.items():
                self._set_aipp(image, index, shapes[image], settings)
            submitted = time.monotonic()
            ret = acl.mdl.execute_async(self._model_id, self._input_dataset, self._output_dataset, stream)
            check(acl, ret, "acl.mdl.execute_async", lambda: self._running(g))
            self._record(2)
            if description.layout.kind == "range":
                self._synchronize(g)
                output_shapes = self._output_desc_shapes()
            else:
                output_shapes = description.layout.output_shapes(g)
            views, sizes = self._outputs_at(output_shapes)
            if copy_in:
                for buffer, size in zip(self._outputs, sizes):
                    self._copy(buffer, size, MemcpyKind.DEVICE_TO_HOST)
            self._record(3)
            self._synchronize(g)
        except BaseException:
            self._drain()
            raise
        done = time.monotonic()
        self.last_times = self._times(started, max(submitted, started + self._copy_seconds[0]), done)
        self._untimed = 0 if self._timed else self._untimed + 1  # a failed run counts for nothing
        return dict(views)

    def _running(self, g: int) -> str:
        """What failed, for an execute_async error. A shape-range model's execute sizes the copy into
        each output buffer on the host and fails with 500002 when one is short (memory_copy.cc 566-572,
        model.cpp 662-671), so its message names the parameter that sizes them."""
        layout = self.description.layout
        if layout.kind != "range":
            return f"running {layout.gear_label(g)}"
        return f"running {layout.gear_label(g)} (an output larger than its buffer fails so: raise acl_max_shapes)"

    def _copy_bytes(self, buffer: Buffer, g: int, shapes: Mapping[str, Shape]) -> int:
        if buffer.tensor is not None and buffer.tensor.free:
            return buffer.byte_size(shapes[buffer.name])
        return self._input_bytes[g][buffer.name]

    def _copy(self, buffer: Buffer, size: int, kind: MemcpyKind) -> None:
        acl = self._acl
        if kind is MemcpyKind.HOST_TO_DEVICE:
            dst, src = buffer.device.addr, buffer.host.addr
        else:
            dst, src = buffer.host.addr, buffer.device.addr
        ret = acl.rt.memcpy_async(dst, buffer.capacity, src, size, kind, self._stream)
        check(
            acl,
            ret,
            "acl.rt.memcpy_async",
            lambda: f"copying {buffer.kind} {buffer.name!r} to the {'device' if buffer.kind == 'input' else 'host'}",
        )

    def _synchronize(self, g: int) -> None:
        ret = self._acl.rt.synchronize_stream(self._stream)
        check(self._acl, ret, "acl.rt.synchronize_stream", lambda: f"running {self.description.layout.gear_label(g)}")

    def _record(self, which: int) -> None:
        if self._timed:
            ret = self._acl.rt.record_event(self._events[which], self._stream)
            check(self._acl, ret, "acl.rt.record_event")

    def _times(self, started: float, submitted: float, done: float) -> PhaseTimes:
        """The phases from the device events; the run's wall time as "execute" without events, or
        when an event cannot be read (that never fails a batch whose outputs are ready: 507000 for an
        event never recorded, 107006 before it completed, event.cc 345-362, 1247-1279).

        With events, the first batch and then one in ``timing_every`` are timed; a timed batch
        counts for itself and the untimed batches since the previous one, which report nothing
        (so the totals never run ahead of the batches): 7 of a batch's 11 runtime calls are the
        timing events'. Every batch counts its device-busy share (busy.py): a timed one its
        execute interval, from the end of its copies in (its stream was idle when the run
        ``started``: every run ends with a wait) for the execute phase; an untimed one from
        ``submitted`` to ``done`` less the last copy back and the median time the last timed
        batches' waits returned after their device work ended."""
        busy, wall = self._setup.busy, done - started
        if not self._events:
            device = busy.account(submitted, done) if busy else 0.0
            return PhaseTimes(execute=wall, device_busy=device)
        if not self._timed:
            late = self._late_median
            end = max(submitted, done - self._copy_seconds[1] - late)
            device = busy.account(submitted, end) if busy else 0.0
            return PhaseTimes(device_busy=device)
        weight = max(self._untimed, 0) + 1
        try:
            into, execute, back = self._elapsed(0, 1), self._elapsed(1, 2), self._elapsed(2, 3)
        except AclError as exc:
            LOG.debug("slot %d: timing events unreadable (%s); reporting wall time", self.index, exc)
            device = busy.account(submitted, done) if busy else 0.0
            return PhaseTimes(execute=wall * weight, device_busy=device)
        self._copy_seconds = (into, back)
        self._late.append(max(0.0, done - (started + into + execute + back)))
        self._late_median = statistics.median(self._late)
        device = busy.account(started + into, started + into + execute) if busy else 0.0
        return PhaseTimes(into * weight, execute * weight, back * weight, device)

    def _elapsed(self, first: int, last: int) -> float:
        ms, ret = self._acl.rt.event_elapsed_time(self._events[first], self._events[last])
        check(self._acl, ret, "acl.rt.event_elapsed_time")
        return ms / 1000.0

    def _outputs_at(self, shapes: tuple[Shape, ...]) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
        """Views of the output staging memory in ``shapes`` and the bytes to copy (cached per shape
        set); EngineError when a shape needs more than its buffer holds."""
        found = self._output_views.get(shapes)
        if found is None:
            sizes = tuple(b.byte_size(s) for b, s in zip(self._outputs, shapes))
            found = ({b.name: b.view(s) for b, s in zip(self._outputs, shapes)}, sizes)
            if self.description.layout.kind != "range" or len(self._output_views) < _SHAPE_CACHE:
                self._output_views[shapes] = found
        return found

    # --- shape-range models -----------------------------------------------------------------

    def _set_input_descs(self, shapes: Mapping[str, Shape]) -> None:
        """Each input's shape on the dataset before execute (aclmdlSetDatasetTensorDesc.md: only the
        dims are used; the dataset keeps a copy, model_om2.cpp 965-990)."""
        acl = self._acl
        for buffer in self._inputs:
            assert buffer.tensor is not None
            desc = self._tensor_desc(buffer.tensor, tuple(shapes[buffer.name]))
            _, ret = acl.mdl.set_dataset_tensor_desc(self._input_dataset, desc, buffer.index)
            check(acl, ret, "acl.mdl.set_dataset_tensor_desc", f"setting the shape of input {buffer.name!r}")

    def _tensor_desc(self, tensor: LayoutTensor, shape: Shape) -> int:
        key = (tensor.name, shape)
        desc = self._tensor_descs.get(key)
        if desc is None:
            made = self._acl.create_tensor_desc(tensor.data_type.code, list(shape), format_code(tensor.format))
            desc = self._tensor_descs[key] = check_handle(self._acl, made, "acl.create_tensor_desc")
            if len(self._tensor_descs) > _SHAPE_CACHE:
                self._acl.destroy_tensor_desc(self._tensor_descs.popitem(last=False)[1])
        return desc

    def _output_desc_shapes(self) -> tuple[Shape, ...]:
        """Each output's shape after execute, from the output dataset's tensor desc (the dynamic-shape
        executor rewrites them, model.cpp 672-693, 818-842; get_cur_output_dims is refused there, 1981-1985)."""
        acl, shapes = self._acl, []
        for buffer in self._outputs:
            desc = acl.mdl.get_dataset_tensor_desc(self._output_dataset, buffer.index)
            check_handle(acl, desc, "acl.mdl.get_dataset_tensor_desc", f"reading the shape of output {buffer.name!r}")
            dims = []
            for axis in range(acl.get_tensor_desc_num_dims(desc)):
                dim, ret = acl.get_tensor_desc_dim_v2(desc, axis)
                check(acl, ret, "acl.get_tensor_desc_dim_v2", f"reading the shape of output {buffer.name!r}")
                dims.append(int(dim))
            assert buffer.tensor is not None
            if len(dims) != len(buffer.tensor.dims):
                raise EngineError(
                    f"after execute, the tensor desc of output {buffer.name!r} has {len(dims)} dims "
                    f"{format_shape(tuple(dims))}; the model's output has {format_shape(buffer.tensor.dims)}"
                )
            shapes.append(tuple(dims))
        return tuple(shapes)

    # --- dynamic AIPP ----------------------------------------------------------------------------

    def _set_aipp(self, image: str, index: int, shape: Shape, settings: Hashable) -> None:
        """Write this batch's AIPP values into the parameter input before execute (aclmdlSetInputAIPP.md:
        "before aclmdlExecute"); one AIPP set per distinct values, built once and kept. ``settings``
        (AippSettings) holds each image's config; without it, the source size alone (RGB888, no crop)."""
        acl = self._acl
        configs = dict(cast(AippSettings, settings or ()))
        config = configs.get(image) or dynamic_aipp_config(AippConfig(), shape)
        key = (image, config, shape[0])
        aipp = self._aipp_sets.get(key)
        if aipp is None:
            aipp = self._aipp_sets[key] = self._build_aipp(config, aipp_batch(self.description, image, shape))
            if len(self._aipp_sets) > _SHAPE_CACHE:
                log_failure(acl, acl.mdl.destroy_aipp(self._aipp_sets.popitem(last=False)[1]), "acl.mdl.destroy_aipp")
        ret = acl.mdl.set_input_aipp(self._model_id, self._input_dataset, index, aipp)
        check(acl, ret, "acl.mdl.set_input_aipp", f"setting the AIPP of input {image!r}")

    def _build_aipp(self, config: AippConfig, batch: int) -> int:
        """An AIPP set with ``config`` for each of ``batch`` images (acl_aipp_om2.cpp 330-692)."""
        acl = self._acl
        aipp = check_handle(acl, acl.mdl.create_aipp(batch), "acl.mdl.create_aipp")
        try:
            fmt = config.input_format or AippInputFormat.RGB888_U8
            calls: list[tuple[str, tuple[Any, ...]]] = [
                ("set_aipp_input_format", (fmt.value,)),
                ("set_aipp_src_image_size", (config.src_image_size_w, config.src_image_size_h)),
                ("set_aipp_rbuv_swap_switch", (int(config.rbuv_swap_switch),)),
                ("set_aipp_ax_swap_switch", (int(config.ax_swap_switch),)),
                (
                    "set_aipp_csc_params",
                    (
                        int(config.csc_switch),
                        *(v for row in (config.matrix or ((0, 0, 0),) * 3) for v in row),
                        *config.output_bias,
                        *config.input_bias,
                    ),
                ),
            ]
            for b in range(batch):
                calls += [
                    (
                        "set_aipp_crop_params",
                        (
                            int(config.crop),
                            config.load_start_pos_w,
                            config.load_start_pos_h,
                            config.crop_size_w,
                            config.crop_size_h,
                            b,
                        ),
                    ),
                    (
                        "set_aipp_padding_params",
                        (
                            int(config.padding),
                            config.top_padding_size,
                            config.bottom_padding_size,
                            config.left_padding_size,
                            config.right_padding_size,
                            b,
                        ),
                    ),
                    ("set_aipp_dtc_pixel_mean", (*config.mean_chn, b)),
                    ("set_aipp_dtc_pixel_min", (*config.min_chn, b)),
                    ("set_aipp_pixel_var_reci", (*config.var_reci_chn, b)),
                ]
            for name, arguments in calls:
                ret = getattr(acl.mdl, name)(aipp, *arguments)
                check(acl, ret, f"acl.mdl.{name}", "building the dynamic AIPP set")
        except BaseException:
            log_failure(acl, acl.mdl.destroy_aipp(aipp), "acl.mdl.destroy_aipp")
            raise
        return aipp

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
        """Free everything in the reverse order of making it; log (never raise) failures. Idempotent."""
        acl = self._acl
        self._input_views, self._input_bytes = (), ()
        self._free_views.clear()
        self._output_views.clear()
        if self._stream:
            log_failure(acl, acl.rt.synchronize_stream(self._stream), "acl.rt.synchronize_stream")
        for aipp in self._aipp_sets.values():
            log_failure(acl, acl.mdl.destroy_aipp(aipp), "acl.mdl.destroy_aipp")
        self._aipp_sets.clear()
        for desc in self._tensor_descs.values():
            acl.destroy_tensor_desc(desc)  # returns None (py_init_acl.cpp 175)
        self._tensor_descs.clear()
        for buffer in self._buffers:
            if buffer.data_buffer:
                log_failure(acl, acl.destroy_data_buffer(buffer.data_buffer), "acl.destroy_data_buffer")
            if buffer.device.raw:
                log_failure(acl, acl.rt.free(buffer.device.raw), "acl.rt.free")
            if buffer.host.raw:
                log_failure(acl, acl.rt.free_host(buffer.host.raw), "acl.rt.free_host")
        for dataset in (self._input_dataset, self._output_dataset):
            if dataset:
                log_failure(acl, acl.mdl.destroy_dataset(dataset), "acl.mdl.destroy_dataset")
        if self._model_id is not None:
            log_failure(acl, acl.mdl.unload(self._model_id), "acl.mdl.unload")
        if self._work.raw:  # after unload: "must not be freed while the model is loaded"
            log_failure(acl, acl.rt.free(self._work.raw), "acl.rt.free")
        if self._desc:
            log_failure(acl, acl.mdl.destroy_desc(self._desc), "acl.mdl.destroy_desc")
        for event in self._events:
            log_failure(acl, acl.rt.destroy_event(event), "acl.rt.destroy_event")
        if self._stream:
            log_failure(acl, acl.rt.destroy_stream(self._stream), "acl.rt.destroy_stream")
        self._buffers, self._inputs, self._outputs, self._events = [], [], [], []
        self._input_dataset, self._output_dataset = 0, 0
        self._model_id, self._desc, self._stream, self._staged, self._work = None, 0, 0, None, Memory()


def _input_capacity(entry: RuntimeInput, max_shapes: Mapping[str, Shape]) -> int:
    if entry.tensor is None:
        return entry.size
    return buffer_capacity(entry.tensor, entry.size, "input", max_shapes)


def aipp_batch(description: ModelDescription, image: str, shape: Shape) -> int:
    """Images per AIPP set: the model's batch, the largest gear for dynamic batch (--insert_op_conf.md
    73-79; set_input_aipp refuses any other, acl_aipp.cpp 174-226)."""
    layout = description.layout
    if layout.kind == "batch":
        return max(g[0] for g in layout.gears)
    declared = layout.input(image).dims[0]
    return declared if declared > 0 else shape[0]


def dynamic_aipp_config(config: AippConfig, shape: Shape) -> AippConfig:
    """``config`` for images of ``shape`` (NHWC): the source size from the tensor (YUV420SP's rows are
    1.5 x its height), RGB888 when no format is set."""
    fmt = config.input_format or AippInputFormat.RGB888_U8
    height = shape[1] * 2 // 3 if fmt is AippInputFormat.YUV420SP_U8 else shape[1]
    return replace(config, input_format=fmt, src_image_size_w=shape[2], src_image_size_h=height)


def _aligned(acl: Any, function: str, size: int, what: str) -> Memory:
    """``size`` bytes from acl.rt.malloc or malloc_host whose start is 64-byte aligned: as allocated
    when it is, else over-allocated and offset."""
    raw = _allocate(acl, function, size, what)
    if raw % ALIGNMENT == 0:
        return Memory(raw, raw)
    if function == "malloc":
        log_failure(acl, acl.rt.free(raw), "acl.rt.free")
    else:
        log_failure(acl, acl.rt.free_host(raw), "acl.rt.free_host")
    raw = _allocate(acl, function, size + ALIGNMENT, what)
    return Memory(raw, (raw + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)


def _allocate(acl: Any, function: str, size: int, what: str) -> int:
    if function == "malloc":
        raw, ret = acl.rt.malloc(size, MallocPolicy.HUGE_FIRST)
    else:
        raw, ret = acl.rt.malloc_host(size)
    check(acl, ret, f"acl.rt.{function}", f"allocating {size} bytes for {what}")
    return int(raw)
