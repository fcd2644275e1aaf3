"""The model repositories the scenarios serve, and their baselines.

- the serving repository (``serving``, ``variants``, ``profile``): image_classifier (FP32
  3x224x224 -> 1000) as the GEModel folder ``ge-triton generate`` writes (``ge``), the
  hand-written model.py (``handwritten``, baselines/handwritten_model.py) and optional variants;
  ``PyTritonProcess`` serves the same ONNX model behind PyTriton's ``@batch``;
- the host-path repository (``host-path``, ``ab``, ``execute``, ``profile --host``): a tiny Relu
  (FP32 [N,3,32,32]) as the identity model.py (baselines/identity_model.py, the baseline), GEModel
  on onnxruntime (``ort``) and acl-sim folders per configuration and device time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

BASELINES = Path(__file__).resolve().parent / "baselines"

# --- the serving repository ----------------------------------------------------------------------

MAX_BATCH = 8
QUEUE_DELAY_US = 500

HANDWRITTEN_CONFIG = f"""name: "handwritten"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def classifier_inputs():
    """One batch-1 request of the serving model (random FP32 image)."""
    import numpy as np

    return {"image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}


def build_serving_repository(
    workdir: Path, variants: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[Path, Path]:
    """(repository, onnx file): folders ``ge`` (ge-triton generate's defaults) and ``handwritten``,
    plus one generated folder per entry of ``variants`` (name -> config parameters to set)."""
    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.testing import models

    onnx_file = models.image_classifier(workdir / "classifier.onnx")
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    for name, parameters in {"ge": {}, **(variants or {})}.items():
        options = GenerateOptions(
            name=name,
            max_batch_size=MAX_BATCH,
            max_queue_delay_us=QUEUE_DELAY_US,
            streams=int(parameters.get("streams", 1)),
        )
        folder = generate(onnx_file, repo, options).model_dir
        set_parameters(folder / "config.pbtxt", **{k: v for k, v in parameters.items() if k != "streams"})
    hand = repo / "handwritten"
    (hand / "1").mkdir(parents=True)
    (hand / "config.pbtxt").write_text(HANDWRITTEN_CONFIG)
    shutil.copyfile(onnx_file, hand / "1" / "model.onnx")
    shutil.copyfile(BASELINES / "handwritten_model.py", hand / "1" / "model.py")
    return repo, onnx_file


class PyTritonProcess:
    """baselines/pytriton_server.py in a child process on free loopback ports."""

    def __init__(self, onnx_file: Path, log: Path, startup_timeout: float = 180.0) -> None:
        from ge_python_backend.ops.server import free_port

        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(BASELINES / "pytriton_server.py"),
                str(onnx_file),
                "--name",
                "pytriton",
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--metrics-port",
                str(self.metrics_port),
                "--max-batch-size",
                str(MAX_BATCH),
                "--max-queue-delay-us",
                str(QUEUE_DELAY_US),
            ],
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + startup_timeout
        line = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            line = self.process.stdout.readline().strip()
            if line == "ready":
                return
        self.stop()
        raise RuntimeError(f"PyTriton did not start ({line!r}); see {log}")

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> PyTritonProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


# --- the host-path repository ---------------------------------------------------------------------

ROWS = 8  # the largest gear: rows per full batch
GEARS = (1, 2, 4, ROWS)
SHAPE = (3, 32, 32)

IDENTITY_CONFIG = f"""name: "identity"
backend: "python"
max_batch_size: {ROWS}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {", ".join(map(str, SHAPE))} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {", ".join(map(str, SHAPE))} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


#: the pyACL a configuration's acl-family folder runs on: the simulator (engine acl-sim) or the
#: null pyACL (engine acl over tools/bench/nullacl.py: the acl engine's host cost without the simulator's)
PYACLS = ("sim", "null")
NULLACL = Path(__file__).resolve().parent / "nullacl.py"


@dataclass(frozen=True)
class Config:
    """One configuration; ``None`` fields: what ``ge-triton generate`` writes.

    ``engine``: ``acl-sim`` (the simulator), ``null`` (engine acl over the null pyACL) or
    ``onnxruntime``; ``parameters``: more config parameters to set (``LABEL+key=value``)."""

    label: str
    mode: str | None = None
    streams: int | None = None
    instances: int | None = None
    engine: str = "acl-sim"
    parameters: tuple[tuple[str, str], ...] = ()

    def folder(self, device_ms: float) -> str:
        """The model folder's name at ``device_ms`` (a folder name, also in URLs: no ``+``/``=``)."""
        name = self.label.replace("+", "__").replace("=", "-")
        return name if self.engine == "onnxruntime" else f"{name}_d{device_ms:g}".replace(".", "p")


def grid(
    modes: Sequence[str], streams: Sequence[int], instances: Sequence[int], engine: str = "acl-sim"
) -> list[Config]:
    prefix = "null_" if engine == "null" else ""
    return [Config(f"{prefix}{m}_s{s}_i{i}", m, s, i, engine) for m in modes for s in streams for i in instances]


LABELS_HELP = (
    "ort (GEModel on onnxruntime), default (generate's folder on acl-sim), null (the same on engine acl over the "
    "null pyACL), MODE_sS_iI or null_MODE_sS_iI (e.g. return_s1_i2); any of them +key=value[+key=value] sets "
    "more config parameters (e.g. default+reject_nonfinite=true)"
)


def config_named(label: str) -> Config:
    """The Config behind a label: ``ort``, ``default``, ``null``, ``[null_]MODE_sS_iI``, each
    optionally followed by ``+key=value`` config parameters (``default+reject_nonfinite=true``)."""
    from ge_python_backend.errors import ConfigError
    from ge_python_backend.ops.deploy.options import pairs

    base, *extras = label.split("+")
    try:
        parameters = pairs(f"configuration {label!r}:", extras)
    except ConfigError as exc:
        raise ValueError(f"{exc} ({LABELS_HELP})") from None
    engine = "acl-sim"
    if base == "ort":
        return Config(label, engine="onnxruntime", parameters=tuple(parameters))
    if base in ("default", "null"):
        return Config(label, engine="null" if base == "null" else engine, parameters=tuple(parameters))
    if base.startswith("null_"):
        engine, base = "null", base.removeprefix("null_")
    try:
        mode, streams, instances = base.split("_")
        return Config(
            label, mode, int(streams.removeprefix("s")), int(instances.removeprefix("i")), engine, tuple(parameters)
        )
    except ValueError:
        raise ValueError(f"unknown configuration {label!r} ({LABELS_HELP})") from None


def relu_model(path: Path, shape: Sequence[int] = SHAPE) -> Path:
    """FP32 [N, *shape] -> Relu -> y (the host-path model; ``images`` gives its own shapes)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *shape])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tools.bench")
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def written_config(folder: Path) -> dict[str, str]:
    """instance count, streams and response mode as written in ``folder``'s config.pbtxt."""
    from ge_python_backend.repository.config import read_config_file

    config = read_config_file(folder / "config.pbtxt")
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    return {
        "instances": str(sum(g.count for g in config.instance_group) or 1),
        "streams": parameters.get("streams", "1"),
        "response_mode": parameters.get("response_mode", "auto"),
    }


def describe(written: Mapping[str, str]) -> str:
    return f"instances {written['instances']}, streams {written['streams']}, response_mode {written['response_mode']}"


def null_prelude(device_ms: float, shared_device: bool = True) -> str:
    """What a null-pyACL folder's model.py runs first: ``import acl`` becomes the null pyACL (loaded
    from this checkout's tools/bench/nullacl.py by path, so a ``code`` checkout's package stays first)."""
    return (
        "import importlib.util as _util\n"
        f"_spec = _util.spec_from_file_location('ge_bench_nullacl', {str(NULLACL)!r})\n"
        "_nullacl = _util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_nullacl)\n"
        f"_nullacl.install(device_ms={device_ms!r}, shared_device={shared_device!r})\n"
    )


def prepend(model_py: Path, text: str) -> None:
    model_py.write_text(text + model_py.read_text())


def config_folder(
    model_file: Path,
    repo: Path,
    config: Config,
    device_ms: float,
    *,
    max_batch_size: int | None = None,
    shared_device: bool = True,
) -> Path:
    """``config``'s folder at ``device_ms`` for ``model_file`` (an .om; an .onnx for onnxruntime),
    as ``ge-triton generate`` writes it, then the configuration's changes: response mode, device
    time (acl-sim's parameter, or the null pyACL's in model.py), engine acl for the null pyACL and
    the extra parameters. ``shared_device`` false: every stream a device of its own (the host
    measured alone)."""
    from ge_python_backend.repository.config import read_config_file, set_parameters
    from ge_python_backend.repository.generate import GenerateOptions, generate

    options = GenerateOptions(
        name=config.folder(device_ms),
        max_queue_delay_us=QUEUE_DELAY_US,
        **({"max_batch_size": max_batch_size} if max_batch_size is not None else {}),
        **({"streams": config.streams} if config.streams is not None else {}),
        **({"instance_count": config.instances} if config.instances is not None else {}),
    )
    folder = generate(model_file, repo, options).model_dir
    parameters: dict[str, str] = {}
    if config.engine == "acl-sim":
        parameters["acl_sim_device_ms"] = f"{device_ms:g}"
        if not shared_device:
            parameters["acl_sim_shared_device"] = "false"
    elif config.engine == "null":
        parameters["engine"] = "acl"
        prepend(folder / "1" / "model.py", null_prelude(device_ms, shared_device))
    if config.mode is not None:
        parameters["response_mode"] = config.mode
    parameters.update(config.parameters)
    set_parameters(folder / "config.pbtxt", **parameters)
    if config.engine == "null":  # generate's acl-sim only parameters would be refused by engine acl
        written = read_config_file(folder / "config.pbtxt")
        stray = [key for key in written.parameters if key.startswith("acl_sim_")]
        if stray:
            raise ValueError(f"{config.label}: engine acl over the null pyACL takes no {', '.join(stray)}")
    return folder


def identity_folder(repo: Path) -> Path:
    """The identity model.py (baselines/identity_model.py: the Python backend's floor) in ``repo``."""
    identity = repo / "identity"
    (identity / "1").mkdir(parents=True)
    (identity / "config.pbtxt").write_text(IDENTITY_CONFIG)
    shutil.copyfile(BASELINES / "identity_model.py", identity / "1" / "model.py")
    return identity


def build_host_repository(
    workdir: Path,
    configs: Sequence[Config],
    device_times: Sequence[float],
    code: Path | None = None,
    shared_device: bool = True,
) -> tuple[Path, Path]:
    """(repository, .om file): identity, ``ort`` and each configuration's folder per device time
    (0 and ``device_times``; an onnxruntime configuration once); ``code``: a checkout whose
    ge_python_backend the GEModel folders import instead of the installed one (to measure a "before")."""
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.sim import sim_compile

    onnx_file = relu_model(workdir / "relu.onnx")
    om_file = workdir / "relu.om"
    sim_compile(onnx_file, om_file, batch_gears=GEARS)
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    identity_folder(repo)
    folders = [
        generate(
            onnx_file, repo, GenerateOptions(name="ort", max_batch_size=ROWS, max_queue_delay_us=QUEUE_DELAY_US)
        ).model_dir
    ]
    for config in configs:
        if config.engine == "onnxruntime":
            if config.label != "ort":
                folders.append(config_folder(onnx_file, repo, config, 0.0, max_batch_size=ROWS))
            continue
        folders += [
            config_folder(om_file, repo, config, device_ms, shared_device=shared_device)
            for device_ms in (0.0, *device_times)
        ]
    if code is not None:
        use_code(folders, code)
    return repo, om_file


def use_code(folders: Sequence[Path], code: Path) -> None:
    """The stub ignores PYTHONPATH: each folder's model.py itself puts the checkout first."""
    for folder in folders:
        prepend(folder / "1" / "model.py", f"import sys\nsys.path.insert(0, {str(code.resolve())!r})\n")


# --- the images repository ------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInput:
    """One request kind of ``images``: UINT8 NHWC through static AIPP (RGB888_U8) or FP32 NCHW."""

    kind: str  # "uint8" or "fp32"
    size: int  # height = width

    @property
    def label(self) -> str:
        return f"{self.kind}_{self.size}"

    @property
    def shape(self) -> tuple[int, ...]:
        """One request's shape without the batch axis."""
        return (self.size, self.size, 3) if self.kind == "uint8" else (3, self.size, self.size)

    @property
    def dtype(self) -> str:
        return "uint8" if self.kind == "uint8" else "float32"

    @property
    def title(self) -> str:
        return (
            f"UINT8 NHWC 1x{self.size}x{self.size}x3 (static AIPP)"
            if self.kind == "uint8"
            else f"FP32 NCHW 1x3x{self.size}x{self.size}"
        )

    @property
    def request_bytes(self) -> int:
        return 3 * self.size * self.size * (1 if self.kind == "uint8" else 4)


def pooled_model(path: Path, size: int) -> Path:
    """FP32 [N,3,size,size] -> ReduceMean over H, W -> [N,3]: an image model with a small answer,
    so what is measured is the input's path."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)],
        "pooled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tools.bench")
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def image_om(workdir: Path, image: ImageInput) -> Path:
    """The .om of ``image``, sim-compiled with gears 1,2,4,8 (UINT8: with a static AIPP config
    converting RGB888_U8 NHWC into the model's FP32 NCHW, as ATC's --insert_op_conf does)."""
    from ge_python_backend.sim import sim_compile

    onnx_file = pooled_model(workdir / f"pooled_{image.size}.onnx", image.size)
    om_file = workdir / f"{image.label}.om"
    aipp = None
    if image.kind == "uint8":
        aipp = workdir / f"aipp_{image.size}.cfg"
        aipp.write_text(
            "aipp_op {\n aipp_mode: static\n input_format: RGB888_U8\n"
            f" src_image_size_w: {image.size}\n src_image_size_h: {image.size}\n}}\n"
        )
    sim_compile(onnx_file, om_file, batch_gears=GEARS, insert_op_conf=aipp)
    return om_file


def build_images_repository(
    workdir: Path, images: Sequence[ImageInput], configs: Sequence[Config], queue_delay_us: int = QUEUE_DELAY_US
) -> tuple[Path, dict[tuple[str, str], str]]:
    """(repository, (image label, config label) -> folder): generate's folder of every image
    model for each configuration (``null``, ``default``) at device time 0, its dynamic batching
    set to gather batches of 8 (preferred size 8 only, ``queue_delay_us``; the gears stay 1,2,4,8
    for the batches the delay cuts short), and beside the first configuration's folder the
    constant model's (``CONSTANT``: the Python backend's floor for the same request)."""
    from ge_python_backend.repository.config import format_config, read_config_file

    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    folders: dict[tuple[str, str], str] = {}
    for image in images:
        om_file = image_om(workdir, image)
        for config in configs:
            named = replace(config, label=f"{image.label}_{config.label}")
            folder = config_folder(om_file, repo, named, 0.0)
            written = read_config_file(folder / "config.pbtxt")
            del written.dynamic_batching.preferred_batch_size[:]
            written.dynamic_batching.preferred_batch_size.append(ROWS)
            written.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
            (folder / "config.pbtxt").write_text(format_config(written))
            folders[(image.label, config.label)] = folder.name
            if config is configs[0]:  # measured next to it in every round
                folders[(image.label, CONSTANT)] = constant_folder(folder, f"{image.label}_{CONSTANT}").name
    return repo, folders


#: the label of the images scenario's floor: baselines/constant_model.py beside each image model
CONSTANT = "constant"


def constant_folder(source: Path, name: str) -> Path:
    """The constant model.py (baselines/constant_model.py: the Python backend's floor) in a folder
    beside ``source`` named ``name``: ``source``'s config (inputs, outputs, batching, instances)
    without its parameters (no engine) and Triton's Python backend's own stub."""
    from ge_python_backend.repository.config import format_config, read_config_file

    config = read_config_file(source / "config.pbtxt")
    config.name = name
    config.backend = "python"
    config.ClearField("parameters")
    folder = source.parent / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(format_config(config))
    shutil.copyfile(BASELINES / "constant_model.py", folder / "1" / "model.py")
    return folder
