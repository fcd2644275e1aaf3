"""What a model file records, read offline whatever its format, without opening an engine.

The format comes from the registry (``registry.detect_format``: built in, the CANN .om and ONNX;
a plug-in adds its own); each format names its reader. ``generate``, ``check``, GEModel's
auto-complete (which runs before any instance exists, so no NPU may be touched), the acl engine
(the streams a load takes, the ``--input_shape`` order) and ``doctor`` all read model files here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.resources import ModelResources, recorded_resources
from ge_python_backend.engines.registry import ModelFormat, ModelRecord, detect_format
from ge_python_backend.errors import ConfigError, OmFormatError
from ge_python_backend.specs import ModelSpec

LOG = logging.getLogger(__name__)


def read_record(path: Path, model_format: ModelFormat | None = None) -> ModelRecord:
    """What ``path`` records (its format detected unless given); ConfigError when no registered
    format is it, OmFormatError when it is damaged."""
    found = model_format or detect_format(path)
    if found is None:
        raise ConfigError(f"{path} is no model file a registered engine runs")
    return found.read(Path(path))


def read_model_spec(path: Path, model_format: ModelFormat) -> ModelSpec:
    """The ModelSpec of ``path``, a model file of ``model_format`` (``registry.detect_format``)."""
    return read_record(path, model_format).spec


def model_resources(path: Path) -> ModelResources:
    """The streams and events a load of ``path`` creates, as its file records them; the defaults
    when it records nothing or cannot be read (the load itself then says what is wrong)."""
    try:
        return read_record(Path(path)).resources
    except (OSError, OmFormatError, ConfigError) as exc:
        LOG.debug("%s records no streams and events that can be read (%s); counting the defaults", path, exc)
        return ModelResources()


def read_cann_om(path: Path) -> ModelRecord:
    """A CANN .om through the offline OM reader."""
    found = read_om(path)
    return ModelRecord(
        found.spec,
        tuple(found.shape_order) if found.shape_order_recorded else (),
        recorded_resources(found.spec.facts, dynamic=found.header.is_multi_model),
    )


def read_onnx(path: Path) -> ModelRecord:
    """An ONNX model through ONNX Runtime on the CPU (its log quiet)."""
    from ge_python_backend.engines.onnxruntime import read_onnx_spec

    return ModelRecord(read_onnx_spec(path))
