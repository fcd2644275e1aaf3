"""Numeric constants of the pyACL contract (the ``acl`` module defines none itself).

Values and meanings follow the project reference ``pyacl.md`` §5. Used by the acl engine and
by the simulator, so both speak the same codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

ACL_SUCCESS = 0

#: ret code -> (name, meaning). pyacl.md §5.1 (generic) and §5.2 (runtime and GE).
RET_CODES: dict[int, tuple[str, str]] = {
    0: ("ACL_SUCCESS", "success"),
    100000: ("ACL_ERROR_INVALID_PARAM", "invalid parameter"),
    100001: ("ACL_ERROR_UNINITIALIZE", "acl.init has not been called"),
    100002: ("ACL_ERROR_REPEAT_INITIALIZE", "acl.init called again (harmless)"),
    100003: ("ACL_ERROR_INVALID_FILE", "invalid file"),
    100004: ("ACL_ERROR_WRITE_FILE", "file could not be written"),
    100005: ("ACL_ERROR_INVALID_FILE_SIZE", "invalid file size"),
    100006: ("ACL_ERROR_PARSE_FILE", "file could not be parsed"),
    100007: ("ACL_ERROR_FILE_MISSING_ATTR", "file misses an attribute"),
    100008: ("ACL_ERROR_FILE_ATTR_INVALID", "file has an invalid attribute"),
    100009: ("ACL_ERROR_INVALID_DUMP_CONFIG", "invalid dump configuration"),
    100010: ("ACL_ERROR_INVALID_PROFILING_CONFIG", "invalid profiling configuration"),
    100011: ("ACL_ERROR_INVALID_MODEL_ID", "unknown model id"),
    100012: ("ACL_ERROR_DESERIALIZE_MODEL", "model could not be deserialized"),
    100013: ("ACL_ERROR_PARSE_MODEL", "model could not be parsed"),
    100014: ("ACL_ERROR_READ_MODEL_FAILURE", "model file could not be read (bad path or unreadable .om)"),
    100015: ("ACL_ERROR_MODEL_SIZE_INVALID", "invalid model size"),
    100016: ("ACL_ERROR_MODEL_MISSING_ATTR", "model misses an attribute"),
    100017: ("ACL_ERROR_MODEL_INPUT_NOT_MATCH", "inputs do not match the model"),
    100018: ("ACL_ERROR_MODEL_OUTPUT_NOT_MATCH", "outputs do not match the model"),
    100019: ("ACL_ERROR_MODEL_NOT_DYNAMIC", "dynamic API used on a static model"),
    100037: ("ACL_ERROR_REPEAT_FINALIZE", "acl.finalize without a matching acl.init"),
    200000: ("ACL_ERROR_BAD_ALLOC", "host memory allocation failed"),
    200001: ("ACL_ERROR_API_NOT_SUPPORT", "API not supported"),
    200002: ("ACL_ERROR_INVALID_DEVICE", "invalid device"),
    200003: ("ACL_ERROR_MEMORY_ADDRESS_UNALIGNED", "memory address not aligned"),
    200004: ("ACL_ERROR_RESOURCE_NOT_MATCH", "resources do not match"),
    200005: ("ACL_ERROR_INVALID_RESOURCE_HANDLE", "invalid resource handle"),
    300000: ("ACL_ERROR_STORAGE_OVER_LIMIT", "storage over limit"),
    500000: ("ACL_ERROR_INTERNAL_ERROR", "internal error"),
    500001: ("ACL_ERROR_FAILURE", "failure"),
    500002: ("ACL_ERROR_GE_FAILURE", "GE failure"),
    500003: ("ACL_ERROR_RT_FAILURE", "runtime failure"),
    500004: ("ACL_ERROR_DRV_FAILURE", "driver failure"),
    500005: ("ACL_ERROR_PROFILING_FAILURE", "profiling failure"),
    107000: ("ACL_ERROR_RT_PARAM_INVALID", "runtime parameter invalid"),
    107001: ("ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id"),
    107002: (
        "ACL_ERROR_RT_CONTEXT_NULL",
        "the calling thread has no current context (call set_context or set_device first)",
    ),
    107003: ("ACL_ERROR_RT_STREAM_CONTEXT", "stream does not belong to the current context"),
    107004: ("ACL_ERROR_RT_MODEL_CONTEXT", "model does not belong to the current context"),
    107019: ("ACL_ERROR_RT_WAIT_TIMEOUT", "wait timeout"),
    107020: ("ACL_ERROR_RT_TASK_TIMEOUT", "task timeout"),
    207001: ("ACL_ERROR_RT_MEMORY_ALLOCATION", "device memory allocation failed"),
    207004: ("ACL_ERROR_RT_NO_DEVICE", "no device"),
    207008: ("ACL_ERROR_RT_NO_STREAM_RESOURCE", "too many streams"),
    207018: ("ACL_ERROR_RT_DEVICE_OOM", "device out of memory"),
    507000: ("ACL_ERROR_RT_INTERNAL_ERROR", "runtime internal error"),
    507011: ("ACL_ERROR_RT_MODEL_EXECUTE", "model execution failed"),
    507014: ("ACL_ERROR_RT_AICORE_TIMEOUT", "AI Core timeout"),
    507015: ("ACL_ERROR_RT_AICORE_EXCEPTION", "AI Core exception"),
    507017: ("ACL_ERROR_RT_AICPU_TIMEOUT", "AI CPU timeout"),
    507018: ("ACL_ERROR_RT_AICPU_EXCEPTION", "AI CPU exception"),
    507046: ("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "stream synchronization timeout"),
    507053: ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "device memory error"),
    507899: ("ACL_ERROR_RT_DRV_INTERNAL_ERROR", "driver internal error"),
    507901: ("ACL_ERROR_RT_SOCKET_CLOSE", "socket closed"),
    145000: ("ACL_ERROR_GE_PARAM_INVALID", "GE parameter invalid"),
    145001: ("ACL_ERROR_GE_EXEC_NOT_INIT", "GE executor not initialised"),
    145002: ("ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID", "model path invalid"),
    145003: ("ACL_ERROR_GE_EXEC_MODEL_ID_INVALID", "model id invalid"),
    145011: ("ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID", "dynamic input buffer address is NULL"),
    145012: ("ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID", "dynamic input buffer too small"),
    145013: ("ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID", "requested batch/HW/dims is not a compiled gear"),
    145021: ("ACL_ERROR_GE_SHAPE_INVALID", "invalid shape"),
    245000: ("ACL_ERROR_GE_MEMORY_ALLOCATION", "GE memory allocation failed"),
    545001: ("ACL_ERROR_GE_LOAD_MODEL", "model load failed"),
    545601: ("ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT", "model execution timeout"),
}

_CODES_BY_NAME = {name: code for code, (name, _) in RET_CODES.items()}

#: Failures after which a device is not expected to work again until it is reset: the engine
#: goes out of service and the model must be reloaded (an inference choice: pyacl.md lists the
#: codes, not their recoverability).
DEVICE_FATAL_RETS = frozenset(
    _CODES_BY_NAME[name]
    for name in (
        "ACL_ERROR_RT_NO_DEVICE",
        "ACL_ERROR_RT_DEVICE_MEM_ERROR",
        "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
        "ACL_ERROR_RT_SOCKET_CLOSE",
    )
)


def ret_code(name: str) -> int:
    """The value of a ret code name such as ``ACL_ERROR_RT_CONTEXT_NULL``."""
    return _CODES_BY_NAME[name]


def describe_ret(ret: int) -> str:
    """``"107002 ACL_ERROR_RT_CONTEXT_NULL (the calling thread has no current context ...)"``."""
    try:
        name, meaning = RET_CODES[ret]
    except KeyError:
        return f"{ret} (not a code listed in pyacl.md)"
    return f"{ret} {name} ({meaning})"


# --- aclDataType (pyacl.md §5.4) -------------------------------------------------------------


@dataclass(frozen=True)
class AclDataType:
    """One aclDataType: its code, its name without the ``ACL_`` prefix, and its Triton type.

    ``triton`` is the Triton API data type name, or "" when the type cannot be served (then
    ``unsupported`` says why).
    """

    code: int
    name: str
    triton: str
    unsupported: str = ""

    @property
    def native_name(self) -> str:
        """GE's spelling of the type, as an .om file names it (``DT_FLOAT16``)."""
        return f"DT_{self.name}"


_NO_NUMPY = "has no numpy equivalent, so the Python backend cannot hold it"
_NEWEST = "exists only in the newest CANN headers and has no numpy equivalent"

DATA_TYPES: tuple[AclDataType, ...] = (
    AclDataType(0, "FLOAT", "FP32"),
    AclDataType(1, "FLOAT16", "FP16"),
    AclDataType(2, "INT8", "INT8"),
    AclDataType(3, "INT32", "INT32"),
    AclDataType(4, "UINT8", "UINT8"),
    AclDataType(6, "INT16", "INT16"),
    AclDataType(7, "UINT16", "UINT16"),
    AclDataType(8, "UINT32", "UINT32"),
    AclDataType(9, "INT64", "INT64"),
    AclDataType(10, "UINT64", "UINT64"),
    AclDataType(11, "DOUBLE", "FP64"),
    AclDataType(12, "BOOL", "BOOL"),
    AclDataType(-1, "DT_UNDEFINED", "", "is undefined"),
    AclDataType(13, "STRING", "", "is a device string type that an offline model cannot exchange as a flat buffer"),
    AclDataType(16, "COMPLEX64", "", "is complex, which Triton has no data type for"),
    AclDataType(17, "COMPLEX128", "", "is complex, which Triton has no data type for"),
    AclDataType(27, "BF16", "", f"(bfloat16) {_NO_NUMPY}; rebuild the model with FP16 or FP32 inputs and outputs"),
    AclDataType(29, "INT4", "", f"(4-bit) {_NO_NUMPY}"),
    AclDataType(30, "UINT1", "", f"(1-bit) {_NO_NUMPY}"),
    AclDataType(33, "COMPLEX32", "", "is complex, which Triton has no data type for"),
    AclDataType(34, "HIFLOAT8", "", _NEWEST),
    AclDataType(35, "FLOAT8_E5M2", "", _NEWEST),
    AclDataType(36, "FLOAT8_E4M3FN", "", _NEWEST),
    AclDataType(37, "FLOAT8_E8M0", "", _NEWEST),
    AclDataType(38, "FLOAT6_E3M2", "", _NEWEST),
    AclDataType(39, "FLOAT6_E2M3", "", _NEWEST),
    AclDataType(40, "FLOAT4_E2M1", "", _NEWEST),
    AclDataType(41, "FLOAT4_E1M2", "", _NEWEST),
)

_TYPES_BY_CODE = {t.code: t for t in DATA_TYPES}
_TYPES_BY_NAME = {t.name: t for t in DATA_TYPES}


def data_type(code: int) -> AclDataType:
    """The aclDataType of ``code``; unknown codes give an unsupported placeholder."""
    found = _TYPES_BY_CODE.get(code)
    if found is None:
        return AclDataType(code, f"UNKNOWN_{code}", "", f"is aclDataType {code}, which pyacl.md does not list")
    return found


def data_type_named(name: str) -> AclDataType:
    """The aclDataType named ``name`` (``FLOAT16`` or ``ACL_FLOAT16``)."""
    key = name.removeprefix("ACL_")
    try:
        return _TYPES_BY_NAME[key]
    except KeyError:
        raise KeyError(f"unknown aclDataType name {name!r}; known: {', '.join(_TYPES_BY_NAME)}") from None


# --- aclFormat (pyacl.md §5.5) ---------------------------------------------------------------

#: aclFormat code -> layout name as specs.TensorSpec.format spells it.
FORMATS: dict[int, str] = {
    -1: "",
    0: "NCHW",
    1: "NHWC",
    2: "ND",
    3: "NC1HWC0",
    4: "FRACTAL_Z",
    12: "NC1HWC0_C04",
    16: "HWCN",
    27: "NDHWC",
    29: "FRACTAL_NZ",
    30: "NCDHW",
    32: "NDC1HWC0",
    33: "FRACTAL_Z_3D",
    35: "NC",
    47: "NCL",
}
_FORMAT_CODES = {name: code for code, name in FORMATS.items() if name}


def format_name(code: int) -> str:
    """Layout name of an aclFormat code ("" for undefined, ``FORMAT_<n>`` for unlisted codes)."""
    return FORMATS.get(code, f"FORMAT_{code}")


def format_code(name: str) -> int:
    """aclFormat code of a layout name ("NCHW" -> 0); "" is ACL_FORMAT_UNDEFINED."""
    if not name:
        return -1
    try:
        return _FORMAT_CODES[name]
    except KeyError:
        raise KeyError(f"unknown aclFormat {name!r}; known: {', '.join(_FORMAT_CODES)}") from None


# --- runtime enums (pyacl.md §5.3, §5.6) -----------------------------------------------------


class MemcpyKind(IntEnum):
    """aclrtMemcpyKind; each member is ``ACL_MEMCPY_<name>`` in the headers."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4

    @property
    def acl_name(self) -> str:
        return f"ACL_MEMCPY_{self.name}"


class MallocPolicy(IntEnum):
    """aclrtMemMallocPolicy; each member is ``ACL_MEM_MALLOC_<name>`` in the headers."""

    HUGE_FIRST = 0
    HUGE_ONLY = 1
    NORMAL_ONLY = 2
    HUGE_FIRST_P2P = 3
    HUGE_ONLY_P2P = 4
    NORMAL_ONLY_P2P = 5
    HUGE1G_ONLY = 6
    HUGE1G_ONLY_P2P = 7

    @property
    def acl_name(self) -> str:
        return f"ACL_MEM_MALLOC_{self.name}"


#: OR-able flags that may accompany a malloc policy.
MALLOC_FLAGS = {0x0100: "ACL_MEM_TYPE_LOW_BAND_WIDTH", 0x1000: "ACL_MEM_TYPE_HIGH_BAND_WIDTH"}

#: aclrtRunMode of an application on a host with a PCIe card (ACL_DEVICE = 0: it runs on the device).
ACL_HOST = 1

# --- model constants (pyacl.md §5.7) ---------------------------------------------------------

#: The extra model input of dynamic batch / HW / dims models.
ACL_DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data"
