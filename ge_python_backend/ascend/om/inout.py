"""The MODEL_INOUT_INFO partition: a TLV summary of a model's inputs, outputs and gears.

Each TLV is ``{u32 type; u32 len; u8 value[len]}`` (hicann/ge
inc/framework/common/ge_model_inout_types.h:41-65: ``ModelDescType``, ``ModelDescTlvConfig``,
``ModelTensorDescBaseInfo``; written by ``ModelIntroduction::SaveTlvBlock``,
base/common/model/model_introduction.cc 339):

- 0 / 1 inputs / outputs: ``u32 n`` then n x [32-byte base info ``u64 size, i32 format, i32 dt,
  u32 name_len, u32 dims_len, u32 dimsV2_len, u32 shape_range_len``, then name bytes,
  ``i64 dims[]``, ``i64 dimsV2[]``, ``(i64, i64) shape_range[]``]; the ``*_len`` fields count bytes;
- 2 dynamic batch: ``u32 n; i64 batch[n]``;
- 3 / 4 dynamic HW / dims: ``u32 n; u32 count[n]; i64 values[sum(count)]``;
- 5 / 6 dynamic output shapes / designated shape order: ``u32 n; u32 len[n]; bytes...``.

``format`` and ``dt`` are the C++ ``ge::Format`` / ``ge::DataType`` enums. Unknown TLV types
are skipped so that newer files still read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, replace

from ge_python_backend.errors import OmFormatError

INPUT_DESC, OUTPUT_DESC, DYNAMIC_BATCH, DYNAMIC_HW, DYNAMIC_DIMS, DYNAMIC_OUTPUT_SHAPE, SHAPE_ORDER = range(7)
_TLV_NAMES = (
    "MODEL_INPUT_DESC",
    "MODEL_OUTPUT_DESC",
    "MODEL_DYNAMIC_BATCH",
    "MODEL_DYNAMIC_HW",
    "MODEL_DYNAMIC_DIMS",
    "MODEL_DYNAMIC_OUTPUT_SHAPE",
    "MODEL_DESIGNATE_SHAPE_ORDER",
)
_BASE_INFO = struct.Struct("<QiiIIII")


@dataclass(frozen=True)
class InoutTensor:
    """One tensor as MODEL_INOUT_INFO records it (``dtype``/``format``: ge:: C++ enums)."""

    name: str
    size: int
    format: int
    dtype: int
    dims: tuple[int, ...]
    dims_v2: tuple[int, ...]
    shape_range: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class InoutInfo:
    inputs: tuple[InoutTensor, ...] = ()
    outputs: tuple[InoutTensor, ...] = ()
    batch_gears: tuple[int, ...] = ()
    hw_gears: tuple[tuple[int, ...], ...] = ()
    dims_gears: tuple[tuple[int, ...], ...] = ()
    dynamic_output_shapes: tuple[str, ...] = ()
    shape_order: tuple[str, ...] = ()


class _Cursor:
    """Sequential little-endian reads inside one TLV value, each bounds-checked."""

    def __init__(self, data: bytes, start: int, end: int, base: int, what: str) -> None:
        self.data, self.pos, self.end, self.base, self.what = data, start, end, base, what

    def take(self, size: int, label: str) -> bytes:
        if size > self.end - self.pos:
            raise OmFormatError(
                f"{self.what}: {label} needs {size} bytes at file offset {self.base + self.pos}, "
                f"only {self.end - self.pos} left in the TLV"
            )
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def u32(self, label: str) -> int:
        return struct.unpack("<I", self.take(4, label))[0]

    def u32s(self, count: int, label: str) -> tuple[int, ...]:
        return struct.unpack(f"<{count}I", self.take(4 * count, label))

    def i64s(self, count: int, label: str) -> tuple[int, ...]:
        return struct.unpack(f"<{count}q", self.take(8 * count, label))

    def byte_array_of(self, size: int, item: int, label: str) -> int:
        """Element count of a ``size``-byte array of ``item``-byte elements."""
        if size % item:
            raise OmFormatError(
                f"{self.what}: {label} is {size} bytes at file offset {self.base + self.pos}, not a multiple of {item}"
            )
        return size // item

    def text(self, size: int, label: str) -> str:
        return self.take(size, label).decode("utf-8", errors="replace")


def parse_inout(data: bytes, base: int) -> InoutInfo:
    """Decode a MODEL_INOUT_INFO partition; ``base`` is its file offset (for error messages)."""
    info = InoutInfo()
    seen: set[int] = set()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 8:
            raise OmFormatError(
                f"MODEL_INOUT_INFO: {len(data) - pos} trailing bytes at file offset {base + pos}, "
                "too short for a TLV header (8 bytes)"
            )
        tlv_type, length = struct.unpack_from("<II", data, pos)
        start = pos + 8
        if length > len(data) - start:
            raise OmFormatError(
                f"MODEL_INOUT_INFO: TLV type {tlv_type} at file offset {base + pos} declares {length} bytes, "
                f"only {len(data) - start} remain in the partition"
            )
        pos = start + length
        if tlv_type >= len(_TLV_NAMES):
            continue
        what = f"MODEL_INOUT_INFO {_TLV_NAMES[tlv_type]} at file offset {base + start - 8}"
        if tlv_type in seen:
            raise OmFormatError(f"{what}: this TLV type occurs twice")
        seen.add(tlv_type)
        cursor = _Cursor(data, start, pos, base, what)
        info = _DECODERS[tlv_type](cursor, info)
        if cursor.pos != pos:
            raise OmFormatError(f"{what}: declares {length} bytes but its content uses {cursor.pos - start}")
    return info


def _tensor_descs(cursor: _Cursor) -> tuple[InoutTensor, ...]:
    count = cursor.u32("tensor count")
    tensors = []
    for i in range(count):
        label = f"tensor {i} of {count}"
        size, fmt, dtype, name_len, dims_len, dims_v2_len, range_len = _BASE_INFO.unpack(
            cursor.take(_BASE_INFO.size, f"{label} base info")
        )
        name = cursor.text(name_len, f"{label} name")
        dims = cursor.i64s(cursor.byte_array_of(dims_len, 8, f"{label} dims"), f"{label} dims")
        dims_v2 = cursor.i64s(cursor.byte_array_of(dims_v2_len, 8, f"{label} dimsV2"), f"{label} dimsV2")
        flat = cursor.i64s(2 * cursor.byte_array_of(range_len, 16, f"{label} shape range"), f"{label} shape range")
        tensors.append(InoutTensor(name, size, fmt, dtype, dims, dims_v2, tuple(zip(flat[::2], flat[1::2]))))
    return tuple(tensors)


def _int_list(cursor: _Cursor) -> tuple[int, ...]:
    return cursor.i64s(cursor.u32("value count"), "values")


def _int_lists(cursor: _Cursor) -> tuple[tuple[int, ...], ...]:
    counts = cursor.u32s(cursor.u32("list count"), "list lengths")
    return tuple(cursor.i64s(count, f"list {i} values") for i, count in enumerate(counts))


def _strings(cursor: _Cursor) -> tuple[str, ...]:
    lengths = cursor.u32s(cursor.u32("string count"), "string lengths")
    return tuple(cursor.text(length, f"string {i}") for i, length in enumerate(lengths))


# Indexed by TLV type: each decodes its TLV into the matching InoutInfo field (typed per field).
_DECODERS: tuple[Callable[[_Cursor, InoutInfo], InoutInfo], ...] = (
    lambda cursor, info: replace(info, inputs=_tensor_descs(cursor)),
    lambda cursor, info: replace(info, outputs=_tensor_descs(cursor)),
    lambda cursor, info: replace(info, batch_gears=_int_list(cursor)),
    lambda cursor, info: replace(info, hw_gears=_int_lists(cursor)),
    lambda cursor, info: replace(info, dims_gears=_int_lists(cursor)),
    lambda cursor, info: replace(info, dynamic_output_shapes=_strings(cursor)),
    lambda cursor, info: replace(info, shape_order=_strings(cursor)),
)
