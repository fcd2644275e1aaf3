"""Engines behind one interface (``base``), declared once in the ``registry``.

Built in: ``onnxruntime`` (an .onnx file) and ``acl`` (an .om on an Ascend NPU through pyACL);
the simulator registers ``acl-sim`` as a plug-in. ``engine: auto`` picks one at load.
"""

from ge_python_backend.engines.base import Engine, PhaseTimes, Slot
from ge_python_backend.engines.registry import (
    EngineInfo,
    ModelFormat,
    ModelRecord,
    auto_candidates,
    detect_format,
    engine_choices,
    engine_for_format,
    engine_info,
    engine_parameters,
    model_formats,
    open_engine,
    registered,
    resolve_auto,
)

__all__ = [
    "Engine",
    "EngineInfo",
    "ModelFormat",
    "ModelRecord",
    "PhaseTimes",
    "Slot",
    "auto_candidates",
    "detect_format",
    "engine_info",
    "engine_choices",
    "engine_for_format",
    "engine_parameters",
    "model_formats",
    "open_engine",
    "registered",
    "resolve_auto",
]
