"""The acl engine: CANN offline models on an Ascend NPU through pyACL.

``runtime`` (process-wide init, devices, errors), ``description`` (what the model is),
``slot`` (one model copy, stream and buffers), ``engine`` (the slots as one engine), ``preflight``
(what the load refuses in the parameters, also found offline).
"""

from ge_python_backend.engines.acl.engine import (
    PARAMETERS,
    AclEngine,
    available,
    compile_target,
    generated_parameters,
    offline_problems,
    open_engine,
)

__all__ = [
    "PARAMETERS",
    "AclEngine",
    "available",
    "compile_target",
    "offline_problems",
    "open_engine",
    "generated_parameters",
]
