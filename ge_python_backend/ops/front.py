"""``ge-triton serve``'s own HTTP endpoint, on the metrics port in place of tritonserver's.

serve runs tritonserver with its metrics endpoint on a loopback port of its own and answers the
metrics port itself, so one scrape target gives both tritonserver's series and serve's:

- ``GET /metrics``: tritonserver's metrics page (``nv_*`` and GEModel's ``ge_*`` series), then the
  supervisor's series (``ge_model_recoveries_total`` ...). When tritonserver's page does not
  answer (serve is restarting it), a comment line that says so and the supervisor's series: they
  are what tells that story.
- ``GET /health/ready``, ``GET /health/live``: 200 ``ready`` / ``live``, or 503 with one reason per
  line (``Supervisor.verdict``): what a Kubernetes httpGet probe reads (the kubelet keeps the body
  in the pod's events).
- ``GET /health``: the supervisor's view of every model as JSON.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, disable_created_metrics, generate_latest

from ge_python_backend.ops.server import HealthCheck
from ge_python_backend.ops.supervisor import Supervisor

LOG = logging.getLogger(__name__)
#: seconds tritonserver's metrics page and health endpoints get to answer
UPSTREAM_TIMEOUT_S = 4.0


class Front:
    """The endpoint on ``host:port``, serving until ``stop``. ``triton_metrics``: tritonserver's
    own metrics page (None when its metrics are off); ``triton_health(check)``: the status of
    tritonserver's /v2/health/<check> (0 when it does not answer)."""

    def __init__(
        self,
        host: str,
        port: int,
        supervisor: Supervisor,
        triton_metrics: str | None,
        triton_health: Callable[[HealthCheck], int],
    ) -> None:
        disable_created_metrics()  # no *_created series beside each counter (tritonserver writes none)
        self.supervisor = supervisor
        self.triton_metrics = triton_metrics
        self.triton_health = triton_health
        self._http = ThreadingHTTPServer((host, port), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="ge-front", daemon=True)

    @property
    def port(self) -> int:
        return self._http.server_address[1]

    def start(self) -> Front:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def metrics(self) -> tuple[int, bytes]:
        """The metrics page: tritonserver's, then the supervisor's series."""
        own = generate_latest(self.supervisor.registry)
        if self.triton_metrics is None:
            return 200, own
        try:
            with urllib.request.urlopen(self.triton_metrics, timeout=UPSTREAM_TIMEOUT_S) as response:
                upstream = response.read()
        except (urllib.error.URLError, OSError) as exc:  # e.g. while serve restarts it: serve's own series still count
            return 200, f"# tritonserver's metrics ({self.triton_metrics}) did not answer: {exc}\n".encode() + own
        if upstream and not upstream.endswith(b"\n"):
            upstream += b"\n"
        return 200, upstream + own

    def health(self, check: HealthCheck) -> tuple[int, bytes]:
        reasons = self.supervisor.verdict(check, self.triton_health(check))
        if reasons:
            return 503, ("".join(f"{reason}\n" for reason in reasons)).encode()
        return 200, f"{check}\n".encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0].rstrip("/")
                content_type = "text/plain; charset=utf-8"
                if path == "/metrics":
                    status, body = front.metrics()
                    content_type = CONTENT_TYPE_PLAIN_0_0_4
                elif path == "/health/ready":
                    status, body = front.health("ready")
                elif path == "/health/live":
                    status, body = front.health("live")
                elif path == "/health":
                    status, body = 200, json.dumps(front.supervisor.status(), indent=1).encode()
                    content_type = "application/json"
                else:
                    status, body = 404, b"not found: /metrics, /health, /health/ready, /health/live\n"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
                LOG.debug("front: " + format, *args)

        return Handler
