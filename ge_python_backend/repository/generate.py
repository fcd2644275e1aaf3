"""Generate a Triton model folder from a model file and a template.

    <repository>/<name>/config.pbtxt
    <repository>/<name>/<version>/model.om | model.onnx
    <repository>/<name>/<version>/model.py        (unless backend "ge": then no per-model code)

The config is a ``ModelConfig`` protobuf built from the model's own description; flags override
what the model implies, and contradictions are errors that say what conflicts.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.engines import engine, engine_parameters
from ge_python_backend.engines.registry import AUTO
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.config import ModelConfig, format_config, mc, read_config_file
from ge_python_backend.repository.modelfile import ModelFile, read_model_file
from ge_python_backend.repository.templates import Template, load_template, safe_join
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.sequences import StatePair
from ge_python_backend.specs import ModelSpec, TensorSpec, config_type
from ge_python_backend.triton.settings import CORE_PARAMETERS

#: Default largest batch for a model whose batch axis takes any size.
DEFAULT_DYNAMIC_MAX_BATCH = 8
#: Instances (instance_group count) of a model on an NPU engine (acl, acl-sim) unless --instances
#: says otherwise; 1 for the others. Answers are returned from execute (the registry's
#: DEFAULT_RESPONSE_MODE), so one instance runs one batch at a time and its slot idles while the
#: host forms, gathers and answers the batch (1.5-3 ms a batch on a 2-core host): other instances
#: run theirs meanwhile (one model copy each). Measured (tools/bench_host.py, BENCHMARKS.md "Host
#: path"): with 1-8 ms of device time per batch of 8 (a ResNet-class model on an Ascend card), 4
#: instances served 1.1-1.8x what 2 did and more than 3; streams add nothing when answers are
#: returned (one execute runs one batch).
DEFAULT_NPU_INSTANCES = 4
#: ... but a model that computes next to nothing is host-bound (its device time is far below a
#: millisecond), and there 2 instances served more than 4 (1.25x at 0 ms: four stubs share two
#: cores). generate cannot run the model, so the file's size stands in for its class of device
#: time: an .om below this size holds at most ~250,000 FP32 weights.
HOST_BOUND_MODEL_BYTES = 1 << 20
HOST_BOUND_NPU_INSTANCES = 2
#: No queue policy by default: in tritonserver 2.51 any default_queue_policy (or
#: priority_levels) makes the dynamic batcher stall for ~0.5 s at a time under concurrent load
#: (measured: a burst of 200 requests took 1.5-5.6 s with a policy vs 0.1-0.2 s without; see
#: docs/generator.md). Opt in with
#: --max-queue-size / --queue-timeout-ms.
DEFAULT_MAX_QUEUE_SIZE = 0
DEFAULT_QUEUE_TIMEOUT_US = 0
#: Sequence batcher control inputs GEModel understands, with their kinds.
CONTROL_INPUTS = (
    ("START", "CONTROL_SEQUENCE_START"),
    ("END", "CONTROL_SEQUENCE_END"),
    ("READY", "CONTROL_SEQUENCE_READY"),
    ("CORRID", "CONTROL_SEQUENCE_CORRID"),
)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class GenerateOptions:
    """Everything ``generate`` may be told; None means: derive it from the model."""

    name: str
    template: str = "generic"
    backend: str = "python"
    version: int = 1
    engine: str | None = None
    max_batch_size: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_delay_us: int = 500
    #: None: DEFAULT_NPU_INSTANCES on an NPU engine, else 1
    instance_count: int | None = None
    device_ids: tuple[int, ...] = (0,)
    streams: int = 1
    warmup: bool = False
    template_options: Mapping[str, str] = field(default_factory=dict)
    overwrite: bool = False
    add_version: bool = False
    version_policy: str | None = None
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE
    queue_timeout_us: int = DEFAULT_QUEUE_TIMEOUT_US
    sequence: bool = False
    sequence_strategy: str = "direct"
    sequence_idle_us: int = 5_000_000
    states: tuple[StatePair, ...] = ()
    state_batch_axis: int = 0
    unbatched_inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for flag, value, low in (
            ("--version", self.version, 1),
            ("--instances", 1 if self.instance_count is None else self.instance_count, 1),
            ("--streams", self.streams, 1),
            ("--max-queue-delay-us", self.max_queue_delay_us, 0),
            ("--max-queue-size", self.max_queue_size, 0),
            ("--max-batch-size", 0 if self.max_batch_size is None else self.max_batch_size, 0),
            ("--state-batch-axis", self.state_batch_axis, 0),
        ):
            if value < low:
                raise ConfigError(f"{flag} {value}: expected an integer >= {low}")
        for flag, micros in (
            ("--queue-timeout-ms", self.queue_timeout_us),
            ("--sequence-idle-ms", self.sequence_idle_us),
        ):
            if micros < 0:
                raise ConfigError(f"{flag} {micros / 1000:g}: expected a number >= 0")

    def layout(self) -> Layout:
        return Layout.of(self.unbatched_inputs, self.states, self.state_batch_axis)


@dataclass(frozen=True)
class Generated:
    model_dir: Path
    files: tuple[Path, ...]
    config: Any
    notes: tuple[str, ...]


def check_name(name: str) -> str:
    """A model name usable as one folder name: no separators, no '..', nothing absolute."""
    if not _SAFE_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"model name {name!r} is not safe as a folder name; use letters, digits, '_', '-' and '.' "
            "(no path separators, not starting with '.' or '-')"
        )
    return name


def batching_plan(spec: ModelSpec, options: GenerateOptions) -> tuple[int, tuple[int, ...], list[str]]:
    """(max_batch_size, preferred batch sizes, notes) from the model and the flags."""
    notes: list[str] = []
    batch = spec.batch
    wanted = options.max_batch_size
    max_batch: int
    preferred: tuple[int, ...]
    if batch.kind == "none":
        if wanted:
            raise ConfigError(
                f"--max-batch-size {wanted} conflicts with the model: it has no batch axis on axis 0 "
                "(some tensor's axis 0 is fixed or differs), so it can only be served with max_batch_size 0"
            )
        notes.append("max_batch_size 0: the model has no batch axis on axis 0, each request runs alone")
        max_batch, preferred = 0, ()
    elif batch.kind == "static":
        if wanted is None:
            notes.append(
                f"max_batch_size 0: axis 0 is fixed at {batch.sizes[0]} in the model file (no dynamic batch), "
                "so requests carry the full shape and run alone"
            )
        elif wanted:
            notes.append(f"requests are padded or split to the model's fixed batch {batch.sizes[0]}")
        max_batch, preferred = wanted or 0, ()
    elif batch.kind == "gears":
        largest = batch.sizes[-1]  # gears always list their sizes (BatchSupport checks)
        if wanted is not None and wanted > largest:
            raise ConfigError(
                f"--max-batch-size {wanted} is above the model's largest batch gear {largest} "
                f"(gears {', '.join(map(str, batch.sizes))})"
            )
        max_batch = largest if wanted is None else wanted
        preferred = tuple(g for g in batch.sizes if g <= max_batch)
    else:
        max_batch = DEFAULT_DYNAMIC_MAX_BATCH if wanted is None else wanted
        preferred = ()
    if options.preferred_batch_sizes is not None:
        preferred = options.preferred_batch_sizes
    if preferred and max_batch == 0:
        raise ConfigError(
            f"--preferred-batch-sizes {','.join(map(str, preferred))} conflicts with max_batch_size 0 "
            "(the model has no usable batch axis, or --max-batch-size 0 was given); give --max-batch-size N "
            "when the model's batch axis allows batching"
        )
    bad = [p for p in preferred if not 1 <= p <= max_batch]
    if bad:
        raise ConfigError(f"preferred batch size {bad[0]} is outside 1..max_batch_size ({max_batch})")
    if batch.kind == "gears":
        off_gear = [p for p in preferred if p not in batch.sizes]
        if off_gear:
            raise ConfigError(
                f"preferred batch size {off_gear[0]} is not one of the model's batch gears "
                f"{', '.join(map(str, batch.sizes))}"
            )
    return max_batch, preferred, notes


def _add_tensor(entries, tensor: TensorSpec | Mapping[str, Any], batched: bool) -> None:
    """One config input/output: a model tensor (batch axis dropped when ``batched``) or a
    template's literal entry. A rank-0 tensor is sent as [1] and reshaped to a scalar."""
    entry = entries.add()
    if not isinstance(tensor, TensorSpec):
        entry.name = tensor["name"]
        entry.data_type = mc.DataType.Value(tensor["data_type"])
        entry.dims.extend(int(d) for d in tensor["dims"])
        return
    if not tensor.dtype or tensor.dtype == "BF16":
        raise ConfigError(
            f"tensor {tensor.name!r} has type {tensor.dtype or tensor.native_type}, which the Python "
            "backend cannot carry as a numpy array; use a template whose preprocess/postprocess converts it"
        )
    entry.name = tensor.name
    entry.data_type = mc.DataType.Value(config_type(tensor.dtype))
    dims = tensor.shape[1:] if batched else tensor.shape
    entry.dims.extend(dims if dims else (1,))
    if not dims:
        entry.reshape.SetInParent()


def _model_io(spec: ModelSpec, options: GenerateOptions, batching: bool):
    """(inputs, outputs) the clients see, each as (tensor, batched): state tensors are the
    model's own business; unbatched inputs keep their full shape."""
    states_in = {p.input for p in options.states}
    states_out = {p.output for p in options.states}
    inputs = [(t, batching and t.name not in options.unbatched_inputs) for t in spec.inputs if t.name not in states_in]
    outputs = [(t, batching) for t in spec.outputs if t.name not in states_out]
    return inputs, outputs


def _add_scheduling(config, options: GenerateOptions, preferred: tuple[int, ...]) -> None:
    if options.sequence:
        sequence = config.sequence_batching
        sequence.max_sequence_idle_microseconds = options.sequence_idle_us
        strategy = getattr(sequence, options.sequence_strategy)
        strategy.SetInParent()
        if options.sequence_strategy == "oldest":
            strategy.max_candidate_sequences = max(config.max_batch_size, 1) * 4
            strategy.preferred_batch_size.extend(preferred)
            strategy.max_queue_delay_microseconds = options.max_queue_delay_us
        for name, kind in CONTROL_INPUTS:
            control_input = sequence.control_input.add()
            control_input.name = name
            control = control_input.control.add()
            control.kind = mc.ModelSequenceBatching.Control.Kind.Value(kind)
            if kind == "CONTROL_SEQUENCE_CORRID":
                control.data_type = mc.TYPE_UINT64
            else:
                control.int32_false_true.extend((0, 1))
        return
    if config.max_batch_size == 0:
        return
    batching = config.dynamic_batching
    batching.preferred_batch_size.extend(preferred)
    batching.max_queue_delay_microseconds = options.max_queue_delay_us
    if not (options.max_queue_size or options.queue_timeout_us):
        return
    policy = batching.default_queue_policy
    policy.timeout_action = mc.ModelQueuePolicy.REJECT
    policy.default_timeout_microseconds = options.queue_timeout_us
    policy.allow_timeout_override = True
    policy.max_queue_size = options.max_queue_size


def parse_version_policy(text: str, config) -> None:
    """latest:N | all | specific:1,3 into ``config.version_policy``."""
    kind, _, value = text.partition(":")
    try:
        if kind == "latest":
            config.version_policy.latest.num_versions = int(value or 1)
        elif kind == "all" and not value:
            config.version_policy.all.SetInParent()
        elif kind == "specific":
            config.version_policy.specific.versions.extend(int(v) for v in value.split(","))
        else:
            raise ValueError(kind)
    except ValueError:
        raise ConfigError(f"--version-policy {text!r}: expected latest:N, all or specific:1,3") from None


def build_config(model: ModelFile, template: Template, values: Mapping[str, str], options: GenerateOptions):
    """The ModelConfig for ``model`` rendered with ``template``; returns (config, notes)."""
    spec = model.spec
    layout = options.layout()
    layout.check(spec)
    if options.states and not options.sequence:
        raise ConfigError("--state needs --sequence (state is kept per sequence)")
    max_batch, preferred, notes = batching_plan(layout.batch_first_spec(spec), options)
    batching = max_batch > 0
    config = ModelConfig(name=options.name, backend=options.backend, max_batch_size=max_batch)
    inputs, outputs = _model_io(spec, options, batching)
    if template.inputs is not None:
        inputs = [(t, batching) for t in template.render_data(list(template.inputs), values, "inputs")]
    if template.outputs is not None:
        outputs = [(t, batching) for t in template.render_data(list(template.outputs), values, "outputs")]
    clash = {name for name, _ in CONTROL_INPUTS} & {t.name for t, _ in inputs if isinstance(t, TensorSpec)}
    if options.sequence and clash:
        raise ConfigError(f"model input {sorted(clash)[0]!r} clashes with a sequence control input name")
    for tensor, batched in inputs:
        _add_tensor(config.input, tensor, batched)
    for tensor, batched in outputs:
        _add_tensor(config.output, tensor, batched)
    _add_scheduling(config, options, preferred)
    if options.version_policy:
        parse_version_policy(options.version_policy, config)
    group = config.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    engine_name = options.engine or model.engine.name
    group.count = options.instance_count or default_instances(engine_name, model)
    parameters = {"engine": engine_name, "streams": str(options.streams)}
    parameters["device_ids"] = ",".join(str(d) for d in options.device_ids)
    if options.states:
        parameters["sequence_state"] = ",".join(f"{p.input}={p.output}" for p in options.states)
        parameters["sequence_state_batch_axis"] = str(options.state_batch_axis)
    if options.unbatched_inputs:
        parameters["unbatched_inputs"] = ",".join(options.unbatched_inputs)
    if options.streams > 1:
        notes.append(
            f"streams {options.streams}: answers are returned from execute, so the slots run only the batches of one "
            "execute side by side (requests of different shapes, or more rows than the largest gear); overlap across "
            "executes comes from --instances"
        )
    _check_parameters(parameters)
    parameters.update(template.render_data(dict(template.parameters), values, "parameters"))
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    if options.warmup:
        _add_warmup(config, max_batch)
    return config, notes


def default_instances(engine_name: str, model: ModelFile) -> int:
    """The instance count generate writes when --instances is not given: 1 off the NPU; on it
    DEFAULT_NPU_INSTANCES, or HOST_BOUND_NPU_INSTANCES for a model file below HOST_BOUND_MODEL_BYTES."""
    npu = model.engine.npu if engine_name == AUTO else engine(engine_name).npu
    if not npu:
        return 1
    try:
        host_bound = model.path.stat().st_size < HOST_BOUND_MODEL_BYTES
    except OSError:
        host_bound = False
    return HOST_BOUND_NPU_INSTANCES if host_bound else DEFAULT_NPU_INSTANCES


def _check_parameters(parameters: Mapping[str, str]) -> None:
    """Parse what the generator writes with the parsers GEModel will use, so a config it writes
    never fails to load for a value a flag allowed (e.g. --streams 100)."""
    declared = {p.name: p for p in CORE_PARAMETERS + engine_parameters()}
    for name, text in parameters.items():
        declared[name].read(text)


def _add_warmup(config, max_batch: int) -> None:
    warmup = config.model_warmup.add()
    warmup.name = "zeros"
    warmup.batch_size = max(max_batch, 1)
    for entry in config.input:
        data = warmup.inputs[entry.name]
        data.data_type = entry.data_type
        data.dims.extend(1 if d == -1 else d for d in entry.dims)
        data.zero_data = True


def _same_io(existing, new) -> str | None:
    """Why a new version's config I/O differs from the model's config, or None."""
    for kind in ("input", "output"):
        old = {e.name: (e.data_type, list(e.dims)) for e in getattr(existing, kind)}
        fresh = {e.name: (e.data_type, list(e.dims)) for e in getattr(new, kind)}
        if old != fresh:
            return f"{kind}s differ: the config has {_describe(old)}, the new model file gives {_describe(fresh)}"
    if existing.max_batch_size != new.max_batch_size:
        return (
            f"max_batch_size differs: the config has {existing.max_batch_size}, "
            f"the new model file gives {new.max_batch_size}"
        )
    return None


def _describe(entries: Mapping[str, tuple]) -> str:
    return ", ".join(f"{n} {mc.DataType.Name(t)} {dims}" for n, (t, dims) in sorted(entries.items())) or "none"


def _add_version(model_dir: Path, config, options: GenerateOptions) -> list[str]:
    """Check that another version of an existing model can share its config; update the policy."""
    config_file = model_dir / "config.pbtxt"
    if not config_file.is_file():
        raise ConfigError(f"--add-version: {config_file} does not exist; generate the model first")
    existing = read_config_file(config_file)
    version_dir = model_dir / str(options.version)
    if version_dir.exists():
        raise ConfigError(f"--add-version: {version_dir} exists already; choose another --version")
    reason = _same_io(existing, config)
    if reason:
        raise ConfigError(f"--add-version: all versions of a model share one config.pbtxt, but {reason}")
    if options.version_policy:
        existing.ClearField("version_policy")
        parse_version_policy(options.version_policy, existing)
        config_file.write_text(format_config(existing), encoding="utf-8")
    return (
        []
        if options.version_policy
        else [
            "config.pbtxt kept as it was: Triton serves only the latest version unless version_policy says otherwise "
            "(--version-policy all)"
        ]
    )


def generate(model_path: Path, repository: Path, options: GenerateOptions) -> Generated:
    """Write the model folder for ``model_path`` into ``repository`` (or, with ``add_version``,
    one more version folder of an existing model)."""
    name = check_name(options.name)
    if options.backend not in ("python", "ge"):
        raise ConfigError(f"--backend {options.backend!r}: accepted python or ge")
    if options.backend == "ge" and options.template != "generic":
        raise ConfigError(
            f"--backend ge serves models without per-model code, but template {options.template!r} brings its own "
            "model.py; use --backend python with it"
        )
    model = read_model_file(model_path)
    template = load_template(options.template)
    values = template.values(options.template_options)
    values.update(name=name, source=Path(model_path).name, model_file=model.default_name)
    config, notes = build_config(model, template, values, options)
    model_dir = safe_join(Path(repository), name)
    files = []
    if options.add_version:
        notes += _add_version(model_dir, config, options)
    else:
        if model_dir.exists():
            if not options.overwrite:
                raise ConfigError(f"{model_dir} exists; pass --force to replace it, or --add-version to add a version")
            shutil.rmtree(model_dir)
        model_dir.mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
        files.append(model_dir / "config.pbtxt")
    version_dir = model_dir / str(options.version)
    version_dir.mkdir()
    shutil.copyfile(model_path, version_dir / model.default_name)
    files.append(version_dir / model.default_name)
    if options.backend == "ge":
        written = []
        notes.append('backend "ge": no model.py; install the backend once with `ge-triton install-backend`')
    else:
        written = template.write_files(model_dir, options.version, values)
    return Generated(model_dir, tuple(files + written), config, tuple(notes))
