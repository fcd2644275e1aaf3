"""``ge-triton serve``'s supervisor: it notices a model instance that is dead, hung or out of
service and reloads its model, so the model serves again without anyone acting.

Why it is needed: tritonserver 24.02-24.10 neither restarts a dead Python backend stub nor
calls its model unready (stub restarts came with python_backend r25.12, server issue #8604), and
a GEModel whose device is lost stays READY while it refuses every request; the model stays that
way until someone reloads it.

What it watches, every ``RecoveryPolicy.interval_s``, in serve's own process:

- the server's stub processes (``ops.processes``: children of tritonserver, by command line);
- the repository index (which model versions are READY);
- GEModel's series on tritonserver's metrics endpoint: each instance's heartbeat and engine
  health, labelled with the stub's ``pid``.

A stub that vanished while its model version is still READY, that no newer stub of the same
instance replaced (a reload starts the new instance before it ends the old one) and whose
GEModel series still stand (a GEModel stub that ends normally deletes its series in finalize;
one that is killed cannot) died: ``stub_died``. A live stub whose heartbeat is older than
``hang_s`` hangs: it is killed first, ``stub_hung``. A live stub whose ``ge_engine_healthy`` is 0
is out of service: ``engine_failed``.

What it does: it reloads the model in place through the repository API, with the operator key
(``TritonServer.reload``: the config it is served with, plus a parameter that makes tritonserver
load it afresh): the new instances start, then the old ones end, and the model keeps serving on
its healthy instances meanwhile. The first recovery runs at once; a model that fails again
within ``settle_s`` of a recovery (or whose reload fails) is reloaded after a backoff that
doubles, and after ``attempts`` such recoveries in a row it is unloaded and left so, with an
error that says what to do. Each step is logged with its cause; recoveries are counted in
``ge_model_recoveries_total{model,cause}`` (``SUPERVISOR_METRICS``), served beside tritonserver's
own series by serve's metrics endpoint (``ops.front``). tritonserver refuses the load API unless
its model control mode is explicit: in the other modes the supervisor reports what it finds and
recovers nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.bench.metrics import Scrape
from ge_python_backend.ops.processes import Stub
from ge_python_backend.ops.server import HealthCheck, RepositoryAction, error_text
from ge_python_backend.params import Choice
from ge_python_backend.triton.metrics import HEARTBEAT

LOG = logging.getLogger(__name__)

ENGINE_HEALTHY = "ge_engine_healthy"
RECOVERIES = "ge_model_recoveries"  # a counter: exposed as ge_model_recoveries_total
HEALTHY = "ge_model_healthy"
UNRECOVERABLE = "ge_model_unrecoverable"
SUPERVISOR_HEARTBEAT = "ge_supervisor_heartbeat_timestamp_seconds"
#: a supervisor whose last look is older than this is stuck: serve is neither ready nor live
STALE_S = 30.0
#: stubs seen ended that the supervisor remembers (an older listing may still show them)
ENDED_REMEMBERED = 4096
#: seconds a restarted tritonserver, ready, has to answer the supervisor's first look
RESTART_LOOK_S = 30.0
#: what a model is doing while a restarted tritonserver loads it again (``server_restarted``)
RESTORING = "loading it again after tritonserver's restart"
#: the last tritonserver whose Python backend restarts a dead stub itself, inside ``execute``
#: (python_backend r24.05; r24.02 ``src/python_be.cc:2433-2453``, removed in r24.06 by #364)
LAST_RESTARTING_STUBS_IN_EXECUTE = (2, 46)


def restarts_stubs_in_execute(version: str | None) -> bool:
    """Whether tritonserver ``version`` ("2.43.0") restarts a dead stub inside ``execute``, which
    crashes it: the restart destroys the stub's shared-memory pool while the requests of the
    batch still hold memory of it, whose release then runs through the destroyed pool manager
    (r24.02 ``python_be.cc:2427-2453`` with ``shm_manager.h`` ``WrapObjectInUniquePtr``): a
    SIGSEGV or ``boost::interprocess::lock_exception`` at that or a later ``execute``."""
    numbers = tuple(int(part) for part in (version or "").split(".")[:2] if part.isdigit())
    return len(numbers) == 2 and numbers <= LAST_RESTARTING_STUBS_IN_EXECUTE


class Cause(Choice):
    """Why a model was reloaded."""

    STUB_DIED = "stub_died"  # its stub process ended without finalizing (killed, OOM, a native crash)
    STUB_HUNG = "stub_hung"  # its stub's heartbeat stopped while the process lives (killed first)
    ENGINE_FAILED = "engine_failed"  # GEModel's engine failed fatally (the device was lost)
    SERVER_DIED = "server_died"  # tritonserver itself died (serve restarted it, every model with it)


#: name -> (kind, help text, label names): the supervisor's own series, on serve's metrics endpoint
SUPERVISOR_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    RECOVERIES: (
        "counter",
        "Reloads by ge-triton serve's supervisor that brought the model back to READY, by cause",
        ("model", "cause"),
    ),
    HEALTHY: (
        "gauge",
        "1 while every instance of the model serves (stub alive, heartbeat fresh, engine healthy); "
        "0 while it is broken, being recovered or left unloaded",
        ("model",),
    ),
    UNRECOVERABLE: (
        "gauge",
        "1 when the supervisor gave up on the model: it failed again at once after each recovery (left "
        "unloaded), or recovery is off (model control mode not explicit); 0 once it serves again",
        ("model",),
    ),
    SUPERVISOR_HEARTBEAT: ("gauge", "Unix time of the supervisor's last look at the server", ()),
}


_CAUSE_TEXT = {
    Cause.STUB_DIED: "its dead stub",
    Cause.STUB_HUNG: "its hung stub",
    Cause.ENGINE_FAILED: "its failed engine",
    Cause.SERVER_DIED: "tritonserver's death",
}


@dataclass(frozen=True)
class RecoveryPolicy:
    """How the supervisor looks and how hard it tries."""

    #: seconds between looks at the server
    interval_s: float = 0.5
    #: a live stub whose GEModel heartbeat (sent every second) is older than this hangs
    hang_s: float = 30.0
    #: recoveries in a row, each followed by a failure within settle_s, before the model is left unloaded
    attempts: int = 3
    #: a model that serves this long after a recovery has recovered: the next failure starts afresh
    settle_s: float = 60.0
    #: wait before the second recovery in a row; it doubles with each further one (the first runs at once)
    backoff_s: float = 2.0
    max_backoff_s: float = 30.0
    #: seconds a reload may take (a model that compiles at load takes minutes)
    load_timeout_s: float = 600.0
    #: stub processes tritonserver may lose before serve restarts it rather than reload the model:
    #: the Python backend keeps a dead stub's model instance, its threads and memory, until the
    #: server exits (measured on 2.51: 36 threads and a file descriptor per instance)
    dead_stub_budget: int = 10

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"recovery attempts {self.attempts}: expected 1 or more")
        for name in ("interval_s", "hang_s", "settle_s", "load_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"recovery {name} {getattr(self, name)}: expected a positive number of seconds")

    def backoff(self, streak: int) -> float:
        """Seconds to wait before the recovery that follows ``streak`` failed ones."""
        return 0.0 if streak == 0 else min(self.backoff_s * 2 ** (streak - 1), self.max_backoff_s)


@dataclass(frozen=True)
class InstanceSeries:
    """GEModel's series of one stub process."""

    model: str
    version: str
    instance: str
    pid: int
    heartbeat: float
    healthy: bool


def instance_series(scrape: Scrape) -> dict[int, InstanceSeries]:
    """GEModel's heartbeat and engine health per stub pid, from tritonserver's metrics."""
    beats: dict[int, tuple[dict[str, str], float]] = {}
    health: dict[int, float] = {}
    for (name, labels), value in scrape.samples.items():
        found = dict(labels)
        if name not in (HEARTBEAT, ENGINE_HEALTHY) or not found.get("pid", "").isdigit():
            continue
        if name == HEARTBEAT:
            beats[int(found["pid"])] = (found, value)
        else:
            health[int(found["pid"])] = value
    return {
        pid: InstanceSeries(
            labels.get("model", ""),
            labels.get("version", ""),
            labels.get("instance", ""),
            pid,
            beat,
            health.get(pid, 1.0) != 0,
        )
        for pid, (labels, beat) in beats.items()
    }


@dataclass(frozen=True)
class Observation:
    """One look at the server."""

    #: wall-clock time of the look (GEModel's heartbeats are wall-clock times)
    time: float
    stubs: tuple[Stub, ...]
    #: the (model, version) pairs of the stubs seen, now and at the last look, that are READY
    ready_versions: Set[tuple[str, str]]
    #: GEModel's series by stub pid; None when the metrics endpoint did not answer
    series: Mapping[int, InstanceSeries] | None

    def ready(self, model: str, version: str) -> bool:
        return (model, version) in self.ready_versions

    def ready_models(self) -> set[str]:
        return {model for model, _ in self.ready_versions}


@dataclass(frozen=True)
class Problem:
    """What is wrong with one model, and the hung stubs to kill before it is reloaded."""

    model: str
    cause: Cause
    detail: str
    hung: tuple[int, ...] = ()
    #: stub processes that died or are to be killed (each leaves its instance in tritonserver)
    lost: int = 0


def died(stub: Stub, now: Observation, backend_restarts: bool = False) -> bool:
    """Whether ``stub``, seen before and gone from ``now``, died (rather than ended in an unload or a
    reload). ``backend_restarts``: the server's Python backend starts a successor for a stub it
    finds dead (``restarts_stubs_in_execute``), so a successor does not prove a reload when the
    stub's GEModel series still stand (a stub that ends in a reload finalizes and deletes them)."""
    if not now.ready(stub.model, stub.version):
        return False  # unloaded, or being unloaded: the index says so before the stubs end
    succeeded = any(other.key == stub.key and other.started > stub.started for other in now.stubs)
    if succeeded and not (backend_restarts and now.series is not None and stub.pid in now.series):
        return False  # a reload started its successor first
    if now.series is not None:
        of_model = [s for s in now.series.values() if s.model == stub.model]
        if of_model and stub.pid not in now.series:
            return False  # a GEModel stub that ended normally: its finalize deleted its series
    return True


def find_problems(
    before: Sequence[Stub],
    now: Observation,
    policy: RecoveryPolicy,
    retiring: Set[int] = frozenset(),
    missed: Set[int] = frozenset(),
    backend_restarts: bool = False,
) -> list[Problem]:
    """One Problem per broken model: dead stubs first, then hung ones, then failed engines.
    ``retiring``: stubs a reload is replacing, or a hung one being killed (they end soon, whatever
    they report); ``missed``: stubs of ``before`` that ``now`` does not list but that still run (a
    reload's new stubs, watched from its end, started after ``now`` listed the stubs)."""
    alive = {stub.pid for stub in now.stubs} | set(missed)
    found: dict[str, list[tuple[Cause, str, int | None]]] = {}
    for stub in before:
        if stub.pid not in alive and stub.pid not in retiring and died(stub, now, backend_restarts):
            found.setdefault(stub.model, []).append((Cause.STUB_DIED, f"{stub.describe()} died", None))
    series = now.series or {}
    for stub in now.stubs:
        mine = series.get(stub.pid)
        if mine is None or stub.pid in retiring or not now.ready(stub.model, stub.version):
            continue
        if mine.heartbeat <= 0:
            # a stub still loading (an operator's reload of a READY model): its series exist, at 0,
            # until GEModel's first flush; 0 is neither a heartbeat nor an engine's health
            continue
        age = now.time - mine.heartbeat
        if age > policy.hang_s:
            detail = f"{stub.describe()} hangs: no heartbeat for {age:.0f} s"
            found.setdefault(stub.model, []).append((Cause.STUB_HUNG, detail, stub.pid))
        elif not mine.healthy:
            detail = f"instance {stub.instance}'s engine failed fatally (ge_engine_healthy 0)"
            found.setdefault(stub.model, []).append((Cause.ENGINE_FAILED, detail, None))
    order = list(Cause)
    problems = []
    for model, items in sorted(found.items()):
        items.sort(key=lambda item: order.index(item[0]))
        hung = tuple(pid for _, _, pid in items if pid is not None)
        lost = sum(1 for cause, _, _ in items if cause is not Cause.ENGINE_FAILED)
        problems.append(Problem(model, items[0][0], "; ".join(detail for _, detail, _ in items), hung, lost))
    return problems


class Server(Protocol):
    """What the supervisor needs of a running tritonserver (``TritonServer`` has it)."""

    def stubs(self) -> list[Stub]: ...

    def version_ready(self, model: str, version: str) -> bool | None: ...

    def scrape(self) -> Scrape | None: ...

    def repository_call(self, action: RepositoryAction, model: str, timeout: float) -> tuple[int, str]: ...

    def reload(self, model: str, note: str, timeout: float) -> tuple[int, str]: ...

    def running(self) -> bool: ...

    def stub_running(self, pid: int) -> bool: ...


@dataclass
class ModelRecord:
    """The supervisor's memory of one model."""

    #: recoveries in a row, each followed by a new failure within settle_s
    streak: int = 0
    #: monotonic time of the last successful recovery
    recovered_at: float | None = None
    #: why the supervisor gave up ("" while it has not)
    unrecoverable: str = ""
    #: what is being recovered now ("" when nothing)
    recovering: str = ""
    #: what is wrong right now, as the last look found it ("" when nothing)
    problem: str = ""
    #: a problem found while a recovery ran: handled once it ends
    pending: Problem | None = None
    #: stubs the reload in flight replaces
    retiring: set[int] = field(default_factory=set)
    recoveries: int = 0

    @property
    def healthy(self) -> bool:
        return not (self.problem or self.recovering or self.unrecoverable)


@dataclass
class Supervisor:
    """Watches ``server`` on its own thread (``start``/``stop``) and recovers its models."""

    server: Server
    policy: RecoveryPolicy = field(default_factory=RecoveryPolicy)
    #: why recovery is off ("" when it is on), e.g. the model control mode
    recovery_off: str = ""
    kill: Callable[[int], None] = field(default=lambda pid: os.kill(pid, signal.SIGKILL))
    clock: Callable[[], float] = time.monotonic
    #: runs a recovery (None: on a thread of its own, so a long reload holds up nothing else)
    spawn: Callable[[Callable[[], None]], None] | None = None
    #: restarts tritonserver, saying why, with the seconds in-flight requests get (None: reload
    #: models only, whatever the budget)
    restart_server: Callable[[str, float], None] | None = None
    #: the server restarts a lost stub inside ``execute`` and crashes of it
    #: (``restarts_stubs_in_execute``): restart it at once instead of reloading the model
    stub_restart_crashes: bool = False

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._recoveries = self._metric(Counter, RECOVERIES)
        self._healthy = self._metric(Gauge, HEALTHY)
        self._unrecoverable = self._metric(Gauge, UNRECOVERABLE)
        self._heartbeat = self._metric(Gauge, SUPERVISOR_HEARTBEAT)
        self.records: dict[str, ModelRecord] = {}
        self._stubs: list[Stub] = []
        #: pids of stubs seen ended (insertion-ordered, the last ENDED_REMEMBERED)
        self._ended: dict[int, None] = {}
        self._lock = threading.Lock()
        #: one look at a time: serve's restart of tritonserver looks too
        self._looking = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: dict[str, threading.Thread] = {}
        self._published: set[str] = set()
        self._reloads = 0  # every reload's note differs: the same config would not reload
        self._ready: Set[str] = frozenset()
        self.last_look = 0.0  # wall clock
        #: why tritonserver is being restarted ("" while it runs)
        self.server_down = ""
        #: stub processes lost since tritonserver (re)started
        self.lost_stubs = 0
        #: the recovery a planned restart of tritonserver makes: (model, cause)
        self._planned: tuple[str, Cause] | None = None
        #: models a restarted tritonserver is loading again through the repository API
        self._restoring: set[str] = set()
        #: times tritonserver died or was stopped for a restart (a recovery it outlived is moot)
        self._server_deaths = 0

    def _metric(self, kind: Any, name: str) -> Any:
        _, text, labels = SUPERVISOR_METRICS[name]
        return kind(name, text, labels, registry=self.registry)

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        """The first look now (the models and their stubs are known when this returns), then one
        every ``interval_s`` on a thread of its own."""
        self.look()
        self._thread = threading.Thread(target=self._run, name="ge-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for worker in list(self._workers.values()):
            worker.join(timeout=1.0)  # a reload in flight ends with the server

    def _run(self) -> None:
        while not self._stop.wait(self.policy.interval_s):
            if not self.server.running() or self.server_down:
                continue  # serve restarts it (SupervisedServer.wait) and looks first; nothing to look at meanwhile
            try:
                self.look()
            except Exception:  # never let one bad look end the supervision
                LOG.exception("supervisor: looking at tritonserver failed")

    def observe(self) -> Observation | None:
        """Stubs, readiness and metrics now; None when tritonserver does not answer.

        Readiness per model version (the health API), not the repository index: the index waits
        while any model loads (measured on 2.51: 5 s and more during a reload), the health API
        answers at once."""
        stubs = self.server.stubs()
        versions = {(stub.model, stub.version) for stub in [*stubs, *self._stubs]}
        ready = set()
        for model, version in sorted(versions):  # after the stubs: an unload shows here before its stubs end
            answer = self.server.version_ready(model, version)
            if answer is None:
                return None
            if answer:
                ready.add((model, version))
        scrape = self.server.scrape()
        return Observation(
            time=time.time(),
            stubs=tuple(stubs),
            ready_versions=frozenset(ready),
            series=None if scrape is None else instance_series(scrape),
        )

    def look(self) -> list[Problem]:
        """One look: find what broke and start its recovery; the problems found. Nothing while
        tritonserver is being restarted (``server_restarted`` looks first once it runs again)."""
        with self._looking:
            if self.server_down:
                return []
            now = self.observe()
            return [] if now is None else self.judge(now)

    def judge(self, now: Observation, restarted: Mapping[str, Cause] | None = None) -> list[Problem]:
        """What ``now`` shows: the problems found, with their recoveries started. ``restarted``:
        after a restart of tritonserver, the models to count as recovered (with the cause) if READY
        again, in the same step that publishes them as served."""
        with self._lock:
            before, listed = self._stubs, {stub.pid for stub in now.stubs}
            # stubs a recovery added to watch after ``now`` listed them: running, not dead
            missed = {stub.pid for stub in before if stub.pid not in listed and self.server.stub_running(stub.pid)}
            for stub in before:
                if stub.pid not in listed and stub.pid not in missed:
                    self._ended[stub.pid] = None
            while len(self._ended) > ENDED_REMEMBERED:
                del self._ended[next(iter(self._ended))]
            # a stub an older listing still shows, seen ended since, is not watched again
            self._stubs = [*(s for s in now.stubs if s.pid not in self._ended), *(s for s in before if s.pid in missed)]
            retiring = set().union(*(r.retiring for r in self.records.values()))
            problems = find_problems(before, now, self.policy, retiring, missed, self.stub_restart_crashes)
            broken = {p.model: p for p in problems}
            ready = now.ready_models()
            for model in ready - set(self.records):
                self.records[model] = ModelRecord()
            alive = listed | missed
            for model, record in self.records.items():
                problem = broken.get(model)
                record.problem = problem.detail if problem else ""
                record.retiring &= alive
                if record.unrecoverable and not (problem or record.recovering or self.recovery_off) and model in ready:
                    LOG.info("supervisor: model %s is loaded and serving again; watching it again", model)
                    record.unrecoverable, record.streak = "", 0
            for model, cause in sorted((restarted or {}).items()):
                if model in ready:
                    self._recoveries.labels(model=model, cause=cause.value).inc()
                    self.records[model].recoveries += 1
                    if cause is not Cause.SERVER_DIED:  # a restart made for this model's failure: its recovery
                        self.records[model].recovered_at = self.clock()
            recoveries = [(p.model, work) for p in problems if (work := self._handle(p)) is not None]
            self._publish(now)
            self.last_look = now.time
        for model, work in recoveries:
            self._spawn(model, work)
        return problems

    def _handle(self, problem: Problem) -> Callable[[], None] | None:
        """Under the lock: what to run to recover ``problem``'s model (None: nothing now)."""
        record = self.records.setdefault(problem.model, ModelRecord())
        if record.unrecoverable:
            return None
        if record.recovering:
            record.pending = problem  # e.g. a new instance died during the reload
            return None
        if self.recovery_off:
            record.unrecoverable = f"{problem.detail}; recovery is off: {self.recovery_off}"
            LOG.error("supervisor: model %s: %s", problem.model, record.unrecoverable)
            return None
        now = self.clock()
        if record.recovered_at is not None and now - record.recovered_at < self.policy.settle_s:
            record.streak += 1
        else:
            record.streak = 0
        record.recovering = problem.detail
        record.retiring |= set(problem.hung)  # killed by the recovery: its end is no new death
        self.lost_stubs += problem.lost
        if problem.lost and self.restart_server is not None:
            if self.stub_restart_crashes:
                return lambda: self._restart_for(
                    problem,
                    "this tritonserver's Python backend restarts a lost stub inside execute, which crashes it "
                    "(python_backend before r24.06): restarting it with the model first",
                    0.0,  # it crashes at the next request to the instance: nothing to wait for
                )
            if self.lost_stubs > self.policy.dead_stub_budget:
                return lambda: self._restart_for(
                    problem,
                    f"tritonserver has lost {self.lost_stubs} stub processes since it started and keeps each one's "
                    f"model instance, threads and memory, until it exits: restarting it (--dead-stub-budget "
                    f"{self.policy.dead_stub_budget})",
                    # to finish what is in flight: the dead stubs' instances would hold a graceful
                    # exit for --exit-timeout-secs, and never finish
                    3.0,
                )
        return lambda: self._recover(problem, record)

    def _restart_for(self, problem: Problem, reason: str, grace: float) -> None:
        """Recover ``problem``'s model by restarting tritonserver, for ``reason``, after ``grace``
        seconds for the requests in flight."""
        assert self.restart_server is not None
        for pid in problem.hung:
            with contextlib.suppress(ProcessLookupError):
                self.kill(pid)
        why = f"model {problem.model}: {problem.detail}; {reason}"
        with self._lock:
            self._planned = (problem.model, problem.cause)
        LOG.warning("supervisor: %s", why)
        try:
            self.restart_server(why, grace)
        finally:
            with self._lock:
                self._workers.pop(problem.model, None)

    def _spawn(self, model: str, work: Callable[[], None]) -> None:
        if self.spawn is not None:
            self.spawn(work)
            return
        worker = threading.Thread(target=work, name=f"ge-recover-{model}", daemon=True)
        self._workers[model] = worker
        worker.start()

    # -- tritonserver itself --------------------------------------------------------------------

    def serving(self) -> set[str]:
        """The models READY at the last look."""
        with self._lock:
            return set(self._ready)

    def last_stubs(self) -> list[Stub]:
        """The stubs the last look found."""
        with self._lock:
            return list(self._stubs)

    def server_died(self, why: str) -> set[str]:
        """tritonserver died (``why``) and is being restarted: the models it served (and those
        a restart before was still loading again)."""
        with self._lock:
            self.server_down = why
            self._server_deaths += 1
            return set(self._ready) | self._restoring

    def failing(self) -> set[str]:
        """The models found broken and not yet recovered (being recovered, or waiting to be)."""
        with self._lock:
            return {
                model
                for model, record in self.records.items()
                if (record.problem or record.recovering or record.pending) and not record.unrecoverable
            }

    def server_restarted(self, served: Set[str], loading: Set[str] = frozenset()) -> None:
        """tritonserver runs again: forget the old stubs, look, and count a recovery for each model
        of ``served`` that is READY again (cause server_died) or, after a restart the supervisor
        asked for, for the model it was made for (with that model's cause), in the same step that
        publishes the models as served (a reader that sees them back sees them counted).
        ``loading``: models of ``served`` the caller loads again now, each reported by ``restored``
        (until then: being recovered)."""
        with self._looking:
            with self._lock:
                self._stubs, self._ended = [], {}
                for record in self.records.values():
                    record.retiring, record.pending, record.recovering = set(), None, ""
                for model in loading:
                    self.records.setdefault(model, ModelRecord()).recovering = RESTORING
                self._restoring = set(loading)
                self.lost_stubs = 0
                planned, self._planned = self._planned, None
            counted = {planned[0]: planned[1]} if planned else dict.fromkeys(served - loading, Cause.SERVER_DIED)
            deadline = time.monotonic() + RESTART_LOOK_S
            while (now := self.observe()) is None and time.monotonic() < deadline and not self._stop.wait(0.1):
                pass
            if now is not None:
                self.judge(now, restarted=counted)
            self.server_down = ""

    def restored(self, model: str, status: int, body: str) -> None:
        """The load of ``model`` after tritonserver's restart (``server_restarted``'s ``loading``)
        answered ``status``: the model is back (counted, cause server_died) or given up on."""
        fresh = self.server.stubs() if status == 200 else []
        with self._lock:
            self._restoring.discard(model)
            record = self.records.setdefault(model, ModelRecord())
            record.recovering = ""
            if status == 200:
                record.recoveries += 1
                self._recoveries.labels(model=model, cause=Cause.SERVER_DIED.value).inc()
                self._ready = frozenset({*self._ready, model})  # READY: its load returned
                known = {stub.pid for stub in self._stubs}  # watched from now on
                self._stubs += [stub for stub in fresh if stub.pid not in known]
            else:
                record.unrecoverable = (
                    f"not loaded again after tritonserver's restart (HTTP {status or 'no answer'}: {error_text(body)})"
                )
            pending, record.pending = record.pending, None  # found while it loaded: handled now
            work = self._handle(pending) if pending is not None and not self._stop.is_set() else None
        if work is not None:
            self._spawn(model, work)
        if status == 200:
            LOG.warning("supervisor: model %s serves again, loaded after tritonserver's restart", model)
        else:
            _log_given_up(model, record)

    # -- recovering a model ---------------------------------------------------------------------

    def _recover(self, problem: Problem, record: ModelRecord) -> None:
        model, policy = problem.model, self.policy
        started = self.clock()
        why = problem.detail
        deaths = self._server_deaths
        try:
            for pid in problem.hung:
                with contextlib.suppress(ProcessLookupError):
                    self.kill(pid)
            while record.streak < policy.attempts:
                delay = policy.backoff(record.streak)
                LOG.warning(
                    "supervisor: model %s: %s; reloading it%s (recovery %d of %d in a row)",
                    model,
                    why,
                    f" in {delay:g} s" if delay else "",
                    record.streak + 1,
                    policy.attempts,
                )
                if self._stop.wait(delay):
                    return
                status, body = self._reload(problem, record)
                if status == 200:
                    fresh = self.server.stubs()
                    with self._lock:
                        record.recovered_at = self.clock()
                        record.recoveries += 1
                        known = {stub.pid for stub in self._stubs}  # the new stubs are watched from now on
                        self._stubs += [stub for stub in fresh if stub.pid not in known]
                    self._recoveries.labels(model=model, cause=problem.cause.value).inc()
                    LOG.warning(
                        "supervisor: model %s serves again, %.1f s after %s was found (%s)",
                        model,
                        self.clock() - started,
                        _CAUSE_TEXT[problem.cause],
                        problem.detail,
                    )
                    return
                why = f"the reload failed (HTTP {status or 'no answer'}): {error_text(body)}"
                LOG.error("supervisor: model %s: %s", model, why)
                if not self.server.running() or self._server_deaths != deaths:
                    return  # tritonserver died: its restart brings the model back
                with self._lock:
                    record.streak += 1
                    record.retiring = set()
            self._give_up(model, record, why)
        finally:
            with self._lock:
                self._workers.pop(model, None)
                work = None
                if self._server_deaths == deaths:  # else the restart has reset the record: this recovery is moot
                    record.recovering = ""
                    pending, record.pending = record.pending, None
                    work = self._handle(pending) if pending is not None and not self._stop.is_set() else None
            if work is not None:
                self._spawn(model, work)

    def _reload(self, problem: Problem, record: ModelRecord) -> tuple[int, str]:
        """Reload ``problem``'s model in place; the stubs it has now (and the hung ones killed) are
        retiring meanwhile."""
        with self._lock:
            # every stub of the model the last look knew (one dying now too: a kill of two
            # instances may straddle a look) and those listed now are replaced by this reload
            known = [*self.server.stubs(), *self._stubs]
            record.retiring = {stub.pid for stub in known if stub.model == problem.model}
            record.retiring |= set(problem.hung)
            record.pending = None
            self._reloads += 1
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            # never the same note twice: the same config would not reload
            note = f"{self._reloads}: {problem.cause.value} at {when}"
        return self.server.reload(problem.model, note, self.policy.load_timeout_s)

    def _give_up(self, model: str, record: ModelRecord, why: str) -> None:
        status, body = self.server.repository_call("unload", model, self.policy.load_timeout_s)
        unloaded = "left unloaded"
        if status != 200:
            unloaded = f"could not be unloaded either (HTTP {status}: {error_text(body)})"
        with self._lock:
            record.unrecoverable = (
                f"broken again after {self.policy.attempts} recoveries in a row, each within "
                f"{self.policy.settle_s:g} s of the last (last: {why}); {unloaded}"
            )
        _log_given_up(model, record)

    # -- what it tells ----------------------------------------------------------------------------

    def _watched(self, ready: Set[str]) -> dict[str, ModelRecord]:
        """The models to report: loaded ones, and those being recovered or given up on (not the
        ones an operator unloaded)."""
        return {
            model: record
            for model, record in sorted(self.records.items())
            if model in ready or record.recovering or record.unrecoverable
        }

    def _publish(self, now: Observation) -> None:
        watched = self._watched(now.ready_models())
        for model in self._published - set(watched):
            self._healthy.remove(model)
            self._unrecoverable.remove(model)
        for model, record in watched.items():
            self._healthy.labels(model=model).set(1 if record.healthy else 0)
            self._unrecoverable.labels(model=model).set(1 if record.unrecoverable else 0)
        self._published = set(watched)
        self._ready = now.ready_models()
        self._heartbeat.set(now.time)

    def status(self) -> dict[str, Any]:
        """Everything the supervisor knows, for serve's /health endpoint (JSON)."""
        with self._lock:
            models = {}
            for model, record in self._watched(self._ready).items():
                models[model] = {
                    "healthy": record.healthy,
                    "problem": record.problem,
                    "recovering": record.recovering,
                    "unrecoverable": record.unrecoverable,
                    "recoveries": record.recoveries,
                }
            return {
                "recovery": "on" if not self.recovery_off else f"off: {self.recovery_off}",
                "last_look": self.last_look,
                "models": models,
            }

    def verdict(self, check: HealthCheck, server_status: int) -> list[str]:
        """Why serve is not ready (or not live): [] when it is. ``server_status``: what
        tritonserver's own /v2/health/<check> answered (0: nothing).

        Ready: tritonserver is ready and every model it serves is healthy. Live: tritonserver is
        live and no model is beyond recovery (a restart of the whole server is what is left)."""
        reasons = []
        if self.server_down:
            if check == "ready":
                reasons.append(f"tritonserver is being restarted: {self.server_down}")
        elif server_status != 200:
            reasons.append(f"tritonserver's /v2/health/{check} answers {server_status or 'nothing'}")
        status = self.status()
        age = time.time() - status["last_look"]
        if age > STALE_S and not self.server_down:
            reasons.append(f"the supervisor has not looked at tritonserver for {age:.0f} s")
        for model, state in status["models"].items():
            if state["unrecoverable"]:
                reasons.append(f"model {model}: {state['unrecoverable']}")
            elif check == "ready" and state["recovering"]:
                reasons.append(f"model {model} is being recovered: {state['recovering']}")
            elif check == "ready" and state["problem"]:
                reasons.append(f"model {model}: {state['problem']}")
        return reasons


def _log_given_up(model: str, record: ModelRecord) -> None:
    """The error line of a model left unloaded, with what the operator does about it."""
    LOG.error(
        "supervisor: model %s %s. Fix its cause, then load it: POST /v2/repository/models/%s/load (with the "
        "operator key)",
        model,
        record.unrecoverable,
        model,
    )
