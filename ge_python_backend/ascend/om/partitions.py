"""Partition tables: where each model's MODEL_DEF, weights, kernels, ... live in the body.

Two table layouts follow the header (hicann/ge inc/framework/common/framework_types_internal.h:
746-774, ``TinyModelPartitionTable`` and ``ModelPartitionTable``; partition types 703-724):

- Tiny (32-bit): ``u32 num`` then ``num`` x {u32 type, u32 mem_offset, u32 mem_size};
- 64-bit: ``u32 num, u32 pad`` then ``num`` x {u32 type, u32 pad, u64 mem_offset, u64 mem_size}.

Partition data follows its table; ``mem_offset`` counts from the table end. GE itself walks
the partitions sequentially by size; this reader locates them by ``mem_offset`` and requires
it to agree with that walk (partitions in order, none overlapping, gaps allowed only for
alignment padding of at most ``MAX_ALIGN_GAP`` bytes). A multi-model file holds ``model_num``
[table][partitions] blocks back to back; the last one must end exactly at the end of the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ge_python_backend.ascend.om.header import HEADER_SIZE, OmHeader
from ge_python_backend.ascend.om.source import FileSource
from ge_python_backend.errors import OmFormatError

PARTITION_TYPE_NAMES = {
    0: "MODEL_DEF",
    1: "WEIGHTS_DATA",
    2: "TASK_INFO",
    3: "TBE_KERNELS",
    4: "CUST_AICPU_KERNELS",
    5: "SO_BINS",
    6: "FLOW_MODEL",
    7: "FLOW_SUBMODEL",
    8: "MODEL_INOUT_INFO",
    9: "STATIC_TASK_DESC",
    10: "DYNAMIC_TASK_DESC",
    11: "TASK_PARAM",
    12: "TILING_DATA",
    20: "PRE_MODEL_DESC",
    21: "PRE_MODEL_SQE",
    22: "PRE_KERNEL_ARGS",
    23: "PRE_MODEL_DESC_EXTEND",
    24: "BUNDLE_MODEL_INFO",
    25: "BUNDLE_MODEL_VAR_INFO",
    26: "CUSTOM_OPS",
}
MODEL_DEF = 0
MODEL_INOUT_INFO = 8

#: Largest gap tolerated between one partition's end and the next one's mem_offset.
MAX_ALIGN_GAP = 4096


@dataclass(frozen=True)
class Partition:
    """One partition: ``offset`` is its absolute position in the file."""

    type: int
    offset: int
    size: int
    mem_offset: int

    @property
    def type_name(self) -> str:
        return PARTITION_TYPE_NAMES.get(self.type, f"UNKNOWN_{self.type}")


@dataclass(frozen=True)
class ModelBlock:
    """One model's partition table and partitions."""

    index: int
    table_offset: int
    table_bits: int
    partitions: tuple[Partition, ...]

    @property
    def end(self) -> int:
        return max((p.offset + p.size for p in self.partitions), default=self.table_offset)

    def find(self, partition_type: int) -> Partition | None:
        """The first partition of a type (MODEL_DEF and MODEL_INOUT_INFO occur once)."""
        return next((p for p in self.partitions if p.type == partition_type), None)


def read_blocks(header: OmHeader, body: FileSource) -> tuple[ModelBlock, ...]:
    """Walk every model block of the body and check that together they fill it exactly."""
    file_end = HEADER_SIZE + header.body_length
    count = header.model_num if header.is_multi_model else 1
    if header.is_multi_model and count == 0:
        raise OmFormatError("header: model_num is 0 but is_unknow_model marks a multi-model file")
    blocks: list[ModelBlock] = []
    position = HEADER_SIZE
    for index in range(count):
        if position >= file_end:
            raise OmFormatError(
                f"model {index} of {count}: partition table expected at file offset {position}, "
                f"but the body ends at {file_end}"
            )
        block = _read_block(index, position, header.uses_64bit_table, body, file_end)
        blocks.append(block)
        position = block.end
    if position != file_end:
        raise OmFormatError(
            f"the partitions of {count} model(s) end at file offset {position}, "
            f"but the header's body length puts the end of the file at {file_end}"
        )
    return tuple(blocks)


def _read_block(index: int, table_offset: int, wide: bool, body: FileSource, file_end: int) -> ModelBlock:
    what = f"model {index} partition table ({'64' if wide else '32'}-bit) at file offset {table_offset}"
    head_size, entry_size = (8, 24) if wide else (4, 12)
    (num,) = struct.unpack("<I", body.read(table_offset, 4, what))
    if num == 0:
        raise OmFormatError(f"{what}: the table lists no partitions")
    room = file_end - table_offset - head_size
    if num > room // entry_size:
        raise OmFormatError(
            f"{what}: {num} entries of {entry_size} bytes need {num * entry_size} bytes, "
            f"only {max(room, 0)} remain in the file"
        )
    raw = body.read(table_offset + head_size, num * entry_size, what)
    data_start = table_offset + head_size + num * entry_size
    partitions: list[Partition] = []
    expected = 0  # where the sequential walk puts the next partition (relative to data_start)
    for i in range(num):
        if wide:
            ptype, _pad, mem_offset, size = struct.unpack_from("<IIQQ", raw, i * entry_size)
        else:
            ptype, mem_offset, size = struct.unpack_from("<III", raw, i * entry_size)
        label = f"{what}: partition {i} ({PARTITION_TYPE_NAMES.get(ptype, f'type {ptype}')})"
        if not expected <= mem_offset <= expected + MAX_ALIGN_GAP:
            raise OmFormatError(
                f"{label}: mem_offset {mem_offset} disagrees with the sequential walk, which puts it at {expected}"
            )
        offset = data_start + mem_offset
        if offset + size > file_end:
            raise OmFormatError(
                f"{label}: {size} bytes at file offset {offset} run past the end of the body (file offset {file_end})"
            )
        partitions.append(Partition(ptype, offset, size, mem_offset))
        expected = mem_offset + size
    return ModelBlock(index, table_offset, 64 if wide else 32, tuple(partitions))
