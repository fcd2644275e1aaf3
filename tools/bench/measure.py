"""The load generators the scenarios share, and their measurements.

- ``sweep``: ``ge-triton bench``'s asyncio client (ge_python_backend.ops.bench) over concurrency
  levels, with its CPU accounting per point (server tree, load generator, "others");
- ``perf_window``: perf_analyzer (C++, Triton's own) as the load, measured over a window between
  two scrapes of Triton's metrics (for rates a Python client cannot send on two cores);
- ``time_calls``: a call repeated in-process.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.runner import ROOT, Bench

TOOLS = ROOT / "tools"

# --- in process -------------------------------------------------------------------------------


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


# --- ge-triton bench's asyncio client -------------------------------------------------------------


def sweep(
    bench: Bench, server: Any, model: str, inputs: dict[str, np.ndarray], levels: Sequence[int], **window: float
) -> list:
    """A concurrency sweep of ``model`` on a running server after a quiet-host wait, with a
    progress bar on a terminal. ``window``: ``duration_s`` and ``warmup_s`` (default: the
    scenario's ``--duration`` and ``--warmup``)."""
    import sys

    from ge_python_backend.ops.bench import Sweep, Target, run_sweep
    from ge_python_backend.ops.bench.progress import Progress

    args = bench.args
    address = server.grpc_address if args.protocol == "grpc" else server.http_address
    target = Target(
        address, model, inputs, args.protocol, metrics_url=server.metrics_url, server_pid=server.process.pid
    )
    sweep = Sweep(
        levels=tuple(levels),
        duration_s=window.get("duration_s", args.duration),
        warmup_s=window.get("warmup_s", args.warmup),
    )
    bench.quiet(model)
    print(f"  {model}: concurrency {', '.join(map(str, levels))} ...", flush=True)
    return run_sweep(target, sweep, progress=Progress(sweep.expected_s, enabled=sys.stderr.isatty()))


def sweep_arguments(
    parser, *, duration: float, warmup: float, levels: tuple[int, ...] | None = None, note: str = ""
) -> None:
    """The asyncio client's options: seconds per level, warm-up, protocol and (unless ``levels``
    is None) the concurrency levels."""
    from ge_python_backend.cli.arguments import int_list

    parser.add_argument("--duration", type=float, default=duration, help="seconds measured per load level")
    parser.add_argument("--warmup", type=float, default=warmup, help="seconds of unmeasured load before each level")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    if levels is None:
        return
    parser.add_argument(
        "--levels",
        type=int_list,
        default=levels,
        metavar="C1,C2,...",
        help="concurrency levels" + (f" ({note})" if note else ""),
    )


#: "cores busy" is req/s x (server + client CPU ms per request): how many of the machine's
#: cores the server and the load generator kept busy together; "others" how many everything
#: else on the host kept busy in the same window (other tenants of a shared machine).
POINT_HEADER = (
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
)


def point_row(name: str, p: Any) -> list[str]:
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


# --- perf_analyzer -----------------------------------------------------------------------------


def perf_analyzer_arguments(parser) -> None:
    parser.add_argument(
        "--perf-analyzer",
        default="/tmp/perf_analyzer/perf_analyzer",
        help="perf_analyzer binary; fetched with tools/get_perf_analyzer.sh when the path does not exist",
    )


def perf_analyzer_binary(given: str) -> str:
    if Path(given).is_file():
        return given
    folder = Path(given).parent
    print(f"perf_analyzer not at {given}: fetching it into {folder} (tools/get_perf_analyzer.sh) ...", flush=True)
    subprocess.run(["bash", str(TOOLS / "get_perf_analyzer.sh"), str(folder)], check=True)
    return str(folder / "perf_analyzer")


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


def perf_window(
    bench: Bench,
    server: Any,
    analyzer: str,
    model: str,
    concurrency: int,
    warmup: float,
    window: float,
    pids: Sequence[int] = (),
    quiet: bool = True,
    extra: Sequence[str] = (),
    split_pids: Sequence[int] = (),
    latencies: bool = False,
    counters: Mapping[str, Callable[[], float]] | None = None,
) -> dict:
    """perf_analyzer loads ``model`` at ``concurrency`` (after a quiet-host wait unless
    ``quiet`` is false); after ``warmup`` s a window of ``window`` s is measured between two
    scrapes of the server's metrics: Triton's counts, CPU of the server's process tree, of
    perf_analyzer and of everything else ("others"). ``pids``: processes whose own CPU per
    request over the same window is reported too (``pid_cpu_ms``); ``extra``: more perf_analyzer
    options (e.g. ``--shared-memory system``); ``split_pids``: processes whose user and system CPU
    and minor page faults per request, summed, are reported too (``split``). With ``latencies``
    perf_analyzer measures three windows over warm-up + window and the point carries its p50 and
    p99 (``p50_ms``, ``p99_ms``: over them all, the warm-up included). ``counters``: name ->
    a reading that grows (e.g. a device's busy seconds); the point carries each one's increase per
    second of the window (``rates``)."""
    from ge_python_backend.ops.bench import metrics
    from ge_python_backend.ops.bench.host import busy_cpu_seconds, process_cpu, process_tree_cpu

    counters = dict(counters or {})
    busy = bench.quiet(f"{model} c={concurrency}") if quiet else None
    log = server.workspace / f"perf_analyzer_{model}_c{concurrency}.log"
    report = log.with_suffix(".csv")
    # with latencies: its three windows (the fewest it reports) span warm-up + window, each one accepted
    # whatever it measured; else one long window: the load runs until it is stopped
    windows = (
        ["--measurement-interval", str(int((warmup + window) * 1000 / 3)), "--max-trials", "3"]
        + ["--stability-percentage", "1000", "-f", str(report)]
        if latencies
        else ["--measurement-interval", "600000", "--max-trials", "1"]
    )
    command, env = perf_analyzer_run(
        analyzer, model, server.grpc_address, concurrency, "--max-threads", str(max(concurrency, 16)), *windows, *extra
    )
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(warmup)
        if process.poll() is not None:
            raise RuntimeError(f"perf_analyzer exited ({process.returncode}); see {log}")

        def reading():
            return (
                time.perf_counter(),
                metrics.fetch(server.metrics_url),
                process_tree_cpu(server.process.pid) or 0.0,
                process_cpu(process.pid) or 0.0,
                busy_cpu_seconds() or 0.0,
                time.process_time(),
                [process_cpu(pid) or 0.0 for pid in pids],
                [sum(column) for column in zip((0.0, 0.0, 0.0), *(user_sys_faults(pid) for pid in split_pids))],
                [read() for read in counters.values()],
            )

        first = reading()
        if latencies:  # perf_analyzer ends its trial itself; the window ends with it
            process.wait(window + 120)
            last = reading()
        else:
            time.sleep(window)
            last = reading()
            if process.poll() is not None:
                raise RuntimeError(f"perf_analyzer exited during the window ({process.returncode}); see {log}")
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    seconds = last[0] - first[0]
    split = metrics.breakdown(first[1], last[1], model)
    requests = split["requests"]
    server_s, client_s, host_s, own_s = (last[i] - first[i] for i in (2, 3, 4, 5))
    per = 1000.0 / requests if requests else math.nan
    phases = {
        key.split("phase=")[1].rstrip("}"): value["increase"] / split["executions"] / 1000.0
        for key, value in split["model_metrics"].items()
        if key.startswith("ge_phase_duration_us") and split["executions"]
    }
    return {
        "model": model,
        "concurrency": concurrency,
        "seconds": seconds,
        "requests": requests,
        "failures": split["failures"],
        "infer_per_s": split["inferences"] / seconds,
        "avg_batch": split["avg_batch"],
        "server_cpu_ms": server_s * per,
        "client_cpu_ms": client_s * per,
        "cores_busy": (server_s + client_s) / seconds,
        "others_cores": max(0.0, host_s - server_s - client_s - own_s) / seconds,
        "busy_before": busy,
        "request_ms": split["per_request_us"]["request"] / 1000.0,
        "queue_ms": split["per_request_us"]["queue"] / 1000.0,
        "phase_ms_per_execution": phases,
        "pid_cpu_ms": {pid: (b - a) * per for pid, a, b in zip(pids, first[6], last[6])},
        "split": dict(zip(("user_ms", "sys_ms", "minflt"), ((b - a) * per for a, b in zip(first[7], last[7])))),
        "rates": {name: (b - a) / seconds for name, a, b in zip(counters, first[8], last[8])},
        **(trial_latencies(report) if latencies else {}),
    }


def trial_latencies(report: Path) -> dict[str, float]:
    """p50 and p99 in ms from perf_analyzer's CSV report (``-f``)."""
    import csv

    try:
        with report.open(newline="") as handle:
            row = next(csv.DictReader(handle))
    except (OSError, StopIteration) as exc:
        raise RuntimeError(f"perf_analyzer wrote no report at {report}: {exc}") from None
    return {"p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000}


def user_sys_faults(pid: int) -> tuple[float, float, float]:
    """``pid``'s user and system CPU seconds and thousands of minor page faults so far (/proc/PID/stat
    fields utime, stime and minflt; the faults scaled as the seconds, so that ``* 1000 / requests``
    gives faults per request); zeros if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return (0.0, 0.0, 0.0)
    fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]) / 1000.0)


def stub_pids(server_pid: int, model: str) -> list[int]:
    """The Python backend stubs tritonserver (``server_pid``) runs for ``model``'s instances."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or not (entry / "comm").read_text().startswith("triton_python"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if int(parent) == server_pid and f"/{model}/" in command:
            found.append(int(entry.name))
    return found


def perf_analyzer_once(analyzer: str, address: str, model: str, concurrency: int, seconds: float) -> dict[str, float]:
    """perf_analyzer's own measurement once at ``concurrency`` (its stability trials): infer/s,
    p50 and p99 in ms, as it reports them."""
    command, env = perf_analyzer_run(
        analyzer,
        model,
        address,
        concurrency,
        "--measurement-interval",
        str(int(seconds * 1000)),
        "--max-trials",
        "3",
        "--stability-percentage",
        "50",
    )
    output = subprocess.run(command, capture_output=True, text=True, timeout=120 + 10 * seconds, env=env).stdout
    return perf_analyzer_figures(output)


def perf_analyzer_figures(output: str) -> dict[str, float]:
    """infer/s, p50 and p99 in ms, read from perf_analyzer's printout (NaN where it has none)."""
    import re

    def number(pattern: str) -> float:
        match = re.search(pattern, output)
        return float(match.group(1)) if match else float("nan")

    return {
        "infer_per_s": number(r"Throughput: ([\d.]+) infer/sec"),
        "p50_ms": number(r"p50 latency: (\d+) usec") / 1000,
        "p99_ms": number(r"p99 latency: (\d+) usec") / 1000,
    }


# --- model control on a server of explicit mode ----------------------------------------------------


def _post(server: Any, path: str, timeout: float = 300.0) -> None:
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


def load_models(server: Any, names: Sequence[str]) -> None:
    """Load ``names`` side by side (explicit model control)."""
    failures: list[str] = []

    def one(name: str) -> None:
        try:
            _post(server, f"/v2/repository/models/{name}/load")
        except OSError as exc:
            failures.append(f"{name}: {exc}")

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError("could not load " + "; ".join(failures) + f"\n{server.log_tail()}")


def unload_models(server: Any, names: Sequence[str]) -> None:
    for name in names:
        _post(server, f"/v2/repository/models/{name}/unload")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {m.name: m for m in server.model_states() or []}
        if not any(states.get(n) is not None and states[n].state not in ("UNAVAILABLE", "") for n in names):
            return
        time.sleep(0.2)


# --- summarising repeated runs -------------------------------------------------------------------


def median_round(points: list[dict], key: Callable[[dict], float]) -> dict:
    """The round whose ``key`` is the median (the lower one of an even count), with every
    round's value under "rounds"."""
    ordered = sorted(points, key=key)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds"] = [key(p) for p in points]
    return chosen


def positive_int(text: str) -> int:
    import argparse

    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value
