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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError
from ..modelfile import ModelFile, read_model_file
from ..specs import ModelSpec, TensorSpec, config_type
from .config import ModelConfig, format_config, mc
from .templates import Template, load_template, safe_join

#: Default largest batch for a model whose batch axis takes any size.
DEFAULT_DYNAMIC_MAX_BATCH = 8
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
    instance_count: int = 1
    device_ids: tuple[int, ...] = (0,)
    streams: int = 1
    warmup: bool = False
    template_options: Mapping[str, str] = field(default_factory=dict)
    overwrite: bool = False


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
        largest = batch.largest
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


def _add_tensor(entries, tensor: TensorSpec | Mapping[str, Any], batching: bool) -> None:
    entry = entries.add()
    if isinstance(tensor, TensorSpec):
        if not tensor.dtype or tensor.dtype == "BF16":
            raise ConfigError(
                f"tensor {tensor.name!r} has type {tensor.dtype or tensor.native_type}, which the Python "
                "backend cannot carry as a numpy array; use a template whose preprocess/postprocess converts it"
            )
        entry.name = tensor.name
        entry.data_type = mc.DataType.Value(config_type(tensor.dtype))
        dims = tensor.shape[1:] if batching else tensor.shape
        entry.dims.extend(dims if dims else (1,))
    else:
        entry.name = tensor["name"]
        entry.data_type = mc.DataType.Value(tensor["data_type"])
        entry.dims.extend(int(d) for d in tensor["dims"])


def build_config(model: ModelFile, template: Template, values: Mapping[str, str], options: GenerateOptions):
    """The ModelConfig for ``model`` rendered with ``template``; returns (config, notes)."""
    spec = model.spec
    max_batch, preferred, notes = batching_plan(spec, options)
    batching = max_batch > 0
    config = ModelConfig(name=options.name, backend=options.backend, max_batch_size=max_batch)
    inputs = template.render_data(list(template.inputs), values, "inputs") if template.inputs is not None else spec.inputs
    outputs = (
        template.render_data(list(template.outputs), values, "outputs") if template.outputs is not None else spec.outputs
    )
    for tensor in inputs:
        _add_tensor(config.input, tensor, batching)
    for tensor in outputs:
        _add_tensor(config.output, tensor, batching)
    if batching:
        config.dynamic_batching.preferred_batch_size.extend(preferred)
        config.dynamic_batching.max_queue_delay_microseconds = options.max_queue_delay_us
    group = config.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    group.count = options.instance_count
    parameters = {"engine": options.engine or model.engine, "streams": str(options.streams)}
    parameters["device_ids"] = ",".join(str(d) for d in options.device_ids)
    parameters.update(template.render_data(dict(template.parameters), values, "parameters"))
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    if options.warmup:
        _add_warmup(config, max_batch)
    return config, notes


def _add_warmup(config, max_batch: int) -> None:
    warmup = config.model_warmup.add()
    warmup.name = "zeros"
    warmup.batch_size = max(max_batch, 1)
    for entry in config.input:
        data = warmup.inputs[entry.name]
        data.data_type = entry.data_type
        data.dims.extend(1 if d == -1 else d for d in entry.dims)
        data.zero_data = True


def generate(model_path: Path, repository: Path, options: GenerateOptions) -> Generated:
    """Write the model folder for ``model_path`` into ``repository``."""
    name = check_name(options.name)
    if options.backend not in ("python", "ge"):
        raise ConfigError(f"--backend {options.backend!r}: accepted python or ge")
    if options.backend == "ge" and options.template != "generic":
        raise ConfigError(
            f'--backend ge serves models without per-model code, but template {options.template!r} brings its own '
            "model.py; use --backend python with it"
        )
    model = read_model_file(model_path)
    template = load_template(options.template)
    values = template.values(options.template_options)
    values.update(name=name, source=Path(model_path).name, model_file=model.default_name)
    config, notes = build_config(model, template, values, options)
    repository = Path(repository)
    model_dir = safe_join(repository, name)
    if model_dir.exists():
        if not options.overwrite:
            raise ConfigError(f"{model_dir} exists; pass --force to replace it")
        shutil.rmtree(model_dir)
    version_dir = model_dir / str(options.version)
    version_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
    shutil.copyfile(model_path, version_dir / model.default_name)
    files = [model_dir / "config.pbtxt", version_dir / model.default_name]
    if options.backend == "ge":
        written = []
        notes.append('backend "ge": no model.py; install the backend once with `ge-triton install-backend`')
    else:
        written = template.write_files(model_dir, options.version, values)
    return Generated(model_dir, tuple(files + written), config, tuple(notes))
