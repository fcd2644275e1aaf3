"""The acl engine: CANN offline models on an Ascend NPU through pyACL."""

from ge_python_backend.engines.acl.engine import PARAMETERS, AclEngine, npu_available, open_engine

__all__ = ["PARAMETERS", "AclEngine", "npu_available", "open_engine"]
