"""Numeric constants of the pyACL contract (the ``acl`` module defines none itself).

Values and names come from CANN's own headers (hicann/runtime ``include/external/acl/``); the
acl engine and the simulator both use them, so they speak the same codes.

``RET_CODES`` was generated from the headers: every ``#define ACL_...`` of
``error_codes/rt_error_codes.h`` (a define continued on the next line with a backslash included),
every ``static const int ACL_...`` of ``acl_base_rt.h`` and every ``static const uint32_t
ACL_ERROR_...`` of ``error_codes/ge_error_codes.h``, each with its header line; the meaning is the
header's comment, or a curated text for the codes the engine explains to users (100001, 100002,
100019, 100037, 100042-100045, 145000, 145012, 145013, 145015, 200000). Regenerate it the same way
after a CANN update: tests/unit/test_cann_tables.py re-reads the headers from a hicann/runtime mirror
when one is present and fails on any code or name that differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

ACL_SUCCESS = 0

#: ret code -> (name, meaning): every code of CANN's headers, with the header's comment as its
#: meaning where it has one (hicann/runtime include/external/acl/error_codes/rt_error_codes.h,
#: include/external/acl/acl_base_rt.h:64-138, include/external/acl/error_codes/ge_error_codes.h:34-71;
#: meanings of the generic and GE codes after docs/zh/api_ref/25-01_aclError.md).
RET_CODES: dict[int, tuple[str, str]] = {
    0: ("ACL_SUCCESS", "success"),  # acl_base_rt.h:65
    100000: ("ACL_ERROR_INVALID_PARAM", "invalid parameter"),  # acl_base_rt.h:67
    100001: (
        "ACL_ERROR_UNINITIALIZE",
        "not initialised: acl.init (or the feature's own init: init_dump, prof.init) was not called",
    ),  # acl_base_rt.h:68
    100002: (
        "ACL_ERROR_REPEAT_INITIALIZE",
        "initialised or loaded again (acl.init a second time is harmless)",
    ),  # acl_base_rt.h:69
    100003: ("ACL_ERROR_INVALID_FILE", "invalid file"),  # acl_base_rt.h:70
    100004: ("ACL_ERROR_WRITE_FILE", "file could not be written"),  # acl_base_rt.h:71
    100005: ("ACL_ERROR_INVALID_FILE_SIZE", "invalid file size"),  # acl_base_rt.h:72
    100006: ("ACL_ERROR_PARSE_FILE", "file could not be parsed"),  # acl_base_rt.h:73
    100007: ("ACL_ERROR_FILE_MISSING_ATTR", "file misses an attribute"),  # acl_base_rt.h:74
    100008: ("ACL_ERROR_FILE_ATTR_INVALID", "file has an invalid attribute"),  # acl_base_rt.h:75
    100009: ("ACL_ERROR_INVALID_DUMP_CONFIG", "invalid dump configuration"),  # acl_base_rt.h:76
    100010: ("ACL_ERROR_INVALID_PROFILING_CONFIG", "invalid profiling configuration"),  # acl_base_rt.h:77
    100011: ("ACL_ERROR_INVALID_MODEL_ID", "unknown model id"),  # acl_base_rt.h:78
    100012: ("ACL_ERROR_DESERIALIZE_MODEL", "model could not be deserialized"),  # acl_base_rt.h:79
    100013: ("ACL_ERROR_PARSE_MODEL", "model could not be parsed"),  # acl_base_rt.h:80
    100014: (
        "ACL_ERROR_READ_MODEL_FAILURE",
        "model file could not be read (bad path or unreadable .om)",
    ),  # acl_base_rt.h:81
    100015: ("ACL_ERROR_MODEL_SIZE_INVALID", "invalid model size"),  # acl_base_rt.h:82
    100016: ("ACL_ERROR_MODEL_MISSING_ATTR", "model misses an attribute"),  # acl_base_rt.h:83
    100017: ("ACL_ERROR_MODEL_INPUT_NOT_MATCH", "inputs do not match the model"),  # acl_base_rt.h:84
    100018: ("ACL_ERROR_MODEL_OUTPUT_NOT_MATCH", "outputs do not match the model"),  # acl_base_rt.h:85
    100019: (
        "ACL_ERROR_MODEL_NOT_DYNAMIC",
        "dynamic API used on a static model (defined; GE returns 145012/145013 instead)",
    ),  # acl_base_rt.h:86
    100020: ("ACL_ERROR_OP_TYPE_NOT_MATCH", "op type not match"),  # acl_base_rt.h:87
    100021: ("ACL_ERROR_OP_INPUT_NOT_MATCH", "op input not match"),  # acl_base_rt.h:88
    100022: ("ACL_ERROR_OP_OUTPUT_NOT_MATCH", "op output not match"),  # acl_base_rt.h:89
    100023: ("ACL_ERROR_OP_ATTR_NOT_MATCH", "op attr not match"),  # acl_base_rt.h:90
    100024: ("ACL_ERROR_OP_NOT_FOUND", "op not found"),  # acl_base_rt.h:91
    100025: ("ACL_ERROR_OP_LOAD_FAILED", "op load failed"),  # acl_base_rt.h:92
    100026: ("ACL_ERROR_UNSUPPORTED_DATA_TYPE", "unsupported data type"),  # acl_base_rt.h:93
    100027: ("ACL_ERROR_FORMAT_NOT_MATCH", "format not match"),  # acl_base_rt.h:94
    100028: ("ACL_ERROR_BIN_SELECTOR_NOT_REGISTERED", "bin selector not registered"),  # acl_base_rt.h:95
    100029: ("ACL_ERROR_KERNEL_NOT_FOUND", "kernel not found"),  # acl_base_rt.h:96
    100030: ("ACL_ERROR_BIN_SELECTOR_ALREADY_REGISTERED", "bin selector already registered"),  # acl_base_rt.h:97
    100031: ("ACL_ERROR_KERNEL_ALREADY_REGISTERED", "kernel already registered"),  # acl_base_rt.h:98
    100032: ("ACL_ERROR_INVALID_QUEUE_ID", "invalid queue id"),  # acl_base_rt.h:99
    100033: ("ACL_ERROR_REPEAT_SUBSCRIBE", "repeat subscribe"),  # acl_base_rt.h:100
    100034: ("ACL_ERROR_STREAM_NOT_SUBSCRIBE", "stream not subscribe"),  # acl_base_rt.h:101
    100035: ("ACL_ERROR_THREAD_NOT_SUBSCRIBE", "thread not subscribe"),  # acl_base_rt.h:102
    100036: ("ACL_ERROR_WAIT_CALLBACK_TIMEOUT", "wait callback timeout"),  # acl_base_rt.h:103
    100037: (
        "ACL_ERROR_REPEAT_FINALIZE",
        "acl.finalize again after a finalize (a finalize without any acl.init returns 0: acl.cpp 42, 630-646)",
    ),  # acl_base_rt.h:104
    100038: ("ACL_ERROR_NOT_STATIC_AIPP", "not static aipp"),  # acl_base_rt.h:105
    100039: ("ACL_ERROR_COMPILING_STUB_MODE", "compiling stub mode"),  # acl_base_rt.h:106
    100040: ("ACL_ERROR_GROUP_NOT_SET", "group not set"),  # acl_base_rt.h:107
    100041: ("ACL_ERROR_GROUP_NOT_CREATE", "group not create"),  # acl_base_rt.h:108
    100042: (
        "ACL_ERROR_PROF_ALREADY_RUN",
        "a profiling session is already running (API profiling cannot coexist with acl.json profiling)",
    ),  # acl_base_rt.h:109
    100043: ("ACL_ERROR_PROF_NOT_RUN", "profiling not initialised (acl.prof.init first)"),  # acl_base_rt.h:110
    100044: ("ACL_ERROR_DUMP_ALREADY_RUN", "dump already configured through acl.init"),  # acl_base_rt.h:111
    100045: ("ACL_ERROR_DUMP_NOT_RUN", "dump not initialised (acl.mdl.init_dump first)"),  # acl_base_rt.h:112
    107000: ("ACL_ERROR_RT_PARAM_INVALID", "param invalid"),  # rt_error_codes.h:21
    107001: ("ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id"),  # rt_error_codes.h:22
    107002: ("ACL_ERROR_RT_CONTEXT_NULL", "current context null"),  # rt_error_codes.h:23
    107003: ("ACL_ERROR_RT_STREAM_CONTEXT", "stream not in current context"),  # rt_error_codes.h:24
    107004: ("ACL_ERROR_RT_MODEL_CONTEXT", "model not in current context"),  # rt_error_codes.h:25
    107005: ("ACL_ERROR_RT_STREAM_MODEL", "stream not in model"),  # rt_error_codes.h:26
    107006: ("ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID", "event timestamp invalid"),  # rt_error_codes.h:27
    107007: ("ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL", "event timestamp reversal"),  # rt_error_codes.h:28
    107008: ("ACL_ERROR_RT_ADDR_UNALIGNED", "memory address unaligned"),  # rt_error_codes.h:29
    107009: ("ACL_ERROR_RT_FILE_OPEN", "open file failed"),  # rt_error_codes.h:30
    107010: ("ACL_ERROR_RT_FILE_WRITE", "write file failed"),  # rt_error_codes.h:31
    107011: ("ACL_ERROR_RT_STREAM_SUBSCRIBE", "error subscribe stream"),  # rt_error_codes.h:32
    107012: ("ACL_ERROR_RT_THREAD_SUBSCRIBE", "error subscribe thread"),  # rt_error_codes.h:33
    107013: ("ACL_ERROR_RT_GROUP_NOT_SET", "group not set"),  # rt_error_codes.h:34
    107014: ("ACL_ERROR_RT_GROUP_NOT_CREATE", "group not create"),  # rt_error_codes.h:35
    107015: ("ACL_ERROR_RT_STREAM_NO_CB_REG", "callback not register to stream"),  # rt_error_codes.h:36
    107016: ("ACL_ERROR_RT_INVALID_MEMORY_TYPE", "invalid memory type"),  # rt_error_codes.h:37
    107017: ("ACL_ERROR_RT_INVALID_HANDLE", "invalid handle"),  # rt_error_codes.h:38
    107018: ("ACL_ERROR_RT_INVALID_MALLOC_TYPE", "invalid malloc type"),  # rt_error_codes.h:39
    107019: ("ACL_ERROR_RT_WAIT_TIMEOUT", "wait timeout"),  # rt_error_codes.h:40
    107020: ("ACL_ERROR_RT_TASK_TIMEOUT", "task timeout"),  # rt_error_codes.h:41
    107021: ("ACL_ERROR_RT_SYSPARAMOPT_NOT_SET", "not set sysparamopt"),  # rt_error_codes.h:42
    107022: ("ACL_ERROR_RT_DEVICE_TASK_ABORT", "device task aborting"),  # rt_error_codes.h:43
    107023: ("ACL_ERROR_RT_STREAM_ABORT", "stream aborting"),  # rt_error_codes.h:44
    107024: ("ACL_ERROR_RT_CAPTURE_DEPENDENCY", "capture dependency failure"),  # rt_error_codes.h:45
    107025: ("ACL_ERROR_RT_STREAM_UNJOINED", "invalid capture model"),  # rt_error_codes.h:46
    107026: ("ACL_ERROR_RT_MODEL_CAPTURED", "model is captured"),  # rt_error_codes.h:47
    107027: ("ACL_ERROR_RT_STREAM_CAPTURED", "stream is captured"),  # rt_error_codes.h:48
    107028: ("ACL_ERROR_RT_EVENT_CAPTURED", "event is captured"),  # rt_error_codes.h:49
    107029: ("ACL_ERROR_RT_STREAM_NOT_CAPTURED", "stream is not in capture status"),  # rt_error_codes.h:50
    107030: (
        "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT",
        "stream is captured, not support current oper",
    ),  # rt_error_codes.h:51
    107031: (
        "ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT",
        "a disallowed implicit dependency from defalut stream",
    ),  # rt_error_codes.h:52
    107032: (
        "ACL_ERROR_STREAM_CAPTURE_CONFLICT",
        "interdependent stream cannot begin capture together",
    ),  # rt_error_codes.h:53
    107033: ("ACL_ERROR_STREAM_TASK_GROUP_STATUS", "task group status error"),  # rt_error_codes.h:54
    107034: ("ACL_ERROR_STREAM_TASK_GROUP_INTR", "task group interrupted"),  # rt_error_codes.h:55
    107035: ("ACL_ERROR_RT_TASK_ABORT_STOP", "device task aborting stop before post process"),  # rt_error_codes.h:56
    107036: (
        "ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED",
        "the capture was not initiated in this stream",
    ),  # rt_error_codes.h:57
    107037: ("ACL_ERROR_RT_MODEL_RUNNING", "the model is still running"),  # rt_error_codes.h:58
    107038: (
        "ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD",
        "the thread of end capture and begin capture is not same",
    ),  # rt_error_codes.h:59
    107039: ("ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY", "input array capacity insufficient"),  # rt_error_codes.h:60
    107040: ("ACL_ERROR_RT_MODEL_UPDATE_FAILED", "the model update failed"),  # rt_error_codes.h:61
    107041: (
        "ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC",
        "async oper convert to sync oper, stream is captured, not support current oper",
    ),  # rt_error_codes.h:62-63
    107042: ("ACL_ERROR_RT_SYMBOL_NOT_FOUND", "symbol not found"),  # rt_error_codes.h:64
    107043: ("ACL_ERROR_RT_INVALID_SYMBOL", "invalid device symbol"),  # rt_error_codes.h:65
    107044: ("ACL_ERROR_RT_INVALID_DEVICE_FUNCTION", "invalid device function"),  # rt_error_codes.h:66
    107045: ("ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING", "sub acl graph is caputring"),  # rt_error_codes.h:67
    145000: (
        "ACL_ERROR_GE_PARAM_INVALID",
        "GE parameter invalid (also: a weight or work buffer smaller than query_size says)",
    ),  # ge_error_codes.h:34
    145001: ("ACL_ERROR_GE_EXEC_NOT_INIT", "GE executor not initialised"),  # ge_error_codes.h:35
    145002: ("ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID", "model path invalid"),  # ge_error_codes.h:36
    145003: ("ACL_ERROR_GE_EXEC_MODEL_ID_INVALID", "model id invalid"),  # ge_error_codes.h:37
    145006: ("ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID", "exec model data size invalid"),  # ge_error_codes.h:38
    145007: ("ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID", "exec model addr invalid"),  # ge_error_codes.h:39
    145008: ("ACL_ERROR_GE_EXEC_MODEL_QUEUE_ID_INVALID", "exec model queue id invalid"),  # ge_error_codes.h:40
    145009: ("ACL_ERROR_GE_EXEC_LOAD_MODEL_REPEATED", "exec load model repeated"),  # ge_error_codes.h:41
    145011: ("ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID", "dynamic input buffer address is NULL"),  # ge_error_codes.h:42
    145012: (
        "ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID",
        "dynamic input buffer too small, or dims that do not match the model's --input_shape layout",
    ),  # ge_error_codes.h:43
    145013: (
        "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID",
        "requested batch/HW/dims is not a compiled gear (also any gear on a static model)",
    ),  # ge_error_codes.h:44
    145014: ("ACL_ERROR_GE_AIPP_BATCH_EMPTY", "aipp batch empty"),  # ge_error_codes.h:45
    145015: ("ACL_ERROR_GE_AIPP_NOT_EXIST", "the input has no AIPP"),  # ge_error_codes.h:46
    145016: ("ACL_ERROR_GE_AIPP_MODE_INVALID", "aipp mode invalid"),  # ge_error_codes.h:47
    145017: ("ACL_ERROR_GE_OP_TASK_TYPE_INVALID", "op task type invalid"),  # ge_error_codes.h:48
    145018: ("ACL_ERROR_GE_OP_KERNEL_TYPE_INVALID", "op kernel type invalid"),  # ge_error_codes.h:49
    145019: ("ACL_ERROR_GE_PLGMGR_PATH_INVALID", "plgmgr path invalid"),  # ge_error_codes.h:50
    145020: ("ACL_ERROR_GE_FORMAT_INVALID", "format invalid"),  # ge_error_codes.h:51
    145021: ("ACL_ERROR_GE_SHAPE_INVALID", "invalid shape"),  # ge_error_codes.h:52
    145022: ("ACL_ERROR_GE_DATATYPE_INVALID", "datatype invalid"),  # ge_error_codes.h:53
    148046: ("ACL_ERROR_PROF_REPEAT_SUBSCRIBE", "prof repeat subscribe"),  # acl_base_rt.h:113
    148047: ("ACL_ERROR_PROF_API_CONFLICT", "prof api conflict"),  # acl_base_rt.h:114
    148048: ("ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG", "invalid max opqueue num config"),  # acl_base_rt.h:115
    148049: ("ACL_ERROR_INVALID_OPP_PATH", "invalid opp path"),  # acl_base_rt.h:116
    148050: ("ACL_ERROR_OP_UNSUPPORTED_DYNAMIC", "op unsupported dynamic"),  # acl_base_rt.h:117
    148051: ("ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED", "relative resource not cleared"),  # acl_base_rt.h:118
    148052: ("ACL_ERROR_UNSUPPORTED_JPEG", "unsupported jpeg"),  # acl_base_rt.h:119
    148053: ("ACL_ERROR_INVALID_BUNDLE_MODEL_ID", "invalid bundle model id"),  # acl_base_rt.h:120
    200000: ("ACL_ERROR_BAD_ALLOC", "host memory allocation failed"),  # acl_base_rt.h:122
    200001: ("ACL_ERROR_API_NOT_SUPPORT", "API not supported"),  # acl_base_rt.h:123
    200002: ("ACL_ERROR_INVALID_DEVICE", "invalid device"),  # acl_base_rt.h:124
    200003: ("ACL_ERROR_MEMORY_ADDRESS_UNALIGNED", "memory address not aligned"),  # acl_base_rt.h:125
    200004: ("ACL_ERROR_RESOURCE_NOT_MATCH", "resources do not match"),  # acl_base_rt.h:126
    200005: ("ACL_ERROR_INVALID_RESOURCE_HANDLE", "invalid resource handle"),  # acl_base_rt.h:127
    200006: ("ACL_ERROR_FEATURE_UNSUPPORTED", "feature unsupported"),  # acl_base_rt.h:128
    200007: ("ACL_ERROR_PROF_MODULES_UNSUPPORTED", "prof modules unsupported"),  # acl_base_rt.h:129
    207000: ("ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "feature not support"),  # rt_error_codes.h:69
    207001: (
        "ACL_ERROR_RT_MEMORY_ALLOCATION",
        "memory allocation error, only used by out of memory",
    ),  # rt_error_codes.h:70
    207002: ("ACL_ERROR_RT_MEMORY_FREE", "memory free error"),  # rt_error_codes.h:71
    207003: ("ACL_ERROR_RT_AICORE_OVER_FLOW", "aicore over flow"),  # rt_error_codes.h:72
    207004: ("ACL_ERROR_RT_NO_DEVICE", "no device"),  # rt_error_codes.h:73
    207005: ("ACL_ERROR_RT_RESOURCE_ALLOC_FAIL", "resource alloc fail"),  # rt_error_codes.h:74
    207006: ("ACL_ERROR_RT_NO_PERMISSION", "no permission"),  # rt_error_codes.h:75
    207007: ("ACL_ERROR_RT_NO_EVENT_RESOURCE", "no event resource"),  # rt_error_codes.h:76
    207008: ("ACL_ERROR_RT_NO_STREAM_RESOURCE", "no stream resource"),  # rt_error_codes.h:77
    207009: ("ACL_ERROR_RT_NO_NOTIFY_RESOURCE", "no notify resource"),  # rt_error_codes.h:78
    207010: ("ACL_ERROR_RT_NO_MODEL_RESOURCE", "no model resource"),  # rt_error_codes.h:79
    207011: ("ACL_ERROR_RT_NO_CDQ_RESOURCE", "no cdq resource"),  # rt_error_codes.h:80
    207012: ("ACL_ERROR_RT_OVER_LIMIT", "over limit"),  # rt_error_codes.h:81
    207013: ("ACL_ERROR_RT_QUEUE_EMPTY", "queue is empty"),  # rt_error_codes.h:82
    207014: ("ACL_ERROR_RT_QUEUE_FULL", "queue is full"),  # rt_error_codes.h:83
    207015: ("ACL_ERROR_RT_REPEATED_INIT", "repeated init"),  # rt_error_codes.h:84
    207016: ("ACL_ERROR_RT_AIVEC_OVER_FLOW", "aivec over flow"),  # rt_error_codes.h:85
    207017: ("ACL_ERROR_RT_OVER_FLOW", "common over flow"),  # rt_error_codes.h:86
    207018: ("ACL_ERROR_RT_DEVICE_OOM", "device oom"),  # rt_error_codes.h:87
    207019: ("ACL_ERROR_RT_FEATURE_NOT_SUPPORT_UPDATE_OP", "not support to update this op"),  # rt_error_codes.h:88
    207020: ("ACL_ERROR_RT_TIMEOUT", "driver timeout"),  # rt_error_codes.h:89
    207021: ("ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED", "invalid link type"),  # rt_error_codes.h:90
    245000: ("ACL_ERROR_GE_MEMORY_ALLOCATION", "GE memory allocation failed"),  # ge_error_codes.h:54
    245001: ("ACL_ERROR_GE_MEMORY_OPERATE_FAILED", "memory operate failed"),  # ge_error_codes.h:55
    245002: ("ACL_ERROR_GE_DEVICE_MEMORY_OPERATE_FAILED", "device memory operate failed"),  # ge_error_codes.h:56
    300000: ("ACL_ERROR_STORAGE_OVER_LIMIT", "storage over limit"),  # acl_base_rt.h:131
    345102: ("ACL_ERROR_GE_SUBHEALTHY", "subhealthy"),  # ge_error_codes.h:57
    345103: ("ACL_ERROR_GE_USER_RAISE_EXCEPTION", "user raise exception"),  # ge_error_codes.h:58
    345104: ("ACL_ERROR_GE_DATA_NOT_ALIGNED", "data not aligned"),  # ge_error_codes.h:59
    500000: ("ACL_ERROR_INTERNAL_ERROR", "internal error"),  # acl_base_rt.h:133
    500001: ("ACL_ERROR_FAILURE", "failure"),  # acl_base_rt.h:134
    500002: ("ACL_ERROR_GE_FAILURE", "GE failure"),  # acl_base_rt.h:135
    500003: ("ACL_ERROR_RT_FAILURE", "runtime failure"),  # acl_base_rt.h:136
    500004: ("ACL_ERROR_DRV_FAILURE", "driver failure"),  # acl_base_rt.h:137
    500005: ("ACL_ERROR_PROFILING_FAILURE", "profiling failure"),  # acl_base_rt.h:138
    507000: ("ACL_ERROR_RT_INTERNAL_ERROR", "runtime internal error"),  # rt_error_codes.h:92
    507001: ("ACL_ERROR_RT_TS_ERROR", "ts internel error"),  # rt_error_codes.h:93
    507002: ("ACL_ERROR_RT_STREAM_TASK_FULL", "task full in stream"),  # rt_error_codes.h:94
    507003: ("ACL_ERROR_RT_STREAM_TASK_EMPTY", "task empty in stream"),  # rt_error_codes.h:95
    507004: ("ACL_ERROR_RT_STREAM_NOT_COMPLETE", "stream not complete"),  # rt_error_codes.h:96
    507005: ("ACL_ERROR_RT_END_OF_SEQUENCE", "end of sequence"),  # rt_error_codes.h:97
    507006: ("ACL_ERROR_RT_EVENT_NOT_COMPLETE", "event not complete"),  # rt_error_codes.h:98
    507007: ("ACL_ERROR_RT_CONTEXT_RELEASE_ERROR", "context release error"),  # rt_error_codes.h:99
    507008: ("ACL_ERROR_RT_SOC_VERSION", "soc version error"),  # rt_error_codes.h:100
    507009: ("ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT", "task type not support"),  # rt_error_codes.h:101
    507010: ("ACL_ERROR_RT_LOST_HEARTBEAT", "ts lost heartbeat"),  # rt_error_codes.h:102
    507011: ("ACL_ERROR_RT_MODEL_EXECUTE", "model execute failed"),  # rt_error_codes.h:103
    507012: ("ACL_ERROR_RT_REPORT_TIMEOUT", "report timeout"),  # rt_error_codes.h:104
    507013: ("ACL_ERROR_RT_SYS_DMA", "sys dma error"),  # rt_error_codes.h:105
    507014: ("ACL_ERROR_RT_AICORE_TIMEOUT", "aicore timeout"),  # rt_error_codes.h:106
    507015: ("ACL_ERROR_RT_AICORE_EXCEPTION", "aicore exception"),  # rt_error_codes.h:107
    507016: ("ACL_ERROR_RT_AICORE_TRAP_EXCEPTION", "aicore trap exception"),  # rt_error_codes.h:108
    507017: ("ACL_ERROR_RT_AICPU_TIMEOUT", "aicpu timeout"),  # rt_error_codes.h:109
    507018: ("ACL_ERROR_RT_AICPU_EXCEPTION", "aicpu exception"),  # rt_error_codes.h:110
    507019: ("ACL_ERROR_RT_AICPU_DATADUMP_RSP_ERR", "aicpu datadump response error"),  # rt_error_codes.h:111
    507020: ("ACL_ERROR_RT_AICPU_MODEL_RSP_ERR", "aicpu model operate response error"),  # rt_error_codes.h:112
    507021: ("ACL_ERROR_RT_PROFILING_ERROR", "profiling error"),  # rt_error_codes.h:113
    507022: ("ACL_ERROR_RT_IPC_ERROR", "ipc error"),  # rt_error_codes.h:114
    507023: ("ACL_ERROR_RT_MODEL_ABORT_NORMAL", "model abort normal"),  # rt_error_codes.h:115
    507024: ("ACL_ERROR_RT_KERNEL_UNREGISTERING", "kernel unregistering"),  # rt_error_codes.h:116
    507025: ("ACL_ERROR_RT_RINGBUFFER_NOT_INIT", "ringbuffer not init"),  # rt_error_codes.h:117
    507026: ("ACL_ERROR_RT_RINGBUFFER_NO_DATA", "ringbuffer no data"),  # rt_error_codes.h:118
    507027: ("ACL_ERROR_RT_KERNEL_LOOKUP", "kernel lookup error"),  # rt_error_codes.h:119
    507028: ("ACL_ERROR_RT_KERNEL_DUPLICATE", "kernel register duplicate"),  # rt_error_codes.h:120
    507029: ("ACL_ERROR_RT_DEBUG_REGISTER_FAIL", "debug register failed"),  # rt_error_codes.h:121
    507030: ("ACL_ERROR_RT_DEBUG_UNREGISTER_FAIL", "debug unregister failed"),  # rt_error_codes.h:122
    507031: ("ACL_ERROR_RT_LABEL_CONTEXT", "label not in current context"),  # rt_error_codes.h:123
    507032: ("ACL_ERROR_RT_PROGRAM_USE_OUT", "program register num use out"),  # rt_error_codes.h:124
    507033: ("ACL_ERROR_RT_DEV_SETUP_ERROR", "device setup error"),  # rt_error_codes.h:125
    507034: ("ACL_ERROR_RT_VECTOR_CORE_TIMEOUT", "vector core timeout"),  # rt_error_codes.h:126
    507035: ("ACL_ERROR_RT_VECTOR_CORE_EXCEPTION", "vector core exception"),  # rt_error_codes.h:127
    507036: ("ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION", "vector core trap exception"),  # rt_error_codes.h:128
    507037: ("ACL_ERROR_RT_CDQ_BATCH_ABNORMAL", "cdq alloc batch abnormal"),  # rt_error_codes.h:129
    507038: ("ACL_ERROR_RT_DIE_MODE_CHANGE_ERROR", "can not change die mode"),  # rt_error_codes.h:130
    507039: ("ACL_ERROR_RT_DIE_SET_ERROR", "single die mode can not set die"),  # rt_error_codes.h:131
    507040: ("ACL_ERROR_RT_INVALID_DIEID", "invalid die id"),  # rt_error_codes.h:132
    507041: ("ACL_ERROR_RT_DIE_MODE_NOT_SET", "die mode not set"),  # rt_error_codes.h:133
    507042: ("ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW", "aic trap read overflow"),  # rt_error_codes.h:134
    507043: ("ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW", "aic trap write overflow"),  # rt_error_codes.h:135
    507044: ("ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW", "aiv trap read overflow"),  # rt_error_codes.h:136
    507045: ("ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW", "aiv trap write overflow"),  # rt_error_codes.h:137
    507046: ("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "stream sync time out"),  # rt_error_codes.h:138
    507047: ("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "event sync time out"),  # rt_error_codes.h:139
    507048: ("ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "ffts+ timeout"),  # rt_error_codes.h:140
    507049: ("ACL_ERROR_RT_FFTS_PLUS_EXCEPTION", "ffts+ exception"),  # rt_error_codes.h:141
    507050: ("ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION", "ffts+ trap exception"),  # rt_error_codes.h:142
    507051: ("ACL_ERROR_RT_SEND_MSG", "hdc send msg fail"),  # rt_error_codes.h:143
    507052: ("ACL_ERROR_RT_COPY_DATA", "copy data fail"),  # rt_error_codes.h:144
    507053: ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "device MEM ERROR"),  # rt_error_codes.h:145
    507054: ("ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR", "hbm Multi-bit ECC error"),  # rt_error_codes.h:146
    507055: ("ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR", "suspect device MEM ERROR"),  # rt_error_codes.h:147
    507056: ("ACL_ERROR_RT_LINK_ERROR", "link ERROR"),  # rt_error_codes.h:148
    507057: ("ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", "suspect remote ERROR"),  # rt_error_codes.h:149
    507899: ("ACL_ERROR_RT_DRV_INTERNAL_ERROR", "drv internal error"),  # rt_error_codes.h:150
    507900: ("ACL_ERROR_RT_AICPU_INTERNAL_ERROR", "aicpu internal error"),  # rt_error_codes.h:151
    507901: ("ACL_ERROR_RT_SOCKET_CLOSE", "hdc disconnect"),  # rt_error_codes.h:152
    507902: ("ACL_ERROR_RT_AICPU_INFO_LOAD_RSP_ERR", "aicpu info load response error"),  # rt_error_codes.h:153
    507903: ("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED", "capture status is invalidated"),  # rt_error_codes.h:154
    507904: ("ACL_ERROR_RT_COMM_OP_RETRY_FAIL", "hccl operation retry failed"),  # rt_error_codes.h:155
    507905: ("ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT", "snapshot lock timeout"),  # rt_error_codes.h:156
    507906: ("ACL_ERROR_SNAPSHOT_LOCK_FAILED", "snapshot lock failed"),  # rt_error_codes.h:157
    507907: ("ACL_ERROR_SNAPSHOT_UNLOCK_FAILED", "snapshot unlock failed"),  # rt_error_codes.h:158
    507908: ("ACL_ERROR_SNAPSHOT_BACKUP_FAILED", "snapshot backup failed"),  # rt_error_codes.h:159
    507909: ("ACL_ERROR_SNAPSHOT_RESTORE_FAILED", "snapshot restore failed"),  # rt_error_codes.h:160
    507910: (
        "ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        "host memory range already registered",
    ),  # rt_error_codes.h:161
    507911: ("ACL_ERROR_HOST_MEMORY_NOT_REGISTERED", "host memory has not been registered"),  # rt_error_codes.h:162
    507912: (
        "ACL_ERROR_SNAPSHOT_CALLBACK_FAILED",
        "snapshot callback function execution failed",
    ),  # rt_error_codes.h:163
    507913: (
        "ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED",
        "register snapshot callback function failed",
    ),  # rt_error_codes.h:164
    507914: ("ACL_ERROR_RT_L3_PORT_ERROR", "l3 port error"),  # rt_error_codes.h:165
    507915: ("ACL_ERROR_RT_CCU_TIMEOUT", "ccu timeout"),  # rt_error_codes.h:166
    507916: ("ACL_ERROR_RT_CCU_EXCEPTION", "ccu exception"),  # rt_error_codes.h:167
    545000: ("ACL_ERROR_GE_INTERNAL_ERROR", "internal error"),  # ge_error_codes.h:60
    545001: ("ACL_ERROR_GE_LOAD_MODEL", "model load failed"),  # ge_error_codes.h:61
    545002: (
        "ACL_ERROR_GE_EXEC_LOAD_MODEL_PARTITION_FAILED",
        "exec load model partition failed",
    ),  # ge_error_codes.h:62
    545003: (
        "ACL_ERROR_GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED",
        "exec load weight partition failed",
    ),  # ge_error_codes.h:63
    545004: ("ACL_ERROR_GE_EXEC_LOAD_TASK_PARTITION_FAILED", "exec load task partition failed"),  # ge_error_codes.h:64
    545005: (
        "ACL_ERROR_GE_EXEC_LOAD_KERNEL_PARTITION_FAILED",
        "exec load kernel partition failed",
    ),  # ge_error_codes.h:65
    545006: ("ACL_ERROR_GE_EXEC_RELEASE_MODEL_DATA", "exec release model data"),  # ge_error_codes.h:66
    545007: ("ACL_ERROR_GE_COMMAND_HANDLE", "command handle"),  # ge_error_codes.h:67
    545008: ("ACL_ERROR_GE_GET_TENSOR_INFO", "get tensor info"),  # ge_error_codes.h:68
    545009: ("ACL_ERROR_GE_UNLOAD_MODEL", "unload model"),  # ge_error_codes.h:69
    545601: ("ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT", "model execution timeout"),  # ge_error_codes.h:70
    545602: ("ACL_ERROR_GE_REDEPLOYING", "redeploying"),  # ge_error_codes.h:71
}

_CODES_BY_NAME = {name: code for code, (name, _) in RET_CODES.items()}

#: Failures after which the device is lost or broken for every context on it, so the engine goes
#: out of service until the model is reloaded (docs/fidelity.md, "Fatal codes"): the runtime marks
#: the device down on a lost heartbeat (507010) or a closed host-device session (507901), and sets
#: a device-wide failure status on a memory UCE (507053), an HBM multi-bit ECC error (507054) or an
#: L3 port error (507914) that every later submit returns until a device clean (hicann/runtime
#: src/runtime/core/src/engine/engine.cc 716-770, runtime.cc 5553-5662, context/context.cc
#: 2889-2943); 507055 is that failure suspected on a peer, 107022 a task abort in progress,
#: 207004 / 507033 a device that is gone or failed to start, 507899 a driver internal error.
#: 507056 (link error) is not here: the docs say to retry it (25-01_aclError.md).
DEVICE_FATAL_RETS = frozenset(
    _CODES_BY_NAME[name]
    for name in (
        "ACL_ERROR_RT_LOST_HEARTBEAT",
        "ACL_ERROR_RT_SOCKET_CLOSE",
        "ACL_ERROR_RT_DEVICE_MEM_ERROR",
        "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR",
        "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR",
        "ACL_ERROR_RT_L3_PORT_ERROR",
        "ACL_ERROR_RT_DEVICE_TASK_ABORT",
        "ACL_ERROR_RT_NO_DEVICE",
        "ACL_ERROR_RT_DEV_SETUP_ERROR",
        "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
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
        return f"{ret} (not a code in CANN's headers)"
    return f"{ret} {name} ({meaning})"


# --- aclDataType (hicann/runtime include/external/acl/acl_base_rt.h:140-169) ---------------


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
        return AclDataType(code, f"UNKNOWN_{code}", "", f"is aclDataType {code}, which CANN's headers do not list")
    return found


def data_type_named(name: str) -> AclDataType:
    """The aclDataType named ``name`` (``FLOAT16`` or ``ACL_FLOAT16``)."""
    key = name.removeprefix("ACL_")
    try:
        return _TYPES_BY_NAME[key]
    except KeyError:
        raise KeyError(f"unknown aclDataType name {name!r}; known: {', '.join(_TYPES_BY_NAME)}") from None


# --- aclFormat (acl_base_rt.h:171-192) ------------------------------------------------------

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


# --- runtime enums (hicann/runtime include/external/acl/acl_rt.h) ---------------------------


class MemcpyKind(IntEnum):
    """aclrtMemcpyKind (acl_rt.h:144-153; 5-7 are not used here); each member is
    ``ACL_MEMCPY_<name>`` in the headers."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4

    @property
    def acl_name(self) -> str:
        return f"ACL_MEMCPY_{self.name}"


class MallocPolicy(IntEnum):
    """aclrtMemMallocPolicy (acl_rt.h:177-185); each member is ``ACL_MEM_MALLOC_<name>`` in the headers."""

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


#: OR-able flags that may accompany a malloc policy (acl_rt.h:186-187).
MALLOC_FLAGS = {0x0100: "ACL_MEM_TYPE_LOW_BAND_WIDTH", 0x1000: "ACL_MEM_TYPE_HIGH_BAND_WIDTH"}

#: aclrtMemAttr ACL_HBM_MEM (acl_rt.h:227-229), what get_mem_info is asked about: it falls back to
#: DDR on devices without HBM (docs/zh/api_ref/11-01_device_memory_malloc_and_free.md 687-737)
ACL_HBM_MEM = 1

#: aclrtRunMode (acl_rt.h 105-108): the application runs on the device (ACL_DEVICE) or on a host
#: with a PCIe card (ACL_HOST)
ACL_DEVICE, ACL_HOST = 0, 1

# --- model constants (hicann/ge inc/external/acl/acl_mdl.h) ---------------------------------

#: The extra model input of dynamic batch / HW / dims models (acl_mdl.h:39).
ACL_DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data"
