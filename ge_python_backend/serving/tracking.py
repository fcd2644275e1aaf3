"""A request in flight: the parts of it still outstanding, and the guarantee of one answer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from ge_python_backend.errors import GEError
from ge_python_backend.serving.observers import FailureKind, Observer
from ge_python_backend.serving.requests import Arrays, Request

LOG = logging.getLogger(__name__)


class Answers:
    """Counts the answers of one ``submit`` down: ``wait`` returns once every request it tracks
    has been handed to ``respond``. One per call, not one event per request (the hot path)."""

    __slots__ = ("_left", "_lock", "_done")

    def __init__(self, count: int) -> None:
        self._left = count
        self._lock = threading.Lock()
        #: held until the last answer (a plain lock is a cheaper latch than an Event's Condition)
        self._done = threading.Lock()
        if count > 0:
            self._done.acquire()

    def answered(self, count: int = 1) -> None:
        with self._lock:
            self._left -= count
            last = self._left == 0
        if last:
            self._done.release()

    def wait(self) -> None:
        with self._done:
            pass


def _nothing(error: GEError) -> None:
    pass


class Tracked:
    """One request until it is answered: exactly one of ``fail`` / ``succeed`` reaches ``respond``."""

    __slots__ = (
        "request",
        "rows",
        "request_rows",
        "parts_left",
        "own_outputs",
        "outputs",
        "_answers",
        "claimed",
        "_lock",
        "_observer",
        "_on_failure",
    )

    def __init__(
        self,
        request: Request,
        observer: Observer,
        on_failure: Callable[[GEError], None] = _nothing,
        answers: Answers | None = None,
    ) -> None:
        self.request = request
        self.rows = 0
        #: the rows the client sent (its answer's rows; None when the model does not batch)
        self.request_rows: int | None = None
        self.parts_left = 0
        #: copy outputs out of slot memory (the slot may run again before they are read)
        self.own_outputs = False
        self.outputs: dict[str, np.ndarray] | None = None
        #: told once the answer has been handed to ``respond`` (not merely decided)
        self._answers = answers
        #: an answer (outputs or an error) has been decided; nothing more is done for it. Set
        #: only by ``_claim``, under the lock; read without it (a plain slot: the hot path).
        self.claimed = False
        self._lock = threading.Lock()
        self._observer = observer
        self._on_failure = on_failure

    def _claim(self) -> bool:
        with self._lock:
            if self.claimed:
                return False
            self.claimed = True
            return True

    def fail(self, error: GEError, kind: FailureKind) -> None:
        if self._claim():
            self._on_failure(error)
            self._observer.failure(kind)  # before the answer: a client that got it can read the metric
            self._send(None, error)

    def succeed(self, outputs: Arrays) -> None:
        if self._claim():
            self._send(outputs, None)

    def _send(self, outputs: Arrays | None, error: GEError | None) -> None:
        try:
            self.request.respond(outputs, error)
        except Exception:  # the client may be gone; nothing else can be done for this request
            LOG.exception("could not send the response of request %r", self.request.info.request_id)
        finally:
            if self._answers is not None:
                self._answers.answered()

    def add_part(self, source_start: int, outputs: Arrays) -> Arrays | None:
        """Record one part's outputs; return the request's outputs once every part is in."""
        with self._lock:
            if self.parts_left == 1 and self.outputs is None:
                self.parts_left = 0
                return {name: array.copy() for name, array in outputs.items()} if self.own_outputs else outputs
            if self.outputs is None:
                self.outputs = {
                    name: np.empty((self.rows,) + array.shape[1:], array.dtype) for name, array in outputs.items()
                }
            for name, array in outputs.items():
                self.outputs[name][source_start : source_start + len(array)] = array
            self.parts_left -= 1
            return self.outputs if self.parts_left == 0 else None
