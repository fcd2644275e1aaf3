"""The acl engine: CANN offline models on an Ascend NPU through pyACL.

``runtime`` (process-wide init, devices, errors), ``description`` (what the model is),
``slot`` (one model copy, stream and buffers), ``engine`` (the slots as one engine), ``preflight``
(what the load refuses in the parameters, also found offline).
"""

from ge_python_backend.engines.acl.engine import DRIVER, PARAMETERS, AclDriver, AclEngine

__all__ = ["DRIVER", "PARAMETERS", "AclDriver", "AclEngine"]
