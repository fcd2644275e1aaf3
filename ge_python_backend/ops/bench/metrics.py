"""Read Triton's Prometheus metrics endpoint and say where a window's time went.

Two scrapes, before and after a measurement window, give per-model deltas: Triton's own
request counts and cumulative durations (queue, compute input / infer / output) and any
model-defined families (GEModel's phase metrics, named with a common prefix).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

#: Triton's cumulative per-model durations (microseconds), by the phase they measure.
TRITON_DURATIONS = {
    "queue": "nv_inference_queue_duration_us",
    "compute_input": "nv_inference_compute_input_duration_us",
    "compute_infer": "nv_inference_compute_infer_duration_us",
    "compute_output": "nv_inference_compute_output_duration_us",
    "request": "nv_inference_request_duration_us",
}


@dataclass
class Scrape:
    """One reading of a metrics page: sample values and each family's declared type."""

    samples: dict[SampleKey, float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name`` over every series whose labels include ``labels`` (0 if none)."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= set(ls))


def _labels(text: str | None, line: str) -> Labels:
    if not text:
        return ()
    body, pairs, position = text[1:-1], [], 0
    while position < len(body):
        match = _LABEL.match(body, position)
        if match is None:
            raise ValueError(f"malformed labels in metrics line {line!r}")
        value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        pairs.append((match.group(1), value))
        position = match.end()
    return tuple(sorted(pairs))


def parse(text: str) -> Scrape:
    """Parse the Prometheus text exposition format (the subset Triton writes)."""
    scrape = Scrape()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[1] == "TYPE":
                scrape.types[parts[2]] = parts[3]
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"malformed metrics line {line!r}")
        name, labels, value = match.groups()
        scrape.samples[(name, _labels(labels, line))] = float(value)
    return scrape


def fetch(url: str, timeout: float = 5.0) -> Scrape:
    """Scrape ``url`` (e.g. http://127.0.0.1:8002/metrics)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return parse(response.read().decode("utf-8", "replace"))


def _family(name: str, types: Mapping[str, str]) -> tuple[str, str]:
    """(family, suffix) of a sample name: histogram and summary samples carry a suffix."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
            return name[: -len(suffix)], suffix
    return name, ""


#: Labels not shown; series that differ only in these are summed (e.g. over instances).
_HIDDEN_LABELS = ("model", "router", "version", "instance", "le", "quantile")


def _series_name(name: str, labels: Labels) -> str:
    shown = [f"{k}={v}" for k, v in labels if k not in _HIDDEN_LABELS]
    return f"{name}{{{','.join(shown)}}}" if shown else name


def model_families(before: Scrape, after: Scrape, model: str, prefix: str) -> dict[str, dict[str, float]]:
    """Deltas of every family named ``prefix``* for ``model`` (a router's series name it in label
    ``router``; series without either label are kept too), summed over instances: histograms and
    summaries as count and mean, counters as their increase, gauges as their last value."""
    result: dict[str, dict[str, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for (name, labels), value in after.samples.items():
        if not name.startswith(prefix):
            continue
        label_map = dict(labels)
        if label_map.get("model", label_map.get("router", model)) != model:
            continue
        family, suffix = _family(name, after.types)
        key = _series_name(family, labels)
        delta = value - before.samples.get((name, labels), 0.0)
        if suffix == "_sum":
            sums[key] = sums.get(key, 0.0) + delta
        elif suffix == "_count":
            counts[key] = counts.get(key, 0.0) + delta
        elif suffix == "":
            kind = "value" if after.types.get(family) == "gauge" else "increase"
            entry = result.setdefault(key, {kind: 0.0})
            entry[kind] += value if kind == "value" else delta
    for key, count in counts.items():
        total = sums.get(key, 0.0)
        result[key] = {"count": count, "sum": total, "mean": total / count if count else 0.0}
    return dict(sorted(result.items()))


def per_batch_us(before: Scrape, after: Scrape, model: str, prefix: str) -> dict[str, float]:
    """Per series of a ``prefix``*``_us`` duration counter of ``model`` (as ``model_families``
    names it): its increase over the window divided by the increase of ``prefix``batches of
    the same instance (the same ``pid``), i.e. the time per engine batch of that instance. Series
    without a ``pid``, or of an instance that ran no batch, are left out."""
    batches: dict[str, float] = {}
    for (name, labels), value in after.samples.items():
        label_map = dict(labels)
        if name == f"{prefix}batches" and label_map.get("model") == model and "pid" in label_map:
            batches[label_map["pid"]] = value - before.samples.get((name, labels), 0.0)
    result: dict[str, float] = {}
    for (name, labels), value in after.samples.items():
        label_map = dict(labels)
        ran = batches.get(label_map.get("pid", ""), 0.0)
        if name.startswith(prefix) and name.endswith("_us") and label_map.get("model") == model and ran:
            key = _series_name(name, labels)
            result[key] = result.get(key, 0.0) + (value - before.samples.get((name, labels), 0.0)) / ran
    return dict(sorted(result.items()))


def device_busy_seconds(before: Scrape, after: Scrape, model: str, prefix: str) -> dict[str, float]:
    """Device -> the increase of ``prefix``device_busy_seconds_total for ``model``, summed over its
    instances on that device: the seconds the device ran executions (divide by the window)."""
    found: dict[str, float] = {}
    for (name, labels), value in after.samples.items():
        label_map = dict(labels)
        if name == f"{prefix}device_busy_seconds_total" and label_map.get("model") == model:
            device = label_map.get("device", "")
            found[device] = found.get(device, 0.0) + value - before.samples.get((name, labels), 0.0)
    return dict(sorted(found.items()))


def breakdown(before: Scrape, after: Scrape, model: str, prefix: str = "ge_") -> dict[str, Any]:
    """Where the window's time went on the server, for ``model``.

    ``per_request_us`` divides Triton's cumulative durations by the requests that succeeded in
    the window; ``avg_batch`` is inferences per model execution; ``model_metrics`` holds the
    model's own families (``model_families``) and ``per_batch_us`` their durations per batch of
    each instance (``per_batch_us``); ``device_busy_s`` the seconds each device ran the model's
    executions (``device_busy_seconds``, NPU engines).
    """

    def delta(name: str) -> float:
        return after.value(name, model=model) - before.value(name, model=model)

    requests = delta("nv_inference_request_success")
    executions = delta("nv_inference_exec_count")
    per_request = {phase: (delta(metric) / requests if requests else 0.0) for phase, metric in TRITON_DURATIONS.items()}
    return {
        "requests": requests,
        "failures": delta("nv_inference_request_failure"),
        "inferences": delta("nv_inference_count"),
        "executions": executions,
        "avg_batch": delta("nv_inference_count") / executions if executions else 0.0,
        "per_request_us": per_request,
        "model_metrics": model_families(before, after, model, prefix),
        "per_batch_us": per_batch_us(before, after, model, prefix),
        "device_busy_s": device_busy_seconds(before, after, model, prefix),
    }
