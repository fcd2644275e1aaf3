"""The Python-based Triton backend "ge": GEModel with no hooks, for model folders with no model.py.

A folder ``<backends>/ge/`` holding only ``model.py`` next to Triton's ``python`` backend makes
``backend: "ge"`` in a config.pbtxt run GEModel on the folder's model file.
"""

from __future__ import annotations

from pathlib import Path

GE_BACKEND_NAME = "ge"
GE_BACKEND_SOURCE = '''"""Triton Python-based backend "ge" (installed by ge-triton install-backend).

Serves every model whose config.pbtxt says backend: "ge" through ge_python_backend.GEModel:
the model folder needs only config.pbtxt and the model file.
"""

from ge_python_backend import GEModel


class TritonPythonModel(GEModel):
    """GEModel with its default (identity) pre- and post-processing."""
'''


def ge_backend_file(backends: Path) -> Path:
    """Where the ``ge`` backend's model.py is in a Triton backends folder."""
    return Path(backends) / GE_BACKEND_NAME / "model.py"


def write_ge_backend(backends: Path) -> Path:
    """Install the ``ge`` Python-based backend into a Triton backends folder."""
    target = ge_backend_file(backends)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(GE_BACKEND_SOURCE, encoding="utf-8")
    return target
