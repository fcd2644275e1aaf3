"""What kind of model file a path is, and its ModelSpec, read offline.

- a CANN offline model (starts with "IMOD"): the offline OM reader, engine ``acl``;
- a simulated OM made by ``ge-triton sim-compile`` (starts with b"GESIMOM\\0"): engine ``acl-sim``;
- an ONNX file: ONNX Runtime, engine ``onnxruntime``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.errors import ConfigError
from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.om.header import MAGIC as OM_MAGIC
from ge_python_backend.ascend.simom import MAGIC as SIM_OM_MAGIC, read_sim_om
from ge_python_backend.specs import ModelSpec


@dataclass(frozen=True)
class ModelFile:
    path: Path
    kind: str  # "om", "sim-om" or "onnx"
    engine: str  # the engine that runs it
    default_name: str  # its file name inside a version folder
    spec: ModelSpec


def read_model_file(path: Path) -> ModelFile:
    """Describe ``path``; ConfigError when it is missing or of no known kind."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise ConfigError(f"cannot read model file {path}: {exc.strerror}") from None
    if head.startswith(SIM_OM_MAGIC):
        return ModelFile(path, "sim-om", "acl-sim", "model.om", read_sim_om(path))
    if head.startswith(OM_MAGIC):
        return ModelFile(path, "om", "acl", "model.om", read_om(path).spec)
    if path.suffix.lower() == ".onnx":
        from ge_python_backend.engines.onnxruntime import read_onnx_spec

        return ModelFile(path, "onnx", "onnxruntime", "model.onnx", read_onnx_spec(path))
    raise ConfigError(
        f"{path}: not a model file ge-triton knows (expected a CANN .om starting with 'IMOD', a simulated .om "
        f"from ge-triton sim-compile, or an .onnx file); first bytes: {head!r}"
    )
