"""Generate a Triton model folder from a model file and a template.

    <repository>/<name>/config.pbtxt
    <repository>/<name>/<version>/model.om | model.onnx
    <repository>/<name>/<version>/model.py        (unless backend "ge": then no per-model code)

The config is a ``ModelConfig`` protobuf built from the model's own description through
``modelconfig.derive`` (the same derivation GEModel's auto-complete fills a config with); flags override
what the model implies, and contradictions are errors that say what conflicts. The folder is
written to a staging folder first and checked with ``check`` (the rules GEModel and
tritonserver 2.51 apply at load): a folder that would not load is never written.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from ge_python_backend.ascend.atc import AtcRequest, ConfigFacts, apply_atc_flags, build_atc_command, config_gears
from ge_python_backend.engines import engine_info, engine_parameters
from ge_python_backend.engines.compile import CACHE_ENV, compiled_model_spec
from ge_python_backend.engines.registry import AUTO, ONNX
from ge_python_backend.errors import ConfigError
from ge_python_backend.modelconfig.derive import (
    DEFAULT_QUEUE_DELAY_US,
    ConfigChoices,
    ConfigTensor,
    DerivedConfig,
    derive_config,
)
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import ModelConfig, format_config, mc, read_config_file
from ge_python_backend.repository.modelfile import ModelFile, read_model_file
from ge_python_backend.repository.router import router_config
from ge_python_backend.repository.templates import Template, load_template, safe_join
from ge_python_backend.repository.versions import MAX_VERSION, FolderKind, read_version_folder
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.sequences import StatePair
from ge_python_backend.specs import ModelSpec, TensorSpec, batch_support_from_shapes, format_shape
from ge_python_backend.triton.settings import CORE_PARAMETERS

#: Instances (instance_group count) of a model on an NPU engine (acl, acl-sim) unless --instances
#: says otherwise; 1 for the others. One NPU's AI Cores serve every instance on it (fidelity.md rows
#: 150-152), so instances add no device throughput: they overlap the host's work with the device's.
#: Answers are returned from execute, so one instance leaves
#: the device idle while the host forms, gathers and answers its batch; with two, one batch runs
#: while the other instance does its host work. Measured on the simulator's shared device (python -m
#: tools.bench device; BENCHMARKS.md "Why the defaults"): at 8 and 20 ms per batch of 8, 2 instances
#: kept the device 0.94-0.99 busy, 3 and 4 no more (4 with twice the p99 at 20 ms), 1 instance
#: 0.53-0.82; at 1-2 ms the host was the bound for every count. Each instance is a model copy (its
#: weights included) in device memory.
DEFAULT_NPU_INSTANCES = 2
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
#: Longest model name written (a folder name; file systems allow 255 bytes).
MAX_NAME_LENGTH = 128
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_STAGING_PREFIX = ".ge-triton-generate-"


@dataclass(frozen=True)
class GenerateOptions:
    """Everything ``generate`` may be told; None means: derive it from the model.

    ``shapes`` gives tensors (inputs or outputs) dims the model file leaves open: a rank for a
    tensor without one, sizes for -1 axes."""

    name: str
    template: str = "generic"
    backend: str = "python"
    version: int = 1
    engine: str | None = None
    max_batch_size: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_delay_us: int = DEFAULT_QUEUE_DELAY_US
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
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: --max-shapes: the largest shapes of unbounded shape-range tensors (the acl engines' acl_max_shapes)
    max_shapes: str = ""
    #: --providers: engine onnxruntime's execution providers (onnxruntime_providers)
    providers: str = ""

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
        if self.version > MAX_VERSION:
            raise ConfigError(
                f"--version {self.version} is beyond int64 (at most {MAX_VERSION}): tritonserver 2.51 aborts on such "
                "a version folder (std::out_of_range from stoll)"
            )
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
    """What generate wrote: the model file's folder, every file, its config, notes; ``folders``
    lists every model folder written (the model file's first, then a template's other models)."""

    model_dir: Path
    files: tuple[Path, ...]
    config: Any
    notes: tuple[str, ...]
    folders: tuple[Path, ...] = ()


def check_name(name: str) -> str:
    """A model name usable as one folder name: no separators, no '..', nothing absolute."""
    if not name:
        raise ConfigError("model name is empty (--name ''); give a name, or leave --name out to use the file's name")
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"model name {name[:20]!r}... is {len(name)} characters long; at most {MAX_NAME_LENGTH} "
            "(it becomes a folder name)"
        )
    if not _NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"model name {name!r} is not safe as a folder name; use letters, digits, '_', '-' and '.' "
            "(no path separators, not starting with '.' or '-')"
        )
    return name


def with_shapes(spec: ModelSpec, shapes: Mapping[str, tuple[int, ...]]) -> ModelSpec:
    """``spec`` with the dims ``shapes`` gives (``--shape NAME:D0,D1``): a rank for a tensor whose
    rank the file leaves open, sizes for its -1 axes; anything else that disagrees is refused.
    Batch support is derived again from the result unless the model has compiled gears."""
    if not shapes:
        return spec
    tensors = {t.name: t for t in spec.inputs + spec.outputs}
    unknown = sorted(set(shapes) - set(tensors))
    if unknown:
        raise ConfigError(f"--shape names {unknown[0]!r}, which the model does not have; it has {sorted(tensors)}")

    def shaped(tensor: TensorSpec) -> TensorSpec:
        given = shapes.get(tensor.name)
        if given is None:
            return tensor
        if any(d == 0 or d < -1 for d in given):
            raise ConfigError(f"--shape {tensor.name}: {format_shape(given)}: sizes are >= 1, or -1 for any size")
        if tensor.dynamic_rank:
            return replace(tensor, shape=given, dynamic_rank=False)
        fits = len(given) == len(tensor.shape) and all(m in (-1, g) for g, m in zip(given, tensor.shape))
        if not fits:
            raise ConfigError(
                f"--shape {tensor.name}: {format_shape(given)} does not fit the model's {tensor.shape_text()} "
                "(same rank; only -1 axes may be given a size)"
            )
        return replace(tensor, shape=given, dim_names=())

    inputs = tuple(shaped(t) for t in spec.inputs)
    outputs = tuple(shaped(t) for t in spec.outputs)
    refined = replace(spec, inputs=inputs, outputs=outputs)
    if spec.batch.kind in ("dynamic", "static", "none") and not spec.shape_gears:
        refined = replace(refined, batch=batch_support_from_shapes(inputs, outputs))
    return refined


def _add_entry(entries, entry: ConfigTensor | Mapping[str, Any]) -> None:
    """One config input/output: a derived model tensor or a template's literal entry."""
    added = entries.add()
    if isinstance(entry, ConfigTensor):
        added.name = entry.name
        added.data_type = mc.DataType.Value(entry.data_type)
        added.dims.extend(entry.dims)
        if entry.reshape is not None:
            added.reshape.SetInParent()
            added.reshape.shape.extend(entry.reshape)
        return
    added.name = entry["name"]
    added.data_type = mc.DataType.Value(entry["data_type"])
    added.dims.extend(int(d) for d in entry["dims"])


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
    """latest:N | all | specific:1,3 into ``config.version_policy`` (N >= 1, versions 1..int64:
    tritonserver 2.51 loads nothing under ``latest: 0``)."""
    kind, _, value = text.partition(":")
    try:
        if kind == "latest":
            count = int(value or 1)
            if count < 1:
                raise ValueError(count)
            config.version_policy.latest.num_versions = count
        elif kind == "all" and not value:
            config.version_policy.all.SetInParent()
        elif kind == "specific":
            versions = [int(v) for v in value.split(",")]
            if any(not 1 <= v <= MAX_VERSION for v in versions):
                raise ValueError(versions)
            config.version_policy.specific.versions.extend(versions)
        else:
            raise ValueError(kind)
    except ValueError:
        raise ConfigError(
            f"--version-policy {text!r}: expected latest:N (N >= 1), all or specific:1,3 (versions 1..{MAX_VERSION})"
        ) from None


def _check_policy_versions(config, versions: set[int]) -> None:
    """A specific version policy must name only versions the model folder has (Triton skips the
    missing ones and, when none is left, fails: "at least one version must be available under
    the version policy", CORE r24.10 ``model_lifecycle.cc:116-126, 451-457``)."""
    missing = sorted(set(config.version_policy.specific.versions) - versions)
    if missing:
        raise ConfigError(
            f"--version-policy names version {missing[0]}, which has no folder (the model has "
            f"{', '.join(map(str, sorted(versions)))}); add it with --add-version --version {missing[0]}, or name "
            "only versions that exist"
        )


def build_config(model: ModelFile, template: Template, values: Mapping[str, str], options: GenerateOptions):
    """The ModelConfig for ``model`` rendered with ``template``; returns (config, notes). An ONNX
    model compiled at load is described as ATC builds it with the template's ``atc_flags``."""
    source_spec = with_shapes(model.spec, options.shapes)
    engine_name = options.engine or model.engine.name
    compiled = model.format == ONNX and engine_name != AUTO and bool(engine_info(engine_name).atc)
    spec, compile_parameters = _described(model, source_spec, template, values, compiled)
    layout = options.layout()
    layout.check(spec)
    if options.states and not options.sequence:
        raise ConfigError("--state needs --sequence (state is kept per sequence)")
    if options.warmup and options.sequence:
        raise ConfigError(
            "--warmup with --sequence: Triton's warm-up requests carry no sequence correlation ID, which a stateful "
            "model needs, so the load would fail ('failed to run warmup sample'); leave --warmup out"
        )
    request = ConfigChoices(
        layout=layout,
        states=frozenset(name for pair in options.states for name in (pair.input, pair.output)),
        max_batch_size=options.max_batch_size,
        preferred_batch_sizes=options.preferred_batch_sizes,
        client_inputs=template.inputs is None,
        client_outputs=template.outputs is None,
    )
    derived = derive_config(spec, request)
    notes = list(derived.notes)
    preferred = _compiled_gears(derived) if compiled and not _ranged(spec) else derived.preferred_batch_sizes
    config = ModelConfig(name=options.name, backend=options.backend, max_batch_size=derived.max_batch_size)
    inputs: list[ConfigTensor | Mapping[str, Any]] = list(derived.inputs)
    outputs: list[ConfigTensor | Mapping[str, Any]] = list(derived.outputs)
    if template.inputs is not None:
        inputs = template.render_data(list(template.inputs), values, "inputs")
    if template.outputs is not None:
        outputs = template.render_data(list(template.outputs), values, "outputs")
    clash = {name for name, _ in CONTROL_INPUTS} & {t.name for t in derived.inputs}
    if options.sequence and clash:
        raise ConfigError(f"model input {sorted(clash)[0]!r} clashes with a sequence control input name")
    for entry in inputs:
        _add_entry(config.input, entry)
    for entry in outputs:
        _add_entry(config.output, entry)
    _add_scheduling(config, options, preferred)
    if options.version_policy:
        parse_version_policy(options.version_policy, config)
    engine_own = _engine_parameters(engine_name, model, spec, derived.max_batch_size, options)
    parameters = {"engine": engine_name, "streams": str(options.streams)}
    parameters |= _instance_group(config, engine_name, model, engine_own, options, notes)
    if options.states:
        parameters["sequence_state"] = ",".join(f"{p.input}={p.output}" for p in options.states)
        parameters["sequence_state_batch_axis"] = str(options.state_batch_axis)
    if options.unbatched_inputs:
        parameters["unbatched_inputs"] = ",".join(options.unbatched_inputs)
    parameters.update(engine_own)
    if options.streams > 1:
        notes.append(
            f"streams {options.streams}: answers are returned from execute, so the slots run only the batches of one "
            "execute side by side (requests of different shapes, or more rows than the largest gear); overlap across "
            "executes comes from --instances"
        )
    _check_parameters(parameters)
    parameters.update(compile_parameters)
    parameters.update(_template_parameters(template, values))
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    if options.warmup:
        _add_warmup(config, spec, layout)
    if compiled:
        notes.append(
            _compile_note(config, options.version, engine_name, source_spec, compile_parameters.get("atc_flags", ""))
        )
    return config, notes


def _ranged(spec: ModelSpec) -> bool:
    """A shape-range model: it batches any size in its range, so there are no gears to prefer."""
    return any(t.ranges for t in spec.inputs)


def _described(
    model: ModelFile, spec: ModelSpec, template: Template, values: Mapping[str, str], compiled: bool
) -> tuple[ModelSpec, dict[str, str]]:
    """``spec`` and no parameters; for a model ``compiled`` at load with the template's ``atc_flags``,
    the model ATC builds with them and parameter ``atc_flags``."""
    atc_flags = template.render(template.atc_flags, values, "atc_flags") if compiled else ""
    if not atc_flags:
        return spec, {}
    facts = ConfigFacts(f"template {template.name!r}")
    built = compiled_model_spec(model.path, facts, {"atc_flags": atc_flags}, Path(model.path).parent)
    return built, {"atc_flags": atc_flags}


def _template_parameters(template: Template, values: Mapping[str, str]) -> dict[str, Any]:
    """The template's parameters rendered; those that render empty are left unset."""
    rendered = template.render_data(dict(template.parameters), values, "parameters")
    return {key: value for key, value in rendered.items() if str(value) != ""}


#: GenerateOptions fields that describe a model file, so that a template without one refuses them: field -> flag
_MODEL_FLAGS = {
    "engine": "--engine",
    "max_batch_size": "--max-batch-size",
    "preferred_batch_sizes": "--preferred-batch-sizes",
    "streams": "--streams",
    "device_ids": "--device-ids",
    "warmup": "--warmup",
    "add_version": "--add-version",
    "sequence": "--sequence",
    "states": "--state",
    "unbatched_inputs": "--unbatched-inputs",
    "shapes": "--shape",
    "max_shapes": "--max-shapes",
}


def _members_config(
    model_path: Path | None, repository: Path, template: Template, values: Mapping[str, str], options: GenerateOptions
) -> tuple[Any, list[str]]:
    """The config of a template whose inputs and outputs are its members' (the router)."""
    if model_path is not None:
        raise ConfigError(
            f"template {template.name!r} takes no model file ({model_path}): its inputs and outputs are its members' "
            "(--set members=A,B)"
        )
    defaults = GenerateOptions(name=options.name)
    for field_name, flag in _MODEL_FLAGS.items():
        if getattr(options, field_name) != getattr(defaults, field_name):
            raise ConfigError(f"{flag} describes a model file; template {template.name!r} has none (its members do)")
    if options.backend != "python":
        raise ConfigError(f"--backend {options.backend}: template {template.name!r} is a Python model (backend python)")
    config, notes = router_config(
        repository, options.name, values["members"], values.get("limits", ""), options.instance_count or 1
    )
    if options.version_policy:
        parse_version_policy(options.version_policy, config)
    for key, value in _template_parameters(template, values).items():
        config.parameters[key].string_value = str(value)
    return config, notes


def _compiled_gears(derived: DerivedConfig) -> tuple[int, ...]:
    """The batch gears the compile at load gives the .om (as preferred sizes: the batcher then forms
    batches of those sizes): the derived preferred sizes and max_batch_size, else the powers of two."""
    return config_gears(ConfigFacts("", derived.max_batch_size, derived.preferred_batch_sizes))


def _compile_note(config, version: int, engine_name: str, spec: ModelSpec, atc_flags: str) -> str:
    """What engine ``engine_name`` runs at load for this folder: the ATC command, from the one builder."""
    facts = ConfigFacts.from_json(json_format.MessageToDict(config, preserving_proto_field_name=True), "the config")
    placeholder = "SOC"
    request = AtcRequest(Path(str(version)) / "model.onnx", placeholder, output="<cache>/model", facts=facts)
    request = apply_atc_flags(request, atc_flags, Path(str(version)), "parameter 'atc_flags'")
    command = build_atc_command(request, spec.inputs).shell()
    command = command.replace(f"--soc_version={placeholder}", "--soc_version=<the device's SoC>")
    return (
        f"engine {engine_name}: the load compiles {version}/model.onnx with ATC once (cached in parameter "
        f"atc_cache_dir, else ${CACHE_ENV}, else ~/.cache/ge-python-backend/atc; more ATC flags in parameter "
        f"atc_flags): {command}"
    )


def _engine_parameters(
    engine_name: str, model: ModelFile, spec: ModelSpec, max_batch_size: int, options: GenerateOptions
) -> dict[str, str]:
    """The engine's own parameters the model needs to load (e.g. the largest shapes of an unbounded
    shape range, ``EngineInfo.generated_parameters``), from the flags that give them."""
    info = model.engine if engine_name == AUTO else engine_info(engine_name)
    given = {"acl_max_shapes": options.max_shapes} if options.max_shapes else {}
    if options.providers:
        given["onnxruntime_providers"] = options.providers
    parameters_needed = info.generated_parameters(spec, max_batch_size, given)
    if options.max_shapes and "acl_max_shapes" not in parameters_needed:
        raise ConfigError(f"--max-shapes applies to the acl engines; engine {info.name} does not take it")
    if options.providers and "onnxruntime_providers" not in parameters_needed:
        raise ConfigError(f"--providers applies to engine onnxruntime; engine {info.name} does not take it")
    return parameters_needed


def _instance_group(
    config: Any,
    engine_name: str,
    model: ModelFile,
    engine_own: Mapping[str, str],
    options: GenerateOptions,
    notes: list[str],
) -> dict[str, str]:
    """Add the instance group: KIND_CPU on the NPUs of --device-ids (the parameter returned), or
    KIND_GPU where the engine's generated parameters run the model on a GPU Triton places
    (``EngineDriver.on_gpu``: ONNX Runtime's GPU providers)."""
    info = model.engine if engine_name == AUTO else engine_info(engine_name)
    own = {p.name: p for p in info.own_parameters()}
    on_gpu = info.driver().on_gpu({k: own[k].read(v) for k, v in engine_own.items() if k in own})
    group = config.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_GPU if on_gpu else mc.ModelInstanceGroup.KIND_CPU
    group.count = options.instance_count or default_instances(engine_name, model)
    if not on_gpu:
        return {"device_ids": ",".join(str(d) for d in options.device_ids)}
    if options.device_ids != GenerateOptions.device_ids:
        raise ConfigError(
            "--device-ids places NPU instances; GPU instances (--providers) go where Triton places them "
            "(instance_group gpus)"
        )
    notes.append("a GPU provider: the instances are KIND_GPU, each running on the GPU Triton places it on")
    return {}


def default_instances(engine_name: str, model: ModelFile) -> int:
    """The instance count generate writes when --instances is not given: DEFAULT_NPU_INSTANCES on
    an NPU engine, 1 off it."""
    npu = model.engine.npu if engine_name == AUTO else engine_info(engine_name).npu
    return DEFAULT_NPU_INSTANCES if npu else 1


def _check_parameters(parameters: Mapping[str, str]) -> None:
    """Parse what the generator writes with the parsers GEModel will use, so a config it writes
    never fails to load for a value a flag allowed (e.g. --streams 100)."""
    declared = {p.name: p for p in CORE_PARAMETERS + engine_parameters()}
    for name, text in parameters.items():
        declared[name].read(text)


def _add_warmup(config, spec: ModelSpec, layout: Layout) -> None:
    """A zero-data warm-up sample: every variable dim set (Triton refuses -1 there, CORE r24.10
    ``src/backend_model_instance.cc:370-380``), the batch the smallest the model runs."""
    max_batch = config.max_batch_size
    smallest = spec.batch.sizes[0] if spec.batch.kind == "gears" else 1
    warmup = config.model_warmup.add()
    warmup.name = "zeros"
    warmup.batch_size = max(max_batch and smallest, 1)
    for entry in config.input:
        data = warmup.inputs[entry.name]
        data.data_type = entry.data_type
        dims = [1 if d == -1 else d for d in entry.dims]
        batch_first = not max_batch and entry.name in {t.name for t in spec.inputs} and layout.axis(entry.name) == 0
        if batch_first and dims and entry.dims[0] == -1:
            dims[0] = smallest
        data.dims.extend(dims)
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


def _add_version(model_dir: Path, config, options: GenerateOptions) -> tuple[Any, list[str]]:
    """Check that another version of an existing model can share its config; returns the
    config the folder will have (its version policy updated) and notes."""
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
    versions = {options.version}
    for entry in model_dir.iterdir():
        found = read_version_folder(entry.name)
        if entry.is_dir() and found.kind is FolderKind.VERSION and found.version is not None:
            versions.add(found.version)
    if options.version_policy:
        existing.ClearField("version_policy")
        parse_version_policy(options.version_policy, existing)
        _check_policy_versions(existing, versions)
        return existing, []
    _check_policy_versions(existing, versions)
    return existing, [
        "config.pbtxt kept as it was: Triton serves only the latest version unless version_policy says otherwise "
        "(--version-policy all)"
    ]


def _verify(model_dir: Path, shown_as: Path, copied: Mapping[Path, Path]) -> None:
    """Refuse a written model folder that ``check`` finds errors in (the rules GEModel and the
    server apply at load); ``shown_as`` is where the folder is meant to be (a router's members are
    beside it), and ``copied`` maps files copied in to the user's own (the file to fix), for messages."""
    errors = check_repository(model_dir, peers=shown_as.parent).errors
    if errors:
        first = errors[0]
        where = shown_as / first.path.relative_to(model_dir) if first.path.is_relative_to(model_dir) else first.path
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        message = first.message
        for copy, given in copied.items():
            message = message.replace(str(copy), str(given))
        message = message.replace(str(model_dir), str(shown_as))
        raise ConfigError(f"the model folder would not load, so nothing was written: {where}: {message}{more}")


def _write_version(
    model_dir: Path,
    model_path: Path | None,
    model: ModelFile | None,
    template: Template,
    values,
    options: GenerateOptions,
) -> list[Path]:
    version_dir = model_dir / str(options.version)
    version_dir.mkdir()
    files = []
    if model_path is not None and model is not None:
        shutil.copyfile(model_path, version_dir / model.default_name)
        files.append(version_dir / model.default_name)
    if options.backend != "ge":
        files += template.write_files(model_dir, options.version, values)
    return files


def _read_source(model_path: Path | None, template: Template, values: dict[str, str], name: str) -> ModelFile | None:
    """The model file (None for a template whose source is its members), its values added to ``values``."""
    if template.source == "members":
        values.update(name=name, source=values["members"], model_file="")
        return None
    if model_path is None:
        raise ConfigError(f"give a model file (template {template.name!r} serves one), or --list-templates")
    model = read_model_file(model_path)
    values.update(name=name, source=Path(model_path).name, model_file=model.default_name)
    return model


def _check_backend(options: GenerateOptions) -> None:
    if options.backend not in ("python", "ge"):
        raise ConfigError(f"--backend {options.backend!r}: accepted python or ge")
    if options.backend == "ge" and options.template != "generic":
        raise ConfigError(
            f"--backend ge serves models without per-model code, but template {options.template!r} brings its own "
            "model.py; use --backend python with it"
        )


def generate(model_path: Path | None, repository: Path, options: GenerateOptions) -> Generated:
    """Write the model folder for ``model_path`` (None for a template whose source is its members)
    into ``repository`` (or, with ``add_version``, one more version folder of an existing model),
    once ``check`` finds it loads."""
    name = check_name(options.name)
    _check_backend(options)
    if Path(repository).exists() and not Path(repository).is_dir():
        raise ConfigError(f"model repository {repository} is not a folder")
    template = load_template(options.template)
    values = template.values(options.template_options)
    model = _read_source(model_path, template, values, name)
    names = [check_name(folder) for folder in template.model_names(values)]
    if len(set(names)) < len(names):
        raise ConfigError(f"template {template.name!r} would write model folders {names}, twice the same name")
    if template.models and (options.add_version or options.backend == "ge"):
        flag = "--add-version" if options.add_version else "--backend ge"
        raise ConfigError(f"template {template.name!r} writes several models ({', '.join(names)}); {flag} cannot")
    if model is None:
        config, notes = _members_config(model_path, Path(repository), template, values, replace(options, name=names[0]))
    else:
        config, notes = build_config(model, template, values, replace(options, name=names[0]))
    model_dir = safe_join(Path(repository), names[0])
    if options.backend == "ge":
        notes.append('backend "ge": no model.py; install the backend once with `ge-triton install-backend`')
    if options.add_version:
        return _generate_version(model_dir, model_path, model, template, values, config, notes, options)
    folders = [safe_join(Path(repository), folder) for folder in names]
    for folder in folders:
        if folder.exists() and not options.overwrite:
            raise ConfigError(f"{folder} exists; pass --force to replace it, or --add-version to add a version")
    _check_policy_versions(config, {options.version})
    if template.models and model_path is not None:
        values.update(_model_values(template, config, model_path))
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX))
    try:
        staged = staging / names[0]
        staged.mkdir()
        (staged / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
        files = [staged / "config.pbtxt"] + _write_version(staged, model_path, model, template, values, options)
        files += template.write_models(staging, options.version, values)
        for folder_name, (source, folder_template) in template.model_files(values).items():
            files += _write_model_folder(staging / folder_name, source, folder_template, values, options, notes)
        if template.models:
            _verify(staging, Path(repository), {})
        else:
            _verify(staged, model_dir, template.copied(staged, options.version, values))
        for folder in folders:
            if folder.exists():
                shutil.rmtree(folder)
            folder.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staging / folder.name), str(folder))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    written = tuple(Path(repository) / f.relative_to(staging) for f in files)
    return Generated(model_dir, written, config, tuple(notes), tuple(folders))


def _write_model_folder(
    folder: Path, source: Path, template: Template, values, options: GenerateOptions, notes: list[str]
) -> list[Path]:
    """A pipeline's folder for another model file, written as generate writes the first one."""
    model = read_model_file(source)
    config, more = build_config(model, template, values, replace(options, name=folder.name, template_options={}))
    notes += [f"{folder.name}: {note}" for note in more]
    folder.mkdir()
    (folder / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
    return [folder / "config.pbtxt"] + _write_version(folder, source, model, template, values, options)


def _model_values(template: Template, config, model_path: Path) -> dict[str, str]:
    """What a template's other models may name of the model folder's config: its name,
    max_batch_size, its outputs as a batching step behind it declares them (``batched_outputs``:
    config text, the batch axis left out) and, for a model of one input and one output, each's
    name, data type and dims."""
    values = {
        "model_name": config.name,
        "max_batch_size": str(config.max_batch_size),
        "batched_outputs": " ".join(_batched_entry("output", e, config.max_batch_size) for e in config.output),
    }
    if len(config.input) == 1 and len(config.output) == 1:
        for kind, entry in (("input", config.input[0]), ("output", config.output[0])):
            values[f"model_{kind}"] = entry.name
            values[f"model_{kind}_type"] = mc.DataType.Name(entry.data_type)
            values[f"model_{kind}_dims"] = ", ".join(str(d) for d in entry.dims)
    elif template.uses("model_input", "model_output"):
        raise ConfigError(
            f"template {template.name!r} builds a pipeline around a model of one input and one output; "
            f"{Path(model_path).name} has inputs {[e.name for e in config.input]} and outputs "
            f"{[e.name for e in config.output]}"
        )
    return values


def _batched_entry(kind: str, entry, max_batch_size: int) -> str:
    """A config entry as a model with batching declares it: without the batch axis (a model
    with max_batch_size 0 keeps it in its dims)."""
    dims = list(entry.dims)[0 if max_batch_size else 1 :]
    name, data_type = json.dumps(entry.name, ensure_ascii=False), mc.DataType.Name(entry.data_type)
    return f"{kind} {{ name: {name} data_type: {data_type} dims: {dims} }}"


def _generate_version(
    model_dir: Path,
    model_path: Path | None,
    model: ModelFile | None,
    template: Template,
    values,
    config,
    notes,
    options,
) -> Generated:
    """--add-version: the new version folder next to the others, undone when ``check`` fails."""
    shared, more_notes = _add_version(model_dir, config, options)
    config_file = model_dir / "config.pbtxt"
    before = config_file.read_text(encoding="utf-8")
    version_dir = model_dir / str(options.version)
    try:
        if options.version_policy:
            config_file.write_text(format_config(shared), encoding="utf-8")
        files = _write_version(model_dir, model_path, model, template, values, options)
        _verify(model_dir, model_dir, template.copied(model_dir, options.version, values))
    except BaseException:
        shutil.rmtree(version_dir, ignore_errors=True)
        config_file.write_text(before, encoding="utf-8")
        raise
    return Generated(model_dir, tuple(files), config, tuple(notes + more_notes))
