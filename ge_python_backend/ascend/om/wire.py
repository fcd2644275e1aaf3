"""A small, defensive protobuf wire-format decoder.

Only what the OM reader needs: one message level is indexed at a time (sub-messages are
decoded when asked for), every length is checked against the enclosing message, nesting is
limited to ``MAX_DEPTH`` and every error is an ``OmFormatError`` naming the message and the
absolute file offset. No schema, no generated code: callers ask for fields by number.

Memory stays proportional to the input with a small factor whatever the file holds: a message's
index keeps one 4- or 8-byte position per field (``Field`` tuples are decoded again when asked
for), a message uses at most ``MAX_NUMBERS`` distinct field numbers, and one decode (a message and
every sub-message read from it) spends at most ``BASE_UNITS`` plus one unit per byte of the
message, a field costing one unit and a sub-message ``MESSAGE_UNITS`` (about 8 bytes a unit): at
most about 8 bytes of index per byte of input, plus 8 MiB. A MODEL_DEF of 2-byte fields used to
cost about sixty times its size in Python objects, one of empty sub-messages three hundred times
(issue 22, finding 7).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from ge_python_backend.errors import OmFormatError

#: Deepest message nesting accepted (protobuf's own default limit is 100).
MAX_DEPTH = 64
#: What one decode may spend besides one unit per byte of its message: real MODEL_DEFs use about
#: one unit per 11 bytes (a 151 KiB one: 2,150 fields, 178 messages), tiny test files up to 2.4 a byte.
BASE_UNITS = 1 << 20
#: The units of a sub-message (its object, index, name and wrapper: about 1 KiB); a field is one; a
#: value of a packed varint field (a Python int and its list slot, from one byte of input) four.
MESSAGE_UNITS = 128
PACKED_VALUE_UNITS = 4
#: Distinct field numbers one message may use (GE's messages declare fewer than 40).
MAX_NUMBERS = 1024

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
_WIRE_NAMES = {VARINT: "varint", FIXED64: "fixed64", LEN: "length-delimited", FIXED32: "fixed32"}

_U64 = 1 << 64


def read_varint(data: bytes, pos: int, end: int, base: int, what: str) -> tuple[int, int]:
    """Decode the unsigned varint at ``data[pos:end]``; return (value, position after it)."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise OmFormatError(
                f"{what}: varint at file offset {base + start} runs past the end of the message "
                f"(file offset {base + end})"
            )
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 70:
            raise OmFormatError(f"{what}: varint at file offset {base + start} is longer than 10 bytes")
    if result >= _U64:
        raise OmFormatError(f"{what}: varint at file offset {base + start} exceeds 64 bits")
    return result, pos


def as_int64(value: int) -> int:
    """Two's-complement reading of a 64-bit varint (protobuf int64/int32 fields)."""
    return value - _U64 if value >= 1 << 63 else value


class Field(NamedTuple):
    """One occurrence of a field: ``value`` is the integer (varint/fixed) or payload offsets."""

    number: int
    wire_type: int
    value: int
    start: int = 0  # payload start in the message buffer (LEN only)
    end: int = 0  # payload end (LEN only)


class _Budget:
    """The units one decode may still spend (shared by a message and its sub-messages)."""

    __slots__ = ("left", "total")

    def __init__(self, size: int) -> None:
        self.total = self.left = BASE_UNITS + size

    def spend(self, units: int, what: str, offset: int) -> None:
        self.left -= units
        if self.left < 0:
            raise OmFormatError(
                f"{what}: more fields and sub-messages than a message of its size can hold in a model GE writes "
                f"(budget {self.total} units spent at file offset {offset}); refusing it rather than indexing it"
            )


class Message:
    """The top-level fields of one encoded message, indexed by field number.

    ``data[start:end]`` is the encoding; ``base`` is the file offset of ``data[0]`` (used only in
    error messages); ``what`` names the message for errors ("ModelDef", "OpDef 'conv1'").
    """

    __slots__ = ("_budget", "_positions", "base", "data", "depth", "end", "start", "what")

    def __init__(
        self, data: bytes, start: int, end: int, base: int, what: str, depth: int = 0, budget: _Budget | None = None
    ) -> None:
        if depth > MAX_DEPTH:
            raise OmFormatError(f"{what}: messages nested deeper than {MAX_DEPTH} levels at file offset {base + start}")
        if not 0 <= start <= end <= len(data):
            raise OmFormatError(f"{what}: message bounds {start}..{end} outside its {len(data)}-byte buffer")
        self.data = data
        self.base = base
        self.what = what
        self.depth = depth
        self.start = start
        self.end = end
        self._budget = budget or _Budget(end - start)
        #: field number -> the positions of its tags, in order
        self._positions: dict[int, array] = {}
        self._index()

    def _decode(self, pos: int) -> tuple[Field, int]:
        """The field whose tag is at ``pos``, and the position after it."""
        data, end, base, what = self.data, self.end, self.base, self.what
        tag, pos_after_tag = read_varint(data, pos, end, base, what)
        number, wire_type = tag >> 3, tag & 7
        if number == 0 or number >= 1 << 29:
            raise OmFormatError(f"{what}: invalid field number {number} in the tag at file offset {base + pos}")
        if wire_type == VARINT:
            value, after = read_varint(data, pos_after_tag, end, base, what)
            return Field(number, wire_type, value), after
        if wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            if pos_after_tag + size > end:
                raise OmFormatError(
                    f"{what}: field {number} ({_WIRE_NAMES[wire_type]}) at file offset {base + pos} "
                    f"needs {size} bytes, only {end - pos_after_tag} left in the message"
                )
            value = int.from_bytes(data[pos_after_tag : pos_after_tag + size], "little")
            return Field(number, wire_type, value), pos_after_tag + size
        if wire_type == LEN:
            length, payload = read_varint(data, pos_after_tag, end, base, what)
            if length > end - payload:
                raise OmFormatError(
                    f"{what}: field {number} at file offset {base + pos} declares {length} bytes, "
                    f"only {end - payload} left in the message"
                )
            return Field(number, wire_type, 0, payload, payload + length), payload + length
        raise OmFormatError(
            f"{what}: unsupported wire type {wire_type} (field {number}) at file offset {base + pos}; "
            "expected varint, fixed32/64 or length-delimited"
        )

    def _index(self) -> None:
        positions, budget, kind = self._positions, self._budget, "I" if self.end < 1 << 32 else "Q"
        pos = self.start
        while pos < self.end:
            budget.spend(1, self.what, self.base + pos)
            item, after = self._decode(pos)
            found = positions.get(item.number)
            if found is None:
                if len(positions) >= MAX_NUMBERS:
                    raise OmFormatError(
                        f"{self.what}: more than {MAX_NUMBERS} distinct field numbers in one message "
                        f"(at file offset {self.base + pos}); GE's messages use fewer than 40"
                    )
                found = positions[item.number] = array(kind)
            found.append(pos)
            pos = after

    def _items(self, number: int) -> Iterator[Field]:
        """Every occurrence of field ``number``, decoded one at a time."""
        for pos in self._positions.get(number, ()):
            yield self._decode(pos)[0]

    def _last(self, number: int) -> Field | None:
        found = self._positions.get(number)
        return self._decode(found[-1])[0] if found else None

    # ----- access helpers (proto3 semantics: the last occurrence of a singular field wins)

    def _expect(self, item: Field, wire_type: int, label: str) -> Field:
        if item.wire_type != wire_type:
            raise OmFormatError(
                f"{self.what}: field {item.number} ({label}) has wire type "
                f"{_WIRE_NAMES.get(item.wire_type, item.wire_type)}, expected {_WIRE_NAMES[wire_type]}"
            )
        return item

    def has(self, number: int) -> bool:
        return number in self._positions

    def uint(self, number: int, label: str, default: int = 0) -> int:
        item = self._last(number)
        return self._expect(item, VARINT, label).value if item else default

    def int64(self, number: int, label: str, default: int = 0) -> int:
        return as_int64(self.uint(number, label, default))

    def float32(self, number: int, label: str) -> float:
        item = self._last(number)
        if item is None:
            return 0.0
        return struct.unpack("<f", self._expect(item, FIXED32, label).value.to_bytes(4, "little"))[0]

    def raw(self, number: int, label: str) -> bytes:
        item = self._last(number)
        if item is None:
            return b""
        item = self._expect(item, LEN, label)
        return bytes(self.data[item.start : item.end])

    def string(self, number: int, label: str) -> str:
        return self.raw(number, label).decode("utf-8", errors="replace")

    def strings(self, number: int, label: str) -> list[str]:
        return [
            bytes(self.data[i.start : i.end]).decode("utf-8", errors="replace")
            for i in (self._expect(item, LEN, label) for item in self._items(number))
        ]

    def message(self, number: int, what: str) -> Message | None:
        item = self._last(number)
        return self._sub(item, what) if item else None

    def messages(self, number: int, what: str) -> list[Message]:
        return [self._sub(item, f"{what}[{i}]") for i, item in enumerate(self._items(number))]

    def _sub(self, item: Field, what: str) -> Message:
        item = self._expect(item, LEN, what)
        self._budget.spend(MESSAGE_UNITS, f"{self.what}.{what}", self.base + item.start)
        return Message(self.data, item.start, item.end, self.base, f"{self.what}.{what}", self.depth + 1, self._budget)

    def repeated_uints(self, number: int, label: str) -> list[int]:
        """A repeated varint field, packed or not (varint encoding: int64, bool, enum)."""
        values: list[int] = []
        for item in self._items(number):
            if item.wire_type == VARINT:
                values.append(item.value)
            elif item.wire_type == LEN:
                pos = item.start
                while pos < item.end:
                    self._budget.spend(PACKED_VALUE_UNITS, f"{self.what}.{label}", self.base + pos)
                    value, pos = read_varint(self.data, pos, item.end, self.base, f"{self.what}.{label}")
                    values.append(value)
            else:
                self._expect(item, VARINT, label)
        return values

    def repeated_int64s(self, number: int, label: str) -> list[int]:
        return [as_int64(v) for v in self.repeated_uints(number, label)]

    def repeated_floats(self, number: int, label: str) -> list[float]:
        """A repeated float field, packed or not."""
        values: list[float] = []
        for item in self._items(number):
            if item.wire_type == FIXED32:
                values.append(struct.unpack("<f", item.value.to_bytes(4, "little"))[0])
            elif item.wire_type == LEN:
                size = item.end - item.start
                if size % 4:
                    raise OmFormatError(
                        f"{self.what}: packed float field {number} ({label}) is {size} bytes, not a multiple of 4"
                    )
                values.extend(struct.unpack(f"<{size // 4}f", bytes(self.data[item.start : item.end])))
            else:
                self._expect(item, FIXED32, label)
        return values
