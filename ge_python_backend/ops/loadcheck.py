"""``check --load``: load each model in a real tritonserver and report what it says.

Offline rules always trail what the server checks, so the server is asked too: a tritonserver
(``PATH`` or the bundled one, ``ops.server``) starts in explicit model-control mode on free
loopback ports with nothing loaded, gRPC and HTTP inference off, and the repository API (which
loads code: a load request may upload files), model configs, shared memory, trace and logging
restricted with a random key only this process knows (``check_server``); each model is loaded
through the repository API, its config as the server completed it is read back and compared with
the file, and it is unloaded again. A refused load is reported with Triton's own message: the
load API's answer, or, when the config failed while the repository was polled (the API then only
says "failed to poll from model repository"), the reason the server logged ("Poll failed for model directory ...", CORE
r24.10 ``src/model_repository_manager/model_repository_manager.cc:1460``).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from ge_python_backend.ops.access import OPERATOR_APIS, Api
from ge_python_backend.ops.server import TritonServer, error_text, last_words
from ge_python_backend.repository.config import mc, read_config_file

#: What the load API answers when the config already failed at the repository poll.
_POLL_FAILED = "failed to poll from model repository"
#: Default seconds one load may take (a stub that never starts hangs the load in 24.10).
DEFAULT_LOAD_TIMEOUT = 180.0


@dataclass(frozen=True)
class LoadResult:
    """One model: loaded or not, Triton's message when not, and what the server completed or
    changed in its config compared with the file (``+ field: value`` filled in,
    ``~ field: file -> server`` changed, ``- field`` dropped)."""

    model: str
    loaded: bool
    message: str = ""
    changes: tuple[str, ...] = ()


def load_models(
    repository: Path,
    models: Sequence[str],
    *,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT,
    server: TritonServer | None = None,
    unload: bool = True,
) -> list[LoadResult]:
    """Load, inspect and unload each of ``models`` of ``repository`` in one fresh tritonserver
    (or in ``server``, running in explicit model-control mode on ``repository``); ServerError
    when no tritonserver can be found or started. A model that kills the server is reported
    with the server's last words, and a fresh server loads the rest (not a given ``server``).
    ``unload`` False keeps the models a given ``server`` loaded, serving."""
    results: list[LoadResult] = []
    pending = list(models)
    while pending:
        running = server or check_server(repository)
        try:
            if server is None:
                running.start()
            while pending:
                results.append(_load_one(running, Path(repository), pending.pop(0), load_timeout, unload))
                if running.process is None or running.process.poll() is not None:
                    break
        finally:
            if server is None:
                running.close()  # its temporary folder too, also when the start failed
        if server is not None:
            break
    return results


def check_server(repository: Path) -> TritonServer:
    """The (not yet started) tritonserver ``check --load`` loads models in: explicit mode,
    loopback, HTTP only, no inference, operator APIs behind a random key."""
    return TritonServer(
        repository,
        model_control_mode="explicit",
        exit_on_error=False,
        restricted_apis=OPERATOR_APIS,
        http_inference=False,
        extra_args=["--allow-grpc=false"],
    )


def _load_one(server: TritonServer, repository: Path, model: str, timeout: float, unload: bool) -> LoadResult:
    log_start = len(server.log_text())
    status, body = server.repository_call("load", model, timeout)
    if status != 200:
        message = error_text(body)
        if _POLL_FAILED in message:
            message = _poll_reason(server.log_text()[log_start:], model) or message
        if status == 0:
            code = _exit_code(server)
            if code is not None:
                last = last_words(server.log_text()[log_start:])
                message = f"tritonserver itself died while loading it (exit code {code}){': ' + last if last else ''}"
            else:
                message = f"the load did not finish within {timeout:.0f} s ({message})"
        return LoadResult(model, False, message)
    try:
        served = _served_config(server, model)
        changes = tuple(config_changes(read_config_file(repository / model / "config.pbtxt"), served))
    finally:
        if unload:
            server.repository_call("unload", model, timeout)
    return LoadResult(model, True, changes=changes)


def _exit_code(server: TritonServer, grace: float = 10.0) -> int | None:
    """The server's exit code when the connection dropped because it is dying; None if it lives."""
    if server.process is None:
        return None
    try:
        return server.process.wait(grace)
    except subprocess.TimeoutExpired:
        return None


def _served_config(server: TritonServer, model: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{server.http_address}/v2/models/{model}/config", headers=server.http_headers(Api.MODEL_CONFIG)
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _poll_reason(log: str, model: str) -> str:
    """The reason the server logged for a config that failed the repository poll."""
    pattern = re.compile(r"Poll failed for model directory '" + re.escape(model) + r"': (.*?)\"?$", re.MULTILINE)
    found = pattern.findall(log)
    return found[-1].strip() if found else ""


# -- what the server completed -----------------------------------------------------------------


def config_changes(file_config: Any, served: dict[str, Any]) -> Iterator[str]:
    """Differences between a config file and the config the server serves, both read through
    Triton's schema (so values equal to the schema's defaults count as absent on both sides)."""
    server_config = json_format.ParseDict(served, mc.ModelConfig(), ignore_unknown_fields=True)
    before, after = _flatten(file_config), _flatten(server_config)
    for key in sorted(set(before) | set(after)):
        if key not in before:
            yield f"+ {key}: {after[key]}"
        elif key not in after:
            yield f"- {key} (was {before[key]})"
        elif before[key] != after[key]:
            yield f"~ {key}: {before[key]} -> {after[key]}"


def _flatten(message: Message, prefix: str = "") -> dict[str, str]:
    """Every set field of ``message`` as ``path -> value text``: ``input[x].dims -> [4]``
    (inputs and outputs by name, other repeated messages by index, maps by key, enums by name)."""
    flat: dict[str, str] = {}
    for field, value in message.ListFields():
        path = f"{prefix}.{field.name}" if prefix else field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key in sorted(value):
                inner = value[key]
                label = f"{path}[{key}]"
                if isinstance(inner, Message):
                    flat.update(_flatten(inner, label))
                else:
                    flat[label] = repr(inner)
        elif field.message_type is not None and _repeated(field):
            for index, inner in enumerate(value):
                key = inner.name if field.name in ("input", "output") and inner.name else str(index)
                flat.update(_flatten(inner, f"{path}[{key}]"))
        elif field.message_type is not None:
            inner_flat = _flatten(value, path)
            flat.update(inner_flat or {path: "{}"})
        else:
            flat[path] = _scalar(field, value)
    return flat


def _repeated(field: Any) -> bool:
    return field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED


def _scalar(field: Any, value: Any) -> str:
    if field.enum_type is not None:
        names = [field.enum_type.values_by_number[v].name for v in value] if _repeated(field) else None
        return str(names) if names is not None else field.enum_type.values_by_number[value].name
    if _repeated(field):
        return str(list(value))
    return (
        json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    )
