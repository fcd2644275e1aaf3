"""An asyncio load generator on tritonclient: one process holds high concurrency.

``run_sweep`` measures a list of load levels against one model: for each level a warm-up,
a metrics scrape, a measured window, another scrape. Levels are either a number of requests
kept in flight (``mode="concurrency"``) or a number of requests started per second
(``mode="rate"``, at fixed intervals). Every request sends the same tensors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tritonclient.utils import np_to_triton_dtype

from ge_python_backend.errors import ConfigError, GEError
from ge_python_backend.ops.access import key_headers
from ge_python_backend.ops.bench import host, metrics
from ge_python_backend.ops.bench.grpc_infer import INFER, infer_request, open_channel
from ge_python_backend.ops.bench.progress import Progress
from ge_python_backend.ops.bench.stats import Point, measured_point
from ge_python_backend.specs import api_type, numpy_dtype

PROTOCOLS = ("grpc", "http")
MODES = ("concurrency", "rate")


class BenchError(GEError):
    """A benchmark cannot run as asked (model inputs, flags, server)."""


@dataclass(frozen=True)
class Target:
    """What to load: a model on a server, and the tensors of one request."""

    url: str
    model: str
    inputs: Mapping[str, np.ndarray]
    protocol: str = "grpc"
    outputs: tuple[str, ...] = ()
    metrics_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: the server's process id, when it runs on this machine: its CPU time (with its children,
    #: e.g. Python stubs) per request is then reported
    server_pid: int | None = None

    @property
    def rows(self) -> int:
        """Rows per request (axis 0 of the first input; 1 for a scalar)."""
        first = next(iter(self.inputs.values()))
        return int(first.shape[0]) if first.ndim else 1


@dataclass(frozen=True)
class Sweep:
    """The load levels to measure and how long."""

    levels: tuple[float, ...]
    mode: str = "concurrency"
    duration_s: float = 10.0
    warmup_s: float = 2.0
    metrics_prefix: str = "ge_"
    max_in_flight: int = 4096
    #: keep every request's latency in the points (``Point.latencies_s``), not only percentiles
    keep_latencies: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BenchError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if not self.levels or any(level <= 0 for level in self.levels):
            raise BenchError(f"levels {self.levels}: expected one or more numbers > 0")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise BenchError(f"duration {self.duration_s} s / warm-up {self.warmup_s} s: expected > 0 / >= 0")

    @property
    def expected_s(self) -> float:
        return len(self.levels) * (self.duration_s + self.warmup_s)


def _client_module(protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc.aio as module
    elif protocol == "http":
        import tritonclient.http.aio as module
    else:
        raise BenchError(f"protocol {protocol!r}: expected grpc or http")
    return module


class _GrpcInfer:
    """gRPC: the ModelInferRequest (tritonclient's protobuf) is built and serialized once and
    the same bytes are sent on every call; the response is not decoded. This keeps the load
    generator's own CPU cost near perf_analyzer's, which matters when it shares the cores with
    the server (per call, tritonclient's aio client re-encodes the tensors)."""

    def __init__(self, target: Target) -> None:
        self.payload = infer_request(target.model, target.inputs, outputs=target.outputs).SerializeToString()
        self.channel = open_channel(target.url)
        self.call = self.channel.unary_unary(INFER)
        self.metadata = tuple(target.headers.items()) or None

    async def __call__(self) -> None:
        await self.call(self.payload, metadata=self.metadata)

    async def close(self) -> None:
        await self.channel.close()


class _HttpInfer:
    """HTTP through tritonclient's aio client, the request tensors converted once."""

    def __init__(self, target: Target, concurrency: int) -> None:
        import tritonclient.http.aio as module

        self.client = module.InferenceServerClient(target.url, conn_limit=max(concurrency, 1))
        self.inputs = []
        for name, array in target.inputs.items():
            tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
            self.inputs.append(tensor)
        self.outputs = [module.InferRequestedOutput(name) for name in target.outputs] or None
        self.model = target.model
        self.headers = dict(target.headers) or None

    async def __call__(self) -> None:
        await self.client.infer(self.model, self.inputs, outputs=self.outputs, headers=self.headers)

    async def close(self) -> None:
        await self.client.close()


def _infer(target: Target, concurrency: int) -> _GrpcInfer | _HttpInfer:
    if target.protocol == "grpc":
        return _GrpcInfer(target)
    if target.protocol == "http":
        return _HttpInfer(target, concurrency)
    raise BenchError(f"protocol {target.protocol!r}: expected one of {', '.join(PROTOCOLS)}")


Infer = Callable[[], Awaitable[None]]


@dataclass
class _Window:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0

    @property
    def answered(self) -> int:
        """Requests that got an answer (a result or an error)."""
        return len(self.latencies) + len(self.errors)

    async def timed(self, infer: Infer) -> None:
        begin = time.perf_counter()
        try:
            await infer()
        except Exception as exc:  # every failure is a data point, never a crash of the run
            self.errors.append(f"{type(exc).__name__}: {exc}".strip()[:300])
        else:
            self.latencies.append(time.perf_counter() - begin)


async def _closed_loop(infer: Infer, concurrency: int, seconds: float) -> _Window:
    """``concurrency`` workers, each sending its next request when the last one is answered,
    until ``seconds`` have passed; requests in flight then are waited for and counted."""
    window = _Window(started=time.perf_counter())
    stop = window.started + seconds

    async def worker() -> None:
        while time.perf_counter() < stop:
            await window.timed(infer)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    window.finished = time.perf_counter()
    return window


async def _open_loop(infer: Infer, rate: float, seconds: float, max_in_flight: int) -> _Window:
    """A request started every 1/``rate`` seconds for ``seconds`` (at most ``max_in_flight``
    outstanding: the schedule waits rather than grow without bound)."""
    window = _Window(started=time.perf_counter())
    gate = asyncio.Semaphore(max_in_flight)
    tasks = []

    async def one() -> None:
        try:
            await window.timed(infer)
        finally:
            gate.release()

    for index in range(max(1, int(rate * seconds))):
        delay = window.started + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await gate.acquire()
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)
    window.finished = time.perf_counter()
    return window


async def _measure(infer: Infer, sweep: Sweep, level: float, seconds: float) -> _Window:
    if sweep.mode == "concurrency":
        return await _closed_loop(infer, int(level), seconds)
    return await _open_loop(infer, level, seconds, sweep.max_in_flight)


def _scrape(url: str | None) -> metrics.Scrape | None:
    if not url:
        return None
    try:
        return metrics.fetch(url)
    except (OSError, ValueError):
        return None


#: how long to wait for Triton's counters to catch up with the answers the client already has
_SETTLE_S = 2.0


def _settled_scrape(target: Target, origin: metrics.Scrape | None, sent: int) -> metrics.Scrape | None:
    """A scrape once Triton counts, since ``origin``, every one of the ``sent`` requests the client
    saw answered: the Python backend may send an answer before the server records the request's
    statistics, so a window's edges would otherwise take in a neighbour's stragglers."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        found = _scrape(target.metrics_url)
        if found is None or origin is None or time.monotonic() >= deadline:
            return found
        counted = sum(
            found.value(name, model=target.model) - origin.value(name, model=target.model)
            for name in ("nv_inference_request_success", "nv_inference_request_failure")
        )
        if counted >= sent:
            return found
        time.sleep(0.05)


async def _sweep(target: Target, sweep: Sweep, progress: Progress, on_point: Callable[[Point], None]) -> list[Point]:
    loop = asyncio.get_running_loop()
    points: list[Point] = []
    elapsed_before = 0.0
    largest = int(max(sweep.levels)) if sweep.mode == "concurrency" else sweep.max_in_flight
    infer = _infer(target, largest)
    origin = await loop.run_in_executor(None, _scrape, target.metrics_url)
    sent = 0  # requests answered since ``origin``
    try:
        for level in sweep.levels:
            label = f"{sweep.mode} {level:g}"
            ticker = asyncio.ensure_future(_tick(progress, elapsed_before, label))
            try:
                if sweep.warmup_s > 0:
                    sent += (await _measure(infer, sweep, level, sweep.warmup_s)).answered
                before = await loop.run_in_executor(None, _settled_scrape, target, origin, sent)
                cpu_before = _cpu(target.server_pid)
                window = await _measure(infer, sweep, level, sweep.duration_s)
                cpu_after = _cpu(target.server_pid)
                sent += window.answered
                after = await loop.run_in_executor(None, _settled_scrape, target, origin, sent)
            finally:
                ticker.cancel()
            server = metrics.breakdown(before, after, target.model, sweep.metrics_prefix) if before and after else {}
            point = measured_point(
                sweep.mode,
                level,
                window.finished - window.started,
                window.latencies,
                window.errors,
                target.rows,
                server,
                _cpu_per_request(
                    cpu_before, cpu_after, len(window.latencies) + len(window.errors), window.finished - window.started
                ),
                keep_latencies=sweep.keep_latencies,
            )
            points.append(point)
            elapsed_before += sweep.warmup_s + sweep.duration_s
            progress.update(elapsed_before, f"{label}: {point.throughput:.1f} req/s", force=True)
            on_point(point)
    finally:
        await infer.close()
        progress.close()
    return points


def _cpu(server_pid: int | None) -> tuple[float, float | None, float | None]:
    """(this process's CPU seconds, the server tree's CPU seconds or None, the whole host's
    busy CPU seconds or None)."""
    return time.process_time(), host.process_tree_cpu(server_pid) if server_pid else None, host.busy_cpu_seconds()


def _cpu_per_request(before, after, requests: int, seconds: float) -> dict[str, float]:
    """CPU milliseconds per request of the load generator and (when known) of the server, and
    ``others_cores``: CPUs kept busy by everything else on the host during the window."""
    if not requests:
        return {}
    result = {"client_ms": (after[0] - before[0]) * 1000 / requests}
    if before[1] is not None and after[1] is not None:
        result["server_ms"] = (after[1] - before[1]) * 1000 / requests
        if before[2] is not None and after[2] is not None and seconds > 0:
            ours = (after[0] - before[0]) + (after[1] - before[1])
            result["others_cores"] = max(0.0, (after[2] - before[2]) - ours) / seconds
    return result


async def _tick(progress: Progress, offset: float, label: str) -> None:
    started = time.perf_counter()
    while True:
        progress.update(offset + time.perf_counter() - started, label)
        await asyncio.sleep(0.25)


def run_sweep(
    target: Target,
    sweep: Sweep,
    *,
    progress: Progress | None = None,
    on_point: Callable[[Point], None] = lambda point: None,
) -> list[Point]:
    """Measure every level of ``sweep`` against ``target``; one ``Point`` per level."""
    return asyncio.run(_sweep(target, sweep, progress or Progress(sweep.expected_s, enabled=False), on_point))


async def _model_io(url: str, protocol: str, model: str, api_key: str = "") -> tuple[int, list[dict[str, Any]]]:
    client = _client_module(protocol).InferenceServerClient(url)
    headers = key_headers(api_key, protocol) or None  # model configs need the operator key (ops.access)
    try:
        if protocol == "grpc":
            config = (await client.get_model_config(model, headers=headers, as_json=True))["config"]
        else:
            config = await client.get_model_config(model, headers=headers)
    finally:
        await client.close()
    return int(config.get("max_batch_size", 0)), list(config.get("input", []))


def random_inputs(
    url: str,
    protocol: str,
    model: str,
    *,
    batch_size: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    api_key: str = "",
) -> dict[str, np.ndarray]:
    """Random tensors for one request, shaped and typed from the served model config (see
    ``random_tensors``; ``api_key`` where model configs are restricted)."""
    max_batch, inputs = asyncio.run(_model_io(url, protocol, model, api_key))
    return random_tensors(max_batch, inputs, batch_size=batch_size, shapes=shapes, seed=seed)


def random_tensors(
    max_batch_size: int,
    config_inputs: Sequence[Mapping[str, Any]],
    *,
    batch_size: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Random tensors for the ``input`` entries of a model config (as JSON).

    The batch axis (when ``max_batch_size`` > 0) gets ``batch_size`` rows; other variable
    dimensions must be given in ``shapes`` (name -> dims without the batch axis).
    """
    shapes = dict(shapes or {})
    rng = np.random.default_rng(seed)
    result = {}
    for tensor in config_inputs:
        name, dtype = tensor["name"], tensor.get("data_type", "TYPE_FP32")
        dims = tuple(int(d) for d in shapes.get(name, tensor.get("dims", [])))
        if any(d < 0 for d in dims):
            raise BenchError(f"input {name!r} has variable dims {list(dims)}: give them with --shape {name}:D1,D2,...")
        try:
            numpy_type = numpy_dtype(api_type(dtype))
        except ConfigError:
            numpy_type = None
        if numpy_type is None or numpy_type.kind not in "biuf":
            raise BenchError(f"input {name!r} is {dtype}: random data covers numeric types only; give --data FILE.npz")
        full = ((batch_size,) if max_batch_size > 0 else ()) + dims
        if numpy_type.kind == "f":
            result[name] = rng.standard_normal(full).astype(numpy_type)
        elif numpy_type.kind == "b":
            result[name] = rng.integers(0, 2, full).astype(np.bool_)
        else:
            result[name] = rng.integers(0, min(np.iinfo(numpy_type).max, 127) + 1, full).astype(numpy_type)
    return result
