"""MODEL_INOUT_INFO TLV decoding against TLVs the builder lays out."""

from __future__ import annotations

import struct

import pytest

from ge_python_backend.ascend.om.inout import parse_inout
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import FORMATS, inout_tensor, tlv, tlv_descs, tlv_int_lists, tlv_strings


def test_tensor_descs_with_dims_v2_and_shape_range():
    inputs = [
        inout_tensor(
            "img",
            "DT_FLOAT16",
            FORMATS["NCHW"],
            (-1, 3, 224, 224),
            dims_v2=(1, 3, 224, 224),
            shape_range=[(1, 8), (3, 3)],
            size=301056,
        ),
        inout_tensor("ids", "DT_INT64", FORMATS["ND"], ()),
    ]
    outputs = [inout_tensor("out:0", "DT_FLOAT", FORMATS["ND"], (-1, 1000))]
    info = parse_inout(tlv_descs(0, inputs) + tlv_descs(1, outputs), base=500)
    img, ids = info.inputs
    assert (img.name, img.dtype, img.format, img.size) == ("img", 1, 0, 301056)
    assert img.dims == (-1, 3, 224, 224) and img.dims_v2 == (1, 3, 224, 224)
    assert img.shape_range == ((1, 8), (3, 3))
    assert (ids.name, ids.dtype, ids.dims) == ("ids", 9, ())
    assert [(o.name, o.dtype, o.dims) for o in info.outputs] == [("out:0", 0, (-1, 1000))]
    assert info.batch_gears == () and info.hw_gears == () and info.shape_order == ()


def test_gear_tlvs():
    data = (
        tlv(2, struct.pack("<I3q", 3, 1, 4, 8))
        + tlv_int_lists(3, [[224, 224], [448, 448]])
        + tlv_int_lists(4, [[1, 2, 3], [4]])
        + tlv_strings(5, ["a:1,2", "b:3"])
        + tlv_strings(6, ["y", "x"])
    )
    info = parse_inout(data, base=0)
    assert info.batch_gears == (1, 4, 8)
    assert info.hw_gears == ((224, 224), (448, 448))
    assert info.dims_gears == ((1, 2, 3), (4,))
    assert info.dynamic_output_shapes == ("a:1,2", "b:3")
    assert info.shape_order == ("y", "x")


def test_unknown_tlv_types_are_skipped():
    data = tlv(99, b"future") + tlv_strings(6, ["x"])
    assert parse_inout(data, base=0).shape_order == ("x",)


def test_empty_partition_has_nothing():
    info = parse_inout(b"", base=0)
    assert info.inputs == () and info.outputs == ()


@pytest.mark.parametrize(
    "data, pattern",
    [
        (b"\x00\x00\x00", r"3 trailing bytes at file offset 100, too short for a TLV header"),
        (struct.pack("<II", 0, 50) + b"\x00" * 10, r"TLV type 0 at file offset 100 declares 50 bytes, only 10 remain"),
        (
            tlv(0, struct.pack("<I", 2) + bytes(32)),
            r"tensor 1 of 2 base info needs 32 bytes at file offset 144, only 0 left",
        ),
        (
            tlv(0, struct.pack("<I", 1) + struct.pack("<QiiIIII", 0, 0, 0, 0, 12, 0, 0) + bytes(12)),
            r"tensor 0 of 1 dims is 12 bytes .* not a multiple of 8",
        ),
        (
            tlv(0, struct.pack("<I", 1) + struct.pack("<QiiIIII", 0, 0, 0, 0, 0, 0, 8) + bytes(8)),
            r"shape range is 8 bytes .* not a multiple of 16",
        ),
        (tlv(2, struct.pack("<I", 1_000_000_000)), r"values needs 8000000000 bytes"),
        (tlv(3, struct.pack("<II", 1, 3) + bytes(8)), r"list 0 values needs 24 bytes"),
        (tlv(6, struct.pack("<I", 1)), r"string lengths needs 4 bytes"),
        (
            tlv(2, struct.pack("<Iq", 1, 5) + b"junk"),
            r"MODEL_DYNAMIC_BATCH .* declares 16 bytes but its content uses 12",
        ),
        (tlv_strings(6, ["x"]) + tlv_strings(6, ["y"]), r"MODEL_DESIGNATE_SHAPE_ORDER .* occurs twice"),
    ],
)
def test_malformed_tlvs(data, pattern):
    with pytest.raises(OmFormatError, match=pattern):
        parse_inout(data, base=100)
