"""A tritonserver with serve's supervisor and its endpoint on the metrics port: what ``ge-triton
serve`` runs, and what the tests and the soak run the same way.

    with SupervisedServer(TritonServer(repo, front_metrics=True)) as served:
        served.front_url   # /metrics, /health, /health/ready, /health/live
"""

from __future__ import annotations

from ge_python_backend.ops.front import Front
from ge_python_backend.ops.server import ServerError, TritonServer
from ge_python_backend.ops.supervisor import RecoveryPolicy, Supervisor


class SupervisedServer:
    """``server`` (made with ``front_metrics=True``) started, then watched by a Supervisor, with a
    Front on the metrics address in force (none when tritonserver's metrics are off: no health
    endpoints either). ``recover`` False: the supervisor reports and reloads nothing."""

    def __init__(self, server: TritonServer, policy: RecoveryPolicy | None = None, recover: bool = True) -> None:
        if not server.front_metrics:
            raise ServerError("a supervised tritonserver needs front_metrics=True: serve answers its metrics port")
        self.server = server
        self.supervisor = Supervisor(server, policy or RecoveryPolicy(), recovery_off=self._recovery_off(recover))
        self.front: Front | None = None

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
            self.supervisor.start()
            endpoint = self.server.metrics_endpoint
            if endpoint.enabled:
                self.front = Front(
                    endpoint.host, endpoint.port, self.supervisor, self.server.triton_metrics_url, self.server.health
                ).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Supervisor, endpoint, then tritonserver (its workspace stays)."""
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
