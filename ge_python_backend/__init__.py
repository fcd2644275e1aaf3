"""Serve CANN offline models (.om) on Ascend NPUs through Triton's Python backend.

``GEModel`` (the TritonPythonModel base class) is imported lazily: it needs Triton's
``triton_python_backend_utils``, which exists only inside a Triton stub process (or the
fake in ``ge_python_backend.testing``). Everything else imports anywhere.
"""

from __future__ import annotations

from ge_python_backend.errors import ConfigError, EngineError, GEError, InputError, OmFormatError
from ge_python_backend.serving.requests import RequestInfo
from ge_python_backend.specs import BatchSupport, ModelSpec, ShapeGear, TensorSpec

__version__ = "0.1.0"

__all__ = [
    "BatchSupport",
    "ConfigError",
    "EngineError",
    "GEError",
    "GEModel",
    "InputError",
    "ModelSpec",
    "OmFormatError",
    "RequestInfo",
    "ShapeGear",
    "TensorSpec",
]


def __getattr__(name: str):
    if name == "GEModel":
        from ge_python_backend.triton.model import GEModel

        return GEModel
    raise AttributeError(f"module 'ge_python_backend' has no attribute {name!r}")
