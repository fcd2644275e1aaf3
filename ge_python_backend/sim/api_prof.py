"""``acl.prof``: the profiling API of the simulator (hicann/runtime include/external/acl/acl_prof.h
150-230; order rules docs/zh/api_ref/19-01_data_profiling_apis.md 13-44 and
src/dfx/msprof/collector/dvvp/msprof/engine/src/prof_acl_mgr.cpp 525-566; Python shapes
python/pyACL/prof/prof_wrap.cpp: ``create_config`` "OikK" returns a handle, the others ``ret``).

The CANN 8.5/9.0 rules: ``start``/``stop``/``finalize`` without ``init`` fail with 100043 (9.1
auto-initialises; the engine always calls ``init`` first, so it works on both).
"""

from __future__ import annotations

import os
from pathlib import Path

from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.sim.dfx import PROFILING_MARKER, write_marker
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import INVALID_PARAM

REPEAT_INITIALIZE = ret_code("ACL_ERROR_REPEAT_INITIALIZE")
PROF_ALREADY_RUN = ret_code("ACL_ERROR_PROF_ALREADY_RUN")
PROF_NOT_RUN = ret_code("ACL_ERROR_PROF_NOT_RUN")
FEATURE_UNSUPPORTED = ret_code("ACL_ERROR_FEATURE_UNSUPPORTED")
#: aclprofAicoreMetrics (acl_prof.h 55-66)
AICORE_METRICS = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 8, 0xFF})
#: every ACL_PROF_* data type bit (acl_prof.h 26-43)
DATA_TYPE_BITS = (
    0x0001
    | 0x0002
    | 0x0004
    | 0x0008
    | 0x0010
    | 0x0020
    | 0x0040
    | 0x0080
    | 0x0100
    | 0x0200
    | 0x0800
    | 0x1000
    | 0x2000
    | 0x4000
    | 0x8000
    | 0x01000000
    | 0x400000000
    | 0x800000000
)


class ProfApi(Namespace):
    _prefix = "acl.prof"

    def _state(self):
        return self._sim.profiling

    def _require_init(self, doing: str) -> None:
        state = self._state()
        if state.from_init:
            raise AclFail(PROF_ALREADY_RUN, f"{doing}: profiling is already on through acl.json (acl.init)")
        if state.folder is None:
            raise AclFail(PROF_NOT_RUN, f"{doing} before acl.prof.init")

    @acl_function("s")
    def init(self, result_path):
        # msprof's dynamic mode owns profiling: aclprofInit refuses (prof_acl_api.cpp 37-46)
        if os.environ.get("PROFILING_MODE") == "dynamic":
            raise AclFail(FEATURE_UNSUPPORTED, "PROFILING_MODE=dynamic: msprof --dynamic drives profiling")
        state = self._state()
        if state.from_init:
            raise AclFail(PROF_ALREADY_RUN, "profiling is already on through acl.json (acl.init)")
        if state.folder is not None:
            raise AclFail(REPEAT_INITIALIZE, "acl.prof.init was already called")
        if self._sim.models:
            raise AclFail(INVALID_PARAM, "acl.prof.init must come before any model is loaded")
        if not 1 <= len(result_path) < 4096:
            raise AclFail(INVALID_PARAM, f"profiling path length {len(result_path)} is not in 1..4095")
        folder = Path(result_path)
        if not folder.is_dir():
            raise AclFail(INVALID_PARAM, f"profiling path {result_path!r} is not a folder")
        state.folder = folder

    @acl_function("OikK", value=True)
    def create_config(self, device_ids, aicore_metrics, aicore_events, data_type_config):
        if not isinstance(device_ids, list) or not all(isinstance(d, int) for d in device_ids):
            raise TypeError("acl.prof.create_config: argument 1 is not a list of int")
        if aicore_events != 0:
            raise AclFail(INVALID_PARAM, "aicore events: only NULL (0) is supported")
        if aicore_metrics not in AICORE_METRICS:
            raise AclFail(INVALID_PARAM, f"aicore metrics {aicore_metrics} is not an aclprofAicoreMetrics")
        if data_type_config & ~DATA_TYPE_BITS:
            raise AclFail(INVALID_PARAM, f"data type config {data_type_config:#x} has bits that are not ACL_PROF_*")
        for device in device_ids:
            self._sim.check_device_id(device)
        state = self._state()
        return self._sim.add(state.configs, lambda handle: (tuple(device_ids), data_type_config))

    @acl_function("k")
    def start(self, config):
        self._require_init("acl.prof.start")
        state = self._state()
        devices, types = self._sim.lookup(state.configs, config, "profiling config")
        for other in state.running:
            if set(state.configs[other][0]) & set(devices):
                raise AclFail(INVALID_PARAM, f"devices {sorted(devices)} are already being profiled")
        state.running.add(config)
        write_marker(state.folder, PROFILING_MARKER, {"event": "start", "devices": list(devices), "data_types": types})

    @acl_function("k")
    def stop(self, config):
        self._require_init("acl.prof.stop")
        state = self._state()
        self._sim.lookup(state.configs, config, "profiling config")
        if config not in state.running:
            raise AclFail(INVALID_PARAM, "acl.prof.stop with a config that was not started")
        state.running.discard(config)
        write_marker(state.folder, PROFILING_MARKER, {"event": "stop"})

    @acl_function("k")
    def destroy_config(self, config):
        state = self._state()
        if config in state.running:
            raise AclFail(INVALID_PARAM, "the profiling config is still started (acl.prof.stop first)")
        self._sim.remove(state.configs, config, "profiling config")

    @acl_function("")
    def finalize(self):
        self._require_init("acl.prof.finalize")
        state = self._state()
        if state.running:
            raise AclFail(INVALID_PARAM, "a profiling config is still started (acl.prof.stop first)")
        state.folder = None
