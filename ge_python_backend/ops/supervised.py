"""A tritonserver with serve's supervisor and its endpoint on the metrics port: what ``ge-triton
serve`` runs, and what the tests and the soak run the same way.

    with SupervisedServer(TritonServer(repo, front_metrics=True)) as served:
        served.front_url   # /metrics, /health, /health/ready, /health/live
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ge_python_backend.ops.front import Front
from ge_python_backend.ops.processes import reap_adopted, running
from ge_python_backend.ops.server import ServerError, TritonServer
from ge_python_backend.ops.supervisor import RecoveryPolicy, Supervisor, restarts_stubs_in_execute
from ge_python_backend.triton.lifeline import POLL_INTERVAL, RELEASE_TIMEOUT

LOG = logging.getLogger(__name__)


class SupervisedServer:
    """``server`` (made with ``front_metrics=True``) started, then watched by a Supervisor, with a
    Front on the metrics address in force (none when tritonserver's metrics are off: no health
    endpoints either). ``recover`` False: the supervisor reports and reloads nothing."""

    def __init__(self, server: TritonServer, policy: RecoveryPolicy | None = None, recover: bool = True) -> None:
        if not server.front_metrics:
            raise ServerError("a supervised tritonserver needs front_metrics=True: serve answers its metrics port")
        self.server = server
        self.policy = policy or RecoveryPolicy()
        self.supervisor = Supervisor(
            server, self.policy, recovery_off=self._recovery_off(recover), restart_server=self._restart_server
        )
        self.front: Front | None = None
        self.recover = recover
        self._stopping = False
        #: why tritonserver is being restarted on purpose ("" when it is not), and what it served
        self._planned = ""
        self._planned_served: set[str] = set()
        self._planned_at = 0.0
        self._keeper = threading.Thread(target=self._keep, name="ge-keeper", daemon=True)
        self.exit_code = 0
        #: times tritonserver was started again after it died
        self.restarts = 0

    def _recovery_off(self, recover: bool) -> str:
        """Why the supervisor may not reload models ("" when it may)."""
        if not recover:
            return "--recovery off"
        mode = self.server.model_control_mode
        if mode != "explicit":
            return f"tritonserver refuses reloads in model control mode {mode} (explicit allows them)"
        return ""

    @property
    def front_url(self) -> str:
        """http://HOST:PORT of serve's endpoint (the metrics address)."""
        return self.server.metrics_url.removesuffix("/metrics")

    def start(self) -> SupervisedServer:
        try:
            self.server.start()
            self.supervisor.stub_restart_crashes = restarts_stubs_in_execute(self.server.version())
            self.supervisor.start()
            endpoint = self.server.metrics_endpoint
            if endpoint.enabled:
                self.front = Front(
                    endpoint.host, endpoint.port, self.supervisor, self.server.triton_metrics_url, self.server.health
                ).start()
            if os.getpid() == 1:  # a container's first process: orphans (a dead stub's lifeline) come here
                threading.Thread(target=self._reap, name="ge-reaper", daemon=True).start()
            self._keeper.start()
        except BaseException:
            self.stop()
            raise
        return self

    def wait(self) -> int:
        """Until tritonserver ends for good (``_keep``); its exit code."""
        while self._keeper.is_alive():
            self._keeper.join(1.0)  # in steps: the main thread stays free for stop signals
        return self.exit_code

    def _keep(self) -> None:
        """Keep tritonserver running, on a thread of its own; ``exit_code`` once it ends for good.

        A tritonserver that dies by itself (a crash, an OOM kill: on Triton 24.02 a dead stub's
        restart inside ``execute`` aborts it, python_be.cc:2433-2453) is started again with the
        same command line and ports, once its stubs are gone (their lifelines remove their
        shared memory). The policy's backoff and limit apply as to a model: after ``attempts``
        restarts in a row, each within ``settle_s`` of the last, it is left dead."""
        streak, restarted_at = 0, None
        while True:
            process = self.server.process
            code = process.wait() if process is not None else 1
            if self._stopping or not self.recover:
                self.exit_code = code
                return
            if self._planned:
                self._restart_on_purpose()
                continue
            why = _death(code, self.server.last_words())
            now = time.monotonic()
            streak = streak + 1 if restarted_at is not None and now - restarted_at < self.policy.settle_s else 0
            if streak >= self.policy.attempts:
                LOG.error(
                    "supervisor: %s; it died %d times in a row, each within %g s of its restart: left so",
                    why,
                    streak + 1,
                    self.policy.settle_s,
                )
                self.exit_code = code
                return
            served = self.supervisor.server_died(why)
            delay = self.policy.backoff(streak)
            LOG.warning(
                "supervisor: %s; restarting it%s (restart %d of %d in a row)",
                why,
                f" in {delay:g} s" if delay else "",
                streak + 1,
                self.policy.attempts,
            )
            time.sleep(delay)
            self._wait_for_stubs()
            restarted_at = time.monotonic()
            self._start_again(served, now, "it died")

    def _start_again(self, served: set[str], since: float, what: str) -> None:
        """Start tritonserver again (down since ``since``, monotonic, because ``what``) with the
        models that were failing (``_first_back``), then load the rest of ``served`` once it
        serves (``_load_again``)."""
        first = self._first_back(served)
        started = time.monotonic()
        try:
            self.server.restart(None if first == served else sorted(first))
        except ServerError as exc:
            LOG.error("supervisor: tritonserver did not start again: %s", exc)
            return  # the keeper's next wait sees it gone and restarts it as a crash
        self.restarts += 1
        later = served - first
        self.supervisor.server_restarted(served, loading=later)
        LOG.warning(
            "supervisor: tritonserver serves again, %.1f s after %s (started in %.1f s); models back: %s%s",
            time.monotonic() - since,
            what,
            time.monotonic() - started,
            ", ".join(sorted(first & self.supervisor.serving())) or "none",
            f"; loading the others again: {', '.join(sorted(later))}" if later else "",
        )
        if later:
            threading.Thread(target=self._load_again, args=(sorted(later),), name="ge-restore", daemon=True).start()

    def _first_back(self, served: set[str]) -> set[str]:
        """The models to start a dead tritonserver again with: those found failing when it died
        (on Triton 24.02 the Python backend's restart of a dead stub inside ``execute`` is what
        crashes it: python_be.cc:2433-2453), the others to be loaded once it serves
        (``_load_again``), since tritonserver opens its endpoints only after its start-up loads.
        Every served model when none was failing, or when models cannot be loaded through the
        repository API."""
        failing = self.supervisor.failing() & served
        return failing if failing and not self.supervisor.recovery_off else served

    def _load_again(self, models: list[str]) -> None:
        """Load ``models`` into the restarted tritonserver, one at a time (the first ones back
        keep the cores), each reported to the supervisor; stops when tritonserver dies again (its
        next start loads the rest)."""
        process = self.server.process
        for model in models:
            status, body = self.server.repository_call("load", model, self.policy.load_timeout_s)
            if self._stopping or self.server.process is not process or not self.server.running():
                return
            self.supervisor.restored(model, status, body)

    def _restart_server(self, why: str, grace: float) -> None:
        """The supervisor's request: stop tritonserver now, giving what is in flight ``grace``
        seconds (``_keep`` starts it again)."""
        self._planned, self._planned_at = why, time.monotonic()
        self._planned_served = self.supervisor.server_died(why)
        self.server.stop(timeout=grace)

    def _restart_on_purpose(self) -> None:
        self._planned = ""
        self._start_again(self._planned_served, self._planned_at, "it was stopped to be restarted")

    def _reap(self) -> None:
        while not self._stopping:
            process = self.server.process
            reap_adopted(keep=process.pid if process is not None else None)
            time.sleep(1.0)

    def _wait_for_stubs(self) -> None:
        """Until the dead server's stubs are gone, for as long as a GEModel stub takes to notice
        its server's death and release its engine (``triton.lifeline``); the restart's stop
        kills the rest with the server's process group (e.g. a stub the Python backend of Triton
        24.02 restarted inside ``execute``, still loading: it would hold the shared-memory name
        and the ports the new server needs until its lifeline ends it)."""
        pids = {stub.pid for stub in self.supervisor.last_stubs()}
        deadline = time.monotonic() + POLL_INTERVAL + RELEASE_TIMEOUT + 0.5
        while time.monotonic() < deadline and any(running(pid) for pid in pids):
            time.sleep(0.1)

    def stop(self) -> None:
        """Supervisor, endpoint, then tritonserver (its workspace stays)."""
        self._stopping = True
        self.supervisor.stop()
        if self.front is not None:
            self.front.stop()
            self.front = None
        self.server.stop()

    def close(self) -> None:
        self.stop()
        self.server.close()

    def __enter__(self) -> SupervisedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        if any(exc):  # keep the workspace (and the log) to look at
            self.stop()
        else:
            self.close()


def _death(code: int, last_words: str) -> str:
    """How tritonserver died, in words."""
    how = f"tritonserver died of signal {-code}" if code < 0 else f"tritonserver exited with code {code}"
    return f"{how} ({last_words})" if last_words else how
