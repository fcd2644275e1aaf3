"""The 256-byte CANN OM file header (``ModelFileHeader``), versions 1.0 and 2.0.

Layout (little-endian), GE's ``struct ModelFileHeader`` (hicann/ge
inc/framework/common/framework_types_internal.h:672-695; model types 736-744):

    0 magic u32 "IMOD" | 4 headsize u32 (256) | 8 version u32 | 12 checksum[64] | 76 length u32
    80 is_encrypt u8 | 81 is_checksum u8 | 82 modeltype u8 | 83 genmode u8 | 84 name[32] | 116 ops u32
    120 userdefineinfo[32] | 152 om_ir_version u32
    v1.0: 156 platform_version[20] | 176 platform_type u8 | reserved
    v2.0: 156 model_num u32 | 160 platform_version[20] | 180 platform_type u8 | 184 model_length u64
          192 need_check_os_cpu_info u8 | 193 is_unknow_model u8 | reserved

Before the header is trusted, ``identify`` names the files that only look like an OM (ONNX,
ZIP/OM2, SVP, HiAI, other "IMOD" formats).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ge_python_backend.errors import OmFormatError

HEADER_SIZE = 256
MAGIC = b"IMOD"
VERSION_1 = 0x10000000
VERSION_2 = 0x20000000
VERSION_NAMES = {VERSION_1: "1.0", VERSION_2: "2.0"}

MODEL_TYPE_NAMES = {0: "IR", 1: "standard", 2: "OM Tiny", 3: "flow", 4: "lite", 5: "bundle"}
FLOW_MODEL_TYPE = 3

# HiAI (Kirin "mobile") OMs share the v1.0 header up to platform_type, then put
# heter_tuning_flag (177), custom_data_len (180), multi_shape_gears (184) and
# custom_lib_info[16] (188) where a CANN v1.0 header has zero reserved bytes.
_HIAI_FIELDS = slice(177, 204)


@dataclass(frozen=True)
class OmHeader:
    """The decoded file header. ``model_num`` is 1 and the v2.0-only fields are 0 in v1.0 files."""

    version: int
    length: int
    is_encrypt: int
    is_checksum: int
    model_type: int
    genmode: int
    name: str
    ops: int
    om_ir_version: int
    model_num: int
    platform_version: str
    platform_type: int
    model_length: int
    need_check_os_cpu_info: int
    is_unknow_model: int

    @property
    def version_name(self) -> str:
        return VERSION_NAMES[self.version]

    @property
    def model_type_name(self) -> str:
        return MODEL_TYPE_NAMES.get(self.model_type, f"unknown ({self.model_type})")

    @property
    def body_length(self) -> int:
        """Bytes after the header: ``model_length`` when set, else ``length``."""
        return self.model_length or self.length

    @property
    def uses_64bit_table(self) -> bool:
        """GE's rule: the 64-bit partition table for flow models or when model_length is set."""
        return self.model_type == FLOW_MODEL_TYPE or self.model_length != 0

    @property
    def is_multi_model(self) -> bool:
        """GE's IsDynamicModel: the body holds ``model_num`` [table][partitions] blocks."""
        return self.version >= VERSION_2 and (self.model_num > 1 or self.is_unknow_model == 1)


def _cstring(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _looks_like_onnx(prefix: bytes) -> bool:
    # ONNX ModelProto starts with ir_version (field 1, varint) followed by producer_name,
    # producer_version, domain, graph or opset_import (fields 2, 3, 4, 7, 8: length-delimited).
    return len(prefix) >= 3 and prefix[0] == 0x08 and prefix[1] < 0x80 and prefix[2] in (0x12, 0x1A, 0x22, 0x3A, 0x42)


def identify(prefix: bytes) -> str | None:
    """Why ``prefix`` (the first bytes of a file) is not a CANN OM, or None when it may be one."""
    if not prefix:
        return "is empty, not a CANN OM"
    if prefix.startswith(b"PK\x03\x04"):
        return "is a ZIP archive (an OM2 package or another zipped model), not an IMOD-format CANN OM"
    if prefix.startswith(b"PICO"):
        return "is an SVP (PICO) offline model, not a CANN OM"
    if not prefix.startswith(MAGIC):
        if _looks_like_onnx(prefix):
            return "looks like an ONNX model (protobuf ModelProto), not a CANN OM"
        return f"does not start with the OM magic b'IMOD' (found {prefix[:8]!r})"
    if len(prefix) < HEADER_SIZE:
        return f"starts with b'IMOD' but is only {len(prefix)} bytes, shorter than the {HEADER_SIZE}-byte OM header"
    headsize, version = struct.unpack_from("<II", prefix, 4)
    if headsize != HEADER_SIZE:
        return (
            f"starts with b'IMOD' but its header size field is {headsize} (expected {HEADER_SIZE}): "
            "another IMOD-lookalike format (e.g. an IMOD tomography model), not a CANN OM"
        )
    if version not in VERSION_NAMES:
        return (
            f"starts with b'IMOD' but has version 0x{version:08x} "
            f"(expected 0x{VERSION_1:08x} or 0x{VERSION_2:08x}): not a CANN OM"
        )
    if version == VERSION_1 and any(prefix[_HIAI_FIELDS]):
        return (
            "is a HiAI (Kirin mobile) OM: its v1.0 header sets HiAI-only fields "
            f"(bytes {_HIAI_FIELDS.start}..{_HIAI_FIELDS.stop - 1} are not zero), not a CANN OM"
        )
    return None


def parse_header(raw: bytes) -> OmHeader:
    """Decode a header that ``identify`` accepted."""
    reason = identify(raw)
    if reason:
        raise OmFormatError(reason)
    version, length = struct.unpack_from("<I", raw, 8)[0], struct.unpack_from("<I", raw, 76)[0]
    is_encrypt, is_checksum, model_type, genmode = raw[80:84]
    ops, om_ir_version = struct.unpack_from("<I", raw, 116)[0], struct.unpack_from("<I", raw, 152)[0]
    if version == VERSION_1:
        model_num, platform_version, platform_type = 1, raw[156:176], raw[176]
        model_length = need_check = unknown = 0
    else:
        model_num = struct.unpack_from("<I", raw, 156)[0]
        platform_version, platform_type = raw[160:180], raw[180]
        model_length = struct.unpack_from("<Q", raw, 184)[0]
        need_check, unknown = raw[192], raw[193]
    return OmHeader(
        version=version,
        length=length,
        is_encrypt=is_encrypt,
        is_checksum=is_checksum,
        model_type=model_type,
        genmode=genmode,
        name=_cstring(raw[84:116]),
        ops=ops,
        om_ir_version=om_ir_version,
        model_num=model_num,
        platform_version=_cstring(platform_version),
        platform_type=platform_type,
        model_length=model_length,
        need_check_os_cpu_info=need_check,
        is_unknow_model=unknown,
    )
