"""The ATC command that compiles an ONNX model into an .om matching a Triton configuration.

ATC (CANN's model compiler) is not needed here: the command is printed for the user to run
where CANN is installed. Shapes come from the ONNX file (read through ``modelfile``), then
from the config's dims, then from ``--input-shape``; batch gears come from ``--batch-gears``
or from the config's ``max_batch_size`` / ``preferred_batch_size``. Contradictions are errors
that say what conflicts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ge_python_backend.engines import ModelKind
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.config import read_config_file
from ge_python_backend.repository.modelfile import read_model_file
from ge_python_backend.specs import TensorSpec, format_shape

#: --precision values ATC takes as --precision_mode_v2 (newer CANN) ...
PRECISION_MODE_V2 = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16")
#: ... and as the older --precision_mode.
PRECISION_MODE = (
    "force_fp16",
    "force_fp32",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)
INPUT_FORMATS = ("NCHW", "NCDHW", "ND")
#: ATC's documented limit on --dynamic_batch_size gears.
MAX_GEARS = 100
ONNX_FRAMEWORK = "5"
_SOC = re.compile(r"^[A-Za-z0-9_]+$")
_NEEDS_QUOTES = re.compile(r"[^A-Za-z0-9_@%+=:,./-]")


@dataclass(frozen=True)
class AtcRequest:
    model: Path
    soc_version: str
    output: str | None = None
    batch_gears: tuple[int, ...] = ()
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    precision: str | None = None
    input_format: str | None = None
    config: Path | None = None


@dataclass(frozen=True)
class AtcCommand:
    arguments: tuple[str, ...]
    notes: tuple[str, ...]

    def shell(self) -> str:
        """The command as one shell line; ATC's list values are double-quoted as its manual writes them."""
        return " ".join(_quoted(argument) for argument in self.arguments)


def _quoted(argument: str) -> str:
    flag, sep, value = argument.partition("=")
    if sep and flag in ("--input_shape", "--dynamic_batch_size") and not re.search(r'["$`\\!]', value):
        return f'{flag}="{value}"'
    return shlex.quote(argument) if _NEEDS_QUOTES.search(argument) else argument


def config_gears(config) -> tuple[int, ...]:
    """Batch gears a config implies: its preferred sizes plus max_batch_size, else powers of
    two up to max_batch_size (and max_batch_size itself); () when it does not batch."""
    max_batch = config.max_batch_size
    if max_batch <= 0:
        return ()
    preferred = set(config.dynamic_batching.preferred_batch_size)
    if preferred:
        return tuple(sorted(preferred | {max_batch}))
    return tuple(sorted({1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch} | {max_batch}))


def _gears(request: AtcRequest, config, notes: list[str]) -> tuple[int, ...]:
    given = tuple(sorted(set(request.batch_gears)))
    if any(g < 1 for g in given):
        raise ConfigError(f"--batch-gears {','.join(map(str, request.batch_gears))}: every gear must be >= 1")
    if config is None:
        return given
    source = request.config
    derived = config_gears(config)
    if not given:
        if derived:
            notes.append(
                f"batch gears {','.join(map(str, derived))} derived from {source} (max_batch_size "
                f"{config.max_batch_size}, preferred_batch_size "
                f"{list(config.dynamic_batching.preferred_batch_size) or 'none'})"
            )
        return derived
    listed = ",".join(map(str, given))
    if config.max_batch_size <= 0:
        raise ConfigError(
            f"--batch-gears {listed} conflicts with {source}: max_batch_size 0 means requests carry "
            "the full shape and the model has no batch gears"
        )
    if given[-1] < config.max_batch_size:
        raise ConfigError(
            f"--batch-gears {listed} conflicts with {source}: max_batch_size {config.max_batch_size} "
            f"is above the largest gear {given[-1]}"
        )
    off_gear = [p for p in config.dynamic_batching.preferred_batch_size if p not in given]
    if off_gear:
        raise ConfigError(
            f"--batch-gears {listed} conflicts with {source}: preferred_batch_size {off_gear[0]} "
            "is not one of the gears"
        )
    return given


def _config_shapes(config, inputs: Sequence[TensorSpec]) -> dict[str, tuple[int, ...]]:
    """Full shapes of the model inputs that the config declares (batch axis -1 when batching)."""
    shapes = {}
    names = {t.name for t in inputs}
    for entry in config.input:
        if entry.name in names:
            dims = tuple(entry.reshape.shape if entry.HasField("reshape") else entry.dims)
            shapes[entry.name] = ((-1,) + dims) if config.max_batch_size > 0 else dims
    return shapes


def _merge(tensor: TensorSpec, shape: tuple[int, ...], given: tuple[int, ...], source: str) -> tuple[int, ...]:
    """``shape`` with the -1 axes filled from ``given``; ConfigError when a fixed axis differs."""
    if len(given) != len(shape):
        raise ConfigError(
            f"{source} gives input {tensor.name!r} rank {len(given)} ({format_shape(given)}); the model "
            f"input has rank {len(shape)} ({format_shape(shape)})"
        )
    merged = []
    for axis, (have, want) in enumerate(zip(shape, given)):
        if have != -1 and want != -1 and have != want:
            raise ConfigError(
                f"{source} gives input {tensor.name!r} size {want} on axis {axis}, but it is "
                f"{have} already ({format_shape(shape)})"
            )
        merged.append(have if want == -1 else want)
    return tuple(merged)


def _input_shapes(
    request: AtcRequest, inputs: Sequence[TensorSpec], config, gears: tuple[int, ...], notes: list[str]
) -> dict[str, tuple[int, ...]]:
    unknown = sorted(set(request.input_shapes) - {t.name for t in inputs})
    if unknown:
        raise ConfigError(
            f"--input-shape names {unknown[0]!r}, which is not a model input; the model takes "
            f"{[t.name for t in inputs]}"
        )
    from_config = _config_shapes(config, inputs) if config is not None else {}
    shapes = {}
    for tensor in inputs:
        shape = tensor.shape
        if tensor.name in from_config:
            shape = _merge(tensor, shape, from_config[tensor.name], str(request.config))
        if tensor.name in request.input_shapes:
            shape = _merge(tensor, shape, tuple(request.input_shapes[tensor.name]), "--input-shape")
        shapes[tensor.name] = _batch_axis(tensor.name, shape, gears, notes)
        rest = [axis for axis, size in enumerate(shapes[tensor.name]) if size < 0 and axis > 0]
        if rest:
            example = ",".join(
                f"<size of axis {axis}>" if axis in rest else str(size) for axis, size in enumerate(shapes[tensor.name])
            )
            raise ConfigError(
                f"input {tensor.name!r} is {format_shape(shape)}: axis {', '.join(map(str, rest))} "
                f"{'has' if len(rest) == 1 else 'have'} no size; give {'it one' if len(rest) == 1 else 'each one'} "
                f"with --input-shape {tensor.name}:{example} "
                "(ATC compiles fixed shapes; only the batch axis takes gears here)"
            )
    return shapes


def _batch_axis(name: str, shape: tuple[int, ...], gears: tuple[int, ...], notes: list[str]) -> tuple[int, ...]:
    if not shape:
        raise ConfigError(f"input {name!r} is a scalar; ATC's dynamic batch needs the batch on axis 0")
    if len(gears) == 1:
        if shape[0] not in (-1, gears[0]):
            raise ConfigError(
                f"input {name!r} has a fixed batch {shape[0]} ({format_shape(shape)}); it conflicts "
                f"with the batch gear {gears[0]}"
            )
        return (gears[0],) + shape[1:]
    if gears:
        if shape[0] != -1:
            raise ConfigError(
                f"input {name!r} has a fixed axis 0 of {shape[0]} ({format_shape(shape)}), but batch "
                "gears need a batch axis on axis 0 of every input (ATC --dynamic_batch_size)"
            )
        return shape
    if shape[0] == -1:
        raise ConfigError(
            f"input {name!r} has a dynamic batch axis ({format_shape(shape)}): give --batch-gears "
            f"(e.g. 1,2,4,8), --config with max_batch_size, or a fixed size with --input-shape "
            f"{name}:1,..."
        )
    return shape


def _input_format(request: AtcRequest, shapes: Mapping[str, tuple[int, ...]]) -> str:
    if request.input_format:
        if request.input_format not in INPUT_FORMATS:
            raise ConfigError(f"--input-format {request.input_format!r}: accepted {', '.join(INPUT_FORMATS)}")
        return request.input_format
    ranks = {len(shape) for shape in shapes.values()}
    return {frozenset({4}): "NCHW", frozenset({5}): "NCDHW"}.get(frozenset(ranks), "ND")


def _precision(precision: str | None) -> list[str]:
    if precision is None:
        return []
    if precision in PRECISION_MODE_V2:
        return [f"--precision_mode_v2={precision}"]
    if precision in PRECISION_MODE:
        return [f"--precision_mode={precision}"]
    raise ConfigError(
        f"--precision {precision!r}: accepted {', '.join(PRECISION_MODE_V2)} (--precision_mode_v2) or "
        f"{', '.join(PRECISION_MODE)} (--precision_mode, older CANN)"
    )


def _output(request: AtcRequest, notes: list[str]) -> str:
    output = request.output
    if output is None and request.config is not None:
        model_dir = Path(request.config).parent
        versions = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
        output = str(model_dir / str(versions[-1] if versions else 1) / "model")
    if output is None:
        output = str(Path(request.model).with_suffix(""))
    if output.endswith(".om"):
        output = output[: -len(".om")]
        notes.append(f"the .om suffix is dropped from the output path: ATC appends it ({output}.om)")
    return output


def atc_command(request: AtcRequest) -> AtcCommand:
    """The ATC command for ``request``; ConfigError for anything missing or contradictory."""
    if not _SOC.match(request.soc_version or ""):
        raise ConfigError(
            f"--soc-version {request.soc_version!r}: expected a name such as Ascend310P3 "
            "(on the target, `npu-smi info` shows it in the Name column, without the Ascend prefix)"
        )
    model = read_model_file(request.model)
    if model.kind is not ModelKind.ONNX:
        raise ConfigError(
            f"{request.model} is a {model.kind.description}; atc-cmd compiles an ONNX model (.onnx) into an .om"
        )
    config = read_config_file(request.config) if request.config is not None else None
    notes: list[str] = []
    gears = _gears(request, config, notes)
    if len(gears) > MAX_GEARS:
        raise ConfigError(f"{len(gears)} batch gears; ATC accepts at most {MAX_GEARS}")
    if len(gears) == 1:
        notes.append(
            f"one batch gear: compiled as a fixed batch of {gears[0]} (ATC --dynamic_batch_size needs at "
            "least two gears)"
        )
    shapes = _input_shapes(request, model.spec.inputs, config, gears, notes)
    arguments = [
        "atc",
        f"--model={request.model}",
        f"--framework={ONNX_FRAMEWORK}",
        f"--output={_output(request, notes)}",
        f"--soc_version={request.soc_version}",
        f"--input_format={_input_format(request, shapes)}",
        "--input_shape=" + ";".join(f"{name}:{','.join(map(str, shape))}" for name, shape in shapes.items()),
    ]
    if len(gears) > 1:
        arguments.append(f"--dynamic_batch_size={','.join(map(str, gears))}")
    arguments += _precision(request.precision)
    return AtcCommand(tuple(arguments), tuple(notes))
