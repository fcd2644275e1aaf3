"""One endpoint over several models: which member serves each request (Triton-free).

The router model (``triton/router.py``) forwards each request to one of its members, in order of
preference (e.g. the NPU copy first, then a CPU or GPU copy of the same model):

- a request goes to the first member that is not backing off and whose rows in flight (sent by
  this router, not yet answered) are below its limit; members before it are *skipped*
  (``SkipCause.AT_LIMIT`` or ``BACKING_OFF``);
- a member that answers "unavailable" (not ready, unloaded, out of service, its queue full) backs
  off for ``backoff_s``: the request is tried on the next member it has not tried
  (``SkipCause.UNAVAILABLE``), and once the back-off is over the member is asked whether it is
  ready (one readiness probe, off the request path) before it is used again;
- when every member it may still use is at its limit, the request waits, first in first out, for
  the first of them to free (never dropped; bounded by the request's own deadline, the client's
  timeout); when none is left that could ever take it (all tried, or backing off), it is refused
  as unavailable at once, so the client or a load balancer can go elsewhere;
- any other answer of a member, errors included (a bad request's INVALID_ARG), is the request's
  answer: it is never retried elsewhere (``serving/bls_errors.py`` tells the two apart).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Choice

LOG = logging.getLogger(__name__)

#: Seconds a member that answered "unavailable" is left alone before a readiness probe.
DEFAULT_BACKOFF_S = 1.0
#: How long ``close`` waits for the watch thread (woken at once; a readiness probe may hold it)
WATCH_STOP_S = 2.0


class SkipCause(Choice):
    """Why a request passed over a member."""

    AT_LIMIT = "at_limit"  # its rows in flight had reached its limit
    BACKING_OFF = "backing_off"  # it answered "unavailable" recently (or its readiness probe failed)
    UNAVAILABLE = "unavailable"  # it answered this request "unavailable": the request was tried elsewhere


class RefusalCause(Choice):
    """Why the router answered a request "unavailable" itself."""

    NO_MEMBER = "no_member"  # every member it could still use was unavailable or backing off
    TIMEOUT = "timeout"  # its deadline (the client's timeout) passed while it waited for a member
    UNLOADING = "unloading"  # the router was unloaded while it waited


class RouteObserver:
    """Hears what the router does; the default ignores it (metrics subclass it)."""

    def answered(self, member: str) -> None:
        """A request was answered by ``member`` (its outputs or its own error)."""

    def in_flight(self, member: str, rows: int) -> None:
        """The rows the router has in flight at ``member`` changed."""

    def skipped(self, member: str, cause: SkipCause) -> None:
        """A request passed over ``member``."""

    def refused(self, cause: RefusalCause) -> None:
        """The router answered a request "unavailable" itself."""

    def waiting(self, requests: int) -> None:
        """The number of requests waiting for a member to free changed."""


@dataclass(frozen=True)
class MemberLimit:
    """A member's name and the rows the router keeps in flight there at most."""

    name: str
    limit: int


@dataclass(eq=False)
class Job:
    """One request on its way through the router.

    ``attempt(member, timeout_us)`` sends it to ``member`` and blocks until the member answers; it
    returns None once the request is answered (outputs or the member's own error), or the reason
    the member was unavailable (nothing was answered: the router tries another member). It never
    raises. ``refuse(message)`` answers it "unavailable" from the router itself. ``deadline``:
    ``time.monotonic()`` by which it must be answered (the client's timeout), or None.
    """

    rows: int
    attempt: Callable[[str, int], str | None]
    refuse: Callable[[str], None]
    deadline: float | None = None
    tried: dict[str, str] = field(default_factory=dict)  # member -> why it was unavailable
    done: bool = False

    def timeout_us(self, now: float) -> int:
        """What is left of the deadline, for the member's own queue (0: no timeout)."""
        return 0 if self.deadline is None else max(1, int((self.deadline - now) * 1e6))


#: a request the router answers itself: the request, why, and the message
Refusal = tuple[Job, RefusalCause, str]


@dataclass
class _MemberState:
    limit: MemberLimit
    rows: int = 0
    #: monotonic time the back-off ends; 0 when the member is usable
    backoff_until: float = 0.0
    probing: bool = False
    last_reason: str = ""


class Router:
    """The routing policy over ``members`` (in order of preference) and the threads that run it.

    ``submit`` hands requests over (never blocks); each one is attempted on a worker thread (one
    per row of capacity: at most the sum of the limits run at once), so the members' own dynamic
    batchers see them together. ``ready(member)`` is the readiness probe after a back-off.
    """

    def __init__(
        self,
        members: Sequence[MemberLimit],
        *,
        backoff_s: float = DEFAULT_BACKOFF_S,
        ready: Callable[[str], bool],
        observer: RouteObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not members:
            raise ConfigError("a router needs at least one member")
        self._members = [_MemberState(m) for m in members]
        self._backoff_s = backoff_s
        self._ready = ready
        self._observer = observer or RouteObserver()
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: deque[Job] = deque()
        self._deadlines: list[tuple[float, int, Job]] = []
        self._sequence = itertools.count()
        self._closed = False
        self._workers = ThreadPoolExecutor(max_workers=sum(m.limit for m in members), thread_name_prefix="ge-router")
        self._watch = threading.Thread(target=self._watch_loop, name="ge-router-watch", daemon=True)
        self._watch.start()

    # -- submitting ---------------------------------------------------------------------------

    def submit(self, jobs: Iterable[Job]) -> None:
        """Route each job: to a member now, into the waiting line, or refused."""
        refused: list[Refusal] = []
        with self._lock:
            now = self._clock()
            for job in jobs:
                if self._closed:
                    refused.append((job, RefusalCause.UNLOADING, "the router is unloading"))
                else:
                    # no waiting job could use a member with room (every change of room drains the
                    # line at once), so a member with room here is one the waiting jobs cannot use
                    self._place(job, now, refused)
        self._refuse_all(refused)

    def _place(self, job: Job, now: float, refused: list[Refusal]) -> None:
        """Send ``job`` to the first member that can take it, else make it wait or refuse it (lock held)."""
        waitable = False
        for state in self._members:
            name = state.limit.name
            if name in job.tried:
                continue
            if state.probing or state.backoff_until > now:
                self._observer.skipped(name, SkipCause.BACKING_OFF)
                waitable = waitable or state.probing
            elif state.rows >= state.limit.limit:
                self._observer.skipped(name, SkipCause.AT_LIMIT)
                waitable = True
            else:
                self._dispatch(job, state)
                return
        if waitable:
            self._enqueue(job, now)
        else:
            refused.append((job, RefusalCause.NO_MEMBER, self._no_member(job, now)))

    def _enqueue(self, job: Job, now: float, front: bool = False) -> None:
        if front:
            self._pending.appendleft(job)
        else:
            self._pending.append(job)
        self._observer.waiting(len(self._pending))
        if job.deadline is not None:
            heapq.heappush(self._deadlines, (job.deadline, next(self._sequence), job))
            self._wake.notify()

    def _dispatch(self, job: Job, state: _MemberState) -> None:
        state.rows += job.rows
        self._observer.in_flight(state.limit.name, state.rows)
        self._workers.submit(self._run, job, state)

    def _no_member(self, job: Job, now: float) -> str:
        """Why no member can take ``job``: each member and its reason."""
        reasons = []
        for state in self._members:
            name = state.limit.name
            if name in job.tried:
                reasons.append(f"{name}: {job.tried[name]}")
            else:
                left = max(0.0, state.backoff_until - now)
                reasons.append(f"{name}: backing off for {left:.1f} s more after: {state.last_reason}")
        return "no member can serve the request now (" + "; ".join(reasons) + ")"

    # -- running ------------------------------------------------------------------------------

    def _run(self, job: Job, state: _MemberState) -> None:
        name = state.limit.name
        try:
            reason = job.attempt(name, job.timeout_us(self._clock()))
        except Exception:  # Job.attempt answers its own failures; this is a bug, and the request is lost
            LOG.exception("the router's attempt at member %r raised", name)
            reason = None
        refused: list[Refusal] = []
        with self._lock:
            now = self._clock()
            state.rows -= job.rows
            self._observer.in_flight(name, state.rows)
            if reason is None:
                job.done = True
                self._observer.answered(name)
            else:
                self._back_off(state, reason, now)
                self._observer.skipped(name, SkipCause.UNAVAILABLE)
                job.tried[name] = reason
                if self._closed:
                    refused.append((job, RefusalCause.UNLOADING, "the router is unloading"))
                else:
                    self._retry(job, now, refused)
            self._drain(state, now)
        self._refuse_all(refused)

    def _retry(self, job: Job, now: float, refused: list[Refusal]) -> None:
        """``job`` after a member was unavailable: the next member, else the front of the line (lock held)."""
        if job.deadline is not None and job.deadline <= now:
            refused.append((job, RefusalCause.TIMEOUT, "its deadline passed: " + self._no_member(job, now)))
            return
        self._place(job, now, refused)
        if self._pending and self._pending[-1] is job and len(self._pending) > 1:
            self._pending.pop()  # it waited longest of all: first in line
            self._pending.appendleft(job)

    def _back_off(self, state: _MemberState, reason: str, now: float) -> None:
        state.last_reason = reason
        if not state.probing:
            state.backoff_until = max(state.backoff_until, now + self._backoff_s)
            self._wake.notify()

    def _drain(self, state: _MemberState, now: float) -> None:
        """Send waiting jobs to ``state``'s member while it has room, first in first out (lock held)."""
        if not self._pending or state.probing or state.backoff_until > now:
            return
        name = state.limit.name
        skipped: list[Job] = []
        while self._pending and state.rows < state.limit.limit:
            job = self._pending.popleft()
            if job.done:
                continue
            if name in job.tried:
                skipped.append(job)
                continue
            self._dispatch(job, state)
        self._pending.extendleft(reversed(skipped))
        self._observer.waiting(len(self._pending))

    # -- deadlines and back-off ends (the watch thread) -------------------------------------------

    def _watch_loop(self) -> None:
        while True:
            expired: list[Refusal] = []
            with self._lock:
                if self._closed:
                    return
                now = self._clock()
                wake_at = self._next_event(now)
                if wake_at is None or wake_at > now:
                    self._wake.wait(None if wake_at is None else wake_at - now)
                    continue
                expired = self._expired(now)
                probes = [s for s in self._members if not s.probing and 0 < s.backoff_until <= now]
                for state in probes:
                    state.probing = True
            self._refuse_all(expired)
            for state in probes:
                self._probe(state)

    def _next_event(self, now: float) -> float | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
        times = [s.backoff_until for s in self._members if s.backoff_until > 0 and not s.probing]
        if self._deadlines:
            times.append(self._deadlines[0][0])
        return min(times) if times else None

    def _expired(self, now: float) -> list[Refusal]:
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, job = heapq.heappop(self._deadlines)
            if job.done or job not in self._pending:
                continue
            self._pending.remove(job)
            job.done = True
            message = "no member was free before the request's timeout (" + self._busy(now) + ")"
            expired.append((job, RefusalCause.TIMEOUT, message))
        if expired:
            self._observer.waiting(len(self._pending))
        return expired

    def _busy(self, now: float) -> str:
        parts = []
        for state in self._members:
            if state.probing or state.backoff_until > now:
                parts.append(f"{state.limit.name}: backing off after: {state.last_reason}")
            else:
                parts.append(f"{state.limit.name}: {state.rows} of {state.limit.limit} rows in flight")
        return "; ".join(parts)

    def _probe(self, state: _MemberState) -> None:
        """Ask whether a member whose back-off ended is ready; a ready one takes waiting jobs."""
        name = state.limit.name
        try:
            ready = self._ready(name)
        except Exception as exc:  # the probe itself failed: treat as not ready, say why
            LOG.warning("readiness probe of member %r failed: %s", name, exc)
            ready = False
        refused: list[Refusal] = []
        with self._lock:
            now = self._clock()
            state.probing = False
            if ready:
                state.backoff_until = 0.0
                self._drain(state, now)
            else:
                state.last_reason = f"{state.last_reason} (and not ready {self._backoff_s:g} s later)"
                state.backoff_until = now + self._backoff_s
                refused = self._unservable(now)
            self._wake.notify()
        self._refuse_all(refused)

    def _unservable(self, now: float) -> list[Refusal]:
        """Waiting jobs no member could ever take now (every member tried or backing off) (lock held)."""
        refused = []
        for job in list(self._pending):
            if all(s.limit.name in job.tried or (s.backoff_until > now and not s.probing) for s in self._members):
                self._pending.remove(job)
                job.done = True
                refused.append((job, RefusalCause.NO_MEMBER, self._no_member(job, now)))
        return refused

    def _refuse_all(self, refused: Sequence[Refusal]) -> None:
        for job, cause, message in refused:
            job.done = True
            self._observer.refused(cause)
            try:
                job.refuse(message)
            except Exception:  # the client may be gone; nothing else can be done for this request
                LOG.exception("could not answer a request the router refused")

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse what waits and stop the threads; requests at members finish on their own threads
        (without waiting for them here: a member that never answers must not hold an unload)."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending), deque()
            self._wake.notify_all()
        self._observer.waiting(0)
        self._refuse_all([(job, RefusalCause.UNLOADING, "the router is unloading") for job in pending if not job.done])
        self._watch.join(WATCH_STOP_S)
        self._workers.shutdown(wait=False)
