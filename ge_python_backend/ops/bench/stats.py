"""Latency percentiles and one measured load point."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation between the two
    nearest ranks (numpy's default method); NaN for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Latency:
    """Latency summary in milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = [s * 1000.0 for s in seconds]
        if not ms:
            nan = math.nan
            return cls(nan, nan, nan, nan, nan, nan)
        return cls(
            p50=percentile(ms, 50),
            p90=percentile(ms, 90),
            p99=percentile(ms, 99),
            mean=sum(ms) / len(ms),
            min=min(ms),
            max=max(ms),
        )


@dataclass(frozen=True)
class Point:
    """One measured load level.

    ``mode`` is "concurrency" (``level`` requests kept in flight) or "rate" (``level`` requests
    started per second). ``throughput`` counts successful requests per second; ``inferences``
    multiplies it by the rows per request. ``server`` is the server-side breakdown over the
    same window (see ``metrics.breakdown``), or empty when the metrics endpoint was not read.
    ``cpu_ms_per_request`` is CPU time per request (answered or failed) of the load generator
    (``client_ms``) and of the server's process tree (``server_ms``) when it was known, with
    ``others_cores``: how many CPUs everything else on the host kept busy meanwhile (a run
    on a shared machine with others_cores well above 0 measured the neighbours too).
    ``latencies_s`` holds every successful request's latency in seconds, in completion order,
    when the measurement was asked to keep them (``Sweep.keep_latencies``); else it is empty.
    """

    mode: str
    level: float
    duration_s: float
    requests: int
    errors: int
    throughput: float
    inferences: float
    latency_ms: Latency
    error_samples: tuple[str, ...] = ()
    server: dict[str, Any] = field(default_factory=dict)
    cpu_ms_per_request: dict[str, float] = field(default_factory=dict)
    latencies_s: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured_point(
    mode: str,
    level: float,
    duration_s: float,
    latencies_s: Sequence[float],
    errors: Sequence[str],
    rows_per_request: int,
    server: dict[str, Any] | None = None,
    cpu_ms_per_request: dict[str, float] | None = None,
    *,
    keep_latencies: bool = False,
) -> Point:
    """A ``Point`` from the raw observations of one measurement window (with the raw
    latencies too when ``keep_latencies``)."""
    throughput = len(latencies_s) / duration_s if duration_s > 0 else 0.0
    return Point(
        mode=mode,
        level=level,
        duration_s=duration_s,
        requests=len(latencies_s),
        errors=len(errors),
        throughput=throughput,
        inferences=throughput * rows_per_request,
        latency_ms=Latency.of(latencies_s),
        error_samples=tuple(dict.fromkeys(errors))[:5],
        server=dict(server or {}),
        cpu_ms_per_request=dict(cpu_ms_per_request or {}),
        latencies_s=tuple(latencies_s) if keep_latencies else (),
    )
