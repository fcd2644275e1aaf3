"""What the request path measures, and who hears it (metrics, verbose logs).

An observer that raises never stops the request path: ``Observers`` logs its first failure
per method with the traceback, and later ones as a count at most once a minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from ge_python_backend.params import Choice

LOG = logging.getLogger(__name__)

#: Seconds between log lines about an observer that keeps failing.
REPEAT_LOG_INTERVAL = 60.0


class Phase(Choice):
    """Where a batch's time goes."""

    PREPROCESS = "preprocess"  # the preprocess hook, per request
    GATHER = "gather"
    HOST_TO_DEVICE = "host_to_device"
    EXECUTE = "execute"
    DEVICE_TO_HOST = "device_to_host"
    SCATTER = "scatter"
    POSTPROCESS = "postprocess"  # the postprocess hook, per request


class FailureKind(Choice):
    """Why a request was answered with an error."""

    INPUT = "input"  # the client's fault (INVALID_ARG)
    ENGINE = "engine"  # the engine failed running its batch
    POSTPROCESS = "postprocess"  # the postprocess hook refused or crashed
    INTERNAL = "internal"  # a bug: preprocess crashed, or the request path itself


class Observer:
    """Receives what the runner measures. The default ignores everything."""

    def batch(self, rows: int, padding: int) -> None:
        """An engine call ran ``rows`` real rows plus ``padding`` rows of padding."""

    def phase(self, name: Phase, seconds: float) -> None:
        """Time spent in one phase of a batch (never 0: ``Observers`` drops those)."""

    def failure(self, kind: FailureKind) -> None:
        """A request was answered with an error."""

    def device_busy(self, seconds: float) -> None:
        """The batch kept its device busy ``seconds`` no other batch on the device counted."""

    def in_flight(self, batches: int) -> None:
        """The number of batches running on slots changed."""

    def sequences(self, active: int) -> None:
        """The number of sequences with stored state changed."""

    def out_of_service(self, reason: str) -> None:
        """The engine failed fatally (the device is gone): every later request is refused."""


class Observers(Observer):
    """Several observers as one; a failing observer is logged, never raised."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self._observers = tuple(observers)
        self._failures: dict[tuple[str, str], list[float]] = {}  # (observer, method) -> [count, last logged]
        self._lock = threading.Lock()
        # Bound once: the batch path calls these several times per batch.
        self._bound: dict[str, tuple[tuple[str, Any], ...]] = {
            method: tuple((type(o).__name__, getattr(o, method)) for o in self._observers)
            for method in ("batch", "phase", "failure", "device_busy", "in_flight", "sequences", "out_of_service")
        }

    def _each(self, method: str, *args: Any) -> None:
        for name, call in self._bound[method]:
            try:
                call(*args)
            except Exception:
                self._failed(name, method)

    def _failed(self, observer: str, method: str) -> None:
        now = time.monotonic()
        with self._lock:
            seen = self._failures.setdefault((observer, method), [0, -REPEAT_LOG_INTERVAL])
            seen[0] += 1
            due = now - seen[1] >= REPEAT_LOG_INTERVAL
            if due:
                count, seen[0], seen[1] = seen[0], 0, now
        if not due:
            return
        if count == 1:
            LOG.exception("observer %s.%s failed (the request path goes on)", observer, method)
        else:
            LOG.error("observer %s.%s failed %d more time(s) in the last minute", observer, method, count)

    def batch(self, rows: int, padding: int) -> None:
        self._each("batch", rows, padding)

    def phase(self, name: Phase, seconds: float) -> None:
        if seconds:  # a phase a batch did not time (or does not have) is 0: nobody hears of it
            self._each("phase", name, seconds)

    def failure(self, kind: FailureKind) -> None:
        self._each("failure", kind)

    def device_busy(self, seconds: float) -> None:
        if seconds:
            self._each("device_busy", seconds)

    def in_flight(self, batches: int) -> None:
        self._each("in_flight", batches)

    def sequences(self, active: int) -> None:
        self._each("sequences", active)

    def out_of_service(self, reason: str) -> None:
        self._each("out_of_service", reason)
