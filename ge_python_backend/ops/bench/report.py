"""Bench results as a text table, a JSON document and a PNG plot (throughput against p99)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.ops.bench.load import Sweep, Target
from ge_python_backend.ops.bench.stats import Point

SCHEMA = "ge-triton-bench/1"


def _ms(us: float) -> str:
    return f"{us / 1000.0:.2f}"


def table(points: Sequence[Point]) -> str:
    """One line per point: load, throughput, latency percentiles, errors; for an NPU model the
    busy fraction of its device(s) over the window (ge_device_busy_seconds_total: the share of
    the time the device ran its executions); when the server's
    metrics were read, the average batch and Triton's per-request time split (ms); when the
    server's process was known, CPU ms per request of the server and of the load generator and
    the CPUs other processes on the host kept busy."""
    with_server = any(p.server for p in points)
    with_cpu = any("server_ms" in p.cpu_ms_per_request for p in points)
    with_device = any(p.server.get("device_busy_s") for p in points)
    header = ["mode", "level", "req/s", "infer/s", "p50 ms", "p90 ms", "p99 ms", "errors"]
    if with_device:
        header += ["device busy"]
    if with_server:
        header += ["batch", "queue", "c.input", "c.infer", "c.output"]
    if with_cpu:
        header += ["srv cpu", "cli cpu", "others"]
    rows = [header]
    for p in points:
        row = [
            p.mode,
            f"{p.level:g}",
            f"{p.throughput:.1f}",
            f"{p.inferences:.1f}",
            f"{p.latency_ms.p50:.2f}",
            f"{p.latency_ms.p90:.2f}",
            f"{p.latency_ms.p99:.2f}",
            str(p.errors),
        ]
        if with_device:
            row += [device_busy(p)]
        if with_server:
            split = p.server.get("per_request_us", {})
            row += [f"{p.server.get('avg_batch', 0.0):.2f}"] + [
                _ms(split.get(k, 0.0)) for k in ("queue", "compute_input", "compute_infer", "compute_output")
            ]
        if with_cpu:
            cpu = p.cpu_ms_per_request
            row += [
                f"{cpu.get('server_ms', math.nan):.2f}",
                f"{cpu.get('client_ms', math.nan):.2f}",
                f"{cpu.get('others_cores', math.nan):.2f}",
            ]
        rows.append(row)
    return format_rows(rows)


def device_busy(point: Point) -> str:
    """The device busy fraction of ``point`` (``DEVICE:FRACTION`` each when it used several)."""
    busy = point.server.get("device_busy_s") or {}
    if not busy or point.duration_s <= 0:
        return "-"
    if len(busy) == 1:
        return f"{next(iter(busy.values())) / point.duration_s:.2f}"
    return " ".join(f"{device}:{seconds / point.duration_s:.2f}" for device, seconds in busy.items())


def format_rows(rows: Sequence[Sequence[str]]) -> str:
    """Right-aligned columns, the first row a header underlined with dashes."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def model_metrics_table(points: Sequence[Point]) -> str:
    """The model's own metric families per point, summed over instances: means of histograms
    (in ms for ``seconds`` families), increases of counters, gauges' last values. A duration
    counter in ``_us`` also shows its time per batch of its own instance (GEModel's series carry
    the instance's ``pid``), else per Triton execution of the model. Counters that did not move
    are left out."""
    lines = []
    for p in points:
        families = p.server.get("model_metrics") or {}
        per_batch = p.server.get("per_batch_us") or {}
        executions = p.server.get("executions", 0.0)
        shown = []
        for series, values in families.items():
            if "mean" in values:
                scale, unit = (1000.0, " ms") if "seconds" in series else (1.0, "")
                shown.append(f"  {series}: mean {values['mean'] * scale:.3f}{unit} over {values['count']:.0f}")
            elif "increase" in values and values["increase"]:
                increase = values["increase"]
                if series in per_batch:
                    shown.append(
                        f"  {series}: {increase / 1000:.1f} ms, {per_batch[series] / 1000:.3f} ms per batch of this "
                        "instance"
                    )
                elif series.split("{")[0].endswith("_us") and executions:
                    shown.append(
                        f"  {series}: {increase / 1000:.1f} ms, {increase / executions / 1000:.3f} ms per execution"
                    )
                else:
                    shown.append(f"  {series}: +{increase:g}")
            elif "value" in values:
                shown.append(f"  {series}: {values['value']:g}")
        if shown:
            lines += [f"{p.mode} {p.level:g} ({executions:.0f} executions):"] + shown
    return "\n".join(lines)


def document(target: Target, sweep: Sweep, points: Sequence[Point]) -> dict[str, Any]:
    """The JSON document of one run."""
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "target": {
            "url": target.url,
            "protocol": target.protocol,
            "model": target.model,
            "rows_per_request": target.rows,
            "inputs": {n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in target.inputs.items()},
            "metrics_url": target.metrics_url,
        },
        "sweep": {
            "mode": sweep.mode,
            "levels": list(sweep.levels),
            "duration_s": sweep.duration_s,
            "warmup_s": sweep.warmup_s,
        },
        "points": [p.to_dict() for p in points],
    }


def write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, allow_nan=True) + "\n", encoding="utf-8")
    return path


def plot(series: Mapping[str, Sequence[Point]], path: Path, title: str = "") -> Path:
    """Throughput (x) against p99 latency (y), one line per series, each point labelled with
    its load level. Needs matplotlib (the ``bench`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from ge_python_backend.ops.bench.load import BenchError

        raise BenchError("the plot needs matplotlib: pip install 'ge-python-backend[bench]'") from None
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, points in series.items():
        xs = [p.inferences for p in points]
        ys = [p.latency_ms.p99 for p in points]
        axes.plot(xs, ys, marker="o", label=name)
        for p, x, y in zip(points, xs, ys):
            axes.annotate(
                f"{'c' if p.mode == 'concurrency' else 'r'}={p.level:g}",
                (x, y),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
    axes.set_xlabel("throughput (inferences/s)")
    axes.set_ylabel("p99 latency (ms)")
    axes.set_title(title or "throughput against p99 latency")
    axes.grid(True, alpha=0.3)
    if len(series) > 1:
        axes.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
