"""Streams that really run their queued work in order on a thread of their own, and events.

``synchronize`` waits on a condition variable, which releases the GIL, so two streams'
work (ONNX Runtime runs and modelled device time) overlaps like on the device.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.sim.signature import AclFail

INTERNAL = ret_code("ACL_ERROR_RT_INTERNAL_ERROR")
TIMEOUT = ret_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT")


@dataclass
class Event:
    handle: int
    context: int
    recorded: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    time: float = 0.0

    def arm(self) -> None:
        self.recorded = True
        self.done.clear()

    def fire(self) -> None:
        self.time = time.perf_counter()
        self.done.set()


class Stream:
    """An in-order work queue served by one worker thread.

    A failed operation puts the stream in error: the operations queued after it are skipped
    until ``synchronize`` reports the first failure.
    """

    def __init__(self, handle: int, context: int) -> None:
        self.handle = handle
        self.context = context
        self._queue: deque[tuple[str, Callable[[], None], Callable[[], None] | None]] = deque()
        self._pending = 0
        self._error: AclFail | None = None
        self._stopping = False
        self._cond = threading.Condition()
        #: the worker starts with the first submitted work, so a stream that never runs anything
        #: (e.g. one of a thousand made to reach the device's stream limit) costs no thread
        self._thread: threading.Thread | None = None

    def submit(self, label: str, work: Callable[[], None], always: Callable[[], None] | None = None) -> None:
        """Queue ``work``; ``always`` runs after it, or instead of it when the stream is in error."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=f"sim-stream-{self.handle:#x}", daemon=True)
                self._thread.start()
            self._queue.append((label, work, always))
            self._pending += 1
            self._cond.notify_all()

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue:
                    return
                label, work, always = self._queue.popleft()
                skip = self._error is not None
            failure = None
            try:
                if not skip:
                    work()
            except AclFail as exc:
                failure = exc
            except Exception as exc:  # a simulator bug must not kill the worker silently
                failure = AclFail(INTERNAL, f"{label}: simulator error {exc!r}")
            finally:
                if always is not None:
                    always()
            with self._cond:
                if failure is not None and self._error is None:
                    self._error = failure
                self._pending -= 1
                self._cond.notify_all()

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every queued operation; raise the first failure since the last synchronize."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._pending == 0, timeout):
                assert timeout is not None  # without a timeout, wait_for returns only once the predicate holds
                raise AclFail(
                    TIMEOUT,
                    f"stream {self.handle:#x}: {self._pending} operation(s) still running "
                    f"after {timeout * 1000:.0f} ms",
                )
            error, self._error = self._error, None
        if error is not None:
            raise error

    def stop(self) -> None:
        """Finish the queued work, then end the worker thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and threading.current_thread() is not thread:
            thread.join()
