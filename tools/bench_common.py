"""Helpers shared by the tools/bench_*.py baselines (benchmarks, not tests).

Each baseline is one command that starts and stops its own servers on loopback, measures a
few configurations of the same model in the same run, and prints a table of ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ge_python_backend.cli.arguments import int_list
from ge_python_backend.ops.bench import Point, Sweep, Target, run_sweep
from ge_python_backend.ops.bench.progress import Progress
from ge_python_backend.ops.bench.report import format_rows


def levels_argument(parser: argparse.ArgumentParser, default: tuple[int, ...], note: str = "") -> None:
    """``--levels C1,C2,...``: the concurrency levels to measure."""
    parser.add_argument(
        "--levels",
        type=int_list,
        default=default,
        metavar="C1,C2,...",
        help="concurrency levels" + (f" ({note})" if note else ""),
    )


def common_arguments(parser: argparse.ArgumentParser, *, duration: float, warmup: float, workdir: str) -> None:
    parser.add_argument("--duration", type=float, default=duration, help="seconds measured per load level")
    parser.add_argument("--warmup", type=float, default=warmup, help="seconds of unmeasured load before each level")
    parser.add_argument("--workdir", type=Path, default=Path(workdir), help="where models, JSON and plots go")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")


@dataclass(frozen=True)
class Ratio:
    """A ratio measured once per repeat, and its target: ``at_least`` (True: >=, False: <=)
    ``target``. The median decides whether the target is met."""

    name: str
    values: Sequence[float]
    target: float | None = None
    at_least: bool = True

    @property
    def value(self) -> float:
        return float(np.median(self.values))

    @property
    def met(self) -> str:
        if self.target is None or not np.isfinite(self.value):
            return ""
        return "yes" if (self.value >= self.target if self.at_least else self.value <= self.target) else "NO"

    def row(self) -> list[str]:
        target = "" if self.target is None else f"{'>=' if self.at_least else '<='} {self.target:g}"
        spread = f"{min(self.values):.2f}..{max(self.values):.2f}" if len(self.values) > 1 else ""
        return [self.name, f"{self.value:.2f}", spread, target, self.met]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "values": list(self.values),
            "median": self.value,
            "target": self.target,
            "at_least": self.at_least,
            "met": self.met,
        }


def ratio_table(ratios: Sequence[Ratio]) -> str:
    return format_rows([["ratio", "median", "range", "target", "met"]] + [r.row() for r in ratios])


def sweep_model(
    server,
    model: str,
    inputs: dict[str, np.ndarray],
    levels: Sequence[int],
    args,
    *,
    url: str | None = None,
    metrics_url: str | None = None,
) -> list[Point]:
    """A concurrency sweep of ``model`` on a running server, with a progress bar."""
    address = url or (server.grpc_address if args.protocol == "grpc" else server.http_address)
    target = Target(
        address,
        model,
        inputs,
        args.protocol,
        metrics_url=metrics_url if metrics_url is not None else getattr(server, "metrics_url", None),
        server_pid=server.process.pid,
    )
    sweep = Sweep(levels=tuple(levels), duration_s=args.duration, warmup_s=args.warmup)
    print(f"  {model}: concurrency {', '.join(map(str, levels))} ...", flush=True)
    return run_sweep(target, sweep, progress=Progress(sweep.planned_s, enabled=_tty()))


def _tty() -> bool:
    import sys

    return sys.stderr.isatty()


@dataclass(frozen=True)
class Timing:
    """A repeated in-process call: seconds per call (median and mean), calls measured, and
    unmeasured warm-up calls made before them."""

    median_s: float
    mean_s: float
    calls: int
    warmup_calls: int

    @property
    def all_calls(self) -> int:
        """Every call made, warm-up included (e.g. to share CPU time measured around it all)."""
        return self.calls + self.warmup_calls


def time_calls(call: Callable[[], object], seconds: float, warmup_calls: int = 3, min_calls: int = 5) -> Timing:
    """Call ``call`` repeatedly for about ``seconds`` after a few unmeasured calls."""
    for _ in range(warmup_calls):
        call()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < min_calls:
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return Timing(float(np.median(samples)), float(np.mean(samples)), len(samples), warmup_calls)


def point_row(name: str, p: Point) -> list[str]:
    server = p.server or {}
    cpu = p.cpu_ms_per_request
    server_ms, client_ms = cpu.get("server_ms", float("nan")), cpu.get("client_ms", float("nan"))
    return [
        name,
        f"{p.level:g}",
        f"{p.inferences:.1f}",
        f"{p.latency_ms.p50:.2f}",
        f"{p.latency_ms.p99:.2f}",
        f"{server.get('avg_batch', 0.0):.2f}",
        f"{server_ms:.2f}",
        f"{client_ms:.2f}",
        f"{p.throughput * (server_ms + client_ms) / 1000:.2f}",
        f"{cpu.get('others_cores', float('nan')):.2f}",
        str(p.errors),
    ]


#: "cores busy" is req/s x (server + client CPU ms per request): how many of the machine's
#: cores the server and the load generator kept busy together; "others" how many everything
#: else on the host kept busy in the same window (other tenants of a shared machine).
POINT_HEADER = [
    "served by",
    "concurrency",
    "infer/s",
    "p50 ms",
    "p99 ms",
    "avg batch",
    "server CPU ms/req",
    "client CPU ms/req",
    "cores busy",
    "others",
    "errors",
]


#: A run during which other processes kept more CPUs busy than this measured them too.
CONTAMINATED_CORES = 0.25


def clean(points):
    """The points measured while the rest of the host stayed nearly idle (all if none was)."""
    quiet = [p for p in points if p.cpu_ms_per_request.get("others_cores", 0.0) < CONTAMINATED_CORES]
    return quiet or list(points)


def save_json(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, allow_nan=True) + "\n")
    return path


def perf_analyzer_run(binary: str, model: str, address: str, concurrency: int, *extra: str) -> tuple[list[str], dict]:
    """The command and environment of perf_analyzer loading ``model`` over gRPC with batch-1
    requests at ``concurrency`` (``extra``: its window and trial options); its two libraries
    sit in ``lib`` beside the binary (tools/get_perf_analyzer.sh)."""
    command = [binary, "-m", model, "-u", address, "-i", "grpc", "-b", "1", "--concurrency-range", str(concurrency)]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(Path(binary).parent / "lib"), env.get("LD_LIBRARY_PATH")) if p
    )
    return command + list(extra), env
