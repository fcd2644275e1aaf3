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
from collections.abc import Callable, Mapping
from typing import Any

from ge_python_backend.serving.observers import FailureKind, Observer, Phase
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

#: name -> (kind, help text, extra label name or None)
METRICS = {
    "ge_batches": ("counter", "Engine calls (device batches) that completed", None),
    "ge_batch_rows": ("counter", "Request rows those engine calls ran, padding excluded", None),
    "ge_padding_rows": (
        "counter",
        "Rows of padding added to reach a compiled batch gear (wasted device work)",
        None,
    ),
    "ge_phase_duration_us": ("counter", "Cumulative microseconds per phase of the request path", "phase"),
    "ge_request_failures": ("counter", "Requests answered with an error, by cause", "kind"),
    "ge_batches_in_flight": (
        "gauge",
        "Batches running on execution slots now (at most streams per instance)",
        None,
    ),
    "ge_sequences_active": ("gauge", "Sequences whose state the model holds (sequence batching)", None),
    "ge_engine_healthy": (
        "gauge",
        "1 while the engine serves; 0 after a fatal engine failure, until the model is reloaded",
        None,
    ),
    HEARTBEAT: (
        "gauge",
        f"Unix time of the instance's last heartbeat, set every {HEARTBEAT_INTERVAL:g} s while its stub process runs; "
        "its age is the signal that a stub died or hangs",
        None,
    ),
    DEVICE_MEMORY: (
        "gauge",
        "NPU engines only: the device's memory from acl.rt.get_mem_info, free and total, read every "
        f"{DEVICE_MEMORY_INTERVAL:g} s off the request path",
        "kind",
    ),
}
#: the values of each metric's extra label
LABEL_VALUES = {
    "ge_phase_duration_us": tuple(p.value for p in Phase),
    "ge_request_failures": tuple(k.value for k in FailureKind),
    DEVICE_MEMORY: ("free", "total"),
}


class TritonMetrics(Observer):
    """An Observer that reports to Triton's metrics endpoint. ``device_memory`` (the engine's
    (free, total) reader, with the ``device`` it reads) adds ``ge_device_memory_bytes``."""

    def __init__(
        self,
        pb_utils: Any,
        labels: Mapping[str, str],
        device_memory: Callable[[], tuple[int, int] | None] | None = None,
        device: str = "",
    ) -> None:
        labels = dict(labels, pid=str(os.getpid()))
        kinds = {"counter": pb_utils.MetricFamily.COUNTER, "gauge": pb_utils.MetricFamily.GAUGE}
        names = [n for n in METRICS if n != DEVICE_MEMORY or device_memory is not None]
        self._families = {
            name: pb_utils.MetricFamily(name, METRICS[name][1], kinds[METRICS[name][0]]) for name in names
        }
        self._metrics: dict[tuple[str, str], Any] = {}
        for name in names:
            extra = METRICS[name][2]
            own = dict(labels, device=device) if name == DEVICE_MEMORY else labels
            for value in LABEL_VALUES[name] if extra else ("",):
                metric_labels = dict(own, **({extra: value} if extra else {}))
                self._metrics[(name, value)] = self._families[name].Metric(labels=metric_labels)
        self._device_memory = device_memory
        self._memory_read = 0.0
        self._pending: dict[tuple[str, str], float] = {}
        self._gauges: dict[str, float] = {
            "ge_batches_in_flight": 0,
            "ge_sequences_active": 0,
            "ge_engine_healthy": 1,
            HEARTBEAT: time.time(),
        }
        self._sent_gauges: dict[str, float] = {}
        self._memory: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._idle = threading.Event()
        self._stop = threading.Event()
        self.flush()
        self._flusher = threading.Thread(target=self._flush_periodically, name="ge-metrics", daemon=True)
        self._flusher.start()

    def _add(self, name: str, value: float, label: str = "") -> None:
        key = (name, label)
        self._pending[key] = self._pending.get(key, 0.0) + value

    def batch(self, rows: int, padding: int) -> None:
        with self._lock:
            self._add("ge_batches", 1)
            self._add("ge_batch_rows", rows)
            self._add("ge_padding_rows", padding)

    def phase(self, name: Phase, seconds: float) -> None:
        with self._lock:
            self._add("ge_phase_duration_us", seconds * 1e6, name.value)

    def failure(self, kind: FailureKind) -> None:
        with self._lock:
            self._add("ge_request_failures", 1, kind.value)
        self.flush()

    def in_flight(self, batches: int) -> None:
        with self._lock:
            self._gauges["ge_batches_in_flight"] = batches
        if batches == 0:
            self._idle.set()

    def sequences(self, active: int) -> None:
        with self._lock:
            changed = self._gauges["ge_sequences_active"] != active
            self._gauges["ge_sequences_active"] = active
        if changed:
            self.flush()

    def out_of_service(self, reason: str) -> None:
        with self._lock:
            self._gauges["ge_engine_healthy"] = 0
        self.flush()

    def _flush_periodically(self) -> None:
        failed = False
        while not self._stop.is_set():
            woken = self._idle.wait(FLUSH_INTERVAL)
            self._idle.clear()
            now = time.time()
            with self._lock:
                if not woken or now - self._gauges[HEARTBEAT] >= HEARTBEAT_INTERVAL:
                    self._gauges[HEARTBEAT] = now
            try:
                self._read_device_memory(now)
                self.flush()
                failed = False
            except Exception:  # logged once per run of failures; the next flush retries
                if not failed:
                    LOG.exception("sending GEModel's metrics to tritonserver failed")
                failed = True
            if woken:  # coalesce: an idle flush at most every IDLE_FLUSH_GAP
                self._stop.wait(IDLE_FLUSH_GAP)

    def _read_device_memory(self, now: float) -> None:
        """The device's free and total memory, every DEVICE_MEMORY_INTERVAL (off the request path)."""
        if self._device_memory is None or now - self._memory_read < DEVICE_MEMORY_INTERVAL:
            return
        self._memory_read = now
        found = self._device_memory()
        if found is not None:
            with self._lock:
                self._memory = found

    def flush(self) -> None:
        """Send what changed since the last flush."""
        # One flush at a time, snapshot and send together: a later snapshot must never be
        # overwritten by an earlier one still being sent.
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
                gauges = {k: v for k, v in self._gauges.items() if self._sent_gauges.get(k) != v}
                self._sent_gauges.update(gauges)
                memory, self._memory = self._memory, None
            updates = [(self._metrics[key].increment, value) for key, value in pending.items() if value]
            updates += [(self._metrics[(name, "")].set, value) for name, value in gauges.items()]
            if memory is not None:
                updates += [(self._metrics[(DEVICE_MEMORY, kind)].set, v) for kind, v in zip(("free", "total"), memory)]
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
