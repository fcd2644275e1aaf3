"""What format a model file is, the engine that runs it, and its ModelSpec, read offline.

The format comes from the file's first bytes or its suffix (``engines.detect_format``), the
engine, its default file name and the format's reader from the engine registry: a CANN offline
model (starts with "IMOD", the offline OM reader), an ONNX file (ONNX Runtime), and what a
plug-in adds (the simulator's simulated .om).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.engines import EngineInfo, ModelFormat, detect_format, engine_for_format, model_formats
from ge_python_backend.engines.offline import read_model_spec
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec


@dataclass(frozen=True)
class ModelFile:
    path: Path
    format: ModelFormat
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
    found = detect_format(path)
    if found is None:
        known = ", ".join(f.description for f in model_formats())
        raise ConfigError(f"{path}: not a model file ge-triton knows (expected one of: {known}); first bytes: {head!r}")
    return ModelFile(path, found, engine_for_format(found), read_model_spec(path, found))


def served_model_file(folder: Path) -> ModelFile:
    """The model file of model folder ``folder``'s newest version (the first file there a
    registered format reads): what a pipeline step reads to know the model it feeds."""
    folder = Path(folder)
    versions = sorted((int(p.name), p) for p in folder.glob("*") if p.is_dir() and p.name.isdigit())
    for _, version in reversed(versions):
        for candidate in sorted(version.iterdir()):
            if candidate.is_file() and detect_format(candidate) is not None:
                return read_model_file(candidate)
    raise ConfigError(f"model folder {folder} holds no model file in a version folder")
