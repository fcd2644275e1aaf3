"""What the running Python backend stub offers GEModel, checked at ``initialize`` (Triton 24.02 … 24.10).

No version string exists to ask (``triton_python_backend_utils.py`` is byte-identical from r24.02
to r26.07, and the C++ module exports none), so each API is checked by itself:

- ``API_SINCE``: what GEModel calls and the python_backend release that brought it. All of it is
  in r24.02; on an older stub the load fails naming what is missing, instead of an
  AttributeError in the middle of a request.
- Answering a non-decoupled request through its response sender (``request.get_response_sender()``
  with ``execute`` returning None) arrived in r24.06 (commit 27f04d1, "Add support for response
  sender in the default mode (#364)"). r24.02 raises TritonModelException ("'get_response_sender'
  function must be called only when the model is using the decoupled transaction policy",
  ``src/infer_request.cc:416-426``); r24.06 and later return the sender (r24.10 ``:405-408``).
  ``response_sender_supported`` probes it for the router (GEModel always answers from ``execute``).

The probe builds a BLS request object and asks for its sender; it never executes the request nor
sends on the sender. Building a request is allowed in ``initialize`` (only ``exec`` is not,
``infer_request.cc:438-443`` r24.02), and r24.02's decoupled check is the first thing
``get_response_sender`` does. On r24.10 the sender of a BLS request has no response factory:
dropping it queues a cleanup of address 0, which the parent turns into an empty
``unique_ptr`` (``python_be.cc:844-849``), as for every BLS request (``infer_request.cc:72-77``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import parse_bool

#: Test switch, read only by the probe: ``1`` makes it report that response senders are
#: unsupported, as on Triton 24.02, so the fallback can be served on a newer tritonserver.
NO_SENDER_ENV = "GE_TRITON_NO_RESPONSE_SENDER"

#: pb_utils attributes GEModel uses beyond the oldest (Tensor, InferenceResponse,
#: TritonModelException), with the python_backend release branch that added each
#: (``git show rYY.MM:src/pb_stub.cc | grep``).
API_SINCE = {
    "Logger": "r22.09",
    "InferenceRequest.parameters": "r23.03",
    "MetricFamily": "r23.05",
    "TritonError.UNAVAILABLE": "r23.09",  # TritonError(message, code) with codes
}

#: What the router (``triton/router.py``) calls beyond GEModel's, likewise: BLS ``exec`` is older
#: than r22; the readiness probe and the request timeout it forwards are not.
ROUTER_API_SINCE = dict(
    API_SINCE,
    **{
        "is_model_ready": "r23.08",
        "InferenceRequest.timeout": "r23.03",
    },
)

#: The response sender of a non-decoupled request, and what is lost without it.
SENDER_SINCE = "r24.06"


def missing_apis(pb_utils: Any, needed: Mapping[str, str] = API_SINCE) -> list[str]:
    """The ``needed`` entries (``API_SINCE`` by default) this stub lacks, as 'name (since rYY.MM)'."""
    missing = []
    for path, since in needed.items():
        target: Any = pb_utils
        for part in path.split("."):
            target = getattr(target, part, None)
            if target is None:
                missing.append(f"pb_utils.{path} (since {since})")
                break
    return missing


def check_apis(pb_utils: Any, needed: Mapping[str, str] = API_SINCE, who: str = "GEModel") -> None:
    """ConfigError naming every API ``who`` needs that this Triton's Python backend lacks."""
    missing = missing_apis(pb_utils, needed)
    if missing:
        raise ConfigError(f"this Triton's Python backend lacks {', '.join(missing)}; {who} needs Triton 24.02 or later")


def response_sender_supported(pb_utils: Any) -> bool:
    """Whether a non-decoupled model may answer through response senders here (r24.06+)."""
    raw = os.environ.get(NO_SENDER_ENV, "")
    try:
        forced_off = parse_bool(raw) if raw else False
    except ValueError:
        raise ConfigError(
            f"environment variable {NO_SENDER_ENV}={raw!r}; accepted: 1/0, true/false, yes/no, on/off"
        ) from None
    if forced_off:
        return False
    probe = pb_utils.InferenceRequest(model_name="__ge_probe__", requested_output_names=[], inputs=[])
    try:
        probe.get_response_sender()
    except pb_utils.TritonModelException:
        return False
    return True
