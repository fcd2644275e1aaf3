"""ONNX Runtime engine: CPU, GPU, or Ascend through ORT's CANN execution provider.

One ``InferenceSession`` is shared by all slots (``session.run`` is thread-safe and releases
the GIL). Each slot keeps reusable input buffers per shape, so the gather copies straight into
memory the slot owns and a steady load allocates nothing for inputs.
"""

from __future__ import annotations

import difflib
import time
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.engines.base import Engine, PhaseTimes, Shapes, Slot
from ge_python_backend.engines.registry import EngineDriver, EngineLoad
from ge_python_backend.errors import ConfigError, EngineError
from ge_python_backend.params import Parameter, parse_bool, parse_choice, parse_int, parse_list
from ge_python_backend.specs import ModelSpec, TensorSpec, batch_support_from_shapes, format_shape, shape_fits

PARAMETERS = (
    Parameter(
        "onnxruntime_providers",
        parse_list(str),
        ("CPUExecutionProvider",),
        "comma-separated ONNX Runtime execution providers in priority order",
        "ONNX Runtime execution providers, e.g. CANNExecutionProvider,CPUExecutionProvider; device providers get "
        "device_id",
    ),
    Parameter(
        "onnxruntime_intra_op_threads",
        parse_int(0),
        0,
        "an integer >= 0 (0: ONNX Runtime's default)",
        "threads used inside one operator",
    ),
    Parameter(
        "onnxruntime_inter_op_threads",
        parse_int(0),
        0,
        "an integer >= 0 (0: ONNX Runtime's default)",
        "threads used across independent operators",
    ),
    Parameter(
        "onnxruntime_spinning",
        parse_bool,
        None,
        "true or false (default: true with one slot, false with several)",
        "let ORT's thread pools spin-wait between operators: faster when one batch runs at a time; several "
        "slots' threads spinning against each other (and tritonserver) on few cores stall the server",
    ),
    Parameter(
        "onnxruntime_graph_optimization",
        parse_choice("disable", "basic", "extended", "all"),
        "all",
        "disable, basic, extended or all",
        "ONNX Runtime graph optimization level",
    ),
)

#: ONNX Runtime element type string -> Triton API data type name.
_ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}

#: Providers that take a device_id provider option (ONNX Runtime's provider options).
_DEVICE_PROVIDERS = frozenset(
    {"CANNExecutionProvider", "CUDAExecutionProvider", "ROCMExecutionProvider", "TensorrtExecutionProvider"}
)
#: Providers that run on a GPU: their instances are instance_group KIND_GPU, and each runs on the GPU
#: Triton places it on (``model_instance_device_id``)
GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "ROCMExecutionProvider", "TensorrtExecutionProvider"})
#: the PyPI package whose onnxruntime has a provider (the package ``onnxruntime`` has the CPU's only)
PROVIDER_PACKAGES = {
    "CUDAExecutionProvider": "onnxruntime-gpu",
    "TensorrtExecutionProvider": "onnxruntime-gpu",
    "ROCMExecutionProvider": "onnxruntime-rocm",
    "CANNExecutionProvider": "onnxruntime-cann",
}


def provider_options(requested: tuple[str, ...], device_id: int) -> list[tuple[str, dict[str, str]]]:
    """The providers a session is created with: a device provider runs on ``device_id`` (the GPU
    Triton placed a KIND_GPU instance on, else the instance's id from device_ids)."""
    return [(p, {"device_id": str(device_id)}) if p in _DEVICE_PROVIDERS else (p, {}) for p in requested]


#: ONNX Runtime's log severity "error" (0 verbose, 1 info, 2 warning, 3 error, 4 fatal).
_ORT_LOG_ERROR = 3

#: Bytes of input buffers a slot keeps for shapes other than its last run's (least recently used
#: dropped first): clients choose the shapes of a model with dynamic axes, so the cache is bounded
#: in bytes, not in shapes (sixteen shapes of 16 MB kept 244 MiB before).
BUFFER_CACHE_BYTES = 64 << 20


def _tensor_spec(node: Any, unranked: frozenset[str]) -> TensorSpec:
    dtype = _ORT_TYPES.get(node.type, "")
    if node.name in unranked:
        return TensorSpec(node.name, dtype, (), native_type=node.type, dynamic_rank=True)
    dims = tuple(node.shape or ())
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims)
    names = tuple(d if isinstance(d, str) else "" for d in dims)
    return TensorSpec(node.name, dtype, shape, native_type=node.type, dim_names=names if any(names) else ())


def unranked_tensors(model_path: Path) -> frozenset[str]:
    """Names of the graph inputs and outputs whose rank the ONNX file leaves open.

    ONNX Runtime reports them with shape [] like a scalar, so the file itself is read (with the
    ``onnx`` package, without external data). Without ``onnx`` nothing can be told apart."""
    try:
        import onnx
    except ImportError:
        return frozenset()
    try:
        graph = onnx.load(str(model_path), load_external_data=False).graph
    except Exception:  # ONNX Runtime loaded it; anything onnx cannot parse is left to ORT
        return frozenset()
    return frozenset(
        value.name
        for value in (*graph.input, *graph.output)
        if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape")
    )


def spec_from_session(session: Any, unranked: frozenset[str] = frozenset()) -> ModelSpec:
    """The ModelSpec of a loaded ONNX Runtime session; ``unranked`` names tensors of open rank."""
    inputs = tuple(_tensor_spec(n, unranked) for n in session.get_inputs())
    outputs = tuple(_tensor_spec(n, unranked) for n in session.get_outputs())
    return ModelSpec(
        inputs=inputs,
        outputs=outputs,
        batch=batch_support_from_shapes(inputs, outputs),
        source="onnx",
        facts={"producer": session.get_modelmeta().producer_name or ""},
    )


def _spec(session: Any, model_path: Path) -> ModelSpec:
    nodes = [*session.get_inputs(), *session.get_outputs()]
    maybe_unranked = any(not node.shape for node in nodes)  # a scalar, or a tensor of open rank
    return spec_from_session(session, unranked_tensors(model_path) if maybe_unranked else frozenset())


def _import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError(
            "the onnxruntime engine needs the onnxruntime package: pip install 'ge-python-backend[onnx]'"
        ) from None
    return onnxruntime


def load_session(
    model_path: Path,
    *,
    device_id: int = 0,
    slots: int = 1,
    options: Mapping[str, Any] | None = None,
    quiet: bool = False,
):
    """An ONNX Runtime session for ``model_path`` configured from engine ``options``.

    ``quiet``: ONNX Runtime logs errors only (reading a model offline must not print its
    warnings, e.g. about unused initializers, on the command line's stderr)."""
    ort = _import_onnxruntime()
    values = {p.name: p.default for p in PARAMETERS} | dict(options or {})
    available = set(ort.get_available_providers())
    requested = values["onnxruntime_providers"]
    missing = [p for p in requested if p not in available]
    if missing:
        raise ConfigError(
            f"parameter 'onnxruntime_providers' names {', '.join(missing)}, which this onnxruntime build "
            f"does not have; available: {', '.join(sorted(available))}"
        )
    providers = provider_options(tuple(requested), device_id)
    session_options = ort.SessionOptions()
    if quiet:
        session_options.log_severity_level = _ORT_LOG_ERROR
    session_options.intra_op_num_threads = values["onnxruntime_intra_op_threads"]
    session_options.inter_op_num_threads = values["onnxruntime_inter_op_threads"]
    spin = values["onnxruntime_spinning"]
    spinning = "1" if (slots == 1 if spin is None else spin) else "0"
    session_options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    session_options.add_session_config_entry("session.inter_op.allow_spinning", spinning)
    session_options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[values["onnxruntime_graph_optimization"]]
    if not Path(model_path).is_file():
        raise ConfigError(f"model file {model_path} does not exist")
    try:
        return ort.InferenceSession(str(model_path), session_options, providers=providers)
    except Exception as exc:  # ORT raises several private exception types
        raise ConfigError(f"ONNX Runtime could not load {model_path}: {exc}") from None


def read_onnx_spec(model_path: Path) -> ModelSpec:
    """Describe an .onnx file (loads it on the CPU provider, ONNX Runtime's warnings silenced)."""
    return _spec(load_session(model_path, quiet=True), Path(model_path))


class _OrtSlot(Slot):
    def __init__(self, index: int, session: Any, spec: ModelSpec) -> None:
        self.index = index
        self.last_times = PhaseTimes()
        self._session = session
        self._spec = spec
        self._output_names = [o.name for o in spec.outputs]
        self._text_inputs = {t.name for t in spec.inputs if t.dtype == "BYTES"}
        self._text_outputs = {t.name for t in spec.outputs if t.dtype == "BYTES"}
        self._buffers: OrderedDict[tuple[str, tuple[int, ...]], np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self._staged: dict[str, np.ndarray] = {}

    def inputs(self, shapes: Shapes, settings: Hashable = None) -> dict[str, np.ndarray]:
        staged = {}
        for spec in self._spec.inputs:
            shape = tuple(shapes[spec.name])
            if not spec.dynamic_rank and not shape_fits(shape, spec.shape):
                raise EngineError(
                    f"input {spec.name!r}: the model takes {format_shape(spec.shape)}, "
                    f"asked to run {format_shape(shape)}"
                )
            staged[spec.name] = self._buffer(spec, shape)
        self._staged = staged
        self._trim(len(staged), sum(b.nbytes for b in staged.values()))
        return staged

    def _buffer(self, spec: TensorSpec, shape: tuple[int, ...]) -> np.ndarray:
        key = (spec.name, shape)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = np.empty(shape, dtype=spec.numpy_dtype)
            self._buffers[key] = buffer
            self._cached_bytes += buffer.nbytes
        else:
            self._buffers.move_to_end(key)
        return buffer

    def _trim(self, current: int, current_bytes: int) -> None:
        """Drop the least recently used buffers until the ones kept besides the ``current`` most
        recent (this run's, ``current_bytes``) fit in BUFFER_CACHE_BYTES."""
        while len(self._buffers) > current and self._cached_bytes - current_bytes > BUFFER_CACHE_BYTES:
            _, dropped = self._buffers.popitem(last=False)
            self._cached_bytes -= dropped.nbytes

    def run(self) -> dict[str, np.ndarray]:
        started = time.perf_counter()
        feeds = {
            name: _as_text(name, array) if name in self._text_inputs else array for name, array in self._staged.items()
        }
        try:
            results = self._session.run(self._output_names, feeds)
        except Exception as exc:  # ORT raises several private exception types
            raise EngineError(f"ONNX Runtime failed: {exc}") from None
        self.last_times = PhaseTimes(execute=time.perf_counter() - started)
        return {
            name: _as_bytes(result) if name in self._text_outputs else result
            for name, result in zip(self._output_names, results)
        }


def _as_text(name: str, array: np.ndarray) -> np.ndarray:
    """A BYTES input as ONNX Runtime takes strings: ``str`` elements (it would call ``str()`` on
    ``bytes`` and send "b'..'"). Requests were checked to be UTF-8 (``utf8_strings``)."""
    text = np.empty(array.shape, dtype=np.object_)
    flat, source = text.reshape(-1), array.reshape(-1)
    for index, value in enumerate(source):
        if isinstance(value, (bytes, bytearray, memoryview)):
            try:
                flat[index] = bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EngineError(f"input {name!r} element {index} is not UTF-8 text ({exc.reason})") from None
        else:
            flat[index] = str(value)
    return text


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """A string output of ONNX Runtime (``str`` elements) as Triton's BYTES: UTF-8 ``bytes``."""
    result = np.empty(array.shape, dtype=np.object_)
    flat = result.reshape(-1)
    for index, value in enumerate(array.reshape(-1)):
        flat[index] = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return result


class OnnxRuntimeEngine(Engine):
    """An ONNX model on ONNX Runtime with ``slots`` concurrent execution contexts."""

    name = "onnxruntime"
    outputs_alias_slot_memory = False  # session.run returns fresh arrays
    utf8_strings = True  # ONNX Runtime's string tensors hold UTF-8 text

    def __init__(
        self, model_path: Path, *, device_id: int = 0, slots: int = 1, options: Mapping[str, Any] | None = None
    ):
        self._session = load_session(model_path, device_id=device_id, slots=slots, options=options)
        self.spec = _spec(self._session, Path(model_path))
        self._providers = self._session.get_providers()
        self._slots = tuple(_OrtSlot(i, self._session, self.spec) for i in range(slots))

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self._slots

    def close(self) -> None:
        self._slots = ()
        self._session = None

    def describe(self) -> str:
        return f"onnxruntime engine ({', '.join(self._providers)}), {len(self._slots)} slot(s)"


class OnnxRuntimeDriver(EngineDriver):
    """Engine ``onnxruntime`` (``peers`` and ``version_dir`` do not matter to ORT: its parameters
    name no files)."""

    parameters = PARAMETERS

    def open(self, load: EngineLoad) -> OnnxRuntimeEngine:
        return OnnxRuntimeEngine(load.model_path, device_id=load.device_id, slots=load.slots, options=load.options)

    def offline_warnings(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        """Providers the onnxruntime here lacks: the load refuses them unless the stub's Python
        environment (ge-triton serve's, or the python3 first on tritonserver's PATH) has the package."""
        requested = options.get("onnxruntime_providers", ())
        ort = _import_onnxruntime()
        available = ort.get_available_providers()
        return [
            f"parameter 'onnxruntime_providers' names {name}, which the onnxruntime {ort.__version__} of this Python "
            f"lacks (it has {', '.join(available)}): the load fails unless the Python environment of the server's "
            f"stub has {PROVIDER_PACKAGES.get(name, 'an onnxruntime build with it')}"
            + (
                f" (pip install {PROVIDER_PACKAGES[name]}, in place of onnxruntime)"
                if name in PROVIDER_PACKAGES
                else ""
            )
            for name in requested
            if name not in available
        ]

    def generated_parameters(self, spec: ModelSpec, max_batch_size: int, given: Mapping[str, str]) -> dict[str, str]:
        """``onnxruntime_providers`` from ``--providers``, each a provider ONNX Runtime defines."""
        text = given.get("onnxruntime_providers", "")
        if not text:
            return {}
        known = _import_onnxruntime().get_all_providers()
        for name in text.split(","):
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]}?" if close else f"; ONNX Runtime's: {', '.join(known)}"
                raise ConfigError(f"--providers {text}: {name!r} is not an ONNX Runtime execution provider{hint}")
        return {"onnxruntime_providers": text}

    def on_gpu(self, options: Mapping[str, Any]) -> bool:
        return any(name in GPU_PROVIDERS for name in options.get("onnxruntime_providers", ()))


DRIVER = OnnxRuntimeDriver()
