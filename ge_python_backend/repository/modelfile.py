"""What kind of model file a path is, the engine that runs it, and its ModelSpec, read offline.

The kind comes from the file's first bytes (``engines.detect_kind``); the engine and its default
file name from the engine registry:

- a CANN offline model (starts with "IMOD"): the offline OM reader;
- a simulated OM made by ``ge-triton sim-compile`` (starts with b"GESIMOM\\0");
- an ONNX file: ONNX Runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.engines import EngineInfo, ModelKind, detect_kind, engine_for_kind
from ge_python_backend.engines.offline import read_model_spec
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec


@dataclass(frozen=True)
class ModelFile:
    path: Path
    kind: ModelKind
    engine: EngineInfo  # the engine that runs it
    spec: ModelSpec

    @property
    def default_name(self) -> str:
        """Its file name inside a version folder."""
        return self.engine.default_file


def read_model_file(path: Path) -> ModelFile:
    """Describe ``path``; ConfigError when it is missing or of no known kind."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise ConfigError(f"cannot read model file {path}: {exc.strerror}") from None
    kind = detect_kind(path)
    if kind is None:
        raise ConfigError(
            f"{path}: not a model file ge-triton knows (expected a CANN .om starting with 'IMOD', a simulated .om "
            f"from ge-triton sim-compile, or an .onnx file); first bytes: {head!r}"
        )
    return ModelFile(path, kind, engine_for_kind(kind), read_model_spec(path, kind))
