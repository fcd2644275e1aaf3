"""``acl.mdl``: load, datasets, execution and data dump of sim-OMs.

The description queries, gear calls and dynamic-AIPP calls live in ``mdl_desc``, ``mdl_gears``
and ``mdl_aipp``; ``MdlApi`` is all of them. Rules, with their sources in hicann/ge
``api/acl/acl_model/model/`` and ``runtime/v1/``, are listed in docs/fidelity.md.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ge_python_backend.ascend.acljson import AclJson, problems
from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.ascend.layout import LayoutTensor, Shape
from ge_python_backend.ascend.limits import arch_compatible, device_limits, platform_npu_arch
from ge_python_backend.errors import OmFormatError
from ge_python_backend.sim.aipp import decode_dynamic
from ge_python_backend.sim.device import clock, wait_until
from ge_python_backend.sim.mdl_aipp import AippCalls
from ge_python_backend.sim.mdl_desc import DescCalls
from ge_python_backend.sim.mdl_gears import GearCalls, refuse_while_executing
from ge_python_backend.sim.memory import read_host
from ge_python_backend.sim.models import (
    SYNC,
    DataBuffer,
    Dataset,
    LoadedModel,
    Run,
    TensorDesc,
    gear_of,
    host_output_shapes,
    model_costs,
    run_session,
)
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.simom import InputRole, SimOm, decode_sim_om, is_sim_om
from ge_python_backend.sim.state import INVALID_PARAM, Context

INVALID_FILE = ret_code("ACL_ERROR_INVALID_FILE")
READ_MODEL = ret_code("ACL_ERROR_READ_MODEL_FAILURE")
PARSE_MODEL = ret_code("ACL_ERROR_PARSE_MODEL")
INPUT_NOT_MATCH = ret_code("ACL_ERROR_MODEL_INPUT_NOT_MATCH")
OUTPUT_NOT_MATCH = ret_code("ACL_ERROR_MODEL_OUTPUT_NOT_MATCH")
MODEL_EXECUTE = ret_code("ACL_ERROR_RT_MODEL_EXECUTE")
MEMORY_ALLOCATION = ret_code("ACL_ERROR_RT_MEMORY_ALLOCATION")
GE_PARAM_INVALID = ret_code("ACL_ERROR_GE_PARAM_INVALID")
GE_FAILURE = ret_code("ACL_ERROR_GE_FAILURE")
REPEAT_INITIALIZE = ret_code("ACL_ERROR_REPEAT_INITIALIZE")
DUMP_NOT_RUN = ret_code("ACL_ERROR_DUMP_NOT_RUN")
INVALID_DUMP_CONFIG = ret_code("ACL_ERROR_INVALID_DUMP_CONFIG")
NO_STREAM = ret_code("ACL_ERROR_RT_NO_STREAM_RESOURCE")
NO_EVENT = ret_code("ACL_ERROR_RT_NO_EVENT_RESOURCE")

#: First bytes of files the simulator recognises as real (unsimulated) model packages.
_REAL_MODEL_MAGICS = {
    b"IMOD": "a CANN offline model",
    b"PICO": "a CANN SVP offline model",
    b"PK\x03\x04": "a CANN OM2 package",
}


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


class MdlApi(DescCalls, GearCalls, AippCalls):
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
            options.log_severity_level = 3
            try:
                session = ort.InferenceSession(om.onnx, options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # ONNX Runtime raises several private exception types
                raise AclFail(PARSE_MODEL, f"the embedded ONNX model does not load: {exc}") from None
            with self._sim.lock:
                self._sim.sessions[key] = session
        return session

    def _load(self, data: bytes, origin: str, work: tuple[int, int] = (0, 0), weight: tuple[int, int] = (0, 0)) -> int:
        sim = self._sim
        with sim.lock:
            context = sim.current_context()
        om = _parse_model(data, origin)
        session = self._session(om)
        work_size, weight_size = model_costs(om)
        self._check_soc(om, origin)
        with sim.lock:
            self._check_room(om, context.device)
            self._check_user_memory(om, work_size, weight_size, work, weight)
            own = (0 if work[0] else work_size) + (0 if weight[0] else weight_size)
            free = sim.config.device_memory - sim.device_used(context.device)
            if own > free:
                raise AclFail(
                    MEMORY_ALLOCATION,
                    f"the model needs {own} bytes of device memory, device {context.device} has {free} free",
                )
            model = LoadedModel(
                sim.new_model_id(),
                origin,
                om,
                session,
                context.handle,
                context.device,
                work_size,
                weight_size,
                weight_ptr=weight[0],
                work_ptr=work[0],
            )
            sim.models[model.model_id] = model
            sim.dumps.loaded(model)
            return model.model_id

    def _check_soc(self, om: SimOm, origin: str) -> None:
        """The model's soc_version against the device: CheckModelCompatibility refuses another NpuArch
        or a SoC no platform file names (om_file_helper.cc 259-287, E10001) with PARAM_INVALID; GE's
        own load test expects that status from LoadModelFromData (tests/ge/st/testcase/
        test_ge_executor.cc 1902-1915), and PARAM_INVALID (50331649, fmk_error_codes.cc 39) lies
        outside GE's ranges, so ACL_GET_ERRCODE_GE makes it 500002 (error_codes_inner.h 23-27;
        model.cpp 181-186: inferred, no test covers the ACL layer). No soc_version: no check."""
        soc = om.producer.get("soc_version", "")
        device = self._sim.config.soc_name
        if arch_compatible(soc, device) is False:
            archs = [platform_npu_arch(s) or "unknown: no platform file names it" for s in (soc, device)]
            raise AclFail(
                GE_FAILURE,
                f"E10001: {origin} was compiled for soc_version {soc} (NpuArch {archs[0]}), which the "
                f"{device} device (NpuArch {archs[1]}) cannot run: compile it with --soc_version={device}",
            )

    def _check_room(self, om: SimOm, device: int) -> None:
        """The streams and events the model creates at load (its stream_num / event_num,
        davinci_model.cc 1460-1509) must fit the device: the runtime's 207008 / 207007 (how GE passes
        them up from rtStreamCreateWithFlags is not traced: inferred). A dynamic-shape (RT2) load
        first creates a stream of its own, destroyed once the load is done (aclrtCreateStream,
        model.cpp 216-233, whose failure is returned as it is)."""
        sim = self._sim
        limits = device_limits(sim.config.soc_name)
        if limits is None:
            return
        loading = 1 if om.layout.kind == "range" else 0
        for what, needed, in_use, limit, code in (
            ("stream", om.model_streams + loading, sim.streams_in_use(device), limits.streams, NO_STREAM),
            ("event", om.model_events, sim.events_in_use(device), limits.events, NO_EVENT),
        ):
            if in_use + needed > limit:
                during = " (one of them only while a dynamic-shape load runs)" if loading and what == "stream" else ""
                raise AclFail(
                    code,
                    f"the model creates {needed} {what}(s) at load{during}; device {device} "
                    f"({sim.config.soc_name}) has {limit}, {in_use} in use",
                )

    def _check_user_memory(
        self, om: SimOm, work_size: int, weight_size: int, work: tuple[int, int], weight: tuple[int, int]
    ) -> None:
        """load_from_file_with_mem's buffers: device memory at least query_size's sizes (145000,
        davinci_model.cc 525-632); one weight buffer may serve several loads of the *same* model
        only (aclmdlLoadFromFileWithMem.md: weights are read-only in inference)."""
        sim = self._sim
        for what, (ptr, size), need in (("work", work, work_size), ("weight", weight, weight_size)):
            if not ptr:
                continue
            if size < need:
                raise AclFail(
                    GE_PARAM_INVALID, f"the {what} memory has {size} bytes; query_size says the model needs {need}"
                )
            sim.check_range(ptr, size, True, f"{what} memory")
        if weight[0]:
            digest = hashlib.sha256(om.onnx).hexdigest()
            for other in sim.models.values():
                if other.weight_ptr == weight[0] and hashlib.sha256(other.om.onnx).hexdigest() != digest:
                    raise AclFail(
                        GE_PARAM_INVALID,
                        f"the weight memory at {weight[0]:#x} holds the weights of model "
                        f"{other.model_id} ({other.path}), another model",
                    )
        if work[0]:
            for other in sim.models.values():
                if other.work_ptr == work[0]:
                    raise AclFail(
                        GE_PARAM_INVALID,
                        f"the work memory at {work[0]:#x} is model {other.model_id}'s; "
                        "work memory may be shared only by models that never run at once",
                    )

    @acl_function("s", outputs=(0,), locked=False)
    def load_from_file(self, model_path):
        return self._load(_read_model_file(model_path), model_path)

    @acl_function("skkkk", outputs=(0,), locked=False)
    def load_from_file_with_mem(self, model_path, work_ptr, work_size, weight_ptr, weight_size):
        """A dynamic (RT2) model takes only the weights: workPtr/workSize are not passed on
        (model.cpp 1332-1335), the runtime holds its own work memory; and a weight buffer below the
        model's weights is not refused (145000 is the OM1 rule, davinci_model.cc 525-570): RT2 then
        allocates weights of its own (GetOrCreateWeightMem, sink_weight_assigner.cc 86-93)."""
        data = _read_model_file(model_path)
        work, weight = (work_ptr, work_size), (weight_ptr, weight_size)
        om = _parse_model(data, model_path)
        if om.layout.kind == "range":
            work = (0, 0)
            if weight_size < model_costs(om)[1]:
                weight = (0, 0)
        return self._load(data, model_path, work, weight)

    @acl_function("kk", outputs=(0,), locked=False)
    def load_from_mem(self, model_ptr, model_size):
        if self._sim.is_device(model_ptr) or model_ptr == 0:
            raise AclFail(INVALID_PARAM, f"model_ptr {model_ptr:#x} is not host memory")
        return self._load(read_host(model_ptr, model_size), f"<memory {model_ptr:#x}>")

    @acl_function("s", outputs=(0, 0))
    def query_size(self, model_path):
        """(work, weight). For a dynamic (shape-range) model GE answers work 0 and the weights of all
        its submodels (GetModelMemAndWeightSize, model_manager.cc 2390-2409); its docs say not to use
        it for such models (aclmdlQuerySize.md 27-45), the code does not refuse it."""
        om = _parse_model(_read_model_file(model_path), model_path)
        work, weight = model_costs(om)
        return (0, weight) if om.layout.kind == "range" else (work, weight)

    @acl_function("I")
    def unload(self, model_id):
        refuse_while_executing(self._sim.model(model_id, self._sim.current_context()), "unloading")
        del self._sim.models[model_id]

    # --- datasets -------------------------------------------------------------------------------

    @acl_function("", value=True)
    def create_dataset(self):
        return self._sim.add(self._sim.datasets, Dataset)

    @acl_function("k")
    def destroy_dataset(self, dataset):
        found = self._sim.remove(self._sim.datasets, dataset, "dataset")
        for index in list(found.descs):
            self._sim.set_dataset_desc(found, index, None)

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

    @acl_function("kkk", outputs=(0,))
    def set_dataset_tensor_desc(self, dataset, tensor_desc, index):
        """Copy the desc onto buffer ``index`` (add the buffers first); 0 clears it (model_om2.cpp 965-990)."""
        sim = self._sim
        found = sim.lookup(sim.datasets, dataset, "dataset")
        if index >= len(found.buffers):
            raise AclFail(
                INVALID_PARAM,
                f"index {index} must be smaller than the dataset's {len(found.buffers)} "
                "buffer(s): add the buffers first",
            )
        given = None if tensor_desc == 0 else sim.tensor_desc(tensor_desc)
        sim.set_dataset_desc(found, index, given)
        return dataset

    @acl_function("kk", value=True)
    def get_dataset_tensor_desc(self, dataset, index):
        """The dataset's own copy (0 when none): execute rewrites the output descs of a shape-range
        model (model.cpp 672-693, 818-842)."""
        found = self._sim.lookup(self._sim.datasets, dataset, "dataset")
        desc = found.descs.get(index)
        return 0 if desc is None else desc.handle

    # --- execution ------------------------------------------------------------------------------

    def _buffers(self, dataset: int, count: int, what: str, code: int) -> tuple[Dataset, list[DataBuffer]]:
        found: Dataset = self._sim.lookup(self._sim.datasets, dataset, f"{what} dataset")
        if len(found.buffers) != count:
            raise AclFail(code, f"the {what} dataset has {len(found.buffers)} buffer(s), the model has {count} {what}s")
        snapshot = []
        for handle in found.buffers:
            buffer = self._sim.lookup(self._sim.buffers, handle, f"{what} data buffer")
            snapshot.append(DataBuffer(handle, buffer.addr, buffer.size))
        return found, snapshot

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
        if model.weight_ptr:
            sim.check_range(model.weight_ptr, model.weight_size, True, "the model's weight memory")
        in_set, inputs = self._buffers(input_dataset, len(om.all_inputs), "input", INPUT_NOT_MATCH)
        out_set, outputs = self._buffers(output_dataset, len(om.layout.outputs), "output", OUTPUT_NOT_MATCH)
        shapes = self._range_shapes(model, in_set) if om.layout.kind == "range" else None
        gear = model.current_gear if model.current_gear is not None else om.layout.gear_count - 1
        gear_shapes = shapes or om.layout.input_shapes(gear)
        label = om.layout.gear_label(gear)
        for entry, buffer in zip(om.model_inputs, inputs):
            tensor = entry.tensor
            shape = gear_shapes.get(tensor.name)
            need = tensor.byte_size(shape) if shape is not None and not tensor.free else min(tensor.size, buffer.size)
            self._check_buffer(tensor, buffer, need, "input", INPUT_NOT_MATCH, label)
        if shapes is None:
            for tensor, buffer, shape in zip(om.layout.outputs, outputs, om.layout.output_shapes(gear)):
                self._check_buffer(tensor, buffer, tensor.byte_size(shape), "output", OUTPUT_NOT_MATCH, label)
        else:
            self._check_range_outputs(model, shapes, outputs)
        model.running[runner] += 1
        return model, inputs, outputs, shapes, out_set

    def _range_shapes(self, model: LoadedModel, dataset: Dataset) -> dict[str, Shape]:
        """Each input's shape from its tensor desc, within its range (100000 otherwise, model.cpp 567-623)."""
        shapes = {}
        for index, entry in enumerate(model.om.model_inputs):
            tensor = entry.tensor
            desc = dataset.descs.get(index)
            shape = desc.dims if desc is not None else tensor.dims
            problem = tensor.range_problem(shape) if tensor.ranges else None
            if desc is None and -1 in tensor.dims:
                problem = f"{tensor.name!r} has no tensor desc on the input dataset (set_dataset_tensor_desc)"
            if problem:
                raise AclFail(INVALID_PARAM, f"input {index} shape out of shape range: {problem}")
            shapes[tensor.name] = tuple(shape)
        return shapes

    def _check_range_outputs(self, model: LoadedModel, shapes: dict[str, Shape], outputs: list[DataBuffer]) -> None:
        """RT2 sizes the copy into each output buffer on the host inside execute (TensorToOut:
        memory_copy.cc 566-572, GRAPH_FAILED -> 500002 through ACL_GET_ERRCODE_GE, model.cpp 662-671),
        so a too-small output fails execute_async itself, before any stream work."""
        found = host_output_shapes(model, shapes)
        for tensor, buffer, shape in zip(model.om.layout.outputs, outputs, found or ()):
            need = tensor.byte_size(shape)
            if need > buffer.size:
                raise AclFail(
                    GE_FAILURE,
                    f"output {tensor.name!r}: {need} bytes ({list(shape)}) do not fit its {buffer.size}-byte buffer",
                )

    def _check_buffer(
        self, tensor: LayoutTensor, buffer: DataBuffer, need: int, what: str, code: int, gear: str
    ) -> None:
        if buffer.size < need:
            raise AclFail(
                code,
                f"{what} {tensor.name!r}: the data buffer has {buffer.size} bytes, the model needs {need} at {gear}",
            )
        self._sim.check_range(buffer.addr, buffer.size, True, f"{what} {tensor.name!r} data buffer")

    def _read_run(self, model: LoadedModel, inputs: list[DataBuffer], shapes: dict[str, Shape] | None) -> Run:
        """What this execution runs, read from device memory at run time (under the lock)."""
        sim = self._sim
        om = model.om
        gear = 0
        if (dynamic_index := model.dynamic_index) is not None:  # the model has gears
            dynamic = inputs[dynamic_index]
            gear = gear_of(model, sim.read(dynamic.addr, dynamic.size, True, "dynamic input"))
        shapes = shapes or dict(om.layout.input_shapes(gear))
        dynamic_aipp = {}
        for index, entry in enumerate(om.model_inputs):
            if entry.role is not InputRole.AIPP_DATA:
                continue
            block = sim.read(inputs[index].addr, entry.tensor.size, True, f"input {entry.tensor.name!r}")
            decoded = decode_dynamic(block)
            if decoded is None:
                # "call aclmdlSetInputAIPP before aclmdlExecute" (ATC AIPP/aipp_intro.md 33). CANN's host
                # checks nothing here and what the device does with an unset block is not documented
                # (davinci_model.cc 6577-6580 only skips the size check): the simulator refuses the run.
                raise AclFail(
                    MODEL_EXECUTE,
                    f"the dynamic-AIPP parameters of input {entry.image!r} were never set: "
                    "call set_input_aipp (or set_aipp_by_input_index) before executing",
                )
            dynamic_aipp[entry.image] = decoded
            head = decoded[0]
            fmt = head.input_format
            image = om.client_input(entry.image).tensor
            batch = shapes[image.name][0] if shapes[image.name][0] > 0 else len(decoded[1])
            if fmt is not None:
                shapes[image.name] = fmt.v2_shape(batch, head.src_image_size_h, head.src_image_size_w)
        data = {}
        for index, entry in enumerate(om.model_inputs):
            if entry.role is not InputRole.CLIENT:
                continue
            tensor = entry.tensor
            data[tensor.name] = sim.read(
                inputs[index].addr, tensor.byte_size(shapes[tensor.name]), True, f"input {tensor.name!r}"
            )
        return Run(gear, shapes, data, dynamic_aipp)

    def _run(
        self,
        model: LoadedModel,
        inputs: list[DataBuffer],
        outputs: list[DataBuffer],
        shapes: dict[str, Shape] | None,
        out_set: Dataset,
        started: float | None = None,
    ) -> float:
        """Execute now (a stream's work from its modelled start ``started``, or ``execute``'s
        caller); no lock held while running. The execution is booked on the model's device, whose
        cores every stream and process on it share (sim/device.py), before ONNX Runtime runs it;
        the call returns at the booked end, the modelled end it returns."""
        sim = self._sim
        if started is None:
            started = clock()
        layout = model.om.layout
        with sim.lock:
            sim.check_device()
            run = self._read_run(model, inputs, shapes)
            demand = sim.execution_demand(model, run)
            device = sim.device_model(model.device)
        _, ended = device.execute(started, demand)
        results = run_session(model, run)
        wait_until(ended)
        with sim.lock:
            sim.check_device()
            for index, (tensor, buffer, result) in enumerate(zip(layout.outputs, outputs, results)):
                # too small: RT2 fails generically (hybrid_model_executor.cc 262-269, memory_copy.cc
                # 566-572), which ACL_GET_ERRCODE_GE makes 500002 (error_codes_inner.h 24-28)
                if result.nbytes > buffer.size:
                    code = GE_FAILURE if layout.kind == "range" else OUTPUT_NOT_MATCH
                    raise AclFail(
                        code,
                        f"output {tensor.name!r}: {result.nbytes} bytes ({list(result.shape)}) at "
                        f"{layout.gear_label(run.gear)} do not fit its {buffer.size}-byte buffer",
                    )
                sim.write(buffer.addr, result.tobytes(), True, f"output {tensor.name!r}")
                if layout.kind == "range":  # the dynamic-shape executor rewrites every output desc
                    desc = TensorDesc(0, tensor.data_type.code, tuple(result.shape), 2, tensor.name)
                    sim.set_dataset_desc(out_set, index, desc)
            sim.dumps.executed(model)
        return ended

    def _finish(self, model: LoadedModel, runner) -> None:
        with self._sim.lock:
            model.running[runner] -= 1

    @acl_function("Ikk", locked=False)
    def execute(self, model_id, input_dataset, output_dataset):
        with self._sim.lock:
            model, inputs, outputs, shapes, out_set = self._prepare(
                model_id, input_dataset, output_dataset, self._sim.current_context(), SYNC
            )
        try:
            self._run(model, inputs, outputs, shapes, out_set)
        finally:
            self._finish(model, SYNC)

    @acl_function("Ikkk")
    def execute_async(self, model_id, input_dataset, output_dataset, stream):
        context = self._sim.current_context()
        target = self._sim.stream(stream, context)
        model, inputs, outputs, shapes, out_set = self._prepare(
            model_id, input_dataset, output_dataset, context, stream
        )
        target.submit(
            "execute_async",
            lambda start: self._run(model, inputs, outputs, shapes, out_set, start),
            lambda: self._finish(model, stream),
        )

    # --- data dump (hicann/runtime src/acl/aclrt_impl/toolchain/dump.cpp 103-239) ---------------

    @acl_function("")
    def init_dump(self):
        if self._sim.dumps.initialized:
            raise AclFail(REPEAT_INITIALIZE, "init_dump was already called (finalize_dump first)")
        self._sim.dumps.initialized = True

    @acl_function("|s")
    def set_dump(self, dump_config_path=None):
        """NULL (no argument) -> 100000; a path that does not resolve or cannot be opened -> 100003
        (GetConfigStrFromFile, json_parser.cpp 181-194); an empty file -> 0 and no change (197-201,
        dump.cpp 168-169); a config the dump converter refuses -> 100009 (dump.cpp 180-185)."""
        dumps = self._sim.dumps
        if not dumps.initialized:
            raise AclFail(DUMP_NOT_RUN, "set_dump before init_dump")
        if dump_config_path is None:
            raise AclFail(INVALID_PARAM, "set_dump needs the path of a dump config (acl.json syntax)")
        try:
            if not dump_config_path:  # mmRealPath("") fails (json_parser.cpp 67-81)
                raise ValueError("an empty path")
            text = Path(dump_config_path).resolve(strict=True).read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise AclFail(INVALID_FILE, f"dump config {dump_config_path!r} cannot be read: {exc}") from None
        if not text:
            return
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise AclFail(INVALID_DUMP_CONFIG, f"dump config {dump_config_path!r}: {exc}") from None
        if not isinstance(data, dict):
            raise AclFail(INVALID_DUMP_CONFIG, f"dump config {dump_config_path!r} is not a JSON object")
        config = AclJson(Path(dump_config_path), {"dump": data.get("dump", {})} if data else {})
        found = [p for p in problems(config) if p.key.startswith("dump")]
        if found:
            raise AclFail(INVALID_DUMP_CONFIG, "; ".join(str(p) for p in found))
        dumps.configure(config)

    @acl_function("")
    def finalize_dump(self):
        dumps = self._sim.dumps
        if not dumps.initialized:
            raise AclFail(DUMP_NOT_RUN, "finalize_dump before init_dump")
        dumps.initialized = False
        dumps.configure(None)
