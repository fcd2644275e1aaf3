"""Header decoding (v1.0 and v2.0) and recognition of files that only look like an OM."""

from __future__ import annotations

import re
import struct

import pytest

from ge_python_backend.ascend.om.header import identify, parse_header
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import VERSION_1, VERSION_2, Header, header_bytes


def test_v2_header_fields_at_their_offsets():
    raw = header_bytes(
        Header(
            version=VERSION_2,
            model_type=3,
            name="resnet50",
            platform_version="1.11.z.0",
            om_ir_version=2,
            model_num=3,
            is_unknow_model=1,
        ),
        length=0,
        model_length=123456,
    )
    h = parse_header(raw)
    assert (h.version, h.version_name, h.model_type, h.model_type_name) == (VERSION_2, "2.0", 3, "flow")
    assert (h.name, h.platform_version, h.om_ir_version) == ("resnet50", "1.11.z.0", 2)
    assert (h.model_num, h.is_unknow_model, h.model_length, h.length) == (3, 1, 123456, 0)
    assert h.body_length == 123456
    assert h.uses_64bit_table and h.is_multi_model


def test_v1_header_has_platform_version_at_156_and_no_model_num():
    raw = header_bytes(Header(version=VERSION_1, name="old", platform_version="1.0.z.0"), length=999, model_length=0)
    h = parse_header(raw)
    assert (h.version_name, h.name, h.platform_version) == ("1.0", "old", "1.0.z.0")
    assert (h.model_num, h.model_length, h.is_unknow_model, h.body_length) == (1, 0, 0, 999)
    assert not h.uses_64bit_table and not h.is_multi_model


def test_table_choice_and_multi_model_rule():
    tiny = parse_header(header_bytes(Header(model_num=1), length=10, model_length=0))
    assert not tiny.uses_64bit_table and not tiny.is_multi_model
    wide = parse_header(header_bytes(Header(model_num=2), length=0, model_length=10))
    assert wide.uses_64bit_table and wide.is_multi_model
    unknown = parse_header(header_bytes(Header(model_num=1, is_unknow_model=1), length=0, model_length=10))
    assert unknown.is_multi_model


def _imod(headsize: int = 256, version: int = VERSION_2) -> bytes:
    return struct.pack("<4sII", b"IMOD", headsize, version) + bytes(244)


@pytest.mark.parametrize(
    "prefix, pattern",
    [
        # the simulator's own format is the simulator's to recognise (through the engine registry)
        (b"GESIMOM\x00" + bytes(300), r"does not start with the OM magic b'IMOD' \(found b'GESIMOM"),
        (b"PK\x03\x04" + bytes(300), "ZIP archive .*OM2"),
        (b"PICO" + bytes(300), "SVP \\(PICO\\)"),
        (b"\x08\x07\x12\x07pytorch\x1a\x032.1" + bytes(40), "looks like an ONNX model"),
        (b"\x7fELF" + bytes(300), r"does not start with the OM magic b'IMOD' \(found b'\\x7fELF"),
        (b"IMOD" + bytes(20), "only 24 bytes, shorter than the 256-byte OM header"),
        (
            b"IMODV1.2" + bytes(300),
            f"header size field is {int.from_bytes(b'V1.2', 'little')} \\(expected 256\\).*IMOD-lookalike",
        ),
        (_imod(version=0x30000000), "version 0x30000000 \\(expected 0x10000000 or 0x20000000\\)"),
    ],
)
def test_lookalikes_are_named(prefix, pattern):
    reason = identify(prefix)
    assert reason is not None and re.search(pattern, reason), reason
    with pytest.raises(OmFormatError, match=pattern):
        parse_header(prefix)


def test_hiai_fields_in_a_v1_header_mark_a_hiai_om():
    raw = bytearray(_imod(version=VERSION_1))
    struct.pack_into("<I", raw, 184, 3)  # HiAI multi_shape_gears
    assert "HiAI" in (identify(bytes(raw)) or "")
    raw = bytearray(_imod(version=VERSION_2))
    struct.pack_into("<Q", raw, 184, 3)  # the same bytes are model_length in v2.0
    assert identify(bytes(raw)) is None


def test_cann_headers_are_accepted():
    assert identify(_imod(version=VERSION_1)) is None
    assert identify(_imod(version=VERSION_2)) is None
