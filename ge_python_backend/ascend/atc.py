"""The ATC command that compiles an ONNX (or TensorFlow) model into an .om matching a Triton configuration.

One builder for ``ge-triton atc-cmd`` (which prints the command) and for engine ``acl``'s
compile at load (which runs it), so the two cannot drift. Shapes come from the model's inputs,
then from the config's dims, then from ``--input-shape``; batch gears come from ``--batch-gears``
or from the config's ``max_batch_size`` / ``preferred_batch_size``. Contradictions are errors
that say what conflicts.

Dynamic dims (``--dynamic-dims``, ATC's ``--dynamic_dims``) follow ATC's own rules: the
``--input_shape`` it emits lists the inputs in the order the user gave (static inputs may be
named too), each gear lists one value per -1 axis of that ``--input_shape``, in its order, and
is checked as ATC checks it: the value count, 2..100 gears, no gear twice, every input with -1
axes named, never together with ``--dynamic_batch_size`` or ``--insert_op_conf`` (hicann/ge
compiler/graph/preprocess/multi_batch_options.cc:32, 477-500, 613-655;
compiler/graph/passes/multi_batch/multi_batch_clone_pass.cc:300-307;
docs/zh/user_guides/atc_tools/CLI_options/--dynamic_dims.md:23-60). ``--insert-op-conf`` passes an
AIPP config (ATC's ``aipp_op { ... }`` syntax) through, after checking it against the inputs.

Other ATC flags (``atc_flags``, e.g. ``--aicore_num``) are checked against ATC's own flag list
(``ascend.atcflags.ATC_FLAGS``) and passed through after the derived ones.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import atcflags
from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode, parse_aipp_config
from ge_python_backend.ascend.layout import range_batch
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import UNBOUNDED, BatchSupport, ModelSpec, ShapeGear, TensorSpec, format_shape, ranges_text

#: --precision values ATC takes as --precision_mode_v2 (newer CANN) ...
#: (api/atc/cmd_flag_info.cc:51-54 at parsing, compiler/api/aclgrph/option_utils.cc:1341-1357 again)
PRECISION_MODE_V2 = (
    "fp16",
    "origin",
    "cube_fp16in_fp32out",
    "mixed_float16",
    "mixed_bfloat16",
    "cube_hif8",
    "mixed_hif8",
)
#: ... and as the older --precision_mode (cmd_flag_info.cc:48-50, option_utils.cc:1316-1339); a
#: value of both lists is given as --precision_mode_v2
PRECISION_MODE = (
    "force_fp16",
    "force_fp32",
    "cube_fp16in_fp32out",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)
#: what --input_format takes (ATC's --input_format.md); NHWC and NDHWC for TensorFlow models
INPUT_FORMATS = ("NCHW", "NCDHW", "ND", "NHWC", "NDHWC")
#: ATC's documented limits on --dynamic_batch_size / --dynamic_dims gears (--dynamic_dims.md:23).
MIN_DIMS_GEARS, MAX_GEARS = 2, 100
#: ATC --framework by source model suffix (atc_flags.cc:15: 3 TensorFlow, 5 ONNX)
FRAMEWORKS = {".onnx": "5", ".pb": "3"}
_SOC = re.compile(r"^[A-Za-z0-9_]+$")
_NEEDS_QUOTES = re.compile(r"[^A-Za-z0-9_@%+=:,./-]")


@dataclass(frozen=True)
class ConfigFacts:
    """What the ATC command takes from a Triton model config: batching and the declared dims."""

    #: where the facts come from, for messages (a config.pbtxt path, or "the model config")
    source: str
    max_batch_size: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    #: each declared input's dims as the model sees them (``reshape`` when given), batch axis removed
    input_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, config: Mapping[str, Any], source: str, served: bool = False) -> ConfigFacts:
        """From Triton's JSON form of a ModelConfig (numbers may be strings, as protobuf's JSON writes
        int64). ``served``: the config as tritonserver hands it to a model, where a
        ``preferred_batch_size`` of just ``[max_batch_size]`` is what the server fills in for a
        config that sets none (tritonserver 2.51, seen with ``check --load``), so it counts as none."""
        dims = {}
        for entry in config.get("input", ()):
            reshape = entry.get("reshape")
            dims[str(entry.get("name", ""))] = tuple(
                int(d) for d in (reshape.get("shape", ()) if reshape is not None else entry.get("dims", ()))
            )
        batching = config.get("dynamic_batching") or {}
        max_batch = int(config.get("max_batch_size", 0) or 0)
        preferred = tuple(int(p) for p in batching.get("preferred_batch_size", ()))
        if served and preferred == (max_batch,):
            preferred = ()
        return cls(source, max_batch, preferred, dims)


@dataclass(frozen=True)
class Spelling:
    """How messages name the flags: atc-cmd's options (``--input-shape "x:..."``), or, where the
    flags come from a parameter (``where``, e.g. "parameter 'atc_flags'"), ATC's own there
    (``--input_shape=x:... in parameter 'atc_flags'``): a fix must be written where it goes."""

    where: str = ""

    def flag(self, name: str) -> str:
        """ATC flag ``name`` (``input_shape``) as the user writes it here."""
        return f"--{name}" if self.where else "--" + name.replace("_", "-")

    def give(self, name: str, value: str) -> str:
        """How to give flag ``name`` the value ``value``, as a fix says it."""
        if self.where:
            return f"--{name}={value} in {self.where}"
        return f'--{name.replace("_", "-")} "{value}"'


#: atc-cmd's own options
ATC_CMD = Spelling()


@dataclass(frozen=True)
class AtcRequest:
    model: Path
    soc_version: str
    #: ATC --output: the .om path (ATC appends ``.om``); None: next to the model
    output: str | None = None
    batch_gears: tuple[int, ...] = ()
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    precision: str | None = None
    input_format: str | None = None
    facts: ConfigFacts | None = None
    #: ATC --dynamic_dims: per gear, one value per -1 axis of ``input_shapes`` (in its order)
    dynamic_dims: tuple[tuple[int, ...], ...] = ()
    #: ATC --insert_op_conf: an AIPP config file
    insert_op_conf: Path | None = None
    #: shape ranges (``a~b`` in --input_shape): per input named there, (min, max) per axis (a size d
    #: is d~d, -1 is 0~, max UNBOUNDED for ``a~``); its -1 axes in ``input_shapes``. Empty: no ranges
    shape_ranges: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    #: further ATC flags, ``--name=value`` each, checked by ``parse_atc_flags``; emitted after the derived ones
    extra_flags: tuple[str, ...] = ()
    #: how messages name the flags (where the user gave them)
    spelling: Spelling = ATC_CMD


@dataclass(frozen=True)
class AtcCommand:
    arguments: tuple[str, ...]
    notes: tuple[str, ...]

    def shell(self) -> str:
        """The command as one shell line; ATC's list values are double-quoted as its manual writes them."""
        return " ".join(_quoted(argument) for argument in self.arguments)


_LIST_FLAGS = ("--input_shape", "--dynamic_batch_size", "--dynamic_dims")


def parse_input_shape(
    text: str, spelling: Spelling = ATC_CMD
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[tuple[int, int], ...]]]:
    """atc-cmd's ``--input-shape`` (or ATC's ``--input_shape`` given in ``spelling.where``): ATC's
    syntax in the given order, as (shapes, ranges): the shapes with -1 on each range axis, and, when
    any axis is a range ``a~b``, every named input's (min, max) per axis (``AtcRequest.shape_ranges``;
    ATC turns such an --input_shape into shape ranges, -1 included: option_utils.cc:737-782)."""
    flag = f"{spelling.where}: --input_shape" if spelling.where else "--input-shape"
    given = atcflags.parse_input_shape(text, flag)
    shapes = {name: tuple(-1 if isinstance(d, tuple) else d for d in dims) for name, dims in given.items()}
    if "~" not in text:
        return shapes, {}
    return shapes, {name: tuple(atcflags.axis_range(d) for d in dims) for name, dims in given.items()}


def parse_dynamic_dims(text: str, spelling: Spelling = ATC_CMD) -> tuple[tuple[int, ...], ...]:
    """ATC's ``--dynamic_dims``: ``"1,20;2,40"`` -> ((1, 20), (2, 40)) (gears by ``;``, values by ``,``)."""
    return atcflags.parse_gear_list(text, f"{spelling.where}: --dynamic_dims" if spelling.where else "--dynamic-dims")


#: ATC flags the command derives itself, and where they come from instead
DERIVED_FLAGS = {
    "model": "the model file of the version folder",
    "output": "where the compiled model is cached",
    "framework": "the model file's suffix (.onnx 5, .pb 3)",
    "soc_version": "the device (acl.get_soc_name)",
    "dynamic_batch_size": "max_batch_size and preferred_batch_size of the config",
    "dynamic_image_size": "nothing: image-size gears need a model.om compiled by hand",
    "weight": "nothing: it is for Caffe models",
}
#: ATC flags that make it do something other than compile one model into an .om
OTHER_MODES = ("mode", "om", "json", "singleop", "help")


def apply_atc_flags(request: AtcRequest, text: str, base_dir: Path, where: str) -> AtcRequest:
    """``request`` with the ATC flags of ``text`` (``--name=value ...``): the ones the builder
    checks (``--input_shape``, ``--dynamic_dims``, ``--input_format``, ``--insert_op_conf``,
    ``--precision_mode(_v2)``) go into their fields, every other flag ATC defines is passed
    through; paths are taken relative to ``base_dir``. ConfigError naming ``where`` and the flag
    for what ATC does not define, what the builder derives, or a bad value."""
    spelling = Spelling(where)
    changes: dict[str, Any] = {"spelling": spelling}
    extra: list[str] = []
    precision_given = False
    for name, value in atcflags.split_atc_flags(text, where):
        if name in DERIVED_FLAGS or name in OTHER_MODES:
            why = f"set from {DERIVED_FLAGS[name]}" if name in DERIVED_FLAGS else "it makes ATC do something else"
            raise ConfigError(f"{where}: --{name} cannot be given here ({why})")
        if name in atcflags.PATH_FLAGS and value:
            value = str(Path(base_dir) / value)
        if name == "input_shape":
            changes["input_shapes"], changes["shape_ranges"] = parse_input_shape(value, spelling)
        elif name == "dynamic_dims":
            changes["dynamic_dims"] = parse_dynamic_dims(value, spelling)
        elif name == "input_format":
            changes["input_format"] = value
        elif name == "insert_op_conf":
            changes["insert_op_conf"] = Path(value)
        elif name in ("precision_mode", "precision_mode_v2"):
            if precision_given:
                # ATC: E10056, "Cannot config both" (compiler/api/aclgrph/option_utils.cc:1359-1371)
                raise ConfigError(f"{where}: --precision_mode and --precision_mode_v2 together; ATC takes one")
            precision_given = True
            accepted = PRECISION_MODE if name == "precision_mode" else PRECISION_MODE_V2
            if value not in accepted:
                raise ConfigError(f"{where}: --{name}={value}: ATC accepts {', '.join(accepted)}")
            if name == "precision_mode" and value in PRECISION_MODE_V2:
                extra.append(f"--{name}={value}")  # a value of both flags stays on the one it was given for
            else:
                changes["precision"] = value
        else:
            if name == "aicore_num":
                atcflags.parse_aicore_num(value, f"{where}: --aicore_num")
            extra.append(f"--{name}={value}")
    return replace(request, **changes, extra_flags=request.extra_flags + tuple(extra))


def _quoted(argument: str) -> str:
    flag, sep, value = argument.partition("=")
    if sep and flag in _LIST_FLAGS and not re.search(r'["$`\\!]', value):
        return f'{flag}="{value}"'
    return shlex.quote(argument) if _NEEDS_QUOTES.search(argument) else argument


def config_gears(facts: ConfigFacts) -> tuple[int, ...]:
    """Batch gears a config implies: its preferred sizes plus max_batch_size, else powers of
    two up to max_batch_size (and max_batch_size itself); () when it does not batch."""
    max_batch = facts.max_batch_size
    if max_batch <= 0:
        return ()
    preferred = set(facts.preferred_batch_size)
    if preferred:
        return tuple(sorted(preferred | {max_batch}))
    return tuple(sorted({1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch} | {max_batch}))


def _gears(request: AtcRequest, config: ConfigFacts | None, notes: list[str]) -> tuple[int, ...]:
    given = tuple(sorted(set(request.batch_gears)))
    if any(g < 1 for g in given):
        raise ConfigError(f"--batch-gears {','.join(map(str, request.batch_gears))}: every gear must be >= 1")
    if config is None:
        return given
    source = config.source
    derived = config_gears(config)
    if not given:
        if derived:
            notes.append(
                f"batch gears {','.join(map(str, derived))} derived from {source} (max_batch_size "
                f"{config.max_batch_size}, preferred_batch_size "
                f"{list(config.preferred_batch_size) or 'none'})"
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
    off_gear = [p for p in config.preferred_batch_size if p not in given]
    if off_gear:
        raise ConfigError(
            f"--batch-gears {listed} conflicts with {source}: preferred_batch_size {off_gear[0]} "
            "is not one of the gears"
        )
    return given


def _config_shapes(
    config: ConfigFacts | None, inputs: Sequence[TensorSpec], aipp: Mapping[str, AippConfig] | None = None
) -> dict[str, tuple[int, ...]]:
    """Full shapes of the model inputs that the config declares (batch axis -1 when batching). An
    input with AIPP is left out: the config declares the image the AIPP takes (UINT8 NHWC), not the
    network input ATC is told about."""
    if config is None:
        return {}
    names = {t.name for t in inputs} - set(aipp or {})
    batch = (-1,) if config.max_batch_size > 0 else ()
    return {name: batch + dims for name, dims in config.input_dims.items() if name in names}


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
    request: AtcRequest,
    inputs: Sequence[TensorSpec],
    config: ConfigFacts | None,
    gears: tuple[int, ...],
    notes: list[str],
    aipp: Mapping[str, AippConfig],
) -> dict[str, tuple[int, ...]]:
    _check_names(request, inputs)
    from_config = _config_shapes(config, inputs, aipp)
    shapes = {}
    for tensor in inputs:
        shape = tensor.shape
        if tensor.name in from_config:
            shape = _merge(tensor, shape, from_config[tensor.name], _source(config))
        if tensor.name in request.input_shapes:
            shape = _merge(
                tensor, shape, tuple(request.input_shapes[tensor.name]), request.spelling.flag("input_shape")
            )
        shapes[tensor.name] = _batch_axis(tensor.name, shape, gears, notes, request.spelling)
        rest = [axis for axis, size in enumerate(shapes[tensor.name]) if size < 0 and axis > 0]
        if rest:
            raise ConfigError(_unsized(tensor.name, shapes[tensor.name], rest, bool(gears), request.spelling))
    if len(gears) > 1 and all(shape[0] != -1 for shape in shapes.values()):
        listed = ", ".join(f"{n} {format_shape(s)}" for n, s in shapes.items())
        raise ConfigError(
            f"batch gears {','.join(map(str, gears))}, but no input has a dynamic axis 0 ({listed}); ATC refuses it "
            "('At least one batch n must be equal to -1', option_utils.cc:332-337): give an input -1 on axis 0"
        )
    return shapes


def _check_names(request: AtcRequest, inputs: Sequence[TensorSpec]) -> None:
    """ConfigError for an --input_shape entry that names no model input."""
    names = [t.name for t in inputs]
    unknown = [n for n in request.input_shapes if n not in names]
    if unknown:
        raise ConfigError(
            f"{request.spelling.flag('input_shape')} names {unknown[0]!r}, which is not a model input; the model "
            f"takes {names}"
        )


def _unsized(name: str, shape: tuple[int, ...], axes: list[int], batch_gears: bool, spelling: Spelling) -> str:
    """What to do about axes without a size: a shape with a placeholder on each of them (never the
    shape that failed), or --dynamic-dims gears of them."""
    which = f"axis {axes[0]} has" if len(axes) == 1 else f"axes {', '.join(map(str, axes))} have"
    fixed = ",".join("<size>" if axis in axes else str(d) for axis, d in enumerate(shape))
    gears = ", instead of batch gears," if batch_gears else ""
    return (
        f"input {name!r} is {format_shape(shape)}: {which} no size, and ATC compiles only the batch axis as "
        f"batch gears. Give a size (each <size> a number) with {spelling.give('input_shape', f'{name}:{fixed}')}, "
        f"or{gears} compile the -1 axes as gears with {spelling.give('dynamic_dims', 'v,v,...;v,v,...')} (one value "
        f"per -1 axis of {spelling.flag('input_shape')}, in its order; at least two gears)"
    )


def _batch_axis(
    name: str, shape: tuple[int, ...], gears: tuple[int, ...], notes: list[str], spelling: Spelling
) -> tuple[int, ...]:
    if not shape:
        raise ConfigError(  # option_utils.cc:317-322 (E10012)
            f"input {name!r} is a scalar; ATC refuses --dynamic_batch_size with a scalar input"
        )
    if len(gears) == 1:
        if shape[0] not in (-1, gears[0]):
            raise ConfigError(
                f"input {name!r} has a fixed batch {shape[0]} ({format_shape(shape)}); it conflicts "
                f"with the batch gear {gears[0]}"
            )
        return (gears[0],) + shape[1:]
    if gears:
        if shape[0] != -1:
            # ATC compiles the inputs whose axis 0 is -1 as batch gears and keeps a fixed input as it is
            # (option_utils.cc:324-326; multi_batch_clone_pass.cc:1124-1127)
            notes.append(
                f"input {name!r} {format_shape(shape)} is fixed: ATC keeps it as it is in every batch gear, "
                "and it is served as one value per request (like --unbatched-inputs)"
            )
        return shape
    if shape[0] == -1:
        fixed = f"a fixed size with {spelling.give('input_shape', f'{name}:1,...')}"
        if spelling.where:
            raise ConfigError(
                f"input {name!r} has a dynamic batch axis ({format_shape(shape)}): set max_batch_size in the config "
                f"(the batch gears follow it), or give {fixed}"
            )
        raise ConfigError(
            f"input {name!r} has a dynamic batch axis ({format_shape(shape)}): give --batch-gears "
            f"(e.g. 1,2,4,8), --config with max_batch_size, or {fixed}"
        )
    return shape


def _input_format(request: AtcRequest, shapes: Mapping[str, tuple[int, ...]]) -> str:
    if request.input_format:
        if request.input_format not in INPUT_FORMATS:
            raise ConfigError(
                f"{request.spelling.flag('input_format')} {request.input_format!r}: accepted {', '.join(INPUT_FORMATS)}"
            )
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


def _source(config: ConfigFacts | None) -> str:
    return config.source if config is not None else ""


def _output(request: AtcRequest, notes: list[str]) -> str:
    output = request.output if request.output is not None else str(Path(request.model).with_suffix(""))
    if output.endswith(".om"):
        output = output[: -len(".om")]
        notes.append(f"the .om suffix is dropped from the output path: ATC appends it ({output}.om)")
    return output


def framework_of(model: Path) -> str:
    """ATC's --framework for a source model file, by its suffix; ConfigError for any other."""
    framework = FRAMEWORKS.get(Path(model).suffix.lower())
    if framework is None:
        raise ConfigError(
            f"{model}: ATC compiles an ONNX (.onnx, --framework=5) or TensorFlow (.pb, --framework=3) model here"
        )
    return framework


def build_atc_command(request: AtcRequest, inputs: Sequence[TensorSpec]) -> AtcCommand:
    """The ATC command for ``request``, whose model takes ``inputs``; ConfigError for anything
    missing or contradictory."""
    if not _SOC.match(request.soc_version or ""):
        raise ConfigError(
            f"--soc-version {request.soc_version!r}: expected a name such as Ascend310P3 "
            "(on the target, `npu-smi info` shows it in the Name column, without the Ascend prefix)"
        )
    framework_of(request.model)
    config = request.facts
    notes: list[str] = []
    aipp = _aipp_configs(request, inputs)
    if request.shape_ranges:
        return _range_command(request, inputs, config, aipp, notes)
    if request.dynamic_dims:
        return _dims_command(request, inputs, config, aipp, notes)
    gears = _gears(request, config, notes)
    if len(gears) > MAX_GEARS:
        raise ConfigError(f"{len(gears)} batch gears; ATC accepts at most {MAX_GEARS}")
    if len(gears) == 1:
        notes.append(
            f"one batch gear: compiled as a fixed batch of {gears[0]} (ATC --dynamic_batch_size needs at "
            "least two gears)"
        )
    shapes = _input_shapes(request, inputs, config, gears, notes, aipp)
    arguments = _common_arguments(request, shapes, notes)
    if len(gears) > 1:
        arguments.append(f"--dynamic_batch_size={','.join(map(str, gears))}")
    arguments += _aipp_arguments(request, aipp, shapes, arguments)
    arguments += _precision(request.precision)
    return AtcCommand(tuple(arguments) + request.extra_flags, tuple(notes))


def _common_arguments(request: AtcRequest, shapes: Mapping[str, tuple[int, ...]], notes: list[str]) -> list[str]:
    """The arguments every command starts with; --input_shape gives an input of ``shape_ranges`` its ranges."""
    framework = framework_of(request.model)
    # TensorFlow models take ATC's own default layout (NHWC) unless the user names one
    layout = [] if framework == FRAMEWORKS[".pb"] and not request.input_format else [_input_format(request, shapes)]
    return [
        "atc",
        f"--model={request.model}",
        f"--framework={framework}",
        f"--output={_output(request, notes)}",
        f"--soc_version={request.soc_version}",
        *(f"--input_format={f}" for f in layout),
        "--input_shape=" + ";".join(f"{name}:{_shape_text(request, name, shape)}" for name, shape in shapes.items()),
    ]


def _shape_text(request: AtcRequest, name: str, shape: tuple[int, ...]) -> str:
    """``shape`` in --input_shape's spelling: a range where ``request`` gives one, else the size."""
    ranges = request.shape_ranges.get(name)
    if ranges is None:
        return ",".join(map(str, shape))
    return atcflags.format_dims(tuple(d if d != -1 else r if r[0] != r[1] else r[0] for d, r in zip(shape, ranges)))


# ----- shape ranges


def _range_command(
    request: AtcRequest,
    inputs: Sequence[TensorSpec],
    config: ConfigFacts | None,
    aipp: Mapping[str, AippConfig],
    notes: list[str],
) -> AtcCommand:
    """The command for --input_shape with ranges: one dynamic-shape model, no gears."""
    _check_ranges(request, aipp)
    ranged = _ranged_inputs(request, inputs, config)
    batch = _check_range_batch(request, ranged, config)
    listed = "; ".join(f"{name} {ranges_text(ranges)}" for name, (_, ranges) in ranged.items())
    served = f", batching along axis 0 up to {batch.limit or 'any size'}" if batch.kind == "dynamic" else ""
    notes.append(f"shape ranges: one dynamic-shape model (no gears) taking {listed}{served}")
    shapes = {name: ranged[name][0] for name in request.input_shapes}
    arguments = _common_arguments(request, shapes, notes)
    arguments += _precision(request.precision)
    return AtcCommand(tuple(arguments) + request.extra_flags, tuple(notes))


def _check_ranges(request: AtcRequest, aipp: Mapping[str, AippConfig]) -> None:
    """What ATC refuses beside shape ranges: gears of any kind (E10040, "--input_shape cannot have
    '~' ... when user set --dynamic_batch_size, --dynamic_image_size or --dynamic_dims",
    option_utils.cc:752-760; --dynamic_batch_size.md:25); AIPP beside ranges is not built here."""
    sp = request.spelling
    given = sp.give("input_shape", "...") if sp.where else f"{sp.flag('input_shape')} with a~b"
    gears = (
        sp.flag("dynamic_dims")
        if request.dynamic_dims
        else "--batch-gears"
        if request.batch_gears and not sp.where
        else ""
    )
    if gears:
        raise ConfigError(
            f"{sp.where + ': ' if sp.where else ''}{sp.flag('input_shape')} has shape ranges (a~b) and {gears} gives "
            "gears: ATC refuses ranges together "
            "with --dynamic_batch_size, --dynamic_image_size or --dynamic_dims (E10040); give ranges or gears"
        )
    if aipp:
        raise ConfigError(
            f"{sp.flag('insert_op_conf')} with shape ranges in {given}: compiling AIPP onto a shape-range model is "
            "not built here; compile it with atc by hand (or ge-triton sim-compile) and serve the .om"
        )


def _ranged_inputs(
    request: AtcRequest, inputs: Sequence[TensorSpec], config: ConfigFacts | None
) -> dict[str, tuple[tuple[int, ...], tuple[tuple[int, int], ...]]]:
    """Each input's shape (-1 on its range axes) and ranges, the model's and the config's sizes merged
    in; ConfigError for a range that excludes the model's own size or a dynamic input left unnamed."""
    _check_names(request, inputs)
    sp = request.spelling
    from_config = _config_shapes(config, inputs)
    found = {}
    for tensor in inputs:
        shape = tensor.shape
        if tensor.name in from_config and len(from_config[tensor.name]) == len(shape):
            shape = tuple(have if have != -1 else want for have, want in zip(shape, from_config[tensor.name]))
        if tensor.name not in request.shape_ranges:
            if -1 in shape:
                raise ConfigError(
                    f"input {tensor.name!r} is {format_shape(shape)}: with shape ranges every input with -1 axes must "
                    f'be named in {sp.flag("input_shape")}; add "{tensor.name}:..." with a size or a range (a~b) on '
                    "each axis"
                )
            found[tensor.name] = (shape, tuple((d, d) for d in shape))
            continue
        ranges = request.shape_ranges[tensor.name]
        merged = _merge(tensor, tensor.shape, tuple(request.input_shapes[tensor.name]), sp.flag("input_shape"))
        for axis, (have, (low, high)) in enumerate(zip(tensor.shape, ranges)):
            if have != -1 and (low, high) not in ((have, have), (0, UNBOUNDED)):  # -1 (0~) keeps the model's size
                raise ConfigError(
                    f"{sp.flag('input_shape')} gives input {tensor.name!r} the range {low}~{high} on axis {axis}, "
                    f"which the model fixes at {have} ({format_shape(tensor.shape)})"
                )
        fixed = tuple(have if have != -1 else (low if low == high else -1) for have, (low, high) in zip(merged, ranges))
        found[tensor.name] = (fixed, tuple((d, d) if d != -1 else r for d, r in zip(fixed, ranges)))
    return found


def _check_range_batch(
    request: AtcRequest,
    ranged: Mapping[str, tuple[tuple[int, ...], tuple[tuple[int, int], ...]]],
    config: ConfigFacts | None,
) -> BatchSupport:
    """The batching of the range model; ConfigError when the config batches (max_batch_size) beyond
    what the ranges of axis 0 take: with ranges ATC builds no batch gears (E10040)."""
    batch = range_batch([ranges for _, ranges in ranged.values()], [(-1,)])
    max_batch = config.max_batch_size if config is not None else 0
    if max_batch > 0 and (batch.kind != "dynamic" or (batch.limit is not None and batch.limit < max_batch)):
        sp = request.spelling
        axes = ", ".join(f"{name} {ranges_text(ranges[:1])}" for name, (_, ranges) in ranged.items())
        flag = sp.flag("input_shape") + (f" in {sp.where}" if sp.where else "")
        raise ConfigError(
            f"{config.source if config else ''}: max_batch_size {max_batch} batches requests along axis 0, but the "
            f"shape ranges of {flag} give axis 0 {axes}; with ranges ATC builds no batch gears (E10040): give every "
            f"input the range 1~{max_batch} (or more) on axis 0, or set max_batch_size 0"
        )
    return batch


# ----- dynamic dims


def _dims_command(
    request: AtcRequest,
    inputs: Sequence[TensorSpec],
    config: ConfigFacts | None,
    aipp: Mapping[str, AippConfig],
    notes: list[str],
) -> AtcCommand:
    """The command for --dynamic-dims: --input_shape in the user's order, then the checked gears."""
    if request.batch_gears:
        raise ConfigError(
            "--dynamic-dims and --batch-gears are mutually exclusive (ATC refuses --dynamic_dims with "
            "--dynamic_batch_size); put the batch axis into the dims gears as a -1 of --input-shape"
        )
    if aipp:
        sp = request.spelling
        raise ConfigError(
            f"{sp.flag('dynamic_dims')} cannot be combined with {sp.flag('insert_op_conf')}: ATC refuses "
            "--dynamic_dims with AIPP "
            "(--dynamic_dims.md; multi_batch_options.cc)"
        )
    shapes = _dims_shapes(request, inputs, config, notes)
    _check_dims(request.dynamic_dims, shapes, request.spelling)
    for gear in request.dynamic_dims:
        values = iter(gear)
        expanded = ", ".join(
            f"{name} {format_shape(tuple(next(values) if d == -1 else d for d in shape))}"
            for name, shape in shapes.items()
        )
        notes.append(f"dims gear {','.join(map(str, gear))}: {expanded}")
    arguments = _common_arguments(request, shapes, notes)
    arguments.append("--dynamic_dims=" + ";".join(",".join(map(str, g)) for g in request.dynamic_dims))
    arguments += _precision(request.precision)
    return AtcCommand(tuple(arguments) + request.extra_flags, tuple(notes))


def _dims_shapes(
    request: AtcRequest, inputs: Sequence[TensorSpec], config: ConfigFacts | None, notes: list[str]
) -> dict[str, tuple[int, ...]]:
    """The inputs named in --input-shape, in its order, with the model's and the config's sizes merged in."""
    _check_names(request, inputs)
    sp = request.spelling
    from_config = _config_shapes(config, inputs)
    merged: dict[str, tuple[int, ...]] = {}
    for tensor in inputs:
        shape = tensor.shape
        if tensor.name in from_config:
            shape = _merge(tensor, shape, from_config[tensor.name], _source(config))
        given = request.input_shapes.get(tensor.name)
        if given is not None:
            fixed = [a for a, (have, want) in enumerate(zip(shape, given)) if want == -1 and have != -1]
            if len(given) == len(shape) and fixed:
                raise ConfigError(
                    f"{sp.flag('input_shape')} gives input {tensor.name!r} -1 on axis {fixed[0]}, which the model "
                    f"fixes at {shape[fixed[0]]} ({format_shape(shape)}); only an axis without a size can be a "
                    f"{sp.flag('dynamic_dims')} axis"
                )
            shape = _merge(tensor, shape, tuple(given), sp.flag("input_shape"))
        merged[tensor.name] = shape
    unnamed = [t.name for t in inputs if t.name not in request.input_shapes and -1 in merged[t.name]]
    if unnamed:
        name = unnamed[0]
        raise ConfigError(
            f"input {name!r} is {format_shape(merged[name])}: with {sp.flag('dynamic_dims')} every input with -1 "
            f"axes must be named in {sp.flag('input_shape')} (ATC: 'All dynamic nodes must be set in --input_shape'); "
            "add "
            f'"{name}:..." with a size or -1 on each axis, at the place in the order you want'
        )
    static = [t.name for t in inputs if t.name not in request.input_shapes]
    if static:
        notes.append(
            f"inputs {', '.join(static)} are not in {sp.flag('input_shape')}: ATC keeps their model shapes and "
            "they take no part in the dims gears"
        )
    return {name: merged[name] for name in request.input_shapes}


def _check_dims(gears: tuple[tuple[int, ...], ...], shapes: Mapping[str, tuple[int, ...]], spelling: Spelling) -> None:
    """ATC's checks of --dynamic_dims (multi_batch_options.cc:477-500, 613-655)."""
    listed = ";".join(",".join(map(str, g)) for g in gears)
    dims, shape = spelling.flag("dynamic_dims"), spelling.flag("input_shape")
    per_input = {name: shape.count(-1) for name, shape in shapes.items() if -1 in shape}
    slots = sum(per_input.values())
    if not slots:
        raise ConfigError(f"{dims} {listed}: {shape} has no -1 axis; mark the axes the gears set with -1")
    if not MIN_DIMS_GEARS <= len(gears) <= MAX_GEARS:
        raise ConfigError(f"{dims} {listed}: {len(gears)} gear(s); ATC takes {MIN_DIMS_GEARS} to {MAX_GEARS}")
    layout = ", ".join(f"{name} {count}" for name, count in per_input.items())
    for gear in gears:
        if len(gear) != slots:
            raise ConfigError(
                f"{dims} gear {','.join(map(str, gear))} has {len(gear)} value(s); {shape} has {slots} "
                f"-1 axes ({layout}, in that order), and each gear gives one value per -1 axis"
            )
        if any(v < 1 for v in gear):
            raise ConfigError(f"{dims} gear {','.join(map(str, gear))}: every value must be >= 1")
    repeated = [g for i, g in enumerate(gears) if g in gears[:i]]
    if repeated:
        raise ConfigError(f"{dims} {listed}: gear {','.join(map(str, repeated[0]))} is given twice")


# ----- AIPP


def _aipp_configs(request: AtcRequest, inputs: Sequence[TensorSpec]) -> dict[str, AippConfig]:
    """The --insert-op-conf configs by input name (parsed in ATC's syntax); ConfigError on a bad one."""
    if request.insert_op_conf is None:
        return {}
    path = Path(request.insert_op_conf)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{request.spelling.flag('insert_op_conf')} {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    found = {}
    for config in parse_aipp_config(text, str(path)):
        if config.related_input_rank >= len(inputs):
            raise ConfigError(
                f"{path}: aipp_op related_input_rank {config.related_input_rank}, but the model has "
                f"{len(inputs)} input(s) ({', '.join(t.name for t in inputs)})"
            )
        found[inputs[config.related_input_rank].name] = config
    return found


def _aipp_arguments(
    request: AtcRequest,
    aipp: Mapping[str, AippConfig],
    shapes: Mapping[str, tuple[int, ...]],
    arguments: list[str],
) -> list[str]:
    """``--insert_op_conf`` after checking each config against its NCHW input (AippConfig.problems)."""
    if not aipp:
        return []
    sp = request.spelling
    if "--input_format=NCHW" not in arguments:
        raise ConfigError(
            f"{sp.flag('insert_op_conf')}: ATC applies AIPP to a 4-D NCHW (or NHWC) input, and the --input_format "
            f"here is not NCHW; give {sp.give('input_format', 'NCHW')}"
        )
    for name, config in aipp.items():
        shape = shapes.get(name, ())
        if len(shape) != 4:
            raise ConfigError(
                f"{sp.flag('insert_op_conf')}: input {name!r} is {format_shape(shape)}; AIPP needs a 4-D input"
            )
        if config.aipp_mode is AippMode.STATIC:
            n, c, h, w = shape
            problems = config.problems((n, c, h, w))
            if problems:
                raise ConfigError(f"{sp.flag('insert_op_conf')}: the AIPP of input {name!r}: " + "; ".join(problems))
    return [f"--insert_op_conf={request.insert_op_conf}"]


# ----- the model ATC builds


def compiled_spec(source: ModelSpec, request: AtcRequest) -> ModelSpec:
    """The inputs, outputs and gears of the .om the command of ``request`` builds from ``source``
    (the ONNX model's own spec), as far as its flags tell, without running ATC: ``--input_shape``
    and the config's dims fill the input shapes (where the config contradicts the model, the
    model's size stays: the comparison with the config reports it); ``--dynamic_dims`` makes dims gears (the -1 axes
    of the inputs ``--input_shape`` names, in its order); otherwise a -1 axis 0 becomes the batch
    gears the config's ``max_batch_size`` implies (``config_gears``; one gear is a fixed batch), or,
    with none yet (GEModel's auto-complete runs before it is known), a batch left to plan
    (``BatchSupport("dynamic")``); an input with ``--insert_op_conf`` becomes the UINT8 NHWC image
    its AIPP takes (static AIPP: the source image size of the AIPP config, ATC's Aipp InferShape,
    insert_aipp_op_util.cc 672-709; dynamic AIPP: [n,-1,-1,-1]). Outputs are the source's, -1 where
    the graph leaves an axis open. ConfigError for what the builder refuses in the same flags."""
    inputs = source.inputs
    aipp = _aipp_configs(request, inputs)
    _check_names(request, inputs)
    config = request.facts
    if request.shape_ranges:
        return _range_spec(source, request, aipp)
    from_config = _config_shapes(config, inputs, aipp)
    shapes: dict[str, tuple[int, ...]] = {}
    for tensor in inputs:
        shape = tensor.shape
        if tensor.name in request.input_shapes:
            shape = _merge(
                tensor, shape, tuple(request.input_shapes[tensor.name]), request.spelling.flag("input_shape")
            )
        declared = from_config.get(tensor.name, ())
        if len(declared) == len(shape):  # the config's sizes fill the open axes; a contradiction is compare_io's
            shape = tuple(want if have == -1 else have for have, want in zip(shape, declared))
        shapes[tensor.name] = shape
    batch, shape_gears = _compiled_gears(request, shapes, source.batch)
    outputs = source.outputs
    if batch.kind == "static" and not shape_gears:  # one batch gear: compiled as a fixed batch

        def fixed(shape: tuple[int, ...]) -> tuple[int, ...]:
            return (batch.sizes[0],) + shape[1:] if shape and shape[0] == -1 else shape

        shapes = {name: fixed(shape) for name, shape in shapes.items()}
        outputs = tuple(replace(t, shape=fixed(t.shape)) for t in outputs)
    layout = request.input_format or ("NCHW" if {len(s) for s in shapes.values()} == {4} else "ND")
    compiled = tuple(
        _aipp_image(tensor, shapes[tensor.name], layout, aipp[tensor.name], request.spelling)
        if tensor.name in aipp
        else replace(tensor, shape=shapes[tensor.name], dim_names=(), ranges=())
        for tensor in inputs
    )
    return ModelSpec(
        inputs=compiled,
        outputs=tuple(replace(t, dim_names=()) for t in outputs),
        batch=batch,
        shape_gears=shape_gears,
        gear_kind="dims" if shape_gears else "",
        source=source.source,
        facts=dict(source.facts),
    )


def _range_spec(source: ModelSpec, request: AtcRequest, aipp: Mapping[str, AippConfig]) -> ModelSpec:
    """The shape-range model of ``request``: -1 on each range axis with the range beside it (as
    ``acl.mdl.get_input_dims_range`` reports it), batching along axis 0 where the ranges allow."""
    _check_ranges(request, aipp)
    ranged = _ranged_inputs(request, source.inputs, request.facts)
    _check_range_batch(request, ranged, request.facts)
    inputs = tuple(replace(t, shape=ranged[t.name][0], ranges=ranged[t.name][1], dim_names=()) for t in source.inputs)
    outputs = tuple(replace(t, dim_names=()) for t in source.outputs)
    return ModelSpec(
        inputs=inputs,
        outputs=outputs,
        batch=range_batch([t.ranges for t in inputs], [t.shape for t in outputs]),
        source=source.source,
        facts=dict(source.facts),
    )


def _compiled_gears(
    request: AtcRequest, shapes: Mapping[str, tuple[int, ...]], source: BatchSupport
) -> tuple[BatchSupport, tuple[ShapeGear, ...]]:
    """The batch support and dims gears of the compiled model (a source without a batch axis,
    e.g. with a scalar input, has none: ATC refuses batch gears there)."""
    if request.dynamic_dims:
        order = [name for name in request.input_shapes if name in shapes]
        _check_dims(request.dynamic_dims, {name: shapes[name] for name in order}, request.spelling)
        dims_gears = []
        for gear in request.dynamic_dims:
            values = iter(gear)
            filled = dict(shapes) | {
                name: tuple(next(values, -1) if d == -1 else d for d in shapes[name]) for name in order
            }
            dims_gears.append(ShapeGear(filled, "dims " + ",".join(map(str, gear))))
        return _fixed_batch([shape for g in dims_gears for shape in g.shapes.values()]), tuple(dims_gears)
    if not any(shape and shape[0] == -1 for shape in shapes.values()):
        return _fixed_batch(list(shapes.values())), ()
    if source.kind == "none":
        return source, ()
    gears = config_gears(request.facts) if request.facts is not None else ()
    if not gears:
        return BatchSupport("dynamic"), ()
    return (BatchSupport("static", gears) if len(gears) == 1 else BatchSupport("gears", gears)), ()


def _fixed_batch(shapes: list[tuple[int, ...]]) -> BatchSupport:
    """Static when every shape has the same fixed axis 0, else none."""
    firsts = {shape[0] if shape else -1 for shape in shapes}
    return BatchSupport("static", (firsts.pop(),)) if len(firsts) == 1 and -1 not in firsts else BatchSupport("none")


def _aipp_image(
    tensor: TensorSpec, shape: tuple[int, ...], layout: str, config: AippConfig, spelling: Spelling
) -> TensorSpec:
    """The UINT8 NHWC image input ATC puts in front of a 4-D network input with AIPP."""
    if len(shape) != 4:
        raise ConfigError(
            f"{spelling.flag('insert_op_conf')}: input {tensor.name!r} is {format_shape(shape)}; AIPP needs a 4-D input"
        )
    n, _, h, w = shape if layout != "NHWC" else (shape[0], shape[3], shape[1], shape[2])
    if config.aipp_mode is AippMode.DYNAMIC:
        dims: tuple[int, ...] = (n, -1, -1, -1)
    else:
        image_format = config.input_format or AippInputFormat.RGB888_U8
        dims = image_format.v2_shape(n, *config.source_size(h, w))
    return TensorSpec(tensor.name, "UINT8", dims, "NHWC", native_type="DT_UINT8", preprocessing=config.preprocessing())
