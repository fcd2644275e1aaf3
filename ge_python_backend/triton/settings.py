"""Typed model settings, parsed once from Triton's ``initialize`` arguments.

Triton passes ``args["model_config"]`` as the JSON of the complete, normalised ModelConfig.
Everything GEModel needs from it (I/O, batching, parameters) becomes a frozen ``ModelSettings``;
a wrong or unknown parameter fails the load with a message that names it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.ascend.atc import ConfigFacts
from ge_python_backend.engines import (
    auto_candidates,
    detect_format,
    engine_choices,
    engine_info,
    engine_parameters,
)
from ge_python_backend.engines.compile import compiled_model_spec
from ge_python_backend.engines.offline import read_model_spec
from ge_python_backend.engines.registry import AUTO, ONNX
from ge_python_backend.errors import ConfigError, GEError
from ge_python_backend.modelconfig.derive import ConfigChoices, complete_config, derive_config, wanted_batch
from ge_python_backend.modelconfig.matching import refine_spec
from ge_python_backend.params import (
    Parameter,
    parse_bool,
    parse_choice,
    parse_float,
    parse_int,
    parse_list,
    parse_parameters,
)
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.outputs import DeclaredTensor
from ge_python_backend.serving.sequences import StatePair, parse_initial_values, parse_state_pairs
from ge_python_backend.specs import ModelSpec, TensorSpec, api_type

#: Set by ge-triton serve's supervisor in the config it reloads a model with (ops/supervisor.py):
#: a config that differs in a parameter makes tritonserver load the model afresh, where the same
#: config would keep its (dead) instances.
RELOAD_PARAMETER = "ge_triton_reload"
#: Parameters read by Triton's Python backend itself, or set by serve; accepted and left alone.
TRITON_PARAMETERS = ("EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS", RELOAD_PARAMETER)


def parse_response_mode(raw: str) -> str:
    """``return`` (``auto`` is the same); ``sender`` is refused, saying what to use instead."""
    if raw in ("return", "auto"):
        return "return"
    if raw == "sender":
        raise ValueError(
            "response senders were removed: on a shared NPU they served no more than answers returned from "
            "execute, and requests waiting in a sender are lost when a stub dies; remove the parameter (return is "
            "the default) and give the model several instances (instance_group count, as ge-triton generate "
            "writes for NPU engines) for batches in flight at once"
        )
    raise ValueError("")


CORE_PARAMETERS = (
    Parameter(
        "engine",
        parse_choice(*engine_choices()),
        "auto",
        " | ".join(engine_choices()),
        "which engine runs the model; auto: acl when model.om is present, pyACL imports and a device answers, "
        "else onnxruntime when model.onnx is present (the choice is logged)",
    ),
    Parameter(
        "model_file",
        str,
        "",
        "a file name in the version folder (or an absolute path)",
        "the model file; unset: model.om (acl, acl-sim), model.onnx (onnxruntime)",
    ),
    Parameter(
        "device_id", parse_int(0), None, "an integer >= 0", "NPU (or ORT device provider) id; unset: device_ids, else 0"
    ),
    Parameter(
        "device_ids",
        parse_list(parse_int(0)),
        None,
        "comma-separated integers >= 0",
        "devices the model's instances are spread over round-robin by the index in their instance name "
        "(set device_id or device_ids, not both)",
    ),
    Parameter(
        "streams",
        parse_int(1, 64),
        1,
        "an integer from 1 to 64",
        "execution slots per instance: batches in flight at once (acl: one model copy and stream each); with answers "
        "returned from execute, extra slots serve only the several batches of one execute, and overlap across "
        "executes comes from instances",
    ),
    Parameter(
        "response_mode",
        parse_response_mode,
        "return",
        "return or auto (the same)",
        "answers are returned from execute, one IPC message per batch; the batches of several executes overlap "
        "across instances (instance_group count). sender is refused: it showed no measured advantage on a shared "
        "NPU and leaves requests unanswered when a stub dies",
    ),
    Parameter(
        "reject_nonfinite",
        parse_bool,
        False,
        "true or false",
        "refuse floating-point inputs that contain NaN or Inf",
    ),
    Parameter(
        "log_verbosity",
        parse_int(0, 2),
        0,
        "0, 1 or 2",
        "0: load and unload only; 1: a verbose line per execute; 2: also one per engine batch (shown with tritonserver "
        "--log-verbose 1)",
    ),
    Parameter("metrics", parse_bool, True, "true or false", "report GEModel's own Prometheus metrics"),
    Parameter(
        "unbatched_inputs",
        parse_list(str),
        (),
        "comma-separated model input names",
        "model inputs without a batch axis: one value per request, shared by its rows",
    ),
    Parameter(
        "sequence_state",
        parse_state_pairs,
        (),
        "comma-separated input_name=output_name pairs",
        "state pairs: the model input fed from the output of the sequence's previous step",
    ),
    Parameter(
        "sequence_state_initial",
        parse_initial_values,
        {},
        "comma-separated input_name=number pairs",
        "initial value of a state input on a START request (default 0)",
    ),
    Parameter(
        "sequence_state_batch_axis",
        parse_int(0),
        0,
        "an integer >= 0",
        "the batch axis of every state tensor (e.g. 1 for [layers, batch, hidden])",
    ),
    Parameter(
        "sequence_idle_timeout_ms",
        parse_float(0.0),
        None,
        "a number of milliseconds >= 0",
        "drop a sequence's state after this idle time (default: max_sequence_idle_microseconds)",
    ),
)


@dataclass(frozen=True)
class ReadyControl:
    """The sequence batcher's CONTROL_SEQUENCE_READY input and the value that means "not ready"."""

    name: str
    false_value: float | int | bool

    def ready(self, value: Any) -> bool:
        return not bool(np.all(np.asarray(value) == self.false_value))


@dataclass(frozen=True)
class ModelSettings:
    """What GEModel needs from the model config and the instance it runs as."""

    model_name: str
    model_version: str
    instance_name: str
    instance_index: int
    version_dir: Path
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    engine: str
    model_file: str
    #: the NPU (device_ids, round-robin by instance) or, for a KIND_GPU instance, the GPU Triton placed it on
    device_id: int
    slots: int
    #: instances of this model on ``device_id`` (this one included): what the device limits are checked for
    instances_on_device: int
    reject_nonfinite: bool
    log_verbosity: int
    metrics: bool
    unbatched_inputs: tuple[str, ...] = ()
    sequence_state: tuple[StatePair, ...] = ()
    sequence_state_initial: Mapping[str, float] = field(default_factory=dict)
    sequence_state_batch_axis: int = 0
    sequence_idle_timeout: float = 1.0
    #: the model config has a sequence_batching section
    sequence_batching: bool = False
    ready_control: ReadyControl | None = None
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: the whole model config as Triton passed it (for subclasses)
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    @property
    def layout(self) -> Layout:
        """Where each engine tensor keeps its batch axis, per the parameters."""
        return Layout.of(self.unbatched_inputs, self.sequence_state, self.sequence_state_batch_axis)


def _io_specs(entries: Iterable[Mapping[str, Any]], kind: str) -> tuple[TensorSpec, ...]:
    specs = []
    for entry in entries:
        name = entry.get("name", "")
        if not name:
            raise ConfigError(f"an {kind} in the model config has no name")
        try:
            dtype = api_type(entry.get("data_type", ""))
        except ConfigError as exc:
            raise ConfigError(f"{kind} {name!r}: {exc}") from None
        # Triton hands the model the reshaped tensor when the config has a reshape.
        source = entry["reshape"].get("shape", ()) if "reshape" in entry else entry.get("dims", ())
        dims = tuple(int(d) for d in source)
        specs.append(TensorSpec(name, dtype, dims, optional=bool(entry.get("optional", False))))
    return tuple(specs)


def declared_outputs(config: Mapping[str, Any]) -> tuple[DeclaredTensor, ...]:
    """The config's outputs as the request path checks answers against them."""
    return tuple(DeclaredTensor.from_config(entry) for entry in config.get("output", []))


def _ready_control(config: Mapping[str, Any]) -> ReadyControl | None:
    for entry in config.get("sequence_batching", {}).get("control_input", ()):
        for control in entry.get("control", ()):
            if control.get("kind") != "CONTROL_SEQUENCE_READY":
                continue
            for key in ("int32_false_true", "fp32_false_true", "bool_false_true"):
                if control.get(key):  # Triton's config checks allow exactly one, with two entries
                    return ReadyControl(entry.get("name", ""), control[key][0])
    return None


def instance_index(instance_name: str, groups: Sequence[Mapping[str, Any]] = ()) -> int:
    """The instance's place among all the model's instances: Triton names each ``<group>_<index>``
    with the index counted within its instance group (the default group names are ``<model>_<n>``),
    so an instance of the second group of 1 follows the first group's instances; 0 if unnamed."""
    match = re.search(r"^(.*)_(\d+)$", instance_name)
    if match is None:
        return 0
    group_name, index = match.group(1), int(match.group(2))
    before = 0
    for group in groups:
        if group.get("name") == group_name:
            return before + index
        before += int(group.get("count", 1))
    return index


def instance_device(device_ids: Sequence[int], index: int) -> int:
    """The device of the model's instance ``index``: the instances take ``device_ids`` round-robin."""
    return device_ids[index % len(device_ids)]


def instances_on(device_ids: Sequence[int], instances: int, device: int) -> int:
    """How many of a model's ``instances`` run on ``device``."""
    return sum(instance_device(device_ids, i) == device for i in range(instances))


def _instances_on(device_ids: tuple[int, ...], index: int, config: Mapping[str, Any]) -> int:
    """How many of the model's instances (every instance_group's count) share this instance's device."""
    groups: list[Mapping[str, Any]] = list(config.get("instance_group") or ()) or [{}]
    total = sum(int(group.get("count", 1)) for group in groups)
    return max(1, instances_on(device_ids, total, instance_device(device_ids, index)))


def read_settings(args: Mapping[str, str], extra_parameters: Iterable[Parameter] = ()) -> ModelSettings:
    """Parse Triton's ``initialize`` args; ``extra_parameters`` are a subclass's own parameters."""
    try:
        config = json.loads(args["model_config"])
    except (KeyError, json.JSONDecodeError) as exc:
        raise ConfigError(f"initialize args carry no readable model_config: {exc}") from None
    raw = {name: value.get("string_value", "") for name, value in config.get("parameters", {}).items()}
    extra = tuple(extra_parameters)
    engine_declared = engine_parameters()
    declared = CORE_PARAMETERS + engine_declared + extra
    values = parse_parameters(raw, declared, ignored=TRITON_PARAMETERS)
    if values["device_id"] is not None and values["device_ids"] is not None:
        raise ConfigError("parameters 'device_id' and 'device_ids' are both set; set one of them")
    name = args.get("model_instance_name", config.get("name", ""))
    index = instance_index(name, config.get("instance_group") or ())
    device_ids = values["device_ids"] or (values["device_id"] or 0,)
    device_id = instance_device(device_ids, index)
    if args.get("model_instance_kind") == "GPU":  # Triton placed this instance on a GPU: the engine runs there
        if values["device_id"] is not None or values["device_ids"] is not None:
            raise ConfigError(
                "instance_group KIND_GPU: Triton places each instance on a GPU of instance_group gpus; parameters "
                "'device_id' and 'device_ids' place NPU instances (KIND_CPU): remove them"
            )
        device_id = int(args.get("model_instance_device_id") or 0)
    engine_names = {p.name for p in engine_declared}
    model_dir = Path(args.get("model_repository", "."))
    version = args.get("model_version", "1")
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch < 0:
        raise ConfigError(f"max_batch_size is {max_batch}; expected 0 (no batching) or more")
    if values["sequence_state"] and "sequence_batching" not in config:
        raise ConfigError("parameter 'sequence_state' needs sequence_batching in the model config")
    states = {pair.input for pair in values["sequence_state"]}
    stray = sorted(set(values["sequence_state_initial"]) - states)
    if stray:
        raise ConfigError(
            f"parameter 'sequence_state_initial' names {stray[0]!r}, which is not a state input "
            f"(state inputs: {', '.join(sorted(states)) or 'none'})"
        )
    idle_ms = values["sequence_idle_timeout_ms"]
    if idle_ms is None:
        idle_us = config.get("sequence_batching", {}).get("max_sequence_idle_microseconds") or 1_000_000
        idle_ms = int(idle_us) / 1000
    return ModelSettings(
        model_name=args.get("model_name", config.get("name", "")),
        model_version=version,
        instance_name=name,
        instance_index=index,
        version_dir=model_dir / version,
        max_batch_size=max_batch,
        inputs=_io_specs(config.get("input", ()), "input"),
        outputs=_io_specs(config.get("output", ()), "output"),
        engine=values["engine"],
        model_file=values["model_file"],
        device_id=device_id,
        slots=values["streams"],
        instances_on_device=_instances_on(device_ids, index, config),
        reject_nonfinite=values["reject_nonfinite"],
        log_verbosity=values["log_verbosity"],
        metrics=values["metrics"],
        unbatched_inputs=values["unbatched_inputs"],
        sequence_state=values["sequence_state"],
        sequence_state_initial=values["sequence_state_initial"],
        sequence_state_batch_axis=values["sequence_state_batch_axis"],
        sequence_idle_timeout=idle_ms / 1000,
        sequence_batching="sequence_batching" in config,
        ready_control=_ready_control(config),
        engine_options={k: values[k] for k in raw if k in engine_names},  # only what the config sets
        extra={p.name: values[p.name] for p in extra},
        config=config,
    )


def auto_complete(
    config: dict[str, Any],
    version_dir: Path,
    extra_parameters: Iterable[Parameter] = (),
    overridden: frozenset[str] = frozenset(),
) -> list[str]:
    """Complete ``config`` (Triton's JSON form, changed in place) from the model file in
    ``version_dir``, as GEModel's ``auto_complete_config`` does: ``max_batch_size`` from the
    gears, inputs, outputs and ``dynamic_batching`` with the preferred sizes, derived by
    ``modelconfig.derive`` exactly as ``ge-triton generate`` derives them. What the config declares is
    kept and checked (ConfigError naming the field, the model's value and the config's); a hook
    in ``overridden`` leaves its side (inputs for preprocess, outputs for postprocess) to the
    config. Returns what was filled, one line each. A model file that cannot be found or read
    is left to ``initialize``, which opens it and reports what to fix (nothing is filled).

    Only ``max_batch_size``, ``input``, ``output``, the scheduler (when the config sets none)
    and ``model_transaction_policy`` survive auto-complete (CORE r24.10
    ``src/backend_model.cc:741-793``), so parameters and instance groups are never touched."""
    probe = dict(config, input=[], output=[])  # the declared I/O is checked against the derived config below
    args = {
        "model_config": json.dumps(probe),
        "model_repository": str(version_dir.parent),
        "model_version": version_dir.name,
        "model_name": str(config.get("name", "")),
    }
    settings = read_settings(args, extra_parameters)
    try:
        path, found = _model_file(settings, version_dir)
        if found == ONNX and _compiles(settings):  # describe the model ATC builds, not the ONNX file
            facts = ConfigFacts.from_json(config, "the model config")
            model_spec = compiled_model_spec(path, facts, settings.engine_options, version_dir)
        else:
            model_spec = read_model_spec(path, found)
    except GEError as exc:  # initialize opens (or compiles) the file and says what to fix, in its own words
        return [f"nothing: the model file cannot be read here ({exc}); initialize reports it"]
    spec = _with_declared_dims(model_spec, config, settings)
    states = frozenset(name for pair in settings.sequence_state for name in (pair.input, pair.output))
    request = ConfigChoices(
        layout=settings.layout,
        states=states,
        max_batch_size=wanted_batch(config),
        source="max_batch_size",
        client_inputs="preprocess" not in overridden,
        client_outputs="postprocess" not in overridden,
    )
    return complete_config(
        config,
        derive_config(spec, request),
        fill_inputs="preprocess" not in overridden,
        fill_outputs="postprocess" not in overridden,
    )


def _compiles(settings: ModelSettings) -> bool:
    """The engine compiles an ONNX file at load (engine auto: the first candidate compiles, as on an NPU host)."""
    if settings.engine == AUTO:
        candidates = auto_candidates(settings.version_dir, settings.model_file)
        return bool(candidates.found) and bool(candidates.found[0][0].atc)
    return bool(engine_info(settings.engine).atc)


def _model_file(settings: ModelSettings, version_dir: Path):
    """The model file GEModel will open (or compile), and its format (engine auto: the first
    candidate, NPU engines first, as ``check`` does; no device is touched)."""
    if settings.engine == AUTO:
        candidates = auto_candidates(version_dir, settings.model_file)
        if not candidates.found:
            raise ConfigError(candidates.nothing_message(f"in {version_dir}"))
        info, path = candidates.found[0]
    else:
        info = engine_info(settings.engine)
        path = info.model_source(version_dir, settings.model_file)[0]
        if not path.is_file():
            raise ConfigError(f"model file {path} does not exist (parameter model_file, engine {info.name})")
    found = detect_format(path)
    if found == ONNX and info.atc:  # compiled at load: the ONNX file says what the .om will take
        return path, found
    if found != info.model_format:
        what = found.description if found is not None else "not a model file ge-triton knows"
        raise ConfigError(f"model file {path} is {what}; engine {info.name} runs a {info.model_format.description}")
    return path, found


def _with_declared_dims(spec: ModelSpec, config: Mapping[str, Any], settings: ModelSettings) -> ModelSpec:
    """Tensors of open rank take the dims the config declares for them (with its max_batch_size)."""
    declared = [
        TensorSpec(str(entry["name"]), "", tuple(int(d) for d in entry["dims"]), native_type="declared")
        for kind in ("input", "output")
        for entry in config.get(kind, [])
        if entry.get("name") and entry.get("dims")
    ]
    batching = int(config.get("max_batch_size", 0) or 0) > 0
    return refine_spec(spec, declared, (), batching=batching, layout=settings.layout)
