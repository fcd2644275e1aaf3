"""GE data type and format enums, and their mapping to Triton data type names.

Two data type enums exist: the C++ ``ge::DataType`` used by MODEL_INOUT_INFO (DT_FLOAT=0,
DT_FLOAT16=1, ...; hicann/ge inc/framework/executor_c/types.h:155-189, formats 95-153) and the
protobuf ``ge.proto.DataType`` used by MODEL_DEF tensor descriptors (DT_UNDEFINED=0, DT_FLOAT=1,
...; graph_metadef/proto/ge_ir.proto:14-58). Both map to the same native names ("DT_FLOAT"),
which map to Triton names ("FP32") where one exists.
"""

from __future__ import annotations

_COMMON = (
    "DT_STRING",
    "DT_DUAL_SUB_INT8",
    "DT_DUAL_SUB_UINT8",
    "DT_COMPLEX64",
    "DT_COMPLEX128",
    "DT_QINT8",
    "DT_QINT16",
    "DT_QINT32",
    "DT_QUINT8",
    "DT_QUINT16",
    "DT_RESOURCE",
    "DT_STRING_REF",
    "DT_DUAL",
    "DT_VARIANT",
    "DT_BF16",
)  # values 13..27 in both enums
_LOW_PRECISION = (
    "DT_INT4",
    "DT_UINT1",
    "DT_INT2",
    "DT_UINT2",
    "DT_COMPLEX32",
    "DT_HIFLOAT8",
    "DT_FLOAT8_E5M2",
    "DT_FLOAT8_E4M3FN",
    "DT_FLOAT8_E8M0",
    "DT_FLOAT6_E3M2",
    "DT_FLOAT6_E2M3",
    "DT_FLOAT4_E2M1",
    "DT_FLOAT4_E1M2",
    "DT_HIFLOAT4",
    "DT_HIFLOAT4_SCALE",
)

#: ge::DataType (C++, MODEL_INOUT_INFO) value -> native name. 5 is reserved.
GE_DATA_TYPES: dict[int, str] = {
    0: "DT_FLOAT",
    1: "DT_FLOAT16",
    2: "DT_INT8",
    3: "DT_INT32",
    4: "DT_UINT8",
    6: "DT_INT16",
    7: "DT_UINT16",
    8: "DT_UINT32",
    9: "DT_INT64",
    10: "DT_UINT64",
    11: "DT_DOUBLE",
    12: "DT_BOOL",
    **{13 + i: name for i, name in enumerate(_COMMON)},
    28: "DT_UNDEFINED",
    **{29 + i: name for i, name in enumerate(_LOW_PRECISION)},
}

#: ge.proto.DataType (protobuf, MODEL_DEF) value -> native name.
PROTO_DATA_TYPES: dict[int, str] = {
    0: "DT_UNDEFINED",
    1: "DT_FLOAT",
    2: "DT_FLOAT16",
    3: "DT_INT8",
    4: "DT_UINT8",
    5: "DT_INT16",
    6: "DT_UINT16",
    7: "DT_INT32",
    8: "DT_INT64",
    9: "DT_UINT32",
    10: "DT_UINT64",
    11: "DT_BOOL",
    12: "DT_DOUBLE",
    **{13 + i: name for i, name in enumerate(_COMMON)},
    **{28 + i: name for i, name in enumerate(_LOW_PRECISION)},
}

#: native name -> Triton API data type name (specs.NUMPY_DTYPES keys).
TRITON_TYPES: dict[str, str] = {
    "DT_FLOAT": "FP32",
    "DT_FLOAT16": "FP16",
    "DT_DOUBLE": "FP64",
    "DT_BF16": "BF16",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
    "DT_BOOL": "BOOL",
    "DT_STRING": "BYTES",
}

#: ge::Format primary value (format & 0xff) -> name.
FORMAT_NAMES: dict[int, str] = dict(
    enumerate(
        (
            "NCHW",
            "NHWC",
            "ND",
            "NC1HWC0",
            "FRACTAL_Z",
            "NC1C0HWPAD",
            "NHWC1C0",
            "FSR_NCHW",
            "FRACTAL_DECONV",
            "C1HWNC0",
            "FRACTAL_DECONV_TRANSPOSE",
            "FRACTAL_DECONV_SP_STRIDE_TRANS",
            "NC1HWC0_C04",
            "FRACTAL_Z_C04",
            "CHWN",
            "FRACTAL_DECONV_SP_STRIDE8_TRANS",
            "HWCN",
            "NC1KHKWHWC0",
            "BN_WEIGHT",
            "FILTER_HWCK",
            "HASHTABLE_LOOKUP_LOOKUPS",
            "HASHTABLE_LOOKUP_KEYS",
            "HASHTABLE_LOOKUP_VALUE",
            "HASHTABLE_LOOKUP_OUTPUT",
            "HASHTABLE_LOOKUP_HITS",
            "C1HWNCoC0",
            "MD",
            "NDHWC",
            "FRACTAL_ZZ",
            "FRACTAL_NZ",
            "NCDHW",
            "DHWCN",
            "NDC1HWC0",
            "FRACTAL_Z_3D",
            "CN",
            "NC",
            "DHWNC",
            "FRACTAL_Z_3D_TRANSPOSE",
            "FRACTAL_ZN_LSTM",
            "FRACTAL_Z_G",
            "RESERVED",
            "ALL",
            "NULL",
            "ND_RNN_BIAS",
            "FRACTAL_ZN_RNN",
            "NYUV",
            "NYUV_A",
            "NCL",
            "FRACTAL_Z_WINO",
            "C1HWC0",
            "FRACTAL_NZ_C0_16",
            "FRACTAL_NZ_C0_32",
            "FRACTAL_NZ_C0_2",
            "FRACTAL_NZ_C0_4",
            "FRACTAL_NZ_C0_8",
        )
    )
)


def ge_type_name(value: int) -> str:
    """Native name of a ge::DataType value (MODEL_INOUT_INFO)."""
    return GE_DATA_TYPES.get(value, f"ge::DataType({value})")


def proto_type_name(value: int) -> str:
    """Native name of a ge.proto.DataType value (MODEL_DEF)."""
    return PROTO_DATA_TYPES.get(value, f"ge.proto.DataType({value})")


def triton_type(native: str) -> str:
    """Triton API name of a native type, "" when Triton has no equivalent."""
    return TRITON_TYPES.get(native, "")


def format_name(value: int) -> str:
    """Name of a ge::Format value; sub-format and C0 bits are ignored (primary = value & 0xff)."""
    primary = value & 0xFF
    return FORMAT_NAMES.get(primary, f"FORMAT({primary})")
