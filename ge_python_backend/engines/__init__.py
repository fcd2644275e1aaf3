"""Engines behind one interface, and the choice between them.

Engine names: ``onnxruntime`` (an .onnx file), ``acl`` (an .om file on an Ascend NPU through
pyacl), ``acl-sim`` (a simulated .om on the pyacl-compatible simulator) and ``auto``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Mapping

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Parameter
from ge_python_backend.engines.base import Engine, PhaseTimes, Slot

ENGINE_NAMES = ("auto", "onnxruntime", "acl", "acl-sim")

#: engine name -> (module under ge_python_backend.engines, default model file name)
_MODULES = {
    "onnxruntime": ("onnxruntime", "model.onnx"),
    "acl": ("acl", "model.om"),
    "acl-sim": ("acl", "model.om"),
}


def _module(engine: str):
    return importlib.import_module(f"{__name__}.{_MODULES[engine][0]}")


def default_model_file(engine: str) -> str:
    return _MODULES[engine][1]


def engine_parameters() -> tuple[Parameter, ...]:
    """Every engine-specific parameter any engine accepts."""
    declared: dict[str, Parameter] = {}
    for engine in _MODULES:
        for parameter in _module(engine).PARAMETERS:
            declared.setdefault(parameter.name, parameter)
    return tuple(declared.values())


def resolve_auto(version_dir: Path, log: Callable[[str], None]) -> str:
    """Pick an engine for ``engine: auto``: acl when model.om is present, pyACL imports and a
    device answers; else onnxruntime when model.onnx is present. The choice is logged."""
    om_file = version_dir / default_model_file("acl")
    onnx_file = version_dir / default_model_file("onnxruntime")
    reason = f"no {om_file.name}"
    if om_file.is_file():
        from ge_python_backend.engines.acl.engine import npu_available

        available, reason = npu_available()
        if available:
            log(f"engine auto: chose acl ({om_file.name} present; {reason})")
            return "acl"
    if onnx_file.is_file():
        log(f"engine auto: chose onnxruntime ({onnx_file.name} present; not acl: {reason})")
        return "onnxruntime"
    raise ConfigError(
        f"engine auto: nothing to run in {version_dir}: acl is out ({reason}) and there is no {onnx_file.name}"
    )


def open_engine(engine: str, model_path: Path, *, device_id: int, slots: int, options: Mapping[str, Any]) -> Engine:
    """Load ``model_path`` on ``engine`` with ``slots`` execution contexts."""
    if engine not in _MODULES:
        raise ConfigError(f"engine {engine!r} is not available; available: {', '.join(_MODULES)}")
    names = {p.name for p in _module(engine).PARAMETERS}
    own = {k: v for k, v in options.items() if k in names}
    extra = {"name": engine} if _MODULES[engine][0] == "acl" else {}
    return _module(engine).open_engine(model_path, device_id=device_id, slots=slots, options=own, **extra)


__all__ = [
    "ENGINE_NAMES",
    "Engine",
    "PhaseTimes",
    "Slot",
    "default_model_file",
    "engine_parameters",
    "open_engine",
    "resolve_auto",
]
