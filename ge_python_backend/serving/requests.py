"""A request as the request path sees it: its tensors, what hooks may know, and how to answer it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ge_python_backend.errors import GEError

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class RequestInfo:
    """What the hooks may know about a request.

    A snapshot taken in ``execute``: the Triton request object itself may already be released
    when ``postprocess`` runs on a worker thread. ``context`` is the one mutable part: what this
    request's hooks leave for each other (``preprocess`` sets the letterbox it applied,
    ``postprocess`` reads it), a dict of its own that no other request sees (two requests with
    equal fields are equal, their contexts are not compared), cleared by the request path when
    the request is answered, whatever the answer.
    """

    request_id: str = ""
    correlation_id: int | str = 0
    flags: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    requested_outputs: tuple[str, ...] = ()
    context: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


#: ``respond(outputs, None)`` or ``respond(None, error)``: called exactly once per request.
Respond = Callable[[Arrays | None, GEError | None], None]

#: A pre- or post-processing hook: one request's tensors (and its info) in, tensors out.
Hook = Callable[[dict[str, np.ndarray], RequestInfo], Mapping[str, Any]]

#: A pre- or post-processing hook over a batch: each request's tensors and info in; out, in order,
#: each request's tensors or the exception that fails that request alone.
BatchHook = Callable[[list[dict[str, np.ndarray]], list[RequestInfo]], Sequence[Mapping[str, Any] | BaseException]]

#: The hooks that make each side of a model: its engine inputs (from the client's tensors) and
#: its answers (from the engine's outputs), per request or per batch.
HOOKS: dict[str, tuple[str, str]] = {
    "preprocess": ("preprocess", "preprocess_batch"),
    "postprocess": ("postprocess", "postprocess_batch"),
}


class EachRequest:
    """A per-request hook as a batch hook: called on each request in turn; what it raises for one
    request is that request's result, so it fails alone."""

    __slots__ = ("hook",)

    def __init__(self, hook: Hook) -> None:
        self.hook = hook

    def __call__(
        self, arrays: list[dict[str, np.ndarray]], infos: list[RequestInfo]
    ) -> list[Mapping[str, Any] | BaseException]:
        hook = self.hook
        results: list[Mapping[str, Any] | BaseException] = []
        for tensors, info in zip(arrays, infos):
            try:
                results.append(hook(tensors, info))
            except Exception as exc:  # that request's answer; the request path logs it where it must
                results.append(exc)
        return results


@dataclass(slots=True)
class Request:
    """One request: what hooks may know of it, its input tensors and the callback that answers it."""

    info: RequestInfo
    inputs: Arrays
    respond: Respond


#: What the request path passes for a request nothing reads the info of (no hook, no sequence
#: state, no request parameters, one requested-outputs answer for all).
NO_INFO = RequestInfo()


def hook_location(hook: Hook | BatchHook) -> str:
    """Where a hook is defined, the way a traceback names a frame (for the log of a hook that
    returned what its contract forbids: its frame is gone by the time that is found)."""
    if isinstance(hook, EachRequest):
        hook = hook.hook
    code = getattr(getattr(hook, "__func__", hook), "__code__", None)
    if code is None:
        return repr(hook)
    return f'File "{code.co_filename}", line {code.co_firstlineno}, in {code.co_name}'
