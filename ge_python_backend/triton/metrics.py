"""GEModel's own Prometheus metrics, through Triton's ``pb_utils.MetricFamily``.

They appear on tritonserver's metrics endpoint next to Triton's ``nv_*`` metrics, labelled
``model``, ``version``, ``instance`` and ``pid`` (the stub process). Counters are cumulative, like
Triton's own latency counters: divide by ``ge_batches`` (or take rates) for averages.

``pid`` makes every label set unique per load. On an in-place reload Triton initializes the new
instance before it finalizes the old one (core r24.10 model_lifecycle.cc:776-826), and a
MetricFamily series with the labels of a live one is the same prometheus object (prometheus-cpp
``Family::Add``; core metric_family.cc counts references per family object, :122): the old
instance's finalize deleted the series the new one was counting, for good, and left the new one
writing to freed memory (server#8663). With ``pid`` the old series go with the old instance.

``ge_heartbeat_timestamp_seconds`` is set every ``HEARTBEAT_INTERVAL`` while the stub process
runs. When a stub dies, tritonserver keeps exporting its series with their last values (nothing
deletes them), so every gauge freezes as it was: the heartbeat's age is the signal.

Each metric update is an IPC round trip from the stub to the server, so nothing is sent on the
batch path: updates are summed in process and sent by a background thread every
``FLUSH_INTERVAL`` seconds, and soon after the model goes idle (at most every
``IDLE_FLUSH_GAP``). Rare events — a failed request, a fatal engine failure, a change in the
number of sequences — are sent at once, before the request is answered.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ge_python_backend.serving.observers import FailureKind, Observer, Phase
from ge_python_backend.serving.routing import RefusalCause, RouteObserver, SkipCause
from ge_python_backend.triton import lifeline

LOG = logging.getLogger(__name__)

FLUSH_INTERVAL = 1.0
IDLE_FLUSH_GAP = 0.1
#: at most this long between heartbeats (one each FLUSH_INTERVAL when idle)
HEARTBEAT_INTERVAL = 1.0
HEARTBEAT = "ge_heartbeat_timestamp_seconds"

#: how often the device's memory is read (acl.rt.get_mem_info), from the flush thread
DEVICE_MEMORY_INTERVAL = 5.0
DEVICE_MEMORY = "ge_device_memory_bytes"
#: an NPU instance's share of its device's busy seconds (engines/acl/busy.py): summed over the
#: instances on a device, the seconds it ran executions; its rate is the device's busy fraction
DEVICE_BUSY = "ge_device_busy_seconds_total"
#: the series an NPU engine adds, labelled with its device
DEVICE_SERIES = (DEVICE_MEMORY, DEVICE_BUSY)

#: a series: its metric's name and the values of its extra labels
Key = tuple[str, tuple[str, ...]]

#: name -> (kind, help text, names of its extra labels)
METRICS = {
    "ge_batches": ("counter", "Engine calls (device batches) that completed", ()),
    "ge_batch_rows": ("counter", "Request rows those engine calls ran, padding excluded", ()),
    "ge_padding_rows": (
        "counter",
        "Rows of padding added to reach a compiled batch gear (wasted device work)",
        (),
    ),
    "ge_phase_duration_us": ("counter", "Cumulative microseconds per phase of the request path", ("phase",)),
    "ge_request_failures": ("counter", "Requests answered with an error, by cause", ("kind",)),
    "ge_batches_in_flight": (
        "gauge",
        "Batches running on execution slots now (at most streams per instance)",
        (),
    ),
    "ge_sequences_active": ("gauge", "Sequences whose state the model holds (sequence batching)", ()),
    "ge_engine_healthy": (
        "gauge",
        "1 while the engine serves; 0 after a fatal engine failure, until the model is reloaded",
        (),
    ),
    DEVICE_BUSY: (
        "counter",
        "NPU engines only: seconds the device ran executions that no other instance on it counted (from the timing "
        "events around each execution); sum the rates of every instance on a device for its busy fraction",
        (),
    ),
    HEARTBEAT: (
        "gauge",
        f"Unix time of the instance's last heartbeat, set every {HEARTBEAT_INTERVAL:g} s while its stub process runs; "
        "its age is the signal that a stub died or hangs",
        (),
    ),
    DEVICE_MEMORY: (
        "gauge",
        "NPU engines only: the device's memory from acl.rt.get_mem_info, free and total, read every "
        f"{DEVICE_MEMORY_INTERVAL:g} s off the request path",
        ("kind",),
    ),
}
#: The router's metrics (``triton/router.py``), labelled ``router`` (its model name), ``version``,
#: ``instance`` and ``pid`` like GEModel's, and ``member`` (a member's model name) where it applies.
ROUTER_METRICS = {
    "ge_router_requests_total": (
        "counter",
        "Requests the router answered with a member's answer (its outputs or its own error), by member",
        ("member",),
    ),
    "ge_router_in_flight": (
        "gauge",
        "Rows the router has sent to a member and not had answered yet (the member's limit bounds it)",
        ("member",),
    ),
    "ge_router_skips_total": (
        "counter",
        "Times a request passed over a member, by cause: at_limit (its rows in flight had reached its limit), "
        "backing_off (it was unavailable a moment ago), unavailable (it answered this request unavailable, and the "
        "request went on to the next member)",
        ("member", "cause"),
    ),
    "ge_router_refused_total": (
        "counter",
        "Requests the router answered unavailable itself, by cause: no_member (every member it could still use was "
        "unavailable), timeout (the client's timeout passed while it waited for a member), unloading",
        ("cause",),
    ),
    "ge_router_waiting": ("gauge", "Requests waiting for a member to free", ()),
}

#: the values of each metric's extra label (GEModel's have at most one)
LABEL_VALUES = {
    "ge_phase_duration_us": tuple(p.value for p in Phase),
    "ge_request_failures": tuple(k.value for k in FailureKind),
    DEVICE_MEMORY: ("free", "total"),
}
#: the keys every batch adds to (made once: the batch path adds several times per batch)
_PHASE_KEYS: dict[Phase, Key] = {p: ("ge_phase_duration_us", (p.value,)) for p in Phase}
_BATCHES: Key = ("ge_batches", ())
_BATCH_ROWS: Key = ("ge_batch_rows", ())
_PADDING_ROWS: Key = ("ge_padding_rows", ())


class Reporter:
    """Series of Triton metric families, updated in process and sent by a background thread.

    ``declarations``: name -> (kind, help text, names of its extra labels); ``series``: name -> the
    values of its extra labels, one tuple per series (``[()]`` without any); ``labels``: every
    series' own labels (``pid`` added). Subclasses count with ``_add`` and set ``_gauges`` (keyed
    by name and label values, under ``_lock``) and may do periodic work in ``_tick``.
    """

    def __init__(
        self,
        pb_utils: Any,
        declarations: Mapping[str, tuple[str, str, tuple[str, ...]]],
        series: Mapping[str, Sequence[tuple[str, ...]]],
        labels: Mapping[str, str],
        gauges: Mapping[Key, float],
        extra_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        labels = dict(labels, pid=str(os.getpid()))
        kinds = {"counter": pb_utils.MetricFamily.COUNTER, "gauge": pb_utils.MetricFamily.GAUGE}
        self._families = {
            name: pb_utils.MetricFamily(name, declarations[name][1], kinds[declarations[name][0]]) for name in series
        }
        self._metrics: dict[Key, Any] = {}
        for name, all_values in series.items():
            extra = declarations[name][2]
            own = dict(labels, **(extra_labels or {}).get(name, {}))
            for values in all_values:
                metric_labels = dict(own, **dict(zip(extra, values)))
                self._metrics[(name, values)] = self._families[name].Metric(labels=metric_labels)
        self._pending: dict[Key, float] = {}
        self._gauges: dict[Key, float] = dict(gauges)
        self._sent_gauges: dict[Key, float] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._idle = threading.Event()
        self._stop = threading.Event()
        self.flush()
        self._flusher = threading.Thread(target=self._flush_periodically, name="ge-metrics", daemon=True)
        self._flusher.start()

    def _add(self, name: str, value: float, *labels: str) -> None:
        key = (name, labels)
        self._pending[key] = self._pending.get(key, 0.0) + value

    def _tick(self, now: float, woken: bool) -> None:
        """Periodic work before each flush of the background thread (``woken``: by ``_idle``)."""

    def _flush_periodically(self) -> None:
        failed = False
        while not self._stop.is_set():
            woken = self._idle.wait(FLUSH_INTERVAL)
            self._idle.clear()
            try:
                self._tick(time.time(), woken)
                self.flush()
                failed = False
            except Exception:  # logged once per run of failures; the next flush retries
                if not failed:
                    LOG.exception("sending metrics to tritonserver failed")
                failed = True
            if woken:  # coalesce: an idle flush at most every IDLE_FLUSH_GAP
                self._stop.wait(IDLE_FLUSH_GAP)

    def flush(self) -> None:
        """Send what changed since the last flush."""
        # One flush at a time, snapshot and send together: a later snapshot must never be
        # overwritten by an earlier one still being sent.
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
                gauges = {k: v for k, v in self._gauges.items() if self._sent_gauges.get(k) != v}
                self._sent_gauges.update(gauges)
            updates = [(self._metrics[key].increment, value) for key, value in pending.items() if value]
            updates += [(self._metrics[key].set, value) for key, value in gauges.items()]
            for send, value in updates:
                # each update waits, holding a lock of the stub, for the server's answer: one sent to a
                # dead server would wait forever (lifeline.py), so look before each one
                if not lifeline.server_alive():
                    return
                send(value)

    def close(self) -> None:
        self._stop.set()
        self._idle.set()
        self._flusher.join()
        self.flush()
        self._metrics.clear()
        self._families.clear()


class TritonMetrics(Reporter, Observer):
    """GEModel's metrics: an Observer that reports to Triton's metrics endpoint. ``device_memory``
    (an NPU engine's (free, total) reader, with the ``device`` it reads) adds the device's series,
    ``ge_device_memory_bytes`` and ``ge_device_busy_seconds_total``."""

    def __init__(
        self,
        pb_utils: Any,
        labels: Mapping[str, str],
        device_memory: Callable[[], tuple[int, int] | None] | None = None,
        device: str = "",
    ) -> None:
        names = [n for n in METRICS if n not in DEVICE_SERIES or device_memory is not None]
        self._device_memory = device_memory
        self._memory_read = 0.0
        gauges: dict[Key, float] = {
            ("ge_batches_in_flight", ()): 0.0,
            ("ge_sequences_active", ()): 0.0,
            ("ge_engine_healthy", ()): 1.0,
            (HEARTBEAT, ()): time.time(),
        }
        super().__init__(
            pb_utils,
            METRICS,
            {name: [(v,) for v in LABEL_VALUES[name]] if name in LABEL_VALUES else [()] for name in names},
            labels,
            gauges,
            extra_labels={name: {"device": device} for name in DEVICE_SERIES},
        )

    def batch(self, rows: int, padding: int) -> None:
        pending = self._pending  # three counts of every batch: _add's work without a call each
        with self._lock:
            pending[_BATCHES] = pending.get(_BATCHES, 0.0) + 1
            pending[_BATCH_ROWS] = pending.get(_BATCH_ROWS, 0.0) + rows
            pending[_PADDING_ROWS] = pending.get(_PADDING_ROWS, 0.0) + padding

    def phase(self, name: Phase, seconds: float) -> None:
        key = _PHASE_KEYS[name]
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + seconds * 1e6

    def failure(self, kind: FailureKind) -> None:
        with self._lock:
            self._add("ge_request_failures", 1, kind.value)
        self.flush()

    def device_busy(self, seconds: float) -> None:
        if self._device_memory is not None:  # an NPU engine: the series exists
            with self._lock:
                self._add(DEVICE_BUSY, seconds)

    def in_flight(self, batches: int) -> None:
        with self._lock:
            self._gauges[("ge_batches_in_flight", ())] = batches
        if batches == 0 and not self._idle.is_set():  # set() alone would take the event's lock each batch
            self._idle.set()

    def sequences(self, active: int) -> None:
        with self._lock:
            changed = self._gauges[("ge_sequences_active", ())] != active
            self._gauges[("ge_sequences_active", ())] = active
        if changed:
            self.flush()

    def out_of_service(self, reason: str) -> None:
        with self._lock:
            self._gauges[("ge_engine_healthy", ())] = 0
        self.flush()

    def _tick(self, now: float, woken: bool) -> None:
        """The heartbeat, and the device's memory every DEVICE_MEMORY_INTERVAL (off the request path)."""
        with self._lock:
            if not woken or now - self._gauges[(HEARTBEAT, ())] >= HEARTBEAT_INTERVAL:
                self._gauges[(HEARTBEAT, ())] = now
        if self._device_memory is None or now - self._memory_read < DEVICE_MEMORY_INTERVAL:
            return
        self._memory_read = now
        found = self._device_memory()
        if found is not None:
            with self._lock:
                self._gauges[(DEVICE_MEMORY, ("free",))], self._gauges[(DEVICE_MEMORY, ("total",))] = found


class RouterMetrics(Reporter, RouteObserver):
    """The router's metrics (``ROUTER_METRICS``) over ``members``: counts summed in process and sent
    by the background thread; refusals at once."""

    def __init__(self, pb_utils: Any, labels: Mapping[str, str], members: Sequence[str]) -> None:
        per_member: list[tuple[str, ...]] = [(m,) for m in members]
        series: dict[str, list[tuple[str, ...]]] = {
            "ge_router_requests_total": per_member,
            "ge_router_in_flight": per_member,
            "ge_router_skips_total": [(m, c.value) for m in members for c in SkipCause],
            "ge_router_refused_total": [(c.value,) for c in RefusalCause],
            "ge_router_waiting": [()],
        }
        gauges: dict[Key, float] = {("ge_router_in_flight", (m,)): 0.0 for m in members}
        gauges[("ge_router_waiting", ())] = 0.0
        super().__init__(pb_utils, ROUTER_METRICS, series, labels, gauges)

    def answered(self, member: str) -> None:
        with self._lock:
            self._add("ge_router_requests_total", 1, member)

    def in_flight(self, member: str, rows: int) -> None:
        with self._lock:
            self._gauges[("ge_router_in_flight", (member,))] = rows
        if rows == 0:
            self._idle.set()

    def skipped(self, member: str, cause: SkipCause) -> None:
        with self._lock:
            self._add("ge_router_skips_total", 1, member, cause.value)

    def refused(self, cause: RefusalCause) -> None:
        with self._lock:
            self._add("ge_router_refused_total", 1, cause.value)
        self.flush()

    def waiting(self, requests: int) -> None:
        with self._lock:
            self._gauges[("ge_router_waiting", ())] = requests
