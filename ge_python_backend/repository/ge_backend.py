"""The Python-based Triton backends: "ge" (GEModel with no hooks, for model folders with no
model.py) and "npu_ge" (the same for the model folders of CANN's own C++ GE backend).

A folder ``<backends>/<name>/`` holding only ``model.py`` next to Triton's ``python`` backend makes
``backend: "<name>"`` in a config.pbtxt run GEModel on the folder's model file.
"""

from __future__ import annotations

from pathlib import Path

from ge_python_backend.errors import ConfigError

GE_BACKEND_NAME = "ge"
NPU_GE_BACKEND_NAME = "npu_ge"

_HEADER = '''"""Triton Python-based backend "{name}" (installed by ge-triton install-backend).

{what}
"""

'''
#: backend name -> its model.py
BACKEND_SOURCES = {
    GE_BACKEND_NAME: _HEADER.format(
        name=GE_BACKEND_NAME,
        what='Serves every model whose config.pbtxt says backend: "ge" through ge_python_backend.GEModel:\n'
        "the model folder needs only config.pbtxt and the model file.",
    )
    + '''from ge_python_backend import GEModel


class TritonPythonModel(GEModel):
    """GEModel with its default (identity) pre- and post-processing."""
''',
    NPU_GE_BACKEND_NAME: _HEADER.format(
        name=NPU_GE_BACKEND_NAME,
        what='Serves the model folders of CANN\'s C++ GE backend (backend: "npu_ge") unchanged: their\n'
        "parameters are translated (docs/npu-ge.md), the .onnx or .pb compiled with ATC at load.",
    )
    + '''from ge_python_backend.triton.npu_ge_model import NpuGeModel


class TritonPythonModel(NpuGeModel):
    """NpuGeModel with its default (identity) pre- and post-processing."""
''',
}


def ge_backend_file(backends: Path, name: str = GE_BACKEND_NAME) -> Path:
    """Where the Python-based backend ``name``'s model.py is in a Triton backends folder."""
    return Path(backends) / name / "model.py"


def write_ge_backend(backends: Path, name: str = GE_BACKEND_NAME) -> Path:
    """Install the Python-based backend ``name`` (``ge`` or ``npu_ge``) into a Triton backends folder."""
    source = BACKEND_SOURCES.get(name)
    if source is None:
        raise ConfigError(f"backend {name!r}: ge-triton installs {' or '.join(BACKEND_SOURCES)}")
    target = ge_backend_file(backends, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source, encoding="utf-8")
    return target
