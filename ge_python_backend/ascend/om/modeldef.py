"""The subset of ``ge.proto.ModelDef`` (the MODEL_DEF partition) the reader needs.

Field numbers (hicann/ge graph_metadef/proto/ge_ir.proto: ModelDef 343-353, GraphDef 329-340, OpDef
300-326, TensorDescriptor 265-289, ShapeDef 259-262, AttrDef 60): ModelDef{name=1, version=2, custom_version=3, graph=7,
attr=11}; GraphDef{name=1, op=6, attr=11}; OpDef{name=1, type=2, input=5, attr=10,
src_name=24, src_index=25, input_desc=33, output_desc=34}; TensorDescriptor{name=1, dtype=2,
shape=3 (ShapeDef{dim=1}), layout=4, attr=5}; attr maps are repeated {key=1, value=2}.
An AttrDef may nest a ``NamedAttrs{name=1, map<string, AttrDef> attr=2}`` in its ``func`` field
(10); ATC stores the AIPP config that way (hicann/ge graph_metadef/proto/ge_ir.proto:113, 252-256;
compiler/graph/preprocess/insert_op/aipp_op.cc:531-539, 1085-1144).

Graphs, ops and attributes are decoded on first use, so a large model costs only what is read.
Op and tensor attribute names may be compressed (``'\\0'`` + base-127 digits, each stored
+1, least significant first) into the model-level ``attr_name_enum`` dictionary; string
values of such attributes are then indices into ``attr_value_enum``
(``attrs_use_string_value`` says which). ``AttrDictionary`` undoes both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from ge_python_backend.ascend.om.wire import Message
from ge_python_backend.errors import OmFormatError


@dataclass(frozen=True)
class NamedAttrs:
    """A nested attribute map (``AttrDef.func``). Its names are never compressed: GE compresses only
    an op's and a tensor's own attribute names (base/common/model/model_compress_manager.cc:83-100,
    156-173)."""

    name: str
    attrs: Mapping[str, AttrValue]


AttrValue = str | int | float | bool | bytes | tuple | NamedAttrs | None

#: Longest compressed attribute name accepted (5 base-127 digits index 33 billion names).
_MAX_ENUM_DIGITS = 5


def _decode_list(msg: Message) -> tuple:
    if msg.has(2):
        return tuple(msg.strings(2, "list.s"))
    if msg.has(3):
        return tuple(msg.repeated_int64s(3, "list.i"))
    if msg.has(4):
        return tuple(msg.repeated_floats(4, "list.f"))
    if msg.has(5):
        return tuple(bool(v) for v in msg.repeated_uints(5, "list.b"))
    if msg.has(12):
        return tuple(msg.repeated_int64s(12, "list.dt"))
    return ()  # empty, or a list of tensors/graphs/named attrs this reader does not decode


def decode_attr(msg: Message) -> AttrValue:
    """Python value of an AttrDef: str, int, float, bool, bytes, tuple (lists), NamedAttrs (``func``) or
    None (other kinds)."""
    if (listed := msg.message(1, "list")) is not None:
        return _decode_list(listed)
    if msg.has(2):
        return msg.string(2, "s")
    if msg.has(3):
        return msg.int64(3, "i")
    if msg.has(4):
        return msg.float32(4, "f")
    if msg.has(5):
        return bool(msg.uint(5, "b"))
    if msg.has(7):
        return msg.raw(7, "bt")
    if (func := msg.message(10, "func")) is not None:
        return NamedAttrs(func.string(1, "name"), _plain_attrs(func, 2))
    if (list_list := msg.message(14, "list_list_int")) is not None:
        rows = list_list.messages(1, "list_list_i")
        return tuple(tuple(row.repeated_int64s(1, "list_i")) for row in rows)
    if msg.has(15):
        return msg.int64(15, "dt")
    return None


def _attr_entries(msg: Message, number: int) -> list[tuple[bytes, Message | None]]:
    return [(entry.raw(1, "key"), entry.message(2, "value")) for entry in msg.messages(number, "attr")]


def _plain_attrs(msg: Message, number: int) -> dict[str, AttrValue]:
    """An attribute map whose names are plain strings (nesting is bounded by ``Message``'s depth limit)."""
    return {
        key.decode("utf-8", errors="replace"): decode_attr(value) if value is not None else None
        for key, value in _attr_entries(msg, number)
    }


@dataclass(frozen=True)
class AttrDictionary:
    """The model-level dictionaries that compressed attribute names and string values point into."""

    names: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    use_string_value: tuple[bool, ...] = ()

    def decode(self, raw_name: bytes, value: AttrValue, where: str) -> tuple[str, AttrValue]:
        """(name, value) of one attribute as GE wrote it before compression."""
        if not raw_name.startswith(b"\0"):
            return raw_name.decode("utf-8", errors="replace"), value
        digits = raw_name[1:]
        if not digits or len(digits) > _MAX_ENUM_DIGITS or 0 in digits or any(d > 127 for d in digits):
            raise OmFormatError(f"{where}: malformed compressed attribute name {raw_name!r}")
        index = sum((d - 1) * 127**i for i, d in enumerate(digits))
        if index >= len(self.names):
            raise OmFormatError(
                f"{where}: compressed attribute name {raw_name!r} points at attr_name_enum[{index}], "
                f"but the model's attr_name_enum has {len(self.names)} entries"
            )
        name = self.names[index]
        if self.use_string_value[index]:
            value = self._string_value(value, f"{where}: attribute {name!r}")
        return name, value

    def _string_value(self, value: AttrValue, where: str) -> AttrValue:
        indices = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            raise OmFormatError(f"{where}: a compressed string value must be an int or a list of ints, found {value!r}")
        for i in indices:
            if not 0 <= i < len(self.values):
                raise OmFormatError(f"{where}: value index {i} outside attr_value_enum ({len(self.values)} entries)")
        strings = tuple(self.values[i] for i in indices)
        return strings if isinstance(value, tuple) else strings[0]


def _decode_attrs(msg: Message, number: int, dictionary: AttrDictionary, where: str) -> dict[str, AttrValue]:
    attrs: dict[str, AttrValue] = {}
    for raw_name, value_msg in _attr_entries(msg, number):
        value = decode_attr(value_msg) if value_msg is not None else None
        name, value = dictionary.decode(raw_name, value, where)
        attrs[name] = value
    return attrs


@dataclass(frozen=True)
class TensorDesc:
    """A TensorDescriptor: ``dtype`` is the ge.proto.DataType value, ``layout`` a format name."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    layout: str
    attrs: Mapping[str, AttrValue]


def _tensor_desc(msg: Message, dictionary: AttrDictionary) -> TensorDesc:
    shape_msg = msg.message(3, "shape")
    shape = tuple(shape_msg.repeated_int64s(1, "dim")) if shape_msg is not None else ()
    return TensorDesc(
        name=msg.string(1, "name"),
        dtype=msg.uint(2, "dtype"),
        shape=shape,
        layout=msg.string(4, "layout"),
        attrs=_decode_attrs(msg, 5, dictionary, msg.what),
    )


class OpDef:
    """One operator: name and type at once, the rest when asked for."""

    def __init__(self, msg: Message, dictionary: AttrDictionary) -> None:
        self._msg = msg
        self._dictionary = dictionary
        self.name = msg.string(1, "name")
        self.type = msg.string(2, "type")
        msg.what = f"{msg.what} ({self.type} {self.name!r})"

    @cached_property
    def attrs(self) -> dict[str, AttrValue]:
        return _decode_attrs(self._msg, 10, self._dictionary, self._msg.what)

    @cached_property
    def input_desc(self) -> tuple[TensorDesc, ...]:
        return tuple(_tensor_desc(m, self._dictionary) for m in self._msg.messages(33, "input_desc"))

    @cached_property
    def src_name(self) -> tuple[str, ...]:
        return tuple(self._msg.strings(24, "src_name"))

    @cached_property
    def src_index(self) -> tuple[int, ...]:
        return tuple(self._msg.repeated_int64s(25, "src_index"))


class GraphDef:
    def __init__(self, msg: Message, dictionary: AttrDictionary) -> None:
        self._msg = msg
        self._dictionary = dictionary
        self.name = msg.string(1, "name")

    @cached_property
    def ops(self) -> tuple[OpDef, ...]:
        return tuple(OpDef(m, self._dictionary) for m in self._msg.messages(6, "op"))


class ModelDef:
    """A decoded ModelDef. ``attrs`` are the model-level attributes (never compressed)."""

    def __init__(self, data: bytes, base: int, what: str = "MODEL_DEF") -> None:
        self._msg = Message(data, 0, len(data), base, what)
        self.name = self._msg.string(1, "name")
        self.version = self._msg.uint(2, "version")

    @cached_property
    def attrs(self) -> dict[str, AttrValue]:
        return _decode_attrs(self._msg, 11, AttrDictionary(), self._msg.what)

    @cached_property
    def dictionary(self) -> AttrDictionary:
        names = self._strings_attr("attr_name_enum")
        values = self._strings_attr("attr_value_enum")
        use_string = self.attrs.get("attrs_use_string_value", ())
        if not isinstance(use_string, tuple) or len(use_string) != len(names):
            raise OmFormatError(
                f"{self._msg.what}: attrs_use_string_value must list one bool per attr_name_enum entry "
                f"({len(names)}), found {use_string!r:.80}"
            )
        return AttrDictionary(names, values, tuple(bool(v) for v in use_string))

    def _strings_attr(self, label: str) -> tuple[str, ...]:
        """The model attribute ``label`` (a list of strings; empty when absent)."""
        item = self.attrs.get(label, ())
        if not isinstance(item, tuple) or not all(isinstance(v, str) for v in item):
            raise OmFormatError(f"{self._msg.what}: model attribute {label} is not a list of strings")
        return item

    @cached_property
    def graphs(self) -> tuple[GraphDef, ...]:
        return tuple(GraphDef(m, self.dictionary) for m in self._msg.messages(7, "graph"))
