"""RouterModel: one endpoint over several copies of a model on different hardware, through BLS.

A Triton Python model whose requests go to its members (other models of the same repository with
the same inputs and outputs, e.g. an acl copy on the NPU and an onnxruntime copy on the CPU), by
the policy of ``serving/routing.py``: in order of preference, each up to its limit of rows in
flight, unavailable members skipped for a back-off time, the rest waiting for the first to free.
Triton glue only: reading the settings and the members' configs at load, forwarding each
request as a BLS request, answering it.

- **No copies of its own.** A request's input tensors go into the BLS request as they are (they
  live in the stub's shared memory already, so ``PbTensor::SaveToSharedMemory`` keeps them:
  python_backend r24.02 ``src/pb_tensor.cc:520-523``), and the member's output tensors into the
  answer; the only copies are BLS's own (into the member, and out of it into this stub's pool).
- **Concurrency.** Every request of an ``execute`` is forwarded at once, each on a thread of the
  router's pool (``exec`` releases the GIL while it waits: ``src/infer_request.cc:436``), so the
  members' dynamic batchers gather them into device batches. ``async_exec`` would be the same
  thing with a smaller pool: in every python_backend release it is ``run_in_executor(None,
  exec)`` on the event loop's default executor (r24.02 ``src/pb_stub.cc:1697-1723``, r26.07
  ``:1854-1876``), whose size is min(32, cores + 4). The server runs each BLS request on a thread
  of the router instance's pool for the whole inference (``python_be.cc`` ``ExecuteBLSRequest``:
  ``response_future.get()``), ``--backend-config=python,thread-pool-size=N`` threads (default
  32): more rows in flight than that wait there; the load warns when the limits exceed it.
- **Answers.** Through each request's response sender where the stub has them for non-decoupled
  models (python_backend r24.06), so ``execute`` returns at once and the next requests are routed
  while these run; else (Triton 24.02) returned from ``execute`` once its requests are answered
  (parameter ``response_mode``).
- **Errors.** A member's answer is the request's answer, errors included; a member that was
  unavailable is retried elsewhere. Before python_backend r25.04 BLS reports every error as
  INTERNAL, so the router asks members for their code (request parameter ``ge_error_code``, which
  GEModel honours) and recognises the unavailable ones by message otherwise
  (``serving/bls_errors.py``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import triton_python_backend_utils as pb_utils

from ge_python_backend.errors import ConfigError
from ge_python_backend.serving.bls_errors import ERROR_CODE_PARAMETER, asks_for_code, read_member_error, tag_error
from ge_python_backend.serving.routing import Job, Router
from ge_python_backend.triton import capabilities, lifeline, logbridge
from ge_python_backend.triton.loading import load_or_refuse
from ge_python_backend.triton.metrics import RouterMetrics
from ge_python_backend.triton.router_settings import (
    DEFAULT_BLS_THREADS,
    ResponseMode,
    RouterSettings,
    bls_threads,
    return_mode_instances,
)

LOG = logging.getLogger(__name__)

#: Triton's error codes by name (TritonError's class attributes), for members' errors through BLS
_CODE_NAMES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS")


class RouterModel:
    """The router: ``TritonPythonModel`` of the folder ``ge-triton generate --template router`` writes."""

    def initialize(self, args: dict[str, str]) -> None:
        self._router: Router | None = None
        self._metrics: RouterMetrics | None = None
        self._watch: lifeline.ServerWatch | None = None
        self._lifeline = None
        name = args.get("model_name", "?")
        with load_or_refuse(name, self._release):
            capabilities.check_apis(pb_utils, capabilities.ROUTER_API_SINCE, "the router")
            logbridge.install(pb_utils, args.get("model_instance_name", ""), verbose=False)
            self.settings = settings = RouterSettings.read(args)
            self._open(settings)
        if lifeline.in_stub():  # never outlive the server (lifeline.py)
            self._watch = lifeline.ServerWatch(self._release)
            self._lifeline = lifeline.start_lifeline()

    def _open(self, settings: RouterSettings) -> None:
        mode = settings.response_mode
        supported = capabilities.response_sender_supported(pb_utils)
        if mode is ResponseMode.SENDER and not supported:
            raise ConfigError(
                "response_mode sender needs Triton 24.06 or later (python_backend "
                f"{capabilities.SENDER_SINCE}: response senders in non-decoupled models); use auto or return"
            )
        self._sender = mode is ResponseMode.SENDER or (mode is ResponseMode.AUTO and supported)
        self._codes = {getattr(pb_utils.TritonError, n): n for n in _CODE_NAMES if hasattr(pb_utils.TritonError, n)}
        self._code_values = {n: v for v, n in self._codes.items()}
        self._batched = settings.io.max_batch_size > 0
        if settings.metrics:
            labels = {"router": settings.name, "version": settings.version, "instance": settings.instance_name}
            self._metrics = RouterMetrics(pb_utils, labels, [m.name for m in settings.limits])
        self._router = Router(
            settings.limits,
            backoff_s=settings.backoff_s,
            ready=lambda member: bool(pb_utils.is_model_ready(model_name=member)),
            observer=self._metrics,
        )
        members = ", ".join(f"{m.name} (up to {m.limit} rows in flight)" for m in settings.limits)
        if self._sender:
            answers = "answers through response senders"
        else:
            answers = (
                "answers returned from execute"
                + ("" if supported else " (no response senders before Triton 24.06)")
                + ": each instance routes one execute's requests at a time"
            )
        pb_utils.Logger.log_info(
            f"{settings.instance_name}: routes to {members}; {answers}; back-off {settings.backoff_s * 1000:g} ms"
        )
        wanted = None if self._sender else return_mode_instances(settings)
        if wanted is not None:
            pb_utils.Logger.log_warn(
                f"{settings.instance_name}: with answers returned from execute, each of the router's "
                f"{settings.instances} instance(s) has at most max_batch_size ({settings.io.max_batch_size}) rows in "
                "flight, fewer than its "
                f"members' limits ({settings.total_rows} rows): give the router {wanted} instances (instance_group "
                "count; each routes its share of every member's limit)"
            )
        threads = bls_threads(os.getppid()) if lifeline.in_stub() else DEFAULT_BLS_THREADS
        total = sum(m.limit for m in settings.limits)
        if total > threads:
            pb_utils.Logger.log_warn(
                f"{settings.instance_name}: the members' limits add up to {total} rows in flight, but tritonserver "
                f"runs at most {threads} BLS requests of a model instance at once (python backend setting "
                f"thread-pool-size): the rest wait there; start tritonserver with "
                f"--backend-config=python,thread-pool-size={total}"
            )

    def execute(self, requests: list) -> list | None:
        router = self._router
        assert router is not None  # initialize opened it, or the model did not load
        now = time.monotonic()
        if self._sender:
            router.submit([self._job(r, partial(_send, r.get_response_sender()), now) for r in requests])
            return [None] * len(requests)
        answers = _Answers(len(requests))
        router.submit([self._job(r, partial(answers.put, i), now) for i, r in enumerate(requests)])
        return answers.wait()

    def finalize(self) -> None:
        self._release()
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        lifeline.stop_lifeline(self._lifeline)
        self._lifeline = None

    # -- one request ---------------------------------------------------------------------------

    def _job(self, request: Any, answer: Callable[[Any], None], now: float) -> Job:
        timeout_us = request.timeout()
        rows = 1
        if self._batched:
            inputs = request.inputs()
            rows = int(inputs[0].shape()[0]) if inputs and inputs[0].shape() else 1
        tag = asks_for_code(request.parameters())
        return Job(
            rows,
            partial(self._attempt, request, answer, tag),
            partial(self._refuse, answer, tag),
            now + timeout_us / 1e6 if timeout_us else None,
        )

    def _attempt(
        self, request: Any, answer: Callable[[Any], None], tag: bool, member: str, timeout_us: int
    ) -> str | None:
        """Forward ``request`` to ``member``: None once it is answered, or why the member was unavailable."""
        try:
            parameters = json.loads(request.parameters() or "{}")
            unsent = next((k for k, v in parameters.items() if not isinstance(v, (bool, int, str))), None)
            if unsent is not None:  # pb_utils.InferenceRequest refuses other types (pb_stub.cc:1638-1645)
                message = (
                    f"request parameter {unsent!r} is {parameters[unsent]!r}: the router forwards bool, integer and "
                    "string parameters only (what BLS carries)"
                )
                answer(self._error(f"router {self.settings.name!r}: {message}", "INVALID_ARG", tag))
                return None
            parameters[ERROR_CODE_PARAMETER] = True
            forwarded = pb_utils.InferenceRequest(
                model_name=member,
                inputs=request.inputs(),
                requested_output_names=list(request.requested_output_names()),
                request_id=request.request_id(),
                parameters=parameters,
                timeout=timeout_us,
            )
            response = forwarded.exec()
        except Exception as exc:  # the BLS request could not be sent (or its parameters were refused)
            read = read_member_error("INTERNAL", str(exc))
            if read.unavailable:
                return f"{member}: {read.message}"
            LOG.exception("router %r: forwarding a request to member %r failed", self.settings.name, member)
            answer(
                self._error(f"router {self.settings.name!r}: forwarding to {member!r} failed: {exc}", "INTERNAL", tag)
            )
            return None
        try:
            if response.has_error():
                error = response.error()
                read = read_member_error(self._codes.get(error.code(), "INTERNAL"), error.message())
                if read.unavailable:
                    return read.message
                answer(self._error(read.message, read.code, tag))
            else:
                answer(pb_utils.InferenceResponse(output_tensors=response.output_tensors()))
        except Exception as exc:  # a bug: logged once, the client gets one line
            LOG.exception("router %r: answering a request from member %r failed", self.settings.name, member)
            answer(self._error(f"router {self.settings.name!r}: {type(exc).__name__}: {exc}", "INTERNAL", tag))
        return None

    def _refuse(self, answer: Callable[[Any], None], tag: bool, message: str) -> None:
        answer(self._error(f"router {self.settings.name!r}: {message}", "UNAVAILABLE", tag))

    def _error(self, message: str, code: str, tag: bool) -> Any:
        text = tag_error(code, message) if tag else message
        value = self._code_values.get(code, self._code_values["INTERNAL"])
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(text, value))

    def _release(self) -> None:
        if self._router is not None:
            self._router.close()
            self._router = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None


def _send(sender: Any, response: Any) -> None:
    if lifeline.server_alive():  # a send to a dead server would wait for it forever
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class _Answers:
    """The answers one execute returns, once every request has one."""

    def __init__(self, count: int) -> None:
        self._responses: list[Any] = [None] * count
        self._left = count
        self._done = threading.Condition()

    def put(self, index: int, response: Any) -> None:
        with self._done:
            self._responses[index] = response
            self._left -= 1
            if not self._left:
                self._done.notify()

    def wait(self) -> list[Any]:
        with self._done:
            self._done.wait_for(lambda: not self._left)
        return self._responses
