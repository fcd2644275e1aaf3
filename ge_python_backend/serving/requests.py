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


@dataclass
class Request:
    """One request: its info, its input tensors and the callback that answers it."""

    info: RequestInfo
    inputs: Arrays
    respond: Respond
