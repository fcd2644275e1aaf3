"""config.pbtxt written through Triton's own schema; reading it is ``modelconfig/files.py``'s
(models read their peers' configs at load too), whose names are used from here as well."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import text_format

from ge_python_backend.modelconfig.files import (
    ModelConfig,
    check_server_compatible,
    config_json,
    mc,
    parse_config,
    read_config_file,
)

__all__ = [
    "ModelConfig",
    "config_json",
    "format_config",
    "mc",
    "parse_config",
    "read_config_file",
    "set_parameters",
]


def format_config(config: Any) -> str:
    """Protobuf text of ``config`` (after the 2.51 compatibility check)."""
    check_server_compatible(config)
    return text_format.MessageToString(config)


def set_parameters(config_file: Path, **values: object) -> Path:
    """Add or replace ``parameters`` entries (string values) of a config.pbtxt file, keeping
    the rest of it; returns ``config_file``."""
    config = read_config_file(config_file)
    for key, value in values.items():
        config.parameters[key].string_value = str(value)
    Path(config_file).write_text(format_config(config), encoding="utf-8")
    return Path(config_file)
