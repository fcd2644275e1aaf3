"""Test-only builder of synthetic CANN .om files, laid out byte by byte.

It shares no code with ``ge_python_backend.ascend.om``: its protobuf encoder, enum tables and
layouts are written from om-format.md, so tests compare the reader against bytes the test
itself described. ``Model`` describes one model at a high level; ``model_def`` and ``inout``
encode it the way GE would (MODEL_DEF graph and MODEL_INOUT_INFO TLVs); ``om_file`` lays out
header, partition tables and partitions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

# ----- protobuf encoding


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 -> two's complement, 10 bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def f_int(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def f_bytes(number: int, payload: bytes | str) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return tag(number, 2) + varint(len(payload)) + payload


def f_float(number: int, value: float) -> bytes:
    return tag(number, 5) + struct.pack("<f", value)


def f_packed(number: int, values) -> bytes:
    return f_bytes(number, b"".join(varint(v) for v in values))


# AttrDef{list=1, s=2, i=3, f=4, b=5, list_list_int=14}; ListValue{s=2, i=3, b=5, val_type=20}
VT_LIST_STRING, VT_LIST_INT, VT_LIST_BOOL = 1, 2, 4


def attr_s(value: str) -> bytes:
    return f_bytes(2, value)


def attr_i(value: int) -> bytes:
    return f_int(3, value)


def attr_f(value: float) -> bytes:
    return f_float(4, value)


def attr_b(value: bool) -> bytes:
    return f_int(5, int(value))


def attr_list_i(values, packed: bool = True) -> bytes:
    body = f_packed(3, values) if packed else b"".join(f_int(3, v) for v in values)
    return f_bytes(1, body + f_int(20, VT_LIST_INT))


def attr_list_s(values) -> bytes:
    return f_bytes(1, b"".join(f_bytes(2, v) for v in values) + f_int(20, VT_LIST_STRING))


def attr_list_b(values) -> bytes:
    return f_bytes(1, f_packed(5, [int(v) for v in values]) + f_int(20, VT_LIST_BOOL))


def attr_list_list_i(rows) -> bytes:
    return f_bytes(14, b"".join(f_bytes(1, f_packed(1, row)) for row in rows))


def map_entry(number: int, key: bytes | str, value: bytes) -> bytes:
    return f_bytes(number, f_bytes(1, key) + f_bytes(2, value))


def attr_named(fields: dict[str, bytes], name: str = "") -> bytes:
    """AttrDef.func (field 10): NamedAttrs{name=1, map<string, AttrDef> attr=2} (ge_ir.proto)."""
    body = (f_bytes(1, name) if name else b"") + b"".join(map_entry(2, k, v) for k, v in fields.items())
    return f_bytes(10, body)


#: domi.AippOpParams.InputFormat values (insert_op.proto)
AIPP_FORMATS = {"YUV420SP_U8": 1, "XRGB8888_U8": 2, "RGB888_U8": 3, "YUV400_U8": 4, "RGB24": 17}


def aipp_attr(**values) -> bytes:
    """An ``aipp`` attribute as AippOp::ConvertParamToAttr writes it: ints as i, bools as b, floats as f."""
    fields = {}
    for key, value in values.items():
        if key == "input_format" and isinstance(value, str):
            value = AIPP_FORMATS[value]
        if isinstance(value, bool):
            fields[key] = attr_b(value)
        elif isinstance(value, float):
            fields[key] = attr_f(value)
        else:
            fields[key] = attr_i(value)
    return attr_named(fields)


# ----- enums (written from om-format.md / ge types.h, independent of the reader's tables)

#: native name -> (ge::DataType value used by MODEL_INOUT_INFO, ge.proto.DataType value used by MODEL_DEF)
DTYPES = {
    "DT_FLOAT": (0, 1),
    "DT_FLOAT16": (1, 2),
    "DT_INT8": (2, 3),
    "DT_INT32": (3, 7),
    "DT_UINT8": (4, 4),
    "DT_INT16": (6, 5),
    "DT_UINT16": (7, 6),
    "DT_UINT32": (8, 9),
    "DT_INT64": (9, 8),
    "DT_UINT64": (10, 10),
    "DT_DOUBLE": (11, 12),
    "DT_BOOL": (12, 11),
    "DT_STRING": (13, 13),
    "DT_COMPLEX64": (16, 16),
    "DT_BF16": (27, 27),
}
#: ge::Format values
FORMATS = {"NCHW": 0, "NHWC": 1, "ND": 2, "NC1HWC0": 3, "FRACTAL_Z": 4, "NDHWC": 27, "NCDHW": 30}

# ----- a model at a high level


@dataclass
class Tensor:
    """An input (Data op) or output (a NetOutput input) of a synthetic model.

    For inputs, ``shape`` is the Data op's input_desc shape and ``origin_dims`` (when set) its
    ``_mbatch_origin_input_dims``. For outputs, ``src`` is (producer op name, output index).
    """

    name: str
    dtype: str = "DT_FLOAT"
    shape: tuple[int, ...] = ()
    layout: str = "ND"
    origin_dims: tuple[int, ...] | None = None
    src: tuple[str, int] = ("", 0)
    format_bits: int = 0  # sub-format / C0 bits OR-ed into the INOUT format value
    op_type: str = "Data"
    #: _dynamic_aipp_input_dims and input_dims (V2) attributes, when set
    aipp_dims: tuple[int, ...] | None = None
    input_dims: tuple[int, ...] | None = None
    #: other op attributes: raw AttrDef bytes, a str (a string attribute) or a list of str
    attrs: dict[str, bytes | str | list[str]] = field(default_factory=dict)
    #: the Data op's index attribute (None: its position in Model.inputs)
    index: int | None = None

    def v1(self) -> tuple[int, ...]:
        """The dims GE reports: _dynamic_aipp_input_dims, else _mbatch_origin_input_dims, else the shape."""
        if self.aipp_dims is not None:
            return self.aipp_dims
        return self.origin_dims if self.origin_dims is not None else self.shape


@dataclass
class Model:
    name: str = "synthetic"
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    #: dynamic type 1 batch, 2 image size, 3 dims (0: none) and one list per gear
    dynamic_type: int = 0
    gears: list[list[int]] = field(default_factory=list)
    shape_order: list[str] = field(default_factory=list)
    out_node_names: list[str] | None = None
    model_attrs: dict[str, bytes] = field(default_factory=dict)
    compress: bool = False
    enum_padding: int = 0  # filler names put before the real ones in attr_name_enum
    data_op_order: list[int] | None = None  # graph order of the Data ops (indices into inputs)
    version: int = 2


MBATCH_DATA = "ascend_mbatch_shape_data"
MBATCH_CASE = "ascend_mbatch_shape_case"


class _Names:
    """Attribute name/value compression exactly as om-format.md §2b describes it."""

    def __init__(self, enabled: bool, padding: int) -> None:
        self.enabled = enabled
        self.names = [f"filler_{i}" for i in range(padding)]
        self.values: list[str] = []
        self.use_string: list[bool] = []

    def attr(self, name: str, value: bytes, string_value: str | list[str] | None = None) -> tuple[bytes, bytes]:
        if not self.enabled:
            return name.encode(), value
        if name not in self.names:
            self.names.append(name)
        while len(self.use_string) < len(self.names):
            self.use_string.append(False)
        index = self.names.index(name)
        if string_value is not None:
            self.use_string[index] = True
            if isinstance(string_value, list):
                value = attr_list_i([self._value(v) for v in string_value])
            else:
                value = attr_i(self._value(string_value))
        return encode_enum_name(index), value

    def _value(self, text: str) -> int:
        if text not in self.values:
            self.values.append(text)
        return self.values.index(text)

    def model_attrs(self) -> bytes:
        if not self.enabled:
            return b""
        self.use_string += [False] * (len(self.names) - len(self.use_string))
        return (
            map_entry(11, "om_compress_version", attr_i(1))
            + map_entry(11, "attr_name_enum", attr_list_s(self.names))
            + map_entry(11, "attr_value_enum", attr_list_s(self.values))
            + map_entry(11, "attrs_use_string_value", attr_list_b(self.use_string))
        )


def encode_enum_name(index: int) -> bytes:
    """'\\0' then base-127 digits, least significant first, each stored as digit + 1."""
    digits = bytearray()
    while True:
        digits.append(index % 127 + 1)
        index //= 127
        if not index:
            return b"\0" + bytes(digits)


def tensor_desc(t: Tensor, shape: tuple[int, ...] | None = None, names: _Names | None = None) -> bytes:
    body = f_int(2, DTYPES[t.dtype][1]) if DTYPES[t.dtype][1] else b""
    body += f_bytes(3, f_packed(1, t.shape if shape is None else shape)) + f_bytes(4, t.layout)
    if names is not None:
        body += map_entry(5, *names.attr("origin_format", attr_s(t.layout), t.layout))
    return body


def op_def(
    name: str,
    op_type: str,
    attrs: Sequence[tuple[bytes, bytes]] = (),
    input_desc: Sequence[bytes] = (),
    src_name: Sequence[str] = (),
    src_index: Sequence[int] = (),
) -> bytes:
    body = f_bytes(1, name) + f_bytes(2, op_type)
    body += b"".join(map_entry(10, key, value) for key, value in attrs)
    body += b"".join(f_bytes(24, s) for s in src_name)
    if src_index:
        body += f_packed(25, src_index)
    body += b"".join(f_bytes(33, d) for d in input_desc)
    body += b"".join(f_bytes(34, d) for d in input_desc)
    return body


def model_def(model: Model) -> bytes:
    """MODEL_DEF bytes: graph 0 with the Data ops, a Conv op, a NetOutput and (with gears) the Case op."""
    names = _Names(model.compress, model.enum_padding)
    data_ops = []
    for index, t in enumerate(model.inputs):
        attrs = [
            names.attr("index", attr_i(index)),
            names.attr("_input_name_key", attr_list_s(["__input0"]), ["__input0"]),
        ]
        if t.index is not None:
            attrs[0] = names.attr("index", attr_i(t.index))
        if t.origin_dims is not None:
            attrs.append(names.attr("_mbatch_origin_input_dims", attr_list_i(t.origin_dims)))
        if t.aipp_dims is not None:
            attrs.append(names.attr("_dynamic_aipp_input_dims", attr_list_i(t.aipp_dims)))
        if t.input_dims is not None:
            attrs.append(names.attr("input_dims", attr_list_i(t.input_dims)))
        for key, value in t.attrs.items():
            if isinstance(value, str):
                attrs.append(names.attr(key, attr_s(value), value))
            elif isinstance(value, list):
                attrs.append(names.attr(key, attr_list_s(value), value))
            else:
                attrs.append(names.attr(key, value))
        data_ops.append(op_def(t.name, t.op_type, attrs, [tensor_desc(t, names=names)]))
    order = model.data_op_order or list(range(len(data_ops)))
    ops = [data_ops[i] for i in order]
    ops.append(op_def("conv", "Conv2D", [names.attr("_kernelname", attr_s("k"), "k")]))
    if model.dynamic_type:
        gear_len = len(model.gears[0])
        ops.append(
            op_def(
                MBATCH_DATA,
                "Data",
                [
                    names.attr("index", attr_i(len(model.inputs))),
                    names.attr("_is_multi_batch_shape_data", attr_b(True)),
                ],
                [tensor_desc(Tensor(MBATCH_DATA, "DT_INT32", (gear_len,)), names=names)],
            )
        )
        case_attrs = [
            names.attr("_batch_num", attr_i(len(model.gears))),
            names.attr("mbatch_dynamic_type", attr_i(model.dynamic_type)),
        ] + [names.attr(f"_pred_value_{i}", attr_list_i(g)) for i, g in enumerate(model.gears)]
        if model.shape_order:
            case_attrs.append(
                names.attr("user_designate_shape_order", attr_list_s(model.shape_order), model.shape_order)
            )
        ops.append(op_def(MBATCH_CASE, "Case", case_attrs))
    ops.append(
        op_def(
            "Node_Output",
            "NetOutput",
            [names.attr("_is_netoutput", attr_b(True))],
            [tensor_desc(t, names=names) for t in model.outputs],
            [t.src[0] for t in model.outputs],
            [t.src[1] for t in model.outputs],
        )
    )
    graph = f_bytes(1, f"{model.name}_0") + b"".join(f_bytes(6, op) for op in ops)
    model_attrs = b"".join(map_entry(11, key, value) for key, value in model.model_attrs.items())
    if model.out_node_names is not None:
        model_attrs += map_entry(11, "attr_model_out_nodes_name", attr_list_s(model.out_node_names))
    return f_bytes(1, model.name) + f_int(2, model.version) + f_bytes(7, graph) + model_attrs + names.model_attrs()


def simple_model_def(name: str) -> bytes:
    """A ModelDef with only a name and an empty graph (for submodels)."""
    return f_bytes(1, name) + f_bytes(7, f_bytes(1, name))


# ----- MODEL_INOUT_INFO


def inout_tensor(name: str, dtype: str, fmt: int, dims, dims_v2=None, shape_range=(), size: int = 0) -> bytes:
    dims_v2 = dims if dims_v2 is None else dims_v2
    raw_name = name.encode()
    flat = [v for pair in shape_range for v in pair]
    return (
        struct.pack(
            "<QiiIIII",
            size,
            fmt,
            DTYPES[dtype][0],
            len(raw_name),
            8 * len(dims),
            8 * len(dims_v2),
            16 * len(shape_range),
        )
        + raw_name
        + struct.pack(f"<{len(dims)}q", *dims)
        + struct.pack(f"<{len(dims_v2)}q", *dims_v2)
        + struct.pack(f"<{len(flat)}q", *flat)
    )


def tlv(tlv_type: int, value: bytes) -> bytes:
    return struct.pack("<II", tlv_type, len(value)) + value


def tlv_descs(tlv_type: int, descs: list[bytes]) -> bytes:
    return tlv(tlv_type, struct.pack("<I", len(descs)) + b"".join(descs))


def tlv_int_lists(tlv_type: int, lists) -> bytes:
    counts = struct.pack(f"<I{len(lists)}I", len(lists), *[len(x) for x in lists])
    return tlv(tlv_type, counts + b"".join(struct.pack(f"<{len(x)}q", *x) for x in lists))


def tlv_strings(tlv_type: int, strings) -> bytes:
    raw = [s.encode() for s in strings]
    return tlv(tlv_type, struct.pack(f"<I{len(raw)}I", len(raw), *[len(r) for r in raw]) + b"".join(raw))


def output_name(model: Model, i: int) -> str:
    """The output name GE derives (om-format.md §2a)."""
    t = model.outputs[i]
    if model.out_node_names is not None and len(model.out_node_names) == len(model.outputs):
        name = model.out_node_names[i]
        return name if ":" in name else f"{name}:{t.src[1]}"
    return f"output_{i}_{t.src[0]}_{t.src[1]}"


def inout(model: Model) -> bytes:
    """MODEL_INOUT_INFO bytes for a model, as GE's ModelIntroduction writes them."""
    inputs = [
        inout_tensor(
            t.name,
            t.dtype,
            FORMATS[t.layout] | t.format_bits,
            t.v1(),
            t.input_dims if t.input_dims is not None else t.v1(),
        )
        for _, t in sorted((i if t.index is None else t.index, t) for i, t in enumerate(model.inputs))
    ]
    if model.dynamic_type:
        inputs.append(inout_tensor(MBATCH_DATA, "DT_INT32", FORMATS["ND"], (len(model.gears[0]),)))
    outputs = [
        inout_tensor(output_name(model, i), t.dtype, FORMATS[t.layout] | t.format_bits, t.shape)
        for i, t in enumerate(model.outputs)
    ]
    data = tlv_descs(0, inputs) + tlv_descs(1, outputs)
    if model.dynamic_type == 1:
        data += tlv(2, struct.pack(f"<I{len(model.gears)}q", len(model.gears), *[g[0] for g in model.gears]))
    elif model.dynamic_type in (2, 3):
        data += tlv_int_lists(model.dynamic_type + 1, model.gears)
    if model.shape_order:
        data += tlv_strings(6, model.shape_order)
    return data


# ----- file layout

VERSION_1, VERSION_2 = 0x10000000, 0x20000000
MODEL_DEF, WEIGHTS_DATA, TASK_INFO, TBE_KERNELS, MODEL_INOUT_INFO = 0, 1, 2, 3, 8


@dataclass
class Header:
    version: int = VERSION_2
    model_type: int = 0
    name: str = "synthetic"
    platform_version: str = "1.11.z.0"
    om_ir_version: int = 2
    model_num: int = 1
    is_unknow_model: int = 0
    is_encrypt: int = 0
    length: int | None = None  # None: computed from the body
    model_length: int | None = None  # None: computed (v2.0 64-bit tables only)
    wide: bool | None = None  # 64-bit tables (then model_length is set); None: only for flow models


def header_bytes(h: Header, length: int, model_length: int) -> bytes:
    raw = bytearray(256)
    struct.pack_into("<4sII", raw, 0, b"IMOD", 256, h.version)
    struct.pack_into("<I", raw, 76, length)
    raw[80] = h.is_encrypt
    raw[82] = h.model_type
    raw[84 : 84 + len(h.name)] = h.name.encode()
    struct.pack_into("<I", raw, 152, h.om_ir_version)
    if h.version == VERSION_1:
        raw[156 : 156 + len(h.platform_version)] = h.platform_version.encode()
    else:
        struct.pack_into("<I", raw, 156, h.model_num)
        raw[160 : 160 + len(h.platform_version)] = h.platform_version.encode()
        struct.pack_into("<Q", raw, 184, model_length)
        raw[193] = h.is_unknow_model
    return bytes(raw)


def partition_block(partitions: list[tuple[int, bytes]], wide: bool, mem_offsets: list[int] | None = None) -> bytes:
    """A partition table and its partitions; ``mem_offsets`` overrides the sequential offsets (gaps are zero-filled)."""
    offsets, position = [], 0
    for i, (_, data) in enumerate(partitions):
        offset = mem_offsets[i] if mem_offsets else position
        offsets.append(offset)
        position = offset + len(data)
    if wide:
        table = struct.pack("<II", len(partitions), 0) + b"".join(
            struct.pack("<IIQQ", t, 0, o, len(d)) for (t, d), o in zip(partitions, offsets)
        )
    else:
        table = struct.pack("<I", len(partitions)) + b"".join(
            struct.pack("<III", t, o, len(d)) for (t, d), o in zip(partitions, offsets)
        )
    body = bytearray(position)
    for (_, data), offset in zip(partitions, offsets):
        body[offset : offset + len(data)] = data
    return table + bytes(body)


def om_file(models: list[list[tuple[int, bytes]]], header: Header | None = None) -> bytes:
    """A whole .om file: header then one partition block per model."""
    h = header or Header()
    wide = h.wide if h.wide is not None else h.model_type == 3
    body = b"".join(partition_block(parts, wide) for parts in models)
    if wide and h.version == VERSION_2:
        length = 0 if h.length is None else h.length
        model_length = len(body) if h.model_length is None else h.model_length
    else:
        length = len(body) if h.length is None else h.length
        model_length = 0 if h.model_length is None else h.model_length
    return header_bytes(h, length, model_length) + body


def standard_om(model: Model, header: Header | None = None, with_inout: bool = True) -> bytes:
    """A single-model OM with MODEL_INOUT_INFO (optional), MODEL_DEF, weights and tasks."""
    parts = [(MODEL_INOUT_INFO, inout(model))] if with_inout else []
    parts += [(MODEL_DEF, model_def(model)), (WEIGHTS_DATA, b"\x01" * 64), (TASK_INFO, b"\x02" * 16)]
    return om_file([parts], header)
