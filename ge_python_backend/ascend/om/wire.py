"""A small, defensive protobuf wire-format decoder.

Only what the OM reader needs: one message level is indexed at a time (sub-messages are
decoded when asked for), every length is checked against the enclosing message, nesting is
limited to ``MAX_DEPTH`` and every error is an ``OmFormatError`` naming the message and the
absolute file offset. No schema, no generated code: callers ask for fields by number.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ge_python_backend.errors import OmFormatError

#: Deepest message nesting accepted (protobuf's own default limit is 100).
MAX_DEPTH = 64

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


class Message:
    """The top-level fields of one encoded message, indexed by field number.

    ``data[start:end]`` is the encoding; ``base`` is the file offset of ``data[0]`` (used only in
    error messages); ``what`` names the message for errors ("ModelDef", "OpDef 'conv1'").
    """

    def __init__(self, data: bytes, start: int, end: int, base: int, what: str, depth: int = 0) -> None:
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
        self.fields: dict[int, list[Field]] = {}
        self._index()

    def _index(self) -> None:
        data, pos, end, base, what = self.data, self.start, self.end, self.base, self.what
        while pos < end:
            tag_at = pos
            tag, pos = read_varint(data, pos, end, base, what)
            number, wire_type = tag >> 3, tag & 7
            if number == 0 or number >= 1 << 29:
                raise OmFormatError(f"{what}: invalid field number {number} in the tag at file offset {base + tag_at}")
            if wire_type == VARINT:
                value, pos = read_varint(data, pos, end, base, what)
                item = Field(number, wire_type, value)
            elif wire_type in (FIXED64, FIXED32):
                size = 8 if wire_type == FIXED64 else 4
                if pos + size > end:
                    raise OmFormatError(
                        f"{what}: field {number} ({_WIRE_NAMES[wire_type]}) at file offset {base + tag_at} "
                        f"needs {size} bytes, only {end - pos} left in the message"
                    )
                value = int.from_bytes(data[pos : pos + size], "little")
                pos += size
                item = Field(number, wire_type, value)
            elif wire_type == LEN:
                length, pos = read_varint(data, pos, end, base, what)
                if length > end - pos:
                    raise OmFormatError(
                        f"{what}: field {number} at file offset {base + tag_at} declares {length} bytes, "
                        f"only {end - pos} left in the message"
                    )
                item = Field(number, wire_type, 0, pos, pos + length)
                pos += length
            else:
                raise OmFormatError(
                    f"{what}: unsupported wire type {wire_type} (field {number}) at file offset {base + tag_at}; "
                    "expected varint, fixed32/64 or length-delimited"
                )
            self.fields.setdefault(number, []).append(item)

    # ----- access helpers (proto3 semantics: the last occurrence of a singular field wins)

    def _expect(self, item: Field, wire_type: int, label: str) -> Field:
        if item.wire_type != wire_type:
            raise OmFormatError(
                f"{self.what}: field {item.number} ({label}) has wire type "
                f"{_WIRE_NAMES.get(item.wire_type, item.wire_type)}, expected {_WIRE_NAMES[wire_type]}"
            )
        return item

    def has(self, number: int) -> bool:
        return number in self.fields

    def uint(self, number: int, label: str, default: int = 0) -> int:
        items = self.fields.get(number)
        return self._expect(items[-1], VARINT, label).value if items else default

    def int64(self, number: int, label: str, default: int = 0) -> int:
        return as_int64(self.uint(number, label, default))

    def float32(self, number: int, label: str) -> float:
        items = self.fields.get(number)
        if not items:
            return 0.0
        return struct.unpack("<f", self._expect(items[-1], FIXED32, label).value.to_bytes(4, "little"))[0]

    def raw(self, number: int, label: str) -> bytes:
        items = self.fields.get(number)
        if not items:
            return b""
        item = self._expect(items[-1], LEN, label)
        return bytes(self.data[item.start : item.end])

    def string(self, number: int, label: str) -> str:
        return self.raw(number, label).decode("utf-8", errors="replace")

    def strings(self, number: int, label: str) -> list[str]:
        return [
            bytes(self.data[i.start : i.end]).decode("utf-8", errors="replace")
            for i in (self._expect(item, LEN, label) for item in self.fields.get(number, ()))
        ]

    def message(self, number: int, what: str) -> Message | None:
        items = self.fields.get(number)
        return self._sub(items[-1], what) if items else None

    def messages(self, number: int, what: str) -> list[Message]:
        return [self._sub(item, f"{what}[{i}]") for i, item in enumerate(self.fields.get(number, ()))]

    def _sub(self, item: Field, what: str) -> Message:
        item = self._expect(item, LEN, what)
        return Message(self.data, item.start, item.end, self.base, f"{self.what}.{what}", self.depth + 1)

    def repeated_uints(self, number: int, label: str) -> list[int]:
        """A repeated varint field, packed or not (varint encoding: int64, bool, enum)."""
        values: list[int] = []
        for item in self.fields.get(number, ()):
            if item.wire_type == VARINT:
                values.append(item.value)
            elif item.wire_type == LEN:
                pos = item.start
                while pos < item.end:
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
        for item in self.fields.get(number, ()):
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
