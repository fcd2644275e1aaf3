"""A small stand-in for Triton's ``triton_python_backend_utils`` (24.10) for fast unit tests.

It covers what GEModel and typical subclasses use: Tensor, InferenceRequest (as received in
``execute``), InferenceResponse, TritonError, TritonModelException, the response sender, Logger,
MetricFamily and the helper functions; and for the router, BLS (``InferenceRequest.exec`` and
``is_model_ready`` over the models a test puts in ``bls_models``). It is deliberately strict where Triton is (one final
response per request, supported numpy dtypes only). Real behaviour is proven against a real
tritonserver in the end-to-end tests; this fake only makes the fast tests possible.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_SUPPORTED_KINDS = set("buifOS")


def triton_string_to_numpy(triton_type_string: str):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


class TritonModelException(Exception):
    pass


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if not isinstance(array, np.ndarray):
            raise TritonModelException("Tensor requires a numpy array")
        if array.dtype.kind not in _SUPPORTED_KINDS or array.dtype == np.complex64:
            raise TritonModelException("NumPy dtype is not supported.")
        self._name = name
        # Like Triton, keep a reference: the data is copied when the response is sent. A rank-0
        # array stays rank 0 (np.ascontiguousarray would make it [1], hiding a missing reshape).
        self._array = array if array.flags.c_contiguous else np.ascontiguousarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True


class InferenceResponse:
    def __init__(self, output_tensors: Iterable[Tensor] = (), error: TritonError | None = None) -> None:
        self._tensors = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    """Collects the one final response of a non-decoupled request."""

    def __init__(self) -> None:
        self.response: InferenceResponse | None = None
        self.done = threading.Event()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self.done.is_set():
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL or response is None:
            raise TritonModelException("a non-decoupled model must send exactly one response with the FINAL flag")
        # Triton copies the tensors into shared memory during send(): snapshot them here.
        self.response = InferenceResponse(
            [Tensor(t.name(), t.as_numpy().copy()) for t in response.output_tensors()], response.error()
        )
        self.done.set()

    def is_cancelled(self) -> bool:
        return False


class InferenceRequest:
    """A request as ``execute`` receives it (constructed by tests), or built as a BLS request
    (``model_name``; GEModel builds one to probe for response senders, never executing it)."""

    def __init__(
        self,
        inputs: Iterable[Tensor],
        requested_output_names: Iterable[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        parameters: dict[str, Any] | None = None,
        model_name: str = "",
        timeout: int = 0,
    ) -> None:
        self.model_name = model_name
        self._timeout = timeout
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._parameters = json.dumps(parameters or {})
        self.sender = ResponseSender()

    def sent(self) -> tuple[list[Tensor], list[str], str]:
        """Not pb_utils: Triton's side of the request (its inputs, requested outputs and id), read
        by ModelHarness without going through the methods a model calls."""
        return self._inputs, self._requested, self._request_id

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> set[str]:
        """A set, as the stub's binding returns the C++ std::set (python_backend r24.10
        ``pb_stub.cc:1844``, ``infer_request.cc:105-109``): in no particular order."""
        return set(self._requested)

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def parameters(self) -> str:
        return self._parameters

    def timeout(self) -> int:
        return self._timeout

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def is_cancelled(self) -> bool:
        return False

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """A BLS request to ``bls_models[model_name]``. As python_backend before r25.04 does, every
        error comes back as INTERNAL (``src/request_executor.cc``), and a model that is not there
        answers that it is not ready (r24.02 ``:323-331``)."""
        model = bls_models.get(self.model_name)
        if model is None:
            return InferenceResponse(
                error=TritonError(
                    f"Model {self.model_name} - Error when running inference: Failed for execute the inference "
                    f"request. Model '{self.model_name}' is not ready.",
                    TritonError.INTERNAL,
                )
            )
        response = model(self)
        error = response.error()
        if error is not None:
            return InferenceResponse(error=TritonError(error.message(), TritonError.INTERNAL))
        return response


#: The models BLS requests reach in tests: name -> what answers a request; a name not here is not ready.
bls_models: dict[str, Callable[[InferenceRequest], InferenceResponse]] = {}


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return model_name in bls_models


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


class Logger:
    """Records log lines in ``Logger.lines`` as (level, message)."""

    INFO, WARNING, ERROR, VERBOSE = range(4)
    lines: list[tuple[str, str]] = []

    @classmethod
    def log(cls, message: str, level: int = 0) -> None:
        cls.lines.append((("INFO", "WARNING", "ERROR", "VERBOSE")[level], message))

    @classmethod
    def log_info(cls, message: str) -> None:
        cls.log(message, cls.INFO)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls.log(message, cls.WARNING)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls.log(message, cls.ERROR)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls.log(message, cls.VERBOSE)


class _Metric:
    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        if (family.kind == MetricFamily.HISTOGRAM) != (buckets is not None):
            raise TritonModelException("buckets are required for histograms and only for them")
        self.family, self.labels, self.buckets = family, labels, buckets
        self.observations: list[float] = []
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("histograms support observe() only")
        self._value += value

    def set(self, value: float) -> None:
        if self.family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only gauges support set()")
        self._value = value

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only histograms support observe()")
        self.observations.append(value)

    def value(self) -> float:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("histograms have no value()")
        return self._value


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = range(3)
    registry: dict[str, MetricFamily] = {}

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind
        self.metrics: list[_Metric] = []
        MetricFamily.registry[name] = self

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> _Metric:
        metric = _Metric(self, dict(labels or {}), buckets)
        self.metrics.append(metric)
        return metric
