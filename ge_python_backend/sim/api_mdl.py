"""``acl.mdl``: load, describe, dynamic gears, datasets and execution of sim-OMs (pyacl.md §4)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, format_code, ret_code
from ge_python_backend.ascend.layout import LayoutTensor
from ge_python_backend.ascend.simom import SimOm, decode_sim_om, is_sim_om
from ge_python_backend.errors import OmFormatError
from ge_python_backend.sim.memory import is_device_address, read_host
from ge_python_backend.sim.models import (
    SYNC,
    DataBuffer,
    Dataset,
    LoadedModel,
    ModelDesc,
    encode_gear,
    gear_of,
    model_costs,
    modelled_seconds,
    pad_to,
    run_session,
)
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import INVALID_PARAM, Context

INVALID_FILE = ret_code("ACL_ERROR_INVALID_FILE")
READ_MODEL = ret_code("ACL_ERROR_READ_MODEL_FAILURE")
PARSE_MODEL = ret_code("ACL_ERROR_PARSE_MODEL")
NOT_DYNAMIC = ret_code("ACL_ERROR_MODEL_NOT_DYNAMIC")
INPUT_NOT_MATCH = ret_code("ACL_ERROR_MODEL_INPUT_NOT_MATCH")
OUTPUT_NOT_MATCH = ret_code("ACL_ERROR_MODEL_OUTPUT_NOT_MATCH")
DYNAMIC_ADDR = ret_code("ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID")
DYNAMIC_LENGTH = ret_code("ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID")
NOT_A_GEAR = ret_code("ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID")
MODEL_EXECUTE = ret_code("ACL_ERROR_RT_MODEL_EXECUTE")
MEMORY_ALLOCATION = ret_code("ACL_ERROR_RT_MEMORY_ALLOCATION")

#: First bytes of files the simulator recognises as real (unsimulated) model packages.
_REAL_MODEL_MAGICS = {
    b"IMOD": "a CANN offline model",
    b"PICO": "a CANN SVP offline model",
    b"PK\x03\x04": "a CANN OM2 package",
}
_NO_INDEX = (1 << 64) - 1


def _parse_model(data: bytes, origin: str) -> SimOm:
    for magic, what in _REAL_MODEL_MAGICS.items():
        if data.startswith(magic):
            raise AclFail(
                INVALID_FILE,
                f"{origin} is {what}, which only a real Ascend NPU can run; the simulator "
                f"runs simulated .om files made by `ge-triton sim-compile`",
            )
    if not is_sim_om(data):
        raise AclFail(INVALID_FILE, f"{origin} is not a model file (first bytes {data[:8]!r})")
    try:
        return decode_sim_om(data, origin)
    except OmFormatError as exc:
        raise AclFail(PARSE_MODEL, str(exc)) from None


def _read_model_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AclFail(READ_MODEL, f"cannot read model file {path!r}: {exc.strerror or exc}") from None


def _dims(name: str, dims) -> dict[str, Any]:
    return {"name": name, "dimCount": len(dims), "dims": list(dims)}


def _refuse_while_executing(model: LoadedModel, doing: str) -> None:
    busy = model.busy_elsewhere(None)
    if busy is not None:
        where = "synchronously in another thread" if busy == SYNC else f"on stream {busy:#x}"
        raise AclFail(MODEL_EXECUTE, f"model {model.model_id} is still executing {where}; synchronize before {doing}")


class MdlApi(Namespace):
    _prefix = "acl.mdl"

    # --- load / unload --------------------------------------------------------------------------

    def _session(self, om: SimOm):
        key = hashlib.sha256(om.onnx).hexdigest()
        with self._sim.lock:
            session = self._sim.sessions.get(key)
        if session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            try:
                session = ort.InferenceSession(om.onnx, options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # ONNX Runtime raises several private exception types
                raise AclFail(PARSE_MODEL, f"the embedded ONNX model does not load: {exc}") from None
            with self._sim.lock:
                self._sim.sessions[key] = session
        return session

    def _load(self, data: bytes, origin: str) -> int:
        sim = self._sim
        with sim.lock:
            context = sim.current_context()
        om = _parse_model(data, origin)
        session = self._session(om)
        work, weight = model_costs(om)
        with sim.lock:
            free = sim.config.device_memory - sim.device_used(context.device)
            if work + weight > free:
                raise AclFail(
                    MEMORY_ALLOCATION,
                    f"the model needs {work + weight} bytes of device memory, device {context.device} has {free} free",
                )
            model = LoadedModel(sim.new_model_id(), origin, om, session, context.handle, context.device, work, weight)
            sim.models[model.model_id] = model
            return model.model_id

    @acl_function("s", outputs=(0,), locked=False)
    def load_from_file(self, model_path):
        return self._load(_read_model_file(model_path), model_path)

    @acl_function("kk", outputs=(0,), locked=False)
    def load_from_mem(self, model_ptr, model_size):
        if is_device_address(model_ptr) or model_ptr == 0:
            raise AclFail(INVALID_PARAM, f"model_ptr {model_ptr:#x} is not host memory")
        return self._load(read_host(model_ptr, model_size), f"<memory {model_ptr:#x}>")

    @acl_function("s", outputs=(0, 0))
    def query_size(self, model_path):
        return model_costs(_parse_model(_read_model_file(model_path), model_path))

    @acl_function("I")
    def unload(self, model_id):
        _refuse_while_executing(self._sim.model(model_id, self._sim.current_context()), "unloading")
        del self._sim.models[model_id]

    # --- desc -----------------------------------------------------------------------------------

    @acl_function("", value=True)
    def create_desc(self):
        return self._sim.add(self._sim.descs, ModelDesc)

    @acl_function("kI")
    def get_desc(self, model_desc, model_id):
        desc = self._sim.lookup(self._sim.descs, model_desc, "model desc")
        desc.model = self._sim.model(model_id)

    @acl_function("k")
    def destroy_desc(self, model_desc):
        self._sim.remove(self._sim.descs, model_desc, "model desc")

    def _described(self, model_desc) -> LoadedModel:
        desc = self._sim.lookup(self._sim.descs, model_desc, "model desc")
        if desc.model is None:
            raise AclFail(INVALID_PARAM, f"model desc {model_desc:#x} is empty (call get_desc first)")
        return desc.model

    def _tensor(self, model_desc, index, outputs: bool) -> LayoutTensor:
        model = self._described(model_desc)
        tensors = model.om.layout.outputs if outputs else model.om.all_inputs
        if index >= len(tensors):
            kind = "output" if outputs else "input"
            raise AclFail(INVALID_PARAM, f"{kind} index {index} is out of range; the model has {len(tensors)}")
        return tensors[index]

    def _declared_dims(self, model_desc, index, outputs: bool) -> dict[str, Any]:
        tensor = self._tensor(model_desc, index, outputs)
        return _dims(tensor.name, tensor.dims)

    @acl_function("k", value=True)
    def get_num_inputs(self, model_desc):
        return len(self._described(model_desc).om.all_inputs)

    @acl_function("k", value=True)
    def get_num_outputs(self, model_desc):
        return len(self._described(model_desc).om.layout.outputs)

    @acl_function("kk", value=True)
    def get_input_size_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, False).size

    @acl_function("kk", value=True)
    def get_output_size_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, True).size

    @acl_function("kk", outputs=({},))
    def get_input_dims(self, model_desc, index):
        return self._declared_dims(model_desc, index, False)

    @acl_function("kk", outputs=({},))
    def get_input_dims_v2(self, model_desc, index):
        return self._declared_dims(model_desc, index, False)

    @acl_function("kk", outputs=({},))
    def get_output_dims(self, model_desc, index):
        return self._declared_dims(model_desc, index, True)

    @acl_function("kk", outputs=({},))
    def get_cur_output_dims(self, model_desc, index):
        tensor = self._tensor(model_desc, index, True)
        model = self._described(model_desc)
        if model.om.layout.kind and model.current_gear is None:
            return _dims(tensor.name, tensor.dims)
        return _dims(tensor.name, model.om.layout.output_shapes(model.current_gear or 0)[index])

    @acl_function("kk", value=True, fail_value=None)
    def get_input_name_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, False).name

    @acl_function("kk", value=True, fail_value=None)
    def get_output_name_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, True).name

    def _index_by_name(self, model_desc, name, outputs: bool) -> int:
        model = self._described(model_desc)
        tensors = model.om.layout.outputs if outputs else model.om.all_inputs
        for index, tensor in enumerate(tensors):
            if tensor.name == name:
                return index
        raise AclFail(INVALID_PARAM, f"the model has no {'output' if outputs else 'input'} named {name!r}")

    @acl_function("ks", outputs=(_NO_INDEX,))
    def get_input_index_by_name(self, model_desc, name):
        return self._index_by_name(model_desc, name, False)

    @acl_function("ks", outputs=(_NO_INDEX,))
    def get_output_index_by_name(self, model_desc, name):
        return self._index_by_name(model_desc, name, True)

    @acl_function("kk", value=True, fail_value=-1)
    def get_input_format(self, model_desc, index):
        return format_code(self._tensor(model_desc, index, False).format)

    @acl_function("kk", value=True, fail_value=-1)
    def get_output_format(self, model_desc, index):
        return format_code(self._tensor(model_desc, index, True).format)

    @acl_function("kk", value=True, fail_value=-1)
    def get_input_data_type(self, model_desc, index):
        return self._tensor(model_desc, index, False).data_type.code

    @acl_function("kk", value=True, fail_value=-1)
    def get_output_data_type(self, model_desc, index):
        return self._tensor(model_desc, index, True).data_type.code

    # --- dynamic gears --------------------------------------------------------------------------

    def _gears(self, model_desc, kind: str) -> list[list[int]]:
        """The model's gears of ``kind``; none, or a failure (SimConfig.absent_gears_ret), if it lacks them."""
        layout = self._described(model_desc).om.layout
        if layout.kind == kind:
            return [list(g) for g in layout.gears]
        absent = self._sim.config.absent_gears_ret
        if absent:
            raise AclFail(absent, f"the model has {layout.kind or 'no'} gears, not {kind} gears")
        return []

    @acl_function("k", outputs=({},))
    def get_dynamic_batch(self, model_desc):
        batches = [g[0] for g in self._gears(model_desc, "batch")]
        return {"batchCount": len(batches), "batch": batches}

    @acl_function("kk", outputs=({},))
    def get_dynamic_hw(self, model_desc, index):
        gears = self._gears(model_desc, "hw")
        return {"hwCount": len(gears), "hw": gears}

    @acl_function("kk", outputs=(0,))
    def get_input_dynamic_gear_count(self, model_desc, index):
        return len(self._gears(model_desc, "dims"))

    @acl_function("kkk", outputs=(None,))
    def get_input_dynamic_dims(self, model_desc, index, gear_count):
        gears = self._gears(model_desc, "dims")
        if gear_count > 4096 or gear_count != len(gears):
            raise AclFail(INVALID_PARAM, f"gear_count {gear_count} does not match the model's {len(gears)} dims gears")
        return [_dims("", g) for g in gears]

    def _set_gear(self, model_id, dataset, index, kind: str, gear: tuple[int, ...]) -> None:
        sim = self._sim
        model = sim.model(model_id, sim.current_context())
        _refuse_while_executing(model, "selecting a gear")
        layout = model.om.layout
        if layout.kind != kind:
            raise AclFail(NOT_DYNAMIC, f"model {model_id} has {layout.kind or 'no'} gears, not {kind} gears")
        found = sim.lookup(sim.datasets, dataset, "dataset")
        if index != model.dynamic_index:
            raise AclFail(
                INVALID_PARAM,
                f"index {index} is not the index of {ACL_DYNAMIC_TENSOR_NAME!r} "
                f"({model.dynamic_index}); look it up with get_input_index_by_name",
            )
        if index >= len(found.buffers):
            raise AclFail(INVALID_PARAM, f"dataset {dataset:#x} has {len(found.buffers)} buffer(s), no index {index}")
        buffer = sim.lookup(sim.buffers, found.buffers[index], "data buffer")
        if buffer.addr == 0:
            raise AclFail(DYNAMIC_ADDR, f"the {ACL_DYNAMIC_TENSOR_NAME!r} buffer has a NULL address")
        if buffer.size < 4 * len(gear):
            raise AclFail(
                DYNAMIC_LENGTH,
                f"the {ACL_DYNAMIC_TENSOR_NAME!r} buffer has {buffer.size} bytes, at least {4 * len(gear)} are needed",
            )
        if kind == "batch" and gear == (0,):
            raise AclFail(INVALID_PARAM, "batch size 0")
        if gear not in layout.gears:
            raise AclFail(
                NOT_A_GEAR, f"{list(gear)} is not one of the model's {kind} gears {[list(g) for g in layout.gears]}"
            )
        sim.write(buffer.addr, encode_gear(kind, gear, buffer.size), True, "dynamic input buffer")
        model.current_gear = layout.gears.index(gear)

    @acl_function("IkkK")
    def set_dynamic_batch_size(self, model_id, dataset, index, batch_size):
        self._set_gear(model_id, dataset, index, "batch", (batch_size,))

    @acl_function("IkkKK")
    def set_dynamic_hw_size(self, model_id, dataset, index, height, width):
        self._set_gear(model_id, dataset, index, "hw", (height, width))

    @acl_function("IkkO")
    def set_input_dynamic_dims(self, model_id, dataset, index, dims):
        try:
            count, values = int(dims["dimCount"]), dims["dims"]
        except (TypeError, KeyError, ValueError):
            raise AclFail(INVALID_PARAM, f"dims must be a dict with 'dimCount' and 'dims', got {dims!r}") from None
        if not isinstance(values, list) or len(values) < count or not all(isinstance(v, int) for v in values):
            raise AclFail(
                INVALID_PARAM, f"dims['dims'] must be a list of at least dimCount={count} ints, got {values!r}"
            )
        self._set_gear(model_id, dataset, index, "dims", tuple(values[:count]))

    # --- datasets -------------------------------------------------------------------------------

    @acl_function("", value=True)
    def create_dataset(self):
        return self._sim.add(self._sim.datasets, Dataset)

    @acl_function("k")
    def destroy_dataset(self, dataset):
        self._sim.remove(self._sim.datasets, dataset, "dataset")

    @acl_function("kk", outputs=(0,))
    def add_dataset_buffer(self, dataset, data_buffer):
        found = self._sim.lookup(self._sim.datasets, dataset, "dataset")
        self._sim.lookup(self._sim.buffers, data_buffer, "data buffer")
        found.buffers.append(data_buffer)
        return dataset

    @acl_function("kk", value=True)
    def get_dataset_buffer(self, dataset, index):
        found = self._sim.lookup(self._sim.datasets, dataset, "dataset")
        if index >= len(found.buffers):
            raise AclFail(INVALID_PARAM, f"dataset {dataset:#x} has {len(found.buffers)} buffer(s), no index {index}")
        return found.buffers[index]

    @acl_function("k", value=True)
    def get_dataset_num_buffers(self, dataset):
        return len(self._sim.lookup(self._sim.datasets, dataset, "dataset").buffers)

    # --- execution ------------------------------------------------------------------------------

    def _buffers(self, dataset: int, count: int, what: str, code: int) -> list[DataBuffer]:
        found: Dataset = self._sim.lookup(self._sim.datasets, dataset, f"{what} dataset")
        if len(found.buffers) != count:
            raise AclFail(code, f"the {what} dataset has {len(found.buffers)} buffer(s), the model has {count} {what}s")
        snapshot = []
        for handle in found.buffers:
            buffer = self._sim.lookup(self._sim.buffers, handle, f"{what} data buffer")
            snapshot.append(DataBuffer(handle, buffer.addr, buffer.size))
        return snapshot

    def _prepare(self, model_id, input_dataset, output_dataset, context: Context, runner):
        """Check an execution at call time and mark the model running on ``runner``."""
        sim = self._sim
        model = sim.model(model_id, context)
        om = model.om
        busy = model.busy_elsewhere(runner)
        if busy is not None or (runner == SYNC and model.running[SYNC]):
            where = "synchronously in another thread" if busy in (None, SYNC) else f"on stream {busy:#x}"
            raise AclFail(
                MODEL_EXECUTE,
                f"model {model_id} is already executing {where}; one model_id must not "
                f"execute concurrently (load one copy of the model per stream)",
            )
        inputs = self._buffers(input_dataset, len(om.all_inputs), "input", INPUT_NOT_MATCH)
        outputs = self._buffers(output_dataset, len(om.layout.outputs), "output", OUTPUT_NOT_MATCH)
        gear = model.current_gear if model.current_gear is not None else om.layout.gear_count - 1
        shapes = om.layout.input_shapes(gear)
        for tensor, buffer in zip(om.all_inputs, inputs):
            need = tensor.byte_size(shapes[tensor.name]) if tensor.name in shapes else tensor.size
            self._check_buffer(tensor, buffer, need, "input", INPUT_NOT_MATCH, om.layout.gear_label(gear))
        for tensor, buffer, shape in zip(om.layout.outputs, outputs, om.layout.output_shapes(gear)):
            self._check_buffer(
                tensor, buffer, tensor.byte_size(shape), "output", OUTPUT_NOT_MATCH, om.layout.gear_label(gear)
            )
        model.running[runner] += 1
        return model, inputs, outputs

    def _check_buffer(
        self, tensor: LayoutTensor, buffer: DataBuffer, need: int, what: str, code: int, gear: str
    ) -> None:
        if buffer.size < need:
            raise AclFail(
                code,
                f"{what} {tensor.name!r}: the data buffer has {buffer.size} bytes, the model needs {need} at {gear}",
            )
        self._sim.check_range(buffer.addr, buffer.size, True, f"{what} {tensor.name!r} data buffer")

    def _run(self, model: LoadedModel, inputs: list[DataBuffer], outputs: list[DataBuffer]) -> None:
        """Execute now (on a stream worker, or the caller for execute); no lock held while running."""
        sim = self._sim
        started = time.perf_counter()
        layout = model.om.layout
        with sim.lock:
            sim.check_device()
            gear = 0
            if (dynamic_index := model.dynamic_index) is not None:  # the model has gears
                dynamic = inputs[dynamic_index]
                gear = gear_of(model, sim.read(dynamic.addr, dynamic.size, True, "dynamic input"))
            data = [
                sim.read(buffer.addr, tensor.byte_size(shape), True, f"input {tensor.name!r}")
                for tensor, buffer, shape in zip(layout.inputs, inputs, layout.input_shapes(gear).values())
            ]
            seconds = modelled_seconds(model, gear, sim.config.device_ms, sim.config.row_ms)
        results = run_session(model, gear, data)
        pad_to(started, seconds)
        with sim.lock:
            sim.check_device()
            for tensor, buffer, result in zip(layout.outputs, outputs, results):
                if result.nbytes > buffer.size:
                    raise AclFail(
                        OUTPUT_NOT_MATCH,
                        f"output {tensor.name!r}: {result.nbytes} bytes at "
                        f"{layout.gear_label(gear)} do not fit its {buffer.size}-byte buffer",
                    )
                sim.write(buffer.addr, result.tobytes(), True, f"output {tensor.name!r}")

    def _finish(self, model: LoadedModel, runner) -> None:
        with self._sim.lock:
            model.running[runner] -= 1

    @acl_function("Ikk", locked=False)
    def execute(self, model_id, input_dataset, output_dataset):
        with self._sim.lock:
            model, inputs, outputs = self._prepare(
                model_id, input_dataset, output_dataset, self._sim.current_context(), SYNC
            )
        try:
            self._run(model, inputs, outputs)
        finally:
            self._finish(model, SYNC)

    @acl_function("Ikkk")
    def execute_async(self, model_id, input_dataset, output_dataset, stream):
        context = self._sim.current_context()
        target = self._sim.stream(stream, context)
        model, inputs, outputs = self._prepare(model_id, input_dataset, output_dataset, context, stream)
        target.submit("execute_async", lambda: self._run(model, inputs, outputs), lambda: self._finish(model, stream))
