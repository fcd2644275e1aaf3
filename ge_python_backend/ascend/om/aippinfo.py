"""What a Data op of an OM says about AIPP (ATC's ``--insert_op_conf``).

ATC keeps the AIPP config on the Data op it feeds (hicann/ge
compiler/graph/preprocess/insert_op/aipp_op.cc:523-539, 1196-1209; attr names in
graph_metadef/graph/attr/ge_attr_define.cc:120-129):

- ``_data_related_aipp_mode``: "static_aipp" or "dynamic_aipp" on the image input,
  "dynamic_aipp_conf" on the dynamic-AIPP parameter input (``ascend_dynamic_aipp_data``, an
  ``AippData`` op); the runtime maps them to aclmdlInputAippType 1/2/3 and refuses any other
  string at load (runtime/v1/graph/load/model_manager/davinci_model.cc:4199-4260);
- ``aipp``: a NamedAttrs with one entry per ``domi.AippOpParams`` field, named as the proto field
  (``AippOp::ConvertParamToAttr``, aipp_op.cc:1085-1144): the static fields, or for dynamic AIPP
  only ``aipp_mode``, ``related_input_rank``, ``max_src_image_size`` and ``support_rotation``;
  repeated fields (``var_reci_chn_*``, ``matrix_*``, ``*_bias_*``) keep their first element;
- ``input_dims``: the buffer's dims as ``get_input_dims_v2`` reports them (the Aipp op's
  InferShape, insert_aipp_op_util.cc:711-749); ``_data_aipp_data_name_map``: the name of the
  linked image / parameter input; ``_aipp_inputs`` / ``_aipp_outputs``: strings
  ``"FORMAT:DTYPE:name:size:dim_num:d0,d1,.."`` of the network input behind the AIPP and of the
  AIPP's output (insert_aipp_op_util.cc:672-709; field order in
  runtime/v1/graph/load/model_manager/aipp_utils.h:22-29).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ge_python_backend.ascend.aipp import (
    DEFAULT_MATRIX_RGB,
    DEFAULT_MATRIX_YUV,
    AippConfig,
    AippInputFormat,
    AippMode,
)
from ge_python_backend.ascend.om.modeldef import AttrValue, NamedAttrs, OpDef
from ge_python_backend.errors import OmFormatError

STATIC_AIPP, DYNAMIC_AIPP, DYNAMIC_AIPP_CONF = "static_aipp", "dynamic_aipp", "dynamic_aipp_conf"
RELATED_MODES = (STATIC_AIPP, DYNAMIC_AIPP, DYNAMIC_AIPP_CONF)
#: The type of the dynamic-AIPP parameter input ATC adds (aipp_op.cc:1212-1236).
AIPP_DATA_TYPE = "AippData"

#: domi.AippOpParams.AippMode (graph_metadef/proto/insert_op.proto): undefined 0, static 1, dynamic 2.
_PROTO_MODES = {1: AippMode.STATIC, 2: AippMode.DYNAMIC}
#: InputFormat values of insert_op.proto that AippInputFormat does not carry (for messages).
_OTHER_FORMATS = {0: "UNDEFINED", 15: "RGB16", 16: "RGB20", 17: "RGB24", 18: "RGB8_IR", 19: "RGB16_IR", 20: "RGB24_IR"}
_INTS = (
    "related_input_rank",
    "src_image_size_w",
    "src_image_size_h",
    "load_start_pos_w",
    "load_start_pos_h",
    "crop_size_w",
    "crop_size_h",
    "left_padding_size",
    "right_padding_size",
    "top_padding_size",
    "bottom_padding_size",
    "max_src_image_size",
)
_BOOLS = ("crop", "padding", "csc_switch", "rbuv_swap_switch", "ax_swap_switch")
_MATRIX = tuple(f"matrix_r{r}c{c}" for r in range(3) for c in range(3))


@dataclass(frozen=True)
class AippTensor:
    """One ``_aipp_inputs`` / ``_aipp_outputs`` entry: ``format``/``dtype`` as GE spells them ("NCHW", "DT_FLOAT")."""

    format: str
    dtype: str
    name: str
    size: int
    dims: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.dtype} [{','.join(map(str, self.dims))}] {self.format}"


@dataclass(frozen=True)
class DataAipp:
    """The AIPP attributes of one Data op (``mode`` "" when it has none)."""

    mode: str = ""
    config: AippConfig | None = None
    input_dims: tuple[int, ...] | None = None
    linked: str = ""
    network: AippTensor | None = None
    #: what the file sets that AippConfig cannot carry (resize, single_line_mode, ...)
    notes: tuple[str, ...] = ()


def data_aipp(op: OpDef) -> DataAipp:
    """The AIPP attributes of ``op``; OmFormatError when they are malformed."""
    where = f"{op.type} op {op.name!r}"
    attrs = op.attrs
    mode = attrs.get("_data_related_aipp_mode", "")
    if not isinstance(mode, str) or (mode and mode not in RELATED_MODES):
        raise OmFormatError(
            f"{where}: _data_related_aipp_mode is {mode!r:.80}, expected one of {', '.join(RELATED_MODES)} "
            "(the runtime refuses any other value at load, davinci_model.cc:4199-4260)"
        )
    raw = attrs.get("aipp")
    if raw is not None and not isinstance(raw, NamedAttrs):
        raise OmFormatError(f"{where}: attribute 'aipp' is {raw!r:.80}, expected named attributes (AttrDef.func)")
    config, notes = config_from_attrs(raw, where) if raw is not None else (None, ())
    if not mode and (op.type == AIPP_DATA_TYPE or config is not None):
        # files without the mode attribute: the AippData op is the parameter input; else the aipp_mode field
        if op.type == AIPP_DATA_TYPE:
            mode = DYNAMIC_AIPP_CONF
        elif config is not None:
            mode = STATIC_AIPP if config.aipp_mode is AippMode.STATIC else DYNAMIC_AIPP
    if config is not None and mode in (STATIC_AIPP, DYNAMIC_AIPP):
        wanted = AippMode.STATIC if mode == STATIC_AIPP else AippMode.DYNAMIC
        if config.aipp_mode is not wanted:
            raise OmFormatError(
                f"{where}: _data_related_aipp_mode is {mode!r} but its aipp attribute has aipp_mode "
                f"{config.aipp_mode.value!r}"
            )
    input_dims = _int_list(attrs.get("input_dims"), where, "input_dims")
    linked = attrs.get("_data_aipp_data_name_map", "")
    if not isinstance(linked, str):
        raise OmFormatError(f"{where}: _data_aipp_data_name_map is {linked!r:.80}, expected a name")
    network = _aipp_tensors(attrs.get("_aipp_inputs"))
    return DataAipp(mode, config, input_dims, linked, network[0] if network else None, notes)


def config_from_attrs(attrs: NamedAttrs, where: str) -> tuple[AippConfig, tuple[str, ...]]:
    """The AippConfig of an ``aipp`` attribute, and notes on what the config cannot carry.

    A field the file leaves out takes ATC's default (the AippConfig default); the runtime does the
    same (``OpUtils::ConvertAippParams``, base/common/op/ge_op_utils.cc:25-38, 102-158).
    """
    values = attrs.attrs
    where = f"{where}: aipp attribute"
    raw_mode = _get_int(values, "aipp_mode", where, 0)
    if raw_mode not in _PROTO_MODES:
        raise OmFormatError(f"{where}: aipp_mode is {raw_mode}, expected 1 (static) or 2 (dynamic)")
    mode = _PROTO_MODES[raw_mode]
    fields: dict[str, Any] = {"aipp_mode": mode}
    fields.update((name, _get_int(values, name, where, 0)) for name in _INTS if name in values)
    fields.update((name, _get_bool(values, name, where)) for name in _BOOLS if name in values)
    notes = []
    if mode is AippMode.DYNAMIC:
        if _get_bool(values, "support_rotation", where):
            notes.append("support_rotation is on (not modelled)")
        return AippConfig(**fields), tuple(notes)
    fmt = _input_format(_get_int(values, "input_format", where, 0), where)
    fields["input_format"] = fmt
    defaults = AippConfig()
    for name, count, getter in (
        ("mean_chn", 4, _get_int),
        ("min_chn", 4, _get_float),
        ("var_reci_chn", 4, _get_float),
        ("input_bias", 3, _get_int),
        ("output_bias", 3, _get_int),
    ):
        base = getattr(defaults, name)
        fields[name] = tuple(getter(values, f"{name}_{i}", where, base[i]) for i in range(count))
    if any(name in values for name in _MATRIX):
        base_matrix = DEFAULT_MATRIX_YUV if fmt is AippInputFormat.YUV420SP_U8 else DEFAULT_MATRIX_RGB
        flat = [_get_int(values, name, where, base_matrix[i // 3][i % 3]) for i, name in enumerate(_MATRIX)]
        fields["matrix"] = tuple(tuple(flat[r * 3 : r * 3 + 3]) for r in range(3))
    if _get_bool(values, "resize", where):
        w = _get_int(values, "resize_output_w", where, 0)
        h = _get_int(values, "resize_output_h", where, 0)
        notes.append(f"resize to {w}x{h} is on (reserved in static AIPP, not modelled)")
    if _get_bool(values, "single_line_mode", where):
        notes.append("single_line_mode is on (not modelled)")
    if _get_float(values, "cpadding_value", where, 0.0):
        notes.append(f"cpadding_value is {_get_float(values, 'cpadding_value', where, 0.0)} (not modelled)")
    return AippConfig(**fields), tuple(notes)


def buffer_dims(config: AippConfig, image_dims: tuple[int, ...]) -> tuple[int, ...]:
    """The V2 dims of a static-AIPP buffer from its image dims [N, H, W, C] when the file has no
    ``input_dims`` (GetAclInputDims of the Aipp op's InferShape; aclmdlGetInputDimsV2.md 31-61)."""
    if config.input_format is None or len(image_dims) != 4:
        return image_dims
    n, h, w, _ = image_dims
    if h < 0 or w < 0:
        return image_dims
    return config.input_format.v2_shape(n, h, w)


def image_size(config: AippConfig, buffer: tuple[int, ...]) -> tuple[int, int]:
    """(h, w) of the image a static-AIPP input takes: src_image_size, else what its V2 dims hold."""
    if config.src_image_size_h and config.src_image_size_w:
        return config.src_image_size_h, config.src_image_size_w
    if len(buffer) != 4:
        return config.src_image_size_h, config.src_image_size_w
    h, w = buffer[1], buffer[2]
    if h > 0 and config.input_format is AippInputFormat.YUV420SP_U8:
        h = h * 2 // 3
    elif h > 0 and config.input_format is AippInputFormat.YUV422SP_U8:
        h //= 2
    return h, w


# ----- attribute access


def _input_format(value: int, where: str) -> AippInputFormat:
    try:
        return AippInputFormat(value)
    except ValueError:
        name = _OTHER_FORMATS.get(value, "unknown")
        raise OmFormatError(
            f"{where}: input_format is {value} ({name}); the AIPP input formats this reader knows are "
            + ", ".join(f"{f.name} ({f.value})" for f in AippInputFormat)
        ) from None


def _get_int(values: Mapping[str, AttrValue], name: str, where: str, default: int) -> int:
    value = values.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise OmFormatError(f"{where}: field {name} is {value!r:.80}, expected an integer")
    return value


def _get_bool(values: Mapping[str, AttrValue], name: str, where: str) -> bool:
    value = values.get(name, False)
    if isinstance(value, int) and value in (0, 1):  # bool is an int; an int 0/1 is what a varint bool decodes to
        return bool(value)
    raise OmFormatError(f"{where}: field {name} is {value!r:.80}, expected true or false")


def _get_float(values: Mapping[str, AttrValue], name: str, where: str, default: float) -> float:
    value = values.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OmFormatError(f"{where}: field {name} is {value!r:.80}, expected a number")
    return float(value)


def _int_list(value: AttrValue, where: str, name: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        raise OmFormatError(f"{where}: attribute {name!r} is {value!r:.80}, expected a list of ints")
    return value


def _aipp_tensors(value: AttrValue) -> tuple[AippTensor, ...]:
    """Parsed ``_aipp_inputs`` entries; entries that do not parse are left out (they only inform reports)."""
    if not isinstance(value, tuple):
        return ()
    found = []
    for entry in value:
        if not isinstance(entry, str):
            continue
        parts = entry.split(":")
        if len(parts) != 6:
            continue
        fmt, dtype, name, size, count, dims = parts
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
            if int(count) != len(shape):
                continue
            found.append(AippTensor(fmt, dtype, name, int(size), shape))
        except ValueError:
            continue
    return tuple(found)
