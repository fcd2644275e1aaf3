"""Errors through BLS: the code a caller asks for, and what a member's error means to a router.

Before python_backend r25.04 BLS hands the caller every error as INTERNAL (``src/request_executor.cc``:
``PbError(message)`` with the default code, r24.02 :151 and r24.10 :152; r25.04 :197 passes the
code on). A router asks its members for the code (``ERROR_CODE_PARAMETER``): GEModel and
PipelineStep then start the message with it (``tag_error``); ``read_member_error`` takes it back
off and says whether the member was unavailable (the request may go to another member) or the error
is the request's own answer, by the code, else by the messages Triton and the Python backend write
for an unavailable model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

#: Request parameter a router sets on what it forwards: a GEModel member then starts an error's
#: message with its Triton error code (``tag_error``).
ERROR_CODE_PARAMETER = "ge_error_code"
_TAG = re.compile(r"^\[ge:([A-Z_]+)\] ")

#: Messages by which a member is unavailable when the code does not say so (BLS before r25.04):
#: (pattern, where it comes from). Each is searched for in the whole message.
UNAVAILABLE_MESSAGES = (
    # BLS checks the member's readiness first (an unloaded or unknown model is not ready):
    # python_backend r24.02 src/request_executor.cc:323-331, "Model 'NAME' is not ready."
    (re.compile(r"Model '[^']*' is not ready\."), "python_backend request_executor.cc"),
    # the member's queue policy: core r24.02 src/scheduler_utils.cc:137 and
    # src/dynamic_batch_scheduler.cc:448 (both UNAVAILABLE there); the timeout is also the one the
    # router forwards, whose expiry the router itself answers
    (re.compile(r"Exceeds maximum queue size|Request timeout expired"), "core scheduler_utils.cc"),
    # the member's stub process died: python_backend r24.02 src/stub_launcher.cc:776,
    # src/python_be.cc:215 and :1431
    (re.compile(r"Stub process (?:'[^']*' )?is not healthy\.|The stub process has exited unexpectedly\."), "stub"),
)


def asks_for_code(parameters: str) -> bool:
    """Whether a request's parameters (its JSON text) ask for error codes in messages."""
    return ERROR_CODE_PARAMETER in parameters and json.loads(parameters).get(ERROR_CODE_PARAMETER) is True


def tag_error(code: str, message: str) -> str:
    """A member's error message carrying its code for a router (see ERROR_CODE_PARAMETER)."""
    return f"[ge:{code}] {message}"


@dataclass(frozen=True)
class MemberError:
    """A member's error as the router reads it: its code, its message, and whether the member was
    unavailable (the request was not served there and may go elsewhere)."""

    code: str
    message: str
    unavailable: bool


def read_member_error(code: str, message: str) -> MemberError:
    """Classify an error a member answered: ``code`` as BLS reports it ("INTERNAL" for every error
    before python_backend r25.04), the tag of a GEModel member, else the known messages."""
    tagged = _TAG.match(message)
    if tagged:
        code, message = tagged.group(1), message[tagged.end() :]
    if code == "UNAVAILABLE":
        return MemberError(code, message, True)
    if code == "INTERNAL" and not tagged and any(p.search(message) for p, _ in UNAVAILABLE_MESSAGES):
        return MemberError("UNAVAILABLE", message, True)
    return MemberError(code, message, False)
