"""A model file's ``ModelSpec`` read offline, whatever its kind, without opening an engine.

One reader per kind: the CANN .om reader (no CANN needed), the simulated-.om reader and, for
ONNX, ONNX Runtime on the CPU with its log quiet. ``generate``, ``check`` and GEModel's
auto-complete (which runs before any instance exists, so no NPU may be touched) all read
model files here.
"""

from __future__ import annotations

from pathlib import Path

from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.simom import read_sim_om
from ge_python_backend.engines.registry import ModelKind
from ge_python_backend.specs import ModelSpec


def read_model_spec(path: Path, kind: ModelKind) -> ModelSpec:
    """The ModelSpec of ``path``, a model file of ``kind`` (``registry.detect_kind``)."""
    if kind is ModelKind.SIM_OM:
        return read_sim_om(path)
    if kind is ModelKind.OM:
        return read_om(path).spec
    from ge_python_backend.engines.onnxruntime import read_onnx_spec

    return read_onnx_spec(path)
