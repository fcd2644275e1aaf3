"""Partition tables (Tiny 32-bit and 64-bit), the multi-model walk and their cross-checks."""

from __future__ import annotations

import io
import struct

import pytest

from ge_python_backend.ascend.om.header import parse_header
from ge_python_backend.ascend.om.partitions import read_blocks
from ge_python_backend.ascend.om.source import FileSource
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import (
    MODEL_DEF,
    TASK_INFO,
    VERSION_1,
    WEIGHTS_DATA,
    Header,
    header_bytes,
    om_file,
    partition_block,
)

PARTS = [(MODEL_DEF, b"m" * 10), (WEIGHTS_DATA, b"w" * 7), (TASK_INFO, b"t" * 3)]


def blocks_of(data: bytes):
    return read_blocks(parse_header(data[:256]), FileSource(io.BytesIO(data), len(data)))


def layout(blocks):
    return [[(p.type_name, p.offset, p.size) for p in b.partitions] for b in blocks]


def test_tiny_table_data_follows_a_12_byte_entry_table():
    data = om_file([PARTS], Header(wide=False))
    (block,) = blocks_of(data)
    start = 256 + 4 + 3 * 12
    assert block.table_bits == 32 and block.table_offset == 256
    assert layout([block]) == [
        [("MODEL_DEF", start, 10), ("WEIGHTS_DATA", start + 10, 7), ("TASK_INFO", start + 17, 3)]
    ]
    assert data[start : start + 10] == b"m" * 10


def test_64bit_table_has_an_8_byte_head_and_24_byte_entries():
    data = om_file([PARTS], Header(wide=True))
    (block,) = blocks_of(data)
    start = 256 + 8 + 3 * 24
    assert block.table_bits == 64
    assert [p.offset for p in block.partitions] == [start, start + 10, start + 17]
    assert block.find(WEIGHTS_DATA).size == 7 and block.find(8) is None


def test_v1_file_uses_the_tiny_table():
    data = om_file([PARTS], Header(version=VERSION_1))
    assert blocks_of(data)[0].table_bits == 32


def test_flow_model_uses_the_64bit_table():
    data = om_file([PARTS], Header(model_type=3))
    assert blocks_of(data)[0].table_bits == 64


def test_multi_model_blocks_are_walked_back_to_back():
    second = [(MODEL_DEF, b"a" * 5), (TASK_INFO, b"b" * 4)]
    third = [(MODEL_DEF, b"c" * 6)]
    data = om_file([PARTS, second, third], Header(wide=True, model_num=3, is_unknow_model=1))
    blocks = blocks_of(data)
    first_end = 256 + 8 + 3 * 24 + 20
    second_end = first_end + 8 + 2 * 24 + 9
    assert [b.table_offset for b in blocks] == [256, first_end, second_end]
    assert layout(blocks)[1] == [("MODEL_DEF", first_end + 56, 5), ("TASK_INFO", first_end + 61, 4)]
    assert blocks[2].end == len(data)


def test_is_unknow_model_alone_triggers_the_walk():
    data = om_file([PARTS], Header(wide=True, model_num=1, is_unknow_model=1))
    assert len(blocks_of(data)) == 1


def test_model_num_larger_than_the_blocks_present():
    data = om_file([PARTS], Header(wide=True, model_num=2, is_unknow_model=1))
    with pytest.raises(
        OmFormatError, match=r"model 1 of 2: partition table expected at file offset \d+, but the body ends"
    ):
        blocks_of(data)


def test_trailing_bytes_after_the_last_partition_are_refused():
    data = om_file([PARTS + [(TASK_INFO, b"x" * 5)]], Header(wide=False))
    # shrink the last entry's size by 5 so that 5 bytes are left over
    cut = bytearray(data)
    struct.pack_into("<I", cut, 256 + 4 + 3 * 12 + 8, 0)
    with pytest.raises(OmFormatError, match=r"end at file offset \d+, but the header's body length puts the end"):
        blocks_of(bytes(cut))


def _single(block: bytes, wide: bool) -> bytes:
    h = Header(wide=wide)
    return header_bytes(h, 0 if wide else len(block), len(block) if wide else 0) + block


@pytest.mark.parametrize("wide", [False, True])
def test_mem_offset_must_agree_with_the_sequential_walk(wide):
    overlapping = partition_block(PARTS, wide, mem_offsets=[0, 5, 17])
    with pytest.raises(OmFormatError, match=r"partition 1 \(WEIGHTS_DATA\): mem_offset 5 disagrees .* puts it at 10"):
        blocks_of(_single(overlapping, wide))


def test_small_alignment_gaps_are_accepted():
    aligned = partition_block(PARTS, True, mem_offsets=[0, 16, 32])
    (block,) = blocks_of(_single(aligned, True))
    start = 256 + 8 + 3 * 24
    assert [p.offset for p in block.partitions] == [start, start + 16, start + 32]


def test_empty_table_and_oversized_count():
    with pytest.raises(OmFormatError, match="the table lists no partitions"):
        blocks_of(_single(struct.pack("<I", 0), False))
    with pytest.raises(OmFormatError, match=r"4000000000 entries of 12 bytes need 48000000000 bytes, only \d+ remain"):
        blocks_of(_single(struct.pack("<I", 4_000_000_000) + bytes(20), False))


def test_partition_running_past_the_body():
    block = bytearray(partition_block(PARTS, False))
    struct.pack_into("<I", block, 4 + 2 * 12 + 8, 1000)  # TASK_INFO size
    with pytest.raises(
        OmFormatError, match=r"partition 2 \(TASK_INFO\): 1000 bytes at file offset \d+ run past the end"
    ):
        blocks_of(_single(bytes(block), False))
