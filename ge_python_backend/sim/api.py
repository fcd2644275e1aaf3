"""The ``acl`` module stand-in: top-level functions, ``acl.util``, and the assembly of the namespaces.

Every function has pyACL's positional-only signature and return tuple (the binding's per-function
formats, tests/support/pyacl_binding.json);
``acl.rt`` and ``acl.mdl`` live in ``api_rt.py`` and ``api_mdl.py``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ge_python_backend.ascend.acljson import problems, read_acl_json
from ge_python_backend.ascend.constants import data_type, ret_code
from ge_python_backend.errors import ConfigError
from ge_python_backend.sim.api_tensor import TensorDescCalls
from ge_python_backend.sim.dfx import PROFILING_MARKER, write_marker
from ge_python_backend.sim.memory import read_host
from ge_python_backend.sim.models import DataBuffer
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, Signature, acl_function
from ge_python_backend.specs import NUMPY_DTYPES

if TYPE_CHECKING:
    from ge_python_backend.sim.api_mdl import MdlApi
    from ge_python_backend.sim.api_prof import ProfApi
    from ge_python_backend.sim.api_rt import RtApi

REPEAT_INIT = ret_code("ACL_ERROR_REPEAT_INITIALIZE")
INVALID_FILE = ret_code("ACL_ERROR_INVALID_FILE")
PARSE_FILE = ret_code("ACL_ERROR_PARSE_FILE")
INVALID_DUMP_CONFIG = ret_code("ACL_ERROR_INVALID_DUMP_CONFIG")
REPEAT_FINALIZE = ret_code("ACL_ERROR_REPEAT_FINALIZE")
INVALID_PARAM = ret_code("ACL_ERROR_INVALID_PARAM")

#: (major, minor, patch) the simulator reports from acl.get_version.
SIM_VERSION = (8, 0, 0)
#: Byte sizes of the data types that have no Triton equivalent (sub-byte and string types: 0).
_OTHER_SIZES = {
    "COMPLEX64": 8,
    "COMPLEX128": 16,
    "BF16": 2,
    "COMPLEX32": 4,
    "HIFLOAT8": 1,
    "FLOAT8_E5M2": 1,
    "FLOAT8_E4M3FN": 1,
    "FLOAT8_E8M0": 1,
}


class UtilApi(Namespace):
    _prefix = "acl.util"

    @acl_function("kk", value=True, fail_value=b"", needs_init=False, locked=False)
    def ptr_to_bytes(self, ptr, size):
        if self._sim.is_device(ptr):
            # The real binding would dereference a device address and crash the process.
            raise ValueError(
                f"acl.util.ptr_to_bytes: {ptr:#x} is (simulated) device memory, which the host "
                f"cannot read; copy it to host memory with acl.rt.memcpy first"
            )
        if ptr == 0:
            raise ValueError("acl.util.ptr_to_bytes: NULL pointer")
        freed = self._sim.host_memory.freed_block(ptr, size)
        if freed is not None:
            # The real binding would read memory the process may already have reused.
            raise ValueError(
                f"acl.util.ptr_to_bytes: {ptr:#x} is in the malloc_host block at {freed.addr:#x}, which was freed"
            )
        return read_host(ptr, size)

    @acl_function("O", value=True, needs_init=False, locked=False)
    def bytes_to_ptr(self, data):
        if not isinstance(data, bytes):
            raise ValueError(f"acl.util.bytes_to_ptr: expected bytes, got {type(data).__name__}")
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0


class TopApi(TensorDescCalls):
    """``acl.*`` (and, as attributes, ``acl.rt``, ``acl.mdl``, ``acl.prof``, ``acl.util``)."""

    # Assigned by simulator.build_module.
    rt: RtApi
    mdl: MdlApi
    prof: ProfApi
    util: UtilApi

    @acl_function("|s", needs_init=False)
    def init(self, config_path=""):
        """Refcounted: again while initialised is 100002 and reads nothing (acl.cpp 387-392); a
        missing file 100003 (acl_rt_impl_base.cpp 154-182); after a finalize, content other than
        the first successful init's (no file: empty content) 100000 (acl.cpp 402-416, 536-542); a
        bad dump section 100009, a bad err_msg_mode or an unknown profiler key 100000 (acl.cpp
        271-545, prof_acl_mgr.cpp 2081-2091)."""
        sim = self._sim
        if sim.initialized:
            raise AclFail(REPEAT_INIT, "acl.init was already called in this process")
        if config_path and not Path(config_path).is_file():
            raise AclFail(INVALID_FILE, f"config file {config_path!r} does not exist")
        content = Path(config_path).read_bytes() if config_path else b""
        if sim.first_init is not None and content != sim.first_init[1]:
            raise AclFail(
                INVALID_PARAM,
                f"config content of {config_path or '(no file)'!r} differs from the first acl.init's "
                f"({sim.first_init[0] or '(no file)'!r}); a process inits with one config",
            )
        if config_path:
            try:
                config = read_acl_json(Path(config_path))
            except ConfigError as exc:
                raise AclFail(PARSE_FILE, str(exc)) from None
            found = problems(config)
            if found:
                raise AclFail(found[0].ret, "; ".join(str(p) for p in found))
            for key, folder in config.output_folders():
                if not folder.is_dir():
                    raise AclFail(
                        INVALID_DUMP_CONFIG if key.startswith("dump") else INVALID_PARAM,
                        f"{key} {str(folder)!r} is not an existing folder",
                    )
            if config.dumps:
                sim.dumps.from_init = config
            if config.profiles:
                sim.profiling.from_init = True
                output = dict(config.output_folders()).get("profiler.output")
                if output is not None:
                    write_marker(
                        output, PROFILING_MARKER, {"event": "acl.json", "profiler": dict(config.profiler or {})}
                    )
        sim.initialized = True
        sim.finalized = False
        if sim.first_init is None:
            sim.first_init = (config_path, content)

    @acl_function("", needs_init=False, locked=False)
    def finalize(self):
        """After a finalize: 100037 until the next acl.init; with no acl.init at all it tears down and
        counts as a finalize (aclFinalizeFlag: false at start, set by a finalize, cleared by an init;
        acl.cpp 42, 534, 623-646)."""
        if self._sim.finalized:
            raise AclFail(REPEAT_FINALIZE, "acl.finalize already ran")
        if not self._sim.initialized:
            self._sim.finalized = True
            return
        self._sim.finalize()

    @acl_function("", value=True, fail_value=None, needs_init=False, locked=False)
    def get_recent_err_msg(self):
        return self._sim.take_error()

    @acl_function("", outputs=(0, 0, 0), needs_init=False)
    def get_version(self):
        return SIM_VERSION

    @acl_function("", value=True, fail_value=None, needs_init=False)
    def get_soc_name(self):
        return self._sim.config.soc_name

    @acl_function("kk", value=True)
    def create_data_buffer(self, data_ptr, size):
        return self._sim.add(self._sim.buffers, lambda handle: DataBuffer(handle, data_ptr, size))

    def _buffer(self, buffer: int) -> DataBuffer:
        return self._sim.lookup(self._sim.buffers, buffer, "data buffer")

    @acl_function("k")
    def destroy_data_buffer(self, buffer):
        self._sim.remove(self._sim.buffers, buffer, "data buffer")

    @acl_function("k", value=True)
    def get_data_buffer_addr(self, buffer):
        return self._buffer(buffer).addr

    @acl_function("k", value=True)
    def get_data_buffer_size(self, buffer):
        return self._buffer(buffer).size

    @acl_function("k", value=True)
    def get_data_buffer_size_v2(self, buffer):
        return self._buffer(buffer).size

    @acl_function("kkk")
    def update_data_buffer(self, buffer, data_ptr, size):
        found = self._buffer(buffer)
        found.addr, found.size = data_ptr, size

    @acl_function("i", value=True, needs_init=False)
    def data_type_size(self, dtype):
        found = data_type(dtype)
        numpy_type = NUMPY_DTYPES.get(found.triton)
        return np.dtype(numpy_type).itemsize if numpy_type is not None else _OTHER_SIZES.get(found.name, 0)


def signatures(module: TopApi) -> dict[str, Signature]:
    """Qualified name -> Signature of every simulated function (``acl.rt.malloc`` -> ("ki", ...))."""
    found = {}
    for namespace in (module, module.rt, module.mdl, module.prof, module.util):
        for name in dir(type(namespace)):
            signature = getattr(getattr(type(namespace), name), "acl_signature", None)
            if signature is not None:
                found[f"{namespace._prefix}.{name}"] = signature
    return found
