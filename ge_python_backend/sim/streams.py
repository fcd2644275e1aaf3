"""Streams whose queued work runs in order when someone waits for it, and events.

A stream has no thread of its own: ``synchronize`` (or a wait on one of its events) runs the
queued work in the waiting thread. Handing every operation to a worker thread and back cost two
thread wake-ups per batch, more than the simulated work itself (docs/benchmarks, issue 15).
What the device would show is kept:

- order: one thread at a time runs a stream's work, first queued first;
- timing: each operation has a modelled start, the later of its submission and the previous
  operation's modelled end, so host work between submitting and waiting overlaps the modelled
  device time as on the device, and events carry modelled timestamps; executions and copies book
  the device's cores and copy engines from that start (sim/device.py), and a wait returns at the
  modelled end of what it waited for;
- errors: a failed operation puts the stream in error; the operations queued after it are
  skipped until ``synchronize`` reports the first failure;
- concurrency: the work itself (ONNX Runtime, modelled device time) runs without the GIL, so
  two threads waiting on two streams overlap as far as their device's cores let them.

Not modelled: work that nobody waits for never runs (the device would run it anyway); only a
wait, or reading an event's time after a wait, observes it, as on the device.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.sim.device import clock, wait_until
from ge_python_backend.sim.signature import AclFail

INTERNAL = ret_code("ACL_ERROR_RT_INTERNAL_ERROR")
TIMEOUT = ret_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT")

#: an operation: called with its modelled start, returns its modelled end (None: when it returned)
Work = Callable[[float], "float | None"]


@dataclass
class Event:
    handle: int
    context: int
    recorded: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    time: float = 0.0
    #: the stream it was last recorded on (a wait on the event runs that stream's work)
    stream: Stream | None = None

    def arm(self, stream: Stream) -> None:
        self.recorded = True
        self.stream = stream
        self.done.clear()

    def fire(self, at: float) -> None:
        self.time = at
        self.done.set()

    def wait(self) -> None:
        """Until the event fires: run its stream's queued work (again, if a record on another
        thread queued the fire after this thread's run), then until its modelled time."""
        while not self.done.is_set():
            stream = self.stream
            if stream is None:
                self.done.wait()
                break
            stream.run_queued()
            self.done.wait(0.001)
        wait_until(self.time)


@dataclass
class _Queued:
    label: str
    work: Work
    always: Callable[[], None] | None
    submitted: float
    #: runs in a stream in error too (an event's fire: its waiters must not hang)
    in_error: bool


class Stream:
    """An in-order work queue, run by whoever waits for it."""

    def __init__(self, handle: int, context: int) -> None:
        self.handle = handle
        self.context = context
        self._queue: deque[_Queued] = deque()
        self._error: AclFail | None = None
        self._lock = threading.Lock()  # the queue and the error
        self._running = threading.Lock()  # one thread runs this stream's work at a time, in order
        #: modelled end of the work run so far
        self._free_at = 0.0

    def submit(
        self, label: str, work: Work, always: Callable[[], None] | None = None, *, in_error: bool = False
    ) -> None:
        """Queue ``work``; ``always`` runs after it, or instead of it when the stream is in error
        (``in_error``: ``work`` runs then too)."""
        with self._lock:
            self._queue.append(_Queued(label, work, always, clock(), in_error))

    def run_queued(self) -> float:
        """Run every queued operation, in order, in this thread; the modelled end of the work."""
        with self._running:
            while True:
                with self._lock:
                    if not self._queue:
                        return self._free_at
                    item = self._queue.popleft()
                    skip = self._error is not None and not item.in_error
                start = max(item.submitted, self._free_at)
                failure, end = None, None
                began = clock()
                try:
                    if not skip:
                        end = item.work(start)
                except AclFail as exc:
                    failure = exc
                except Exception as exc:  # a simulator bug must fail the stream, not vanish
                    failure = AclFail(INTERNAL, f"{item.label}: simulator error {exc!r}")
                finally:
                    if item.always is not None:
                        item.always()
                # its modelled end; work that models none took what it took now, counted from its
                # modelled start (it may run later than that)
                self._free_at = end if end is not None else start + (clock() - began)
                if failure is not None:
                    with self._lock:
                        if self._error is None:
                            self._error = failure

    def synchronize(self, timeout: float | None = None) -> None:
        """Run every queued operation; raise the first failure since the last synchronize.

        With ``timeout``: 507046 when the work ends later than ``timeout`` after the call (the
        work is then done; on the device it would still be running)."""
        called = clock()
        ended = self.run_queued()
        wait_until(ended if timeout is None else min(ended, called + timeout))
        if timeout is not None and ended - called > timeout:
            raise AclFail(
                TIMEOUT,
                f"stream {self.handle:#x}: its work ended {(ended - called) * 1000:.0f} ms after the call, "
                f"past the {timeout * 1000:.0f} ms timeout",
            )
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def stop(self) -> None:
        """Finish the queued work (a stream being destroyed)."""
        self.run_queued()
