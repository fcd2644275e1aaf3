"""AIPP (ATC's ``--insert_op_conf``): the configuration, ATC's ``aipp.cfg`` syntax, and its rules.

An AIPP op runs on the device in front of a model input: the client sends an image in a pixel
format (UINT8, NHWC), the AIPP crops it, converts its colour space, normalises it and pads it into
the model's own input. ``AippConfig`` holds one ``aipp_op { ... }`` block with the field names of
``domi.AippOpParams`` (hicann/ge ``graph_metadef/proto/insert_op.proto:15-137``); the engine, the
simulator, the offline reader and sim-compile all share it.

Sources (see docs/fidelity.md for the rule-by-rule table): the ATC template
``docs/zh/user_guides/atc_tools/AIPP/config_file_template.md`` (defaults, ranges, processing
order), the colour-space tables ``AIPP/CSC_config.md``, the default matrices in
``compiler/graph/preprocess/insert_op/aipp_op.cc:48-72, 776-817`` and the dims the runtime
reports for an AIPP input (``docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDims.md``,
``aclmdlGetInputDimsV2.md``), all in hicann/ge.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import IntEnum
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Choice
from ge_python_backend.specs import DevicePreprocessing

#: The extra model input ATC adds for dynamic AIPP (hicann/ge inc/external/acl/acl_mdl.h:40).
DYNAMIC_AIPP_INPUT = "ascend_dynamic_aipp_data"
#: Bytes of the dynamic-AIPP parameter block: 64-byte head + 96 bytes per batch entry
#: (hicann/ge inc/graph_metadef/common/dynamic_aipp.h:20-97; aclmdlGetAippDataSize is 96 x batch + 64:
#: api/acl/acl_model/model/acl_aipp_om2.cpp 372-382).
DYNAMIC_AIPP_HEAD_BYTES = 64
DYNAMIC_AIPP_BATCH_BYTES = 96


class AippMode(Choice):
    STATIC = "static"
    DYNAMIC = "dynamic"


class AippInputFormat(IntEnum):
    """``aclAippInputFormat`` / ``AippOpParams.InputFormat`` (acl_mdl.h:60-76, insert_op.proto)."""

    YUV420SP_U8 = 1
    XRGB8888_U8 = 2
    RGB888_U8 = 3
    YUV400_U8 = 4
    NC1HWC0DI_FP16 = 5
    NC1HWC0DI_S8 = 6
    ARGB8888_U8 = 7
    YUYV_U8 = 8
    YUV422SP_U8 = 9
    AYUV444_U8 = 10
    RAW10 = 11
    RAW12 = 12
    RAW16 = 13
    RAW24 = 14

    @property
    def yuv(self) -> bool:
        """A YUV format: CSC subtracts ``input_bias`` (YUV -> RGB); other formats add ``output_bias``."""
        return self in (
            AippInputFormat.YUV420SP_U8,
            AippInputFormat.YUV400_U8,
            AippInputFormat.YUYV_U8,
            AippInputFormat.YUV422SP_U8,
            AippInputFormat.AYUV444_U8,
        )

    def v2_shape(self, batch: int, height: int, width: int) -> tuple[int, int, int, int]:
        """The buffer's dims as ``get_input_dims_v2`` reports them (NHWC; the product is the byte size):
        YUV420SP [n, 1.5h, w, 1], YUV422SP [n, 2h, w, 1], YUYV [n, h, w, 2], XRGB/ARGB/AYUV [n, h, w, 4],
        RGB888 [n, h, w, 3], YUV400 [n, h, w, 1] (aclmdlGetInputDimsV2.md 31-61)."""
        if self is AippInputFormat.YUV420SP_U8:
            return (batch, height * 3 // 2, width, 1)
        if self is AippInputFormat.YUV422SP_U8:
            return (batch, height * 2, width, 1)
        return (batch, height, width, self.pixel_channels)

    def v1_shape(self, batch: int, height: int, width: int) -> tuple[int, int, int, int]:
        """The image's dims as ``get_input_dims`` (V1) reports them: [n, h, w, C] with C = 4 for
        XRGB/ARGB/AYUV, 1 for YUV400 and RAW, else 3 — also for YUV420SP, whose V1 product is
        not its size (aclmdlGetInputDims.md 31-61; GetChannel in the Aipp op's InferShape)."""
        channels = {
            AippInputFormat.XRGB8888_U8: 4,
            AippInputFormat.ARGB8888_U8: 4,
            AippInputFormat.AYUV444_U8: 4,
            AippInputFormat.YUV400_U8: 1,
        }.get(self, 1 if self.name.startswith("RAW") else 3)
        return (batch, height, width, channels)

    @property
    def pixel_channels(self) -> int:
        """Bytes per pixel of a packed format (C of its V2 dims)."""
        return {
            AippInputFormat.XRGB8888_U8: 4,
            AippInputFormat.ARGB8888_U8: 4,
            AippInputFormat.AYUV444_U8: 4,
            AippInputFormat.RGB888_U8: 3,
            AippInputFormat.YUYV_U8: 2,
        }.get(self, 1)

    def byte_size(self, batch: int, height: int, width: int) -> int:
        return math.prod(self.v2_shape(batch, height, width))


#: The formats ATC's template accepts for static AIPP, and dynamic AIPP on every device family
#: (config_file_template.md: input_format; aipp_param_check.cpp for dynamic AIPP).
SUPPORTED_FORMATS = (
    AippInputFormat.YUV420SP_U8,
    AippInputFormat.XRGB8888_U8,
    AippInputFormat.RGB888_U8,
    AippInputFormat.YUV400_U8,
)

#: ATC's default CSC matrix when csc_switch is on and none is given (aipp_op.cc:48-72, 776-817):
#: YUV420SP_U8 -> BGR (BT-601 narrow), any other input -> YUV (BT-601 narrow).
DEFAULT_MATRIX_YUV = ((298, 516, 0), (298, -100, -208), (298, 0, 409))
DEFAULT_MATRIX_RGB = ((66, 129, 25), (-38, -74, 112), (112, -94, -18))
DEFAULT_BIAS = (16, 128, 128)

_MATRIX_FIELDS = tuple(f"matrix_r{r}c{c}" for r in range(3) for c in range(3))


@dataclass(frozen=True)
class AippConfig:
    """One ``aipp_op`` block. Sizes of 0 mean "the model's own W/H" where ATC allows it."""

    aipp_mode: AippMode = AippMode.STATIC
    related_input_rank: int = 0
    input_format: AippInputFormat | None = None
    src_image_size_w: int = 0
    src_image_size_h: int = 0
    crop: bool = False
    load_start_pos_w: int = 0
    load_start_pos_h: int = 0
    crop_size_w: int = 0
    crop_size_h: int = 0
    padding: bool = False
    left_padding_size: int = 0
    right_padding_size: int = 0
    top_padding_size: int = 0
    bottom_padding_size: int = 0
    padding_value: float = 0.0
    csc_switch: bool = False
    rbuv_swap_switch: bool = False
    ax_swap_switch: bool = False
    matrix: tuple[tuple[int, int, int], ...] = ()
    input_bias: tuple[int, int, int] = DEFAULT_BIAS
    output_bias: tuple[int, int, int] = DEFAULT_BIAS
    mean_chn: tuple[int, int, int, int] = (0, 0, 0, 0)
    min_chn: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    var_reci_chn: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    #: dynamic AIPP: bytes the image buffer holds (N x the largest image)
    max_src_image_size: int = 0
    #: the matrix entries (0..8, row by row) that are ATC's default for ``input_format``, not given:
    #: a change of format changes them (SetCscDefaultValue fills each missing entry by the format,
    #: aipp_op.cc:776-798); not compared, not stored in a sim-OM
    matrix_defaulted: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.csc_switch and not self.matrix and self.input_format is not None:
            object.__setattr__(self, "matrix", default_matrix(self.input_format))
            object.__setattr__(self, "matrix_defaulted", tuple(range(9)))

    # -- geometry ------------------------------------------------------------------------------

    def source_size(self, model_h: int, model_w: int) -> tuple[int, int]:
        """(h, w) of the image the client sends: src_image_size, or the model's H/W when 0."""
        return (self.src_image_size_h or model_h, self.src_image_size_w or model_w)

    def crop_size(self, model_h: int, model_w: int) -> tuple[int, int]:
        """(h, w) after the crop: crop_size (the model's H/W when 0), or the whole source."""
        if self.crop:
            return (self.crop_size_h or model_h, self.crop_size_w or model_w)
        return self.source_size(model_h, model_w)

    def output_size(self, model_h: int, model_w: int) -> tuple[int, int]:
        """(h, w) the AIPP hands the model: the crop plus the paddings."""
        h, w = self.crop_size(model_h, model_w)
        if self.padding:
            h += self.top_padding_size + self.bottom_padding_size
            w += self.left_padding_size + self.right_padding_size
        return (h, w)

    @property
    def normalizes(self) -> bool:
        """Mean, min or variance change the pixels (only for a float model input)."""
        return any(self.mean_chn) or any(self.min_chn) or any(v != 1.0 for v in self.var_reci_chn)

    def steps(self) -> tuple[str, ...]:
        """What this AIPP does, in the hardware's order (config_file_template.md: swap > crop > CSC >
        mean/normalise > padding), for reports and logs."""
        found = []
        if self.rbuv_swap_switch or self.ax_swap_switch:
            found.append("channel swap")
        if self.crop:
            found.append(
                f"crop {self.crop_size_w}x{self.crop_size_h} at ({self.load_start_pos_w},{self.load_start_pos_h})"
            )
        if self.csc_switch:
            found.append("colour-space conversion")
        if self.normalizes:
            found.append(f"mean {list(self.mean_chn)}, min {list(self.min_chn)}, var_reci {list(self.var_reci_chn)}")
        if self.padding:
            found.append("padding")
        return tuple(found)

    def describe(self) -> str:
        fmt = self.input_format.name if self.input_format is not None else "per request"
        if self.aipp_mode is AippMode.DYNAMIC:
            return f"dynamic AIPP on input {self.related_input_rank} (max {self.max_src_image_size} bytes)"
        size = f"{self.src_image_size_w}x{self.src_image_size_h}" if self.src_image_size_w else "model size"
        return f"static AIPP {fmt} {size}: " + (", ".join(self.steps()) or "no transform")

    # -- rules -------------------------------------------------------------------------------

    def field_problems(self) -> list[str]:
        """Values outside the ranges of ATC's template (config_file_template.md 122-188, 265-292), NaN
        included: checked for every AIPP set, whatever the model input (AippParamsCheck runs for every
        set_input_aipp, aipp_param_check.cpp:312-347; the setters refuse such values)."""
        return _field_problems(self)

    def problems(self, model_nchw: tuple[int, int, int, int], *, model_output: bool = True) -> list[str]:
        """Why this config cannot feed a model input of (N, C, H, W), per ATC's documented rules.
        ``model_output`` False leaves out the rules tying the AIPP's output to the model input's
        H, W and channels (set_input_aipp skips them for an input with shape ranges,
        acl_aipp.cpp:184-188)."""
        _, channels, model_h, model_w = model_nchw
        found = _field_problems(self)
        if self.aipp_mode is AippMode.DYNAMIC:
            if self.max_src_image_size <= 0:  # aipp_op.cc:741-744 (ValidateParams)
                found.append("max_src_image_size must be > 0 for dynamic AIPP")
            return found
        fmt = self.input_format
        if fmt is None:
            return found + ["input_format is required for static AIPP"]
        if fmt not in SUPPORTED_FORMATS:
            found.append(
                f"input_format {fmt.name} is not one ATC accepts: " + ", ".join(f.name for f in SUPPORTED_FORMATS)
            )
        if (self.crop or self.padding) and not (self.src_image_size_w and self.src_image_size_h):
            found.append("src_image_size_w/h must be set when crop or padding is on")
        src_h, src_w = self.source_size(model_h, model_w)
        if fmt is AippInputFormat.YUV420SP_U8 and (src_h % 2 or src_w % 2):
            found.append(f"YUV420SP_U8 images need an even width and height, got {src_w}x{src_h}")
        if self.crop:
            crop_h, crop_w = self.crop_size(model_h, model_w)
            if self.load_start_pos_w + crop_w > src_w or self.load_start_pos_h + crop_h > src_h:
                found.append(
                    f"the crop {crop_w}x{crop_h} at ({self.load_start_pos_w},{self.load_start_pos_h}) "
                    f"leaves the {src_w}x{src_h} image"
                )
            if fmt is AippInputFormat.YUV420SP_U8 and (self.load_start_pos_w % 2 or self.load_start_pos_h % 2):
                found.append("load_start_pos_w/h must be even for YUV420SP_U8")
        out_h, out_w = self.output_size(model_h, model_w)
        if model_output and (out_h, out_w) != (model_h, model_w):
            found.append(
                f"the AIPP output is {out_w}x{out_h} (crop and padding), the model input is "
                f"{model_w}x{model_h}: they must be equal"
            )
        if self.csc_switch and fmt is AippInputFormat.YUV400_U8:
            found.append("csc_switch cannot be on for YUV400_U8 (one channel)")
        if not model_output:
            return found
        # (inferred) no check in aipp_op.cc / insert_aipp_op_util.cc: the Aipp op's shape inference is
        # not in the mirrors; a 1-channel YUV400 feeds a C=1 network (typical_scenario_examples.md 3-13)
        produced = self.output_channels()
        if channels > produced:
            found.append(f"the model input has {channels} channels, the AIPP produces {produced} from {fmt.name}")
        return found

    def preprocessing(self) -> DevicePreprocessing:
        """What a model spec says about this AIPP (the pixel format only where it is compiled in)."""
        static = self.aipp_mode is AippMode.STATIC
        fmt = self.input_format
        return DevicePreprocessing(
            kind="aipp-static" if static else "aipp-dynamic",
            pixel_format=fmt.name if fmt is not None and static else "",
            height=self.src_image_size_h,
            width=self.src_image_size_w,
            steps=self.steps(),
            normalizes=self.normalizes,
        )

    def output_channels(self) -> int:
        """Channels the AIPP produces: 3 after CSC or from a 3/4-channel format, 1 from YUV400."""
        if self.input_format is AippInputFormat.YUV400_U8:
            return 1
        return 3

    # -- storage ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["matrix_defaulted"]
        data["aipp_mode"] = self.aipp_mode.value
        data["input_format"] = self.input_format.name if self.input_format is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AippConfig:
        values = dict(data)
        values["aipp_mode"] = AippMode(values["aipp_mode"])
        fmt = values.get("input_format")
        values["input_format"] = AippInputFormat[fmt] if fmt else None
        for name in ("matrix",):
            values[name] = tuple(tuple(int(v) for v in row) for row in values.get(name, ()))
        for name in ("input_bias", "output_bias", "mean_chn"):
            values[name] = tuple(int(v) for v in values[name])
        for name in ("min_chn", "var_reci_chn"):
            values[name] = tuple(float(v) for v in values[name])
        return cls(**values)


def default_matrix(fmt: AippInputFormat | None) -> tuple[tuple[int, int, int], ...]:
    """ATC's CSC matrix for ``fmt`` when the config gives none (aipp_op.cc:776-798)."""
    return DEFAULT_MATRIX_YUV if fmt is AippInputFormat.YUV420SP_U8 else DEFAULT_MATRIX_RGB


def _field_problems(config: AippConfig) -> list[str]:
    """Ranges from the ATC template (config_file_template.md 122-188, 265-292); ATC's ValidateParams
    itself checks only that sizes and positions are >= 0 (aipp_op.cc:749-770)."""
    found = []
    checks: list[tuple[str, float, float, float]] = [
        ("src_image_size_w", config.src_image_size_w, 0, 4096),
        ("src_image_size_h", config.src_image_size_h, 0, 4096),
        ("load_start_pos_w", config.load_start_pos_w, 0, 4095),
        ("load_start_pos_h", config.load_start_pos_h, 0, 4095),
        ("crop_size_w", config.crop_size_w, 0, 4096),
        ("crop_size_h", config.crop_size_h, 0, 4096),
    ]
    checks += [
        (f"{side}_padding_size", getattr(config, f"{side}_padding_size"), 0, 32)
        for side in ("left", "right", "top", "bottom")
    ]
    checks += [(f"mean_chn_{i}", v, 0, 255) for i, v in enumerate(config.mean_chn)]
    checks += [(f"min_chn_{i}", v, 0, 255) for i, v in enumerate(config.min_chn)]
    checks += [(f"var_reci_chn_{i}", v, -65504, 65504) for i, v in enumerate(config.var_reci_chn)]
    checks += [(f"input_bias_{i}", v, 0, 255) for i, v in enumerate(config.input_bias)]
    checks += [(f"output_bias_{i}", v, 0, 255) for i, v in enumerate(config.output_bias)]
    checks += [(name, v, -32677, 32676) for name, v in zip(_MATRIX_FIELDS, (v for row in config.matrix for v in row))]
    for name, value, low, high in checks:
        if not low <= value <= high:
            found.append(f"{name} is {value}; accepted {low}..{high}")
    if config.src_image_size_w == 1:
        found.append("src_image_size_w is 1; accepted 2..4096 or 0")
    return found


# -- ATC's aipp.cfg syntax ---------------------------------------------------------------------

#: Fields ATC documents as reserved (not supported); a config that turns one on is refused.
_RESERVED = {
    "resize": False,
    "support_rotation": False,
    "single_line_mode": False,
    "rotation_angle": 0,
    "resize_output_w": 0,
    "resize_output_h": 0,
    "cpadding_value": 0.0,
    "raw_rgbir_to_f16_n": 8,
}
_IGNORED = {"related_input_name"}  # Caffe only; related_input_rank names the input here
_SCALARS = {f.name for f in fields(AippConfig)} - {
    "matrix",
    "matrix_defaulted",
    "input_bias",
    "output_bias",
    "mean_chn",
    "min_chn",
    "var_reci_chn",
}
_VECTORS = {"input_bias": 3, "output_bias": 3, "mean_chn": 4, "min_chn": 4, "var_reci_chn": 4}
_TOKEN = re.compile(r'#[^\n]*|[{}:]|"(?:[^"\\\n]|\\.)*"|[^\s{}:#"]+|\s+')


def parse_aipp_config(text: str, origin: str = "aipp config") -> tuple[AippConfig, ...]:
    """Every ``aipp_op { ... }`` block of ATC's AIPP config file (prototxt), validated field by field.

    Unknown fields, values of the wrong type and reserved features that are switched on are
    errors naming the field, its line and what is accepted.
    """
    tokens = _Tokens(text, origin)
    blocks = []
    while not tokens.done():
        line, word = tokens.take()
        if word != "aipp_op":
            raise ConfigError(f"{origin}:{line}: expected 'aipp_op {{ ... }}', found {word!r}")
        tokens.expect("{")
        blocks.append(_block(tokens, origin, line))
    if not blocks:
        raise ConfigError(f"{origin}: holds no aipp_op block")
    ranks = [b.related_input_rank for b in blocks]
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"{origin}: two aipp_op blocks name the same related_input_rank {ranks}")
    return tuple(blocks)


class _Tokens:
    """Words, braces and colons of a prototxt text, with their line numbers (comments dropped)."""

    def __init__(self, text: str, origin: str) -> None:
        self.origin = origin
        self._items: list[tuple[int, str]] = []
        line = 1
        for match in _TOKEN.finditer(text):
            token = match.group(0)
            if not token.isspace() and not token.startswith("#"):
                self._items.append((line, token[1:-1] if token.startswith('"') else token))
            line += token.count("\n")
        self._next = 0
        if sum(len(m.group(0)) for m in _TOKEN.finditer(text)) != len(text):
            raise ConfigError(f"{origin}: holds characters that are not prototxt")

    def done(self) -> bool:
        return self._next >= len(self._items)

    def take(self) -> tuple[int, str]:
        if self.done():
            last = self._items[-1][0] if self._items else 1
            raise ConfigError(f"{self.origin}:{last}: the text ends inside an aipp_op block")
        item = self._items[self._next]
        self._next += 1
        return item

    def expect(self, token: str) -> None:
        line, found = self.take()
        if found != token:
            raise ConfigError(f"{self.origin}:{line}: expected {token!r}, found {found!r}")


def _block(tokens: _Tokens, origin: str, start_line: int) -> AippConfig:
    values: dict[str, Any] = {}
    vectors: dict[str, dict[int, Any]] = {}
    matrix: dict[str, int] = {}
    seen: set[str] = set()
    while True:
        line, key = tokens.take()
        if key == "}":
            return _config(values, vectors, matrix, origin, start_line)
        tokens.expect(":")
        _, raw = tokens.take()
        if key in seen:
            raise ConfigError(f"{origin}:{line}: field {key!r} is set twice (ATC refuses repeated values)")
        seen.add(key)
        where = f"{origin}:{line}: {key}"
        if key in _IGNORED:
            continue
        if key in _RESERVED:
            if _value(raw, type(_RESERVED[key]), where) != _RESERVED[key]:
                raise ConfigError(f"{where} is a reserved AIPP feature that CANN does not support")
            continue
        if key in _MATRIX_FIELDS:
            matrix[key] = _value(raw, int, where)
            continue
        vector = re.fullmatch(r"(input_bias|output_bias|mean_chn|min_chn|var_reci_chn)_(\d)", key)
        if vector and int(vector.group(2)) < _VECTORS[vector.group(1)]:
            kind_type = float if vector.group(1) in ("min_chn", "var_reci_chn") else int
            vectors.setdefault(vector.group(1), {})[int(vector.group(2))] = _value(raw, kind_type, where)
            continue
        if key not in _SCALARS:
            raise ConfigError(f"{where} is not an AIPP field ATC knows")
        values[key] = _scalar(key, raw, where)


def _scalar(key: str, raw: str, where: str) -> Any:
    if key == "aipp_mode":
        try:
            return AippMode(raw)
        except ValueError:
            raise ConfigError(f"{where} is {raw!r}; accepted: static, dynamic") from None
    if key == "input_format":
        try:
            return AippInputFormat[raw]
        except KeyError:
            raise ConfigError(f"{where} is {raw!r}; accepted: {', '.join(f.name for f in SUPPORTED_FORMATS)}") from None
    kind = {f.name: f.type for f in fields(AippConfig)}[key]
    return _value(raw, bool if "bool" in str(kind) else float if "float" in str(kind) else int, where)


def _value(raw: str, kind: type, where: str) -> Any:
    try:
        if kind is bool:
            if raw not in ("true", "false"):
                raise ValueError
            return raw == "true"
        if kind is int:
            return int(raw)
        return float(raw)
    except ValueError:
        accepted = "true or false" if kind is bool else "an integer" if kind is int else "a number"
        raise ConfigError(f"{where} is {raw!r}; accepted: {accepted}") from None


def _config(
    values: dict[str, Any], vectors: dict[str, dict[int, Any]], matrix: dict[str, int], origin: str, line: int
) -> AippConfig:
    defaults = AippConfig()
    for name, given in vectors.items():
        current = list(getattr(defaults, name))
        for index, value in given.items():
            current[index] = value
        values[name] = tuple(current)
    config = AippConfig(**values)
    if matrix:
        # the entries not given are ATC's default for the format (SetCscDefaultValue, aipp_op.cc:776-798)
        given = {_MATRIX_FIELDS.index(key): value for key, value in matrix.items()}
        config = replace(config, **_matrix_values(config.matrix, tuple(range(9)), config.input_format, given))
    if config.aipp_mode is AippMode.STATIC and config.input_format is None:
        raise ConfigError(f"{origin}:{line}: input_format is required in a static aipp_op")
    return config


@dataclass(frozen=True)
class AippOverrides:
    """Per-request dynamic-AIPP values: request parameters named like ``aipp_op`` fields."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def applied_to(self, base: AippConfig) -> AippConfig:
        return replace(base, **dict(self.values)) if self.values else base


#: Request parameters a client may send for dynamic AIPP, and how each is read.
REQUEST_FIELDS = (
    "input_format",
    "src_image_size_w",
    "src_image_size_h",
    "crop",
    "load_start_pos_w",
    "load_start_pos_h",
    "crop_size_w",
    "crop_size_h",
    "padding",
    "left_padding_size",
    "right_padding_size",
    "top_padding_size",
    "bottom_padding_size",
    "csc_switch",
    "rbuv_swap_switch",
    "ax_swap_switch",
    *_MATRIX_FIELDS,
    *(f"{name}_{i}" for name, count in _VECTORS.items() for i in range(count)),
)


def request_overrides(parameters: Mapping[str, Any], base: AippConfig) -> AippOverrides:
    """The AIPP fields a request's parameters set (other parameters are left to the hooks);
    ConfigError naming a bad value, or a parameter so close to a field's name that it is a misspelt
    one (silently ignoring ``mean_chan_0`` would run the request with another mean)."""
    values: dict[str, Any] = {}
    vectors: dict[str, list[Any]] = {}
    entries: dict[str, int] = {}
    for key, raw in parameters.items():
        if key not in REQUEST_FIELDS:
            close = difflib.get_close_matches(key, REQUEST_FIELDS, n=1, cutoff=0.8)
            if close:
                raise ConfigError(
                    f"request parameter {key!r} is not an aipp_op field (did you mean {close[0]!r}?); the fields a "
                    f"request may set: {', '.join(REQUEST_FIELDS)}"
                )
            continue
        text = str(raw).lower() if isinstance(raw, bool) else str(raw)
        where = f"request parameter {key}"
        if key in _MATRIX_FIELDS:
            entries[key] = _value(text, int, where)
            continue
        vector = re.fullmatch(r"(input_bias|output_bias|mean_chn|min_chn|var_reci_chn)_(\d)", key)
        if vector:
            name = vector.group(1)
            current = vectors.setdefault(name, list(getattr(base, name)))
            current[int(vector.group(2))] = _value(text, float if name in ("min_chn", "var_reci_chn") else int, where)
            continue
        values[key] = _scalar(key, text, where)
    values.update((name, tuple(v)) for name, v in vectors.items())
    fmt = values.get("input_format", base.input_format)
    if entries or (fmt is not base.input_format and base.matrix_defaulted):
        # matrix fields change the base's matrix; every entry neither the request nor the aipp_config
        # file gives is ATC's default for the format in force, as in an aipp.cfg (aipp_op.cc:776-798):
        # a file that turns CSC on for RGB and a request that sends YUV420SP get the YUV default
        given = {_MATRIX_FIELDS.index(key): value for key, value in entries.items()}
        defaulted = base.matrix_defaulted if base.matrix else tuple(range(9))
        changed = _matrix_values(base.matrix, defaulted, fmt, given)
        if changed["matrix"] != base.matrix or changed["matrix_defaulted"] != base.matrix_defaulted:
            values.update(changed)
    return AippOverrides(values)


def _matrix_values(
    matrix: tuple[tuple[int, int, int], ...],
    defaulted: tuple[int, ...],
    fmt: AippInputFormat | None,
    given: Mapping[int, int],
) -> dict[str, Any]:
    """``matrix`` with its ``defaulted`` entries recomputed for ``fmt`` and the ``given`` ones set."""
    flat = [v for row in (matrix or default_matrix(fmt)) for v in row]
    default = [v for row in default_matrix(fmt) for v in row]
    for index in defaulted:
        flat[index] = default[index]
    for index, value in given.items():
        flat[index] = value
    rows = tuple((flat[3 * r], flat[3 * r + 1], flat[3 * r + 2]) for r in range(3))
    return {"matrix": rows, "matrix_defaulted": tuple(i for i in defaulted if i not in given)}
