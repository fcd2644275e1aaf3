"""The protobuf wire decoder against bytes encoded by the test builder."""

from __future__ import annotations

import pytest

from ge_python_backend.ascend.om.wire import MAX_DEPTH, MAX_NUMBERS, Message
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import f_bytes, f_float, f_int, f_packed, tag, varint


def parse(data: bytes, base: int = 0) -> Message:
    return Message(data, 0, len(data), base, "Test")


def test_scalars_strings_and_last_occurrence_wins():
    data = f_int(1, 150) + f_bytes(2, "héllo") + f_int(1, 7) + f_float(3, 1.5) + f_int(4, -5)
    msg = parse(data)
    assert msg.uint(1, "a") == 7
    assert msg.string(2, "b") == "héllo"
    assert msg.float32(3, "c") == 1.5
    assert msg.int64(4, "d") == -5
    assert msg.uint(9, "missing", default=42) == 42
    assert msg.string(9, "missing") == ""


def test_repeated_ints_packed_and_unpacked_mix():
    data = f_packed(5, [1, -2, 300]) + f_int(5, 4) + f_int(5, -1)
    assert parse(data).repeated_int64s(5, "dims") == [1, -2, 300, 4, -1]


def test_repeated_floats_packed_and_unpacked():
    import struct

    packed = f_bytes(4, struct.pack("<2f", 0.5, 2.0))
    assert parse(packed + f_float(4, -1.0)).repeated_floats(4, "f") == [0.5, 2.0, -1.0]


def test_nested_messages_and_repeated_strings():
    inner = f_bytes(1, "op_a") + f_bytes(2, "Data")
    data = f_bytes(6, inner) + f_bytes(6, f_bytes(1, "op_b")) + f_bytes(24, "x") + f_bytes(24, "y")
    msg = parse(data)
    ops = msg.messages(6, "op")
    assert [op.string(1, "name") for op in ops] == ["op_a", "op_b"]
    assert ops[0].string(2, "type") == "Data"
    assert msg.strings(24, "src_name") == ["x", "y"]
    assert msg.message(7, "absent") is None


def test_error_offsets_are_absolute_file_offsets():
    data = f_int(1, 1) + tag(2, 2) + varint(50) + b"abc"  # declares 50 bytes, has 3
    with pytest.raises(OmFormatError, match=r"field 2 at file offset 1002 declares 50 bytes, only 3 left"):
        parse(data, base=1000)


@pytest.mark.parametrize(
    "data, pattern",
    [
        (b"\x08", "varint at file offset 1 runs past the end"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\x08" + b"\xff" * 9 + b"\x7f", "exceeds 64 bits"),
        (tag(1, 3), "unsupported wire type 3"),
        (tag(1, 4), "unsupported wire type 4"),
        (tag(1, 6), "unsupported wire type 6"),
        (b"\x00", "invalid field number 0"),
        (tag(1, 5) + b"\x01\x02", r"needs 4 bytes, only 2 left"),
        (tag(1, 1) + b"\x01", r"needs 8 bytes, only 1 left"),
    ],
)
def test_malformed_encodings_raise_om_format_error(data, pattern):
    with pytest.raises(OmFormatError, match=pattern):
        parse(data)


def test_wrong_wire_type_for_requested_field():
    msg = parse(f_int(1, 3))
    with pytest.raises(OmFormatError, match=r"field 1 \(name\) has wire type varint, expected length-delimited"):
        msg.string(1, "name")
    msg = parse(f_bytes(2, "x"))
    with pytest.raises(OmFormatError, match=r"field 2 \(version\) has wire type length-delimited, expected varint"):
        msg.uint(2, "version")


def test_packed_float_length_must_be_a_multiple_of_four():
    with pytest.raises(OmFormatError, match="not a multiple of 4"):
        parse(f_bytes(4, b"\x00" * 6)).repeated_floats(4, "f")


def test_nesting_deeper_than_the_limit_is_refused():
    data = b""
    for _ in range(MAX_DEPTH + 2):
        data = f_bytes(1, data)
    msg: Message | None = parse(data)
    with pytest.raises(OmFormatError, match=f"nested deeper than {MAX_DEPTH} levels"):
        for _ in range(MAX_DEPTH + 2):
            assert msg is not None
            msg = msg.message(1, "child")


def test_a_message_with_more_distinct_field_numbers_than_any_ge_message_is_refused():
    data = b"".join(varint(number << 3) + b"\x00" for number in range(1, MAX_NUMBERS + 2))
    with pytest.raises(OmFormatError, match=f"more than {MAX_NUMBERS} distinct field numbers in one message"):
        parse(data)
    assert parse(data[: -len(varint((MAX_NUMBERS + 1) << 3)) - 1]).has(MAX_NUMBERS)


def test_fields_are_decoded_again_when_asked_for_in_their_order():
    data = f_int(3, 7) + f_bytes(5, b"a") + f_int(3, 8) + f_bytes(5, b"b")
    msg = parse(data)
    assert msg.uint(3, "n") == 8 and msg.strings(5, "s") == ["a", "b"] and msg.repeated_uints(3, "n") == [7, 8]
