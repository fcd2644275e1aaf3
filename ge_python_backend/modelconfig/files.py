"""config.pbtxt read through Triton's own schema (``tritonclient.grpc.model_config_pb2``).

The installed tritonclient may be newer than the 2.51 server and know fields that server
refuses (``model_metrics``, ``ensemble_scheduling ... max_inflight_requests``); configs are
checked for them when read and before they are written (``repository/config.py``). A model that
reads another model's config at load (the router reads its members') reads it here too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as mc

from ge_python_backend.errors import ConfigError

ModelConfig = mc.ModelConfig

#: Fields of newer schemas that tritonserver 2.51 (release 24.10) does not know, by message.
_NEWER_FIELDS = {
    "inference.ModelConfig": ("model_metrics",),
    "inference.ModelEnsembling": ("max_inflight_requests",),
}


def parse_config(text: str, source: str = "config.pbtxt") -> Any:
    """A ModelConfig from protobuf text; ConfigError naming ``source`` and the line on failure."""
    try:
        config = text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    check_server_compatible(config, source)
    return config


def read_config_file(path: Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_config(text, str(path))


def check_server_compatible(message: Message, source: str = "config") -> None:
    """Refuse fields that the 2.51 server does not know (it would refuse the model)."""
    for field, value in message.ListFields():
        if field.name in _NEWER_FIELDS.get(message.DESCRIPTOR.full_name, ()):
            raise ConfigError(f"{source}: field {field.name!r} is not known to tritonserver 2.51; remove it")
        for child in _child_messages(field, value):
            check_server_compatible(child, source)


def _child_messages(field, value) -> list[Message]:
    entry = field.message_type
    if entry is None:
        return []
    if entry.GetOptions().map_entry:
        return list(value.values()) if entry.fields_by_name["value"].message_type else []
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    return list(value) if repeated else [value]


def config_dict(config: Any, name: str | None = None) -> dict[str, Any]:
    """The dict of Triton's ``args["model_config"]`` JSON (enums as names, dims as numbers)."""
    data = json_format.MessageToDict(config, preserving_proto_field_name=True)
    data.setdefault("max_batch_size", 0)
    if name:
        data["name"] = name
    for key in ("input", "output"):
        for entry in data.get(key, []):
            entry["dims"] = [int(d) for d in entry.get("dims", [])]
            entry.setdefault("optional", False)
    return data


def config_json(config: Any, name: str | None = None) -> str:
    """The JSON Triton gives ``initialize`` as ``args["model_config"]``."""
    return json.dumps(config_dict(config, name))
