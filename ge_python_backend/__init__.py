"""Serve CANN offline models (.om) on Ascend NPUs through Triton's Python backend.

The names a model.py needs are importable from here: ``GEModel`` (the TritonPythonModel base
class), ``InputError`` (refuse one request), ``Parameter`` (declare a config parameter), the
hook helpers (``ImageClassifier``, ``load_labels``, ``top_k``, ...) and ``ModelHarness`` (run a
model in-process in tests). ``GEModel`` and ``ModelHarness`` are imported on first use: GEModel
needs Triton's ``triton_python_backend_utils``, which exists only inside a Triton stub process
(or as the fake in ``ge_python_backend.testing``). Everything else imports anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ge_python_backend.errors import ConfigError, EngineError, GEError, InputError, OmFormatError
from ge_python_backend.params import Parameter
from ge_python_backend.serving.requests import RequestInfo
from ge_python_backend.specs import BatchSupport, ModelSpec, ShapeGear, Tensor, TensorSpec
from ge_python_backend.version import __version__

if TYPE_CHECKING:
    from ge_python_backend.testing import ModelHarness
    from ge_python_backend.triton.model import GEModel

#: name -> the module it comes from, imported when the name is first used
_LAZY = {
    "GEModel": "ge_python_backend.triton.model",
    "ModelHarness": "ge_python_backend.testing",
    **{
        name: "ge_python_backend.hooks"
        for name in (
            "CLASSIFICATION_PARAMETERS",
            "ImageClassifier",
            "ImageInput",
            "decode_images",
            "image_input",
            "load_labels",
            "normalize",
            "softmax",
            "top_k",
        )
    },
}

__all__ = [
    "BatchSupport",
    "ConfigError",
    "EngineError",
    "GEError",
    "GEModel",
    "InputError",
    "ModelHarness",
    "ModelSpec",
    "OmFormatError",
    "Parameter",
    "RequestInfo",
    "ShapeGear",
    "Tensor",
    "TensorSpec",
    "__version__",
    *sorted(name for name in _LAZY if name not in ("GEModel", "ModelHarness")),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ge_python_backend' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
