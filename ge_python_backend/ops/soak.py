"""Integrity under load: many concurrent requests, every answer checked against a reference.

``run_soak`` sends ``requests`` requests with random batch sizes and random data to one model,
keeping ``concurrency`` of them in flight from one asyncio process. Each request has a unique
request id and goes either over one of a few gRPC bidirectional streams (answers come back in
any order, matched by id) or as its own unary call. Every answer must echo its request's id and
carry exactly the outputs the reference computes for that request's data; the report counts

- ``verified``: answered once, correctly;
- ``refused``: a bad request (``bad_share`` of them: another data type, a wrong dimension, more
  rows than the batch allows, or what the model's own checks refuse) answered with an error, as
  it must be;
- ``wrong``: outputs that differ from the reference (a mix-up between requests lands here), an
  answer whose id was never sent, or outputs for a bad request;
- ``duplicated``: a second answer for an id already answered;
- ``errored``: an error answer;
- ``lost``: no answer by the deadline.

The reference is independent of the server: ``OnnxReference`` runs the ONNX file on ONNX
Runtime in this process; ``ClassifierReference`` adds the classification template's
pre- and post-processing, written here from its documented contract (not the template's code).
Requests are built from tritonclient's protobuf messages and sent
with ``grpc.aio`` directly, so an error answer on a stream keeps its request id (tritonclient's
own stream iterator drops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ge_python_backend.engines.onnxruntime import spec_from_session
from ge_python_backend.errors import ConfigError, GEError
from ge_python_backend.ops.bench.grpc_infer import INFER, STREAM_INFER, infer_request, open_channel
from ge_python_backend.specs import TensorSpec, format_shape

Arrays = Mapping[str, np.ndarray]
#: Problem descriptions kept in a report (the counts are always complete).
SAMPLES = 5
#: how long a phase's end waits for tritonserver to end its half-closed streams before cancelling them
STREAM_END_GRACE_S = 5.0


class SoakError(GEError):
    """A soak run cannot start as asked (model, reference, settings)."""


class Reference(Protocol):
    """Random requests, good and bad, and the outputs a good one must get."""

    def random_request(self, rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]: ...

    def bad_request(self, rng: np.random.Generator, max_rows: int) -> dict[str, np.ndarray]: ...

    def __call__(self, inputs: Arrays) -> dict[str, np.ndarray]: ...


def _bad_tensors(rng: np.random.Generator, good: dict[str, np.ndarray], max_rows: int) -> dict[str, np.ndarray]:
    """``good`` spoiled one way: another data type, one more element in the last dimension, or more
    rows than ``max_rows`` (tritonserver's core refuses each before the model sees it)."""
    name = next(iter(good))
    array = good[name]
    kind = int(rng.integers(3))
    if kind == 0:
        other = np.float32 if array.dtype in (np.float64, np.object_) else np.float64
        good[name] = np.zeros(array.shape, other) if array.dtype == np.object_ else array.astype(other)
    elif kind == 1 and array.ndim > 1:
        good[name] = np.concatenate([array, array[..., :1]], axis=-1)
    else:
        good = {n: np.concatenate([a] * (max_rows // len(a) + 1))[: max_rows + 1] for n, a in good.items()}
    return good


class OnnxReference:
    """ONNX Runtime on the model file, called directly: random requests and their expected outputs.

    Every input must have a free first (batch) axis and fixed other axes."""

    def __init__(self, onnx_file: Path) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
        spec = spec_from_session(self.session)
        self.inputs: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        for tensor in spec.inputs:
            dims = tensor.shape[1:]
            if not tensor.shape or any(d < 1 for d in dims):
                raise SoakError(
                    f"{onnx_file}: input {tensor.name!r} has shape {format_shape(tensor.shape)}; a soak needs a "
                    "batch axis first and fixed other axes"
                )
            self.inputs[tensor.name] = (_random_dtype(onnx_file, tensor), dims)
        self.output_names = [o.name for o in spec.outputs]

    def random_request(self, rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
        request = {}
        for name, (dtype, dims) in self.inputs.items():
            if dtype.kind == "f":
                request[name] = rng.standard_normal((rows, *dims)).astype(dtype)
            else:
                request[name] = rng.integers(-100, 100, (rows, *dims)).astype(dtype)
        return request

    def bad_request(self, rng: np.random.Generator, max_rows: int) -> dict[str, np.ndarray]:
        return _bad_tensors(rng, self.random_request(rng, 1), max_rows)

    def __call__(self, inputs: Arrays) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(self.output_names, dict(inputs))))


#: ImageNet's channel means and deviations: what the classification template normalises with
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


class ClassifierReference:
    """The classification template's contract (docs/model-code.md): raw RGB bytes of a
    ``size`` x ``size`` image per row of ``IMAGE``, scaled to [0, 1], normalised with ImageNet's
    mean and deviation, NCHW into the ONNX model; ``LABELS``: the labels of the ``top_k`` largest
    logits, ``SCORES``: those logits."""

    def __init__(self, onnx_file: Path, labels: Sequence[str], size: int, top_k: int) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        self.labels, self.size, self.top_k = list(labels), size, top_k

    def random_request(self, rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
        images = rng.integers(0, 256, (rows, self.size, self.size, 3), dtype=np.uint8)
        return {"IMAGE": np.array([[image.tobytes()] for image in images], dtype=np.object_)}

    def bad_request(self, rng: np.random.Generator, max_rows: int) -> dict[str, np.ndarray]:
        if rng.integers(2):  # bytes that are no image of this size: the template's preprocess refuses them
            return {"IMAGE": np.array([[bytes(int(rng.integers(1, 3 * self.size**2)))]], dtype=np.object_)}
        return _bad_tensors(rng, self.random_request(rng, 1), max_rows)

    def __call__(self, inputs: Arrays) -> dict[str, np.ndarray]:
        blobs = [row[0] for row in inputs["IMAGE"]]
        images = np.stack([np.frombuffer(b, np.uint8).reshape(self.size, self.size, 3) for b in blobs])
        normalised = ((images.astype(np.float32) / 255 - IMAGENET_MEAN) / IMAGENET_STD).transpose(0, 3, 1, 2)
        (logits,) = self.session.run(None, {self.input: np.ascontiguousarray(normalised)})
        order = np.argsort(-logits, axis=1, kind="stable")[:, : self.top_k]
        labels = np.array([[self.labels[i].encode() for i in row] for row in order], dtype=np.object_)
        return {"LABELS": labels, "SCORES": np.take_along_axis(logits, order, axis=1)}


def _random_dtype(onnx_file: Path, tensor: TensorSpec) -> np.dtype:
    """The numpy dtype of an input a soak fills with random numbers; SoakError for any other."""
    try:
        dtype = tensor.numpy_dtype
    except ConfigError as exc:
        raise SoakError(f"{onnx_file}: input {tensor.name!r}: {exc}") from None
    if dtype.kind not in "biuf":
        raise SoakError(
            f"{onnx_file}: input {tensor.name!r} is {tensor.dtype}; a soak sends random numbers, so it takes "
            "boolean, integer and floating-point inputs only"
        )
    return dtype


@dataclass(frozen=True)
class SoakSettings:
    """How much load, how it is sent, and the bounds of the run."""

    requests: int = 2000
    concurrency: int = 128
    streams: int = 4
    #: fraction of requests sent over the streams; the rest are unary calls
    stream_share: float = 0.5
    max_rows: int = 8
    seed: int = 0
    #: stop sending new requests after this many seconds
    time_limit_s: float = 600.0
    #: a request without an answer this long after the last one was sent is lost
    deadline_s: float = 60.0
    atol: float = 1e-5
    rtol: float = 1e-5
    #: fraction of requests that are bad (each must be refused with an error)
    bad_share: float = 0.0
    #: set to stop sending before ``requests`` (background load for a run's other phases)
    stop: threading.Event | None = None
    #: error answers are expected (a model is unloaded, reloaded or killed meanwhile): the run is
    #: judged ``intact`` (nothing wrong, lost or twice), not ``clean``
    errors_allowed: bool = False
    #: called with the number of requests answered so far, every ``progress_every`` answers
    progress: Callable[[int], None] | None = None
    progress_every: int = 1000

    def __post_init__(self) -> None:
        if self.requests < 1 or self.concurrency < 1 or self.streams < 1 or self.max_rows < 1:
            raise SoakError("requests, concurrency, streams and max_rows must each be >= 1")
        for name in ("stream_share", "bad_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise SoakError(f"{name} {getattr(self, name)}: expected a fraction from 0 to 1")


@dataclass
class SoakReport:
    """What happened to every request of a soak run."""

    model: str
    requested: int
    #: judged ``intact`` rather than ``clean`` (SoakSettings.errors_allowed)
    errors_allowed: bool = False
    sent: int = 0
    verified: int = 0
    refused: int = 0
    wrong: int = 0
    duplicated: int = 0
    errored: int = 0
    lost: int = 0
    rows: int = 0
    seconds: float = 0.0
    samples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Every request asked for was sent, every good one verified and every bad one refused,
        and nothing else happened."""
        return self.sent == self.requested == self.verified + self.refused and not (
            self.wrong or self.duplicated or self.errored or self.lost
        )

    @property
    def intact(self) -> bool:
        """Every request was answered once and never wrongly (errors allowed: a model was being
        unloaded, reloaded or killed meanwhile)."""
        return not (self.wrong or self.duplicated or self.lost)

    @property
    def ok(self) -> bool:
        """``intact`` where errors were allowed, else ``clean``."""
        return self.intact if self.errors_allowed else self.clean

    def note(self, problem: str) -> None:
        if len(self.samples) < SAMPLES:
            self.samples.append(problem)

    def describe(self) -> str:
        rate = self.sent / self.seconds if self.seconds else 0.0
        lines = [
            f"{self.model}: sent {self.sent}/{self.requested} ({self.rows} rows) in {self.seconds:.1f} s "
            f"({rate:.0f} req/s): verified {self.verified}, refused {self.refused}, lost {self.lost}, "
            f"wrong {self.wrong}, duplicated {self.duplicated}, errored {self.errored} -> "
            f"{'OK' if self.ok else 'FAILED'}"
        ]
        lines += [f"  {sample}" for sample in self.samples]
        return "\n".join(lines)


class _Ledger:
    """Requests in flight by id, and the verdict on every answer."""

    def __init__(self, report: SoakReport, reference: Callable[[Arrays], Arrays], settings: SoakSettings) -> None:
        self.report = report
        self._reference = reference
        self._settings = settings
        self._pending: dict[str, Arrays] = {}
        self._bad: set[str] = set()
        self._answered: set[str] = set()
        self.slots = asyncio.Semaphore(settings.concurrency)
        self.idle = asyncio.Event()
        self.idle.set()

    def sent(self, request_id: str, inputs: Arrays, bad: bool = False) -> None:
        self._pending[request_id] = inputs
        if bad:
            self._bad.add(request_id)
        self.report.sent += 1
        self.report.rows += len(next(iter(inputs.values())))
        self.idle.clear()

    def answer(self, request_id: str, outputs: Arrays | None, error: str | None, mismatch: str = "") -> None:
        """Judge one answer to ``request_id``: its outputs, an error message, or (``mismatch``)
        why it cannot be the answer to that request."""
        report = self.report
        inputs = self._pending.pop(request_id, None)
        if inputs is None:
            if request_id in self._answered:
                report.duplicated += 1
                report.note(f"request {request_id!r} answered twice")
            else:
                report.wrong += 1
                report.note(f"an answer for request id {request_id!r}, which was never sent")
            return
        self._answered.add(request_id)
        self.slots.release()
        if not self._pending:
            self.idle.set()
        settings = self._settings
        if settings.progress is not None and len(self._answered) % settings.progress_every == 0:
            settings.progress(len(self._answered))
        if request_id in self._bad:
            self._bad.discard(request_id)
            if error is not None:
                report.refused += 1
            else:
                report.wrong += 1
                report.note(f"bad request {request_id!r} was answered with outputs")
            return
        if mismatch:
            report.wrong += 1
            report.note(f"request {request_id!r}: {mismatch}")
            return
        if error is not None:
            report.errored += 1
            report.note(f"request {request_id!r} failed: {error}")
            return
        assert outputs is not None  # an answer carries outputs unless it has an error or a mismatch
        problem = self._compare(inputs, outputs)
        if problem:
            report.wrong += 1
            report.note(f"request {request_id!r}: {problem}")
        else:
            report.verified += 1

    def unattributed_error(self, error: str) -> None:
        """An error answer without a request id: counted as errored; its request stays pending."""
        self.report.errored += 1
        self.report.note(f"an error answer without a request id: {error}")

    def _compare(self, inputs: Arrays, outputs: Arrays) -> str | None:
        expected = self._reference(inputs)
        for name, want in expected.items():
            got = outputs.get(name)
            if got is None:
                return f"output {name!r} missing (got {sorted(outputs)})"
            if got.shape != want.shape or got.dtype != want.dtype:
                return f"output {name!r} is {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}"
            if want.dtype == np.object_:
                if got.tolist() != want.tolist():
                    return f"output {name!r} is {got.tolist()}, expected {want.tolist()}"
                continue
            if not np.allclose(got, want, atol=self._settings.atol, rtol=self._settings.rtol):
                return f"output {name!r} differs from the reference by up to {np.abs(got - want).max():.3g}"
        return None

    def close(self) -> None:
        self.report.lost = len(self._pending)
        for request_id in list(self._pending)[:SAMPLES]:
            self.report.note(f"request {request_id!r}: no answer")


def _outputs(response) -> dict[str, np.ndarray]:
    from tritonclient.grpc import InferResult

    result = InferResult(response)
    return {o.name: result.as_numpy(o.name) for o in response.outputs}


class _Connection:
    """One gRPC channel: unary calls, and ``streams`` bidirectional streams with their readers."""

    def __init__(self, url: str, ledger: _Ledger, streams: int) -> None:
        import grpc
        from tritonclient.grpc import service_pb2

        self._grpc = grpc
        self._ledger = ledger
        self.channel = open_channel(url)
        serialize = service_pb2.ModelInferRequest.SerializeToString
        self._unary = self.channel.unary_unary(
            INFER, request_serializer=serialize, response_deserializer=service_pb2.ModelInferResponse.FromString
        )
        stream = self.channel.stream_stream(
            STREAM_INFER,
            request_serializer=serialize,
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )
        self.streams = [stream() for _ in range(streams)]
        self._readers = [asyncio.ensure_future(self._read(call)) for call in self.streams]
        self._calls: set[asyncio.Future] = set()

    async def _read(self, call) -> None:
        try:
            while True:
                response = await call.read()
                if response is self._grpc.aio.EOF:
                    return
                request_id = response.infer_response.id
                if response.error_message:
                    if request_id:
                        self._ledger.answer(request_id, None, response.error_message)
                    else:
                        self._ledger.unattributed_error(response.error_message)
                else:
                    self._ledger.answer(request_id, _outputs(response.infer_response), None)
        except self._grpc.aio.AioRpcError as exc:
            if exc.code() != self._grpc.StatusCode.CANCELLED:
                self._ledger.unattributed_error(f"stream closed: {exc.code().name}: {exc.details()}")

    async def send_stream(self, index: int, request) -> None:
        await self.streams[index % len(self.streams)].write(request)

    def send_unary(self, request, timeout: float) -> None:
        call = asyncio.ensure_future(self._call(request, timeout))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _call(self, request, timeout: float) -> None:
        try:
            response = await self._unary(request, timeout=timeout)
        except self._grpc.aio.AioRpcError as exc:
            if exc.code() != self._grpc.StatusCode.DEADLINE_EXCEEDED:  # past the deadline: lost
                self._ledger.answer(request.id, None, f"{exc.code().name}: {exc.details()}")
            return
        if response.id != request.id:
            self._ledger.answer(request.id, None, None, mismatch=f"answered with request id {response.id!r}")
        else:
            self._ledger.answer(request.id, _outputs(response), None)

    async def close(self) -> None:
        """Half-close each stream and let tritonserver end it once its answers are out; cancel only
        what is still open after ``STREAM_END_GRACE_S``. Cancelling the streams right after their
        last answers crashed tritonserver 2.51 (24.10) once at a phase's end, in the gRPC frontend's
        ``ModelStreamInferHandler::StreamInferResponseComplete`` (most likely a cancellation racing
        the final response callback, fixed after 24.10: server PRs #7840, #8078); a client that has
        its answers has no reason to cancel, so the soak does not (docs/reliability.md)."""
        for call in self.streams:
            with contextlib.suppress(Exception):  # a broken stream has nothing left to finish
                await call.done_writing()
        open_tasks = [*self._readers, *self._calls]
        if open_tasks:
            _, still_open = await asyncio.wait(open_tasks, timeout=STREAM_END_GRACE_S)
            for task in still_open:
                task.cancel()
        for call in self.streams:
            call.cancel()  # a no-op for a stream tritonserver has ended
        await asyncio.gather(*self._readers, *self._calls, return_exceptions=True)
        await self.channel.close()


async def soak(url: str, model: str, reference: Reference, settings: SoakSettings) -> SoakReport:
    """The asyncio body of ``run_soak``."""
    report = SoakReport(model, settings.requests, settings.errors_allowed)
    ledger = _Ledger(report, reference, settings)
    rng = np.random.default_rng(settings.seed)
    connection = _Connection(url, ledger, settings.streams)
    started = time.perf_counter()
    try:
        for index in range(settings.requests):
            if time.perf_counter() - started > settings.time_limit_s:
                report.note(f"time limit {settings.time_limit_s:g} s reached after {index} requests")
                break
            if settings.stop is not None and settings.stop.is_set():
                report.requested = index
                break
            try:
                await asyncio.wait_for(ledger.slots.acquire(), settings.deadline_s)
            except asyncio.TimeoutError:
                report.note(f"no request slot came free for {settings.deadline_s:g} s; stopped sending")
                break
            request_id = f"soak-{settings.seed}-{index}"
            bad = rng.random() < settings.bad_share
            if bad:
                inputs = reference.bad_request(rng, settings.max_rows)
            else:
                inputs = reference.random_request(rng, int(rng.integers(1, settings.max_rows + 1)))
            request = infer_request(model, inputs, request_id=request_id)
            ledger.sent(request_id, inputs, bad)
            if rng.random() < settings.stream_share:
                try:
                    await connection.send_stream(index, request)
                except Exception as exc:  # the stream broke (e.g. the server is gone): stop; it counts as lost
                    report.note(f"stopped sending: stream write of {request_id!r} failed: {type(exc).__name__}: {exc}")
                    break
            else:
                connection.send_unary(request, settings.deadline_s)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(ledger.idle.wait(), settings.deadline_s)
    finally:
        report.seconds = time.perf_counter() - started
        await connection.close()
        ledger.close()
    return report


def run_soak(url: str, model: str, reference: Reference, settings: SoakSettings | None = None) -> SoakReport:
    """Soak ``model`` on the gRPC endpoint ``url`` (HOST:PORT); see the module docstring."""
    return asyncio.run(soak(url, model, reference, settings or SoakSettings()))
