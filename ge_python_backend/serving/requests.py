"""A request as the request path sees it: its tensors, what hooks may know, and how to answer it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ge_python_backend.errors import GEError

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class RequestInfo:
    """What the hooks may know about a request.

    A snapshot taken in ``execute``: the Triton request object itself may already be released
    when ``postprocess`` runs on a worker thread.
    """

    request_id: str = ""
    correlation_id: int | str = 0
    flags: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    requested_outputs: tuple[str, ...] = ()


#: ``respond(outputs, None)`` or ``respond(None, error)``: called exactly once per request.
Respond = Callable[[Arrays | None, GEError | None], None]

#: A pre- or post-processing hook: one request's tensors (and its info) in, tensors out.
Hook = Callable[[dict[str, np.ndarray], RequestInfo], Mapping[str, Any]]


@dataclass(slots=True)
class Request:
    """One request: what hooks may know of it, its input tensors and the callback that answers it."""

    info: RequestInfo
    inputs: Arrays
    respond: Respond


#: What the request path passes for a request nothing reads the info of (no hook, no sequence
#: state, no request parameters, one requested-outputs answer for all).
NO_INFO = RequestInfo()


def hook_location(hook: Hook) -> str:
    """Where a hook is defined, the way a traceback names a frame (for the log of a hook that
    returned what its contract forbids: its frame is gone by the time that is found)."""
    code = getattr(getattr(hook, "__func__", hook), "__code__", None)
    if code is None:
        return repr(hook)
    return f'File "{code.co_filename}", line {code.co_firstlineno}, in {code.co_name}'
