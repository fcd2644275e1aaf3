"""Two tritonservers behind a real load balancer (Debian's nginx), one killed mid-load.

Both servers serve one generated repository on loopback. nginx balances HTTP (``proxy_pass``)
and gRPC (``grpc_pass`` on an HTTP/2 listener) over them with passive health checks
(``max_fails``/``fail_timeout``) and retries on the other server (``*_next_upstream``). Client
threads send requests with unique ids and random inputs through nginx over both protocols and
compare every answer with ONNX Runtime. One server is killed with SIGKILL while they run.

The contract: every answer that arrives is right and answers its own request (id echoed), no
request gets two answers, a failed attempt is retried by the client (and counted) or reported
with its error, the survivor keeps serving, and the killed server, restarted on its ports,
receives requests again (its own ``nv_inference_request_success`` rises).

nginx comes from Debian's package (tools/bootstrap.sh installs it when missing, as root); the
test is skipped, with the reason, only when there is no nginx with HTTP/2.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from ge_python_backend.ops.server import TritonServer, free_port
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import models

pytestmark = pytest.mark.e2e

MODEL = "linear"
OUTPUTS = ("logits", "probs")
THREADS_PER_PROTOCOL = 3
ATTEMPTS = 8  # per request, client side
RETRY_PAUSE_S = 0.1
FAIL_TIMEOUT_S = 2  # nginx: a failed server is skipped this long, then tried again


# -- nginx ------------------------------------------------------------------------------------------------


def find_nginx() -> str:
    """The nginx binary, or skip with the reason."""
    binary = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if binary is None:
        pytest.skip("nginx is not installed (tools/bootstrap.sh installs Debian's nginx with apt-get when run as root)")
    version = subprocess.run([binary, "-V"], capture_output=True, text=True)
    if "http_v2_module" not in version.stderr + version.stdout:
        pytest.skip(f"{binary} has no HTTP/2 module (needed for grpc_pass): {version.stderr.strip()}")
    return binary


def nginx_config(prefix: Path, http_port: int, grpc_port: int, servers: list[TritonServer]) -> str:
    """HTTP and gRPC upstreams over ``servers`` with passive health checks and retries.

    nginx 1.22 (Debian 12) syntax: ``listen ... http2`` (``http2 on`` needs 1.25.1). Requests are
    retried on the other server even after they were sent (``non_idempotent``): fine for a
    stateless model, whose second run gives the same answer."""
    upstream = f"max_fails=1 fail_timeout={FAIL_TIMEOUT_S}s"
    http_servers = "\n".join(f"        server {s.http_address} {upstream};" for s in servers)
    grpc_servers = "\n".join(f"        server {s.grpc_address} {upstream};" for s in servers)
    temp = "\n".join(f"    {kind}_temp_path {prefix}/tmp/{kind};" for kind in ("proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;" if os.geteuid() == 0 else ""  # workers as root: pytest's tmp folders are private
    return f"""{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log notice;
events {{ worker_connections 1024; }}
http {{
    log_format upstreams '$server_port|$status|$upstream_addr|$upstream_status';
    access_log {prefix}/access.log upstreams;
    client_body_temp_path {prefix}/tmp/client_body;
{temp}
    upstream triton_http {{
{http_servers}
        keepalive 16;
    }}
    upstream triton_grpc {{
{grpc_servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{http_port};
        client_max_body_size 64m;
        location / {{
            proxy_pass http://triton_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 1s;
            proxy_read_timeout 30s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 3;
        }}
    }}
    server {{
        listen 127.0.0.1:{grpc_port} http2;
        client_max_body_size 64m;
        location / {{
            grpc_pass grpc://triton_grpc;
            grpc_connect_timeout 1s;
            grpc_read_timeout 30s;
            grpc_next_upstream error timeout http_502 http_503 non_idempotent;
            grpc_next_upstream_tries 3;
        }}
    }}
}}
"""


@dataclass
class Nginx:
    binary: str
    prefix: Path
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def conf(self) -> Path:
        return self.prefix / "nginx.conf"

    def start(self, servers: list[TritonServer]) -> Nginx:
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.prefix / "tmp" / kind).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(nginx_config(self.prefix, self.http_port, self.grpc_port, servers))
        base = [self.binary, "-p", str(self.prefix), "-c", str(self.conf), "-e", str(self.prefix / "error.log")]
        test = subprocess.run([*base, "-t"], capture_output=True, text=True)
        assert test.returncode == 0, f"nginx -t refused the config:\n{test.stderr}\n{self.conf.read_text()}"
        self.process = subprocess.Popen(
            [*base, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 10
        while not all(_accepts(port) for port in (self.http_port, self.grpc_port)):
            assert self.process.poll() is None, self.log()
            assert time.monotonic() < deadline, "nginx does not listen after 10 s:\n" + self.log()
            time.sleep(0.05)
        return self

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.prefix / "error.log").read_text()[-4000:]
        return ""

    def upstream_counts(self) -> tuple[Counter, int]:
        """Requests nginx answered with 200 per upstream address (the one that answered), and how
        many of them it had retried on the other server first (``$upstream_addr`` lists both)."""
        counts: Counter = Counter()
        retried = 0
        with contextlib.suppress(OSError):
            for line in (self.prefix / "access.log").read_text().splitlines():
                _, status, addresses, _ = (line.split("|") + ["", "", "", ""])[:4]
                if status == "200":
                    tried = [a.strip() for a in addresses.split(",")]
                    counts[tried[-1]] += 1
                    retried += len(tried) > 1
        return counts, retried

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGQUIT)  # graceful: workers finish, then exit
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- servers ------------------------------------------------------------------------------------------------


def success_count(server: TritonServer) -> int:
    """The server's own nv_inference_request_success for the model (-1 when unreachable)."""
    try:
        with urllib.request.urlopen(server.metrics_url, timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return -1
    match = re.search(rf'^nv_inference_request_success{{model="{MODEL}",version="1"}} (\d+)', text, re.M)
    return int(match.group(1)) if match else 0


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.1)


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(entry.name))
    return pids


def kill_hard(server: TritonServer) -> list[Path]:
    """SIGKILL the server and its stub processes; returns the /dev/shm regions they held (a killed
    server cannot remove them; the caller does)."""
    assert server.process is not None
    pgid = server.process.pid
    regions = set()
    for pid in group_pids(pgid):
        with contextlib.suppress(OSError):
            regions |= set(re.findall(r"(/dev/shm/triton_\S+)", Path(f"/proc/{pid}/maps").read_text()))
    os.killpg(pgid, signal.SIGKILL)
    server.stop()  # reaps it
    return [Path(r) for r in sorted(regions)]


# -- load ----------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    protocol: str
    attempts: int
    answered: bool
    right: bool = False
    errors: list[str] = field(default_factory=list)
    finished: float = 0.0


class Load:
    """Threads that send requests through the balancer until stopped; one Outcome per request id."""

    def __init__(self, nginx: Nginx, session: ort.InferenceSession) -> None:
        self.nginx = nginx
        self.session = session
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes: dict[str, Outcome] = {}
        self.duplicates: list[str] = []
        self.pool = ThreadPoolExecutor(2 * THREADS_PER_PROTOCOL)
        self.futures = [
            self.pool.submit(self._run, protocol, index)
            for protocol in ("http", "grpc")
            for index in range(THREADS_PER_PROTOCOL)
        ]

    def _client(self, protocol: str):
        if protocol == "http":
            return httpclient.InferenceServerClient(
                f"127.0.0.1:{self.nginx.http_port}", connection_timeout=5, network_timeout=30
            )
        return grpcclient.InferenceServerClient(f"127.0.0.1:{self.nginx.grpc_port}")

    def _send(self, client, protocol: str, request_id: str, x: np.ndarray) -> dict[str, np.ndarray]:
        module = httpclient if protocol == "http" else grpcclient
        tensor = module.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        outputs = [module.InferRequestedOutput(name) for name in OUTPUTS]
        if protocol == "http":
            result = client.infer(MODEL, [tensor], request_id=request_id, outputs=outputs)
            answered_id = result.get_response()["id"]
        else:
            result = client.infer(MODEL, [tensor], request_id=request_id, outputs=outputs, client_timeout=30)
            answered_id = result.get_response().id
        assert answered_id == request_id, f"asked {request_id}, the answer is for {answered_id}"
        return {name: result.as_numpy(name) for name in OUTPUTS}

    def _run(self, protocol: str, index: int) -> None:
        rng = np.random.default_rng(1000 * index + (protocol == "grpc"))
        client = self._client(protocol)
        number = 0
        try:
            while not self.stop.is_set():
                number += 1
                request_id = f"{protocol}-{index}-{number}"
                x = rng.standard_normal((int(rng.integers(1, 5)), 4)).astype(np.float32)
                outcome = self._one(client, protocol, request_id, x)
                with self.lock:
                    if request_id in self.outcomes:
                        self.duplicates.append(request_id)
                    self.outcomes[request_id] = outcome
        finally:
            client.close()

    def _one(self, client, protocol: str, request_id: str, x: np.ndarray) -> Outcome:
        outcome = Outcome(protocol, 0, False)
        while outcome.attempts < ATTEMPTS:
            outcome.attempts += 1
            try:
                answer = self._send(client, protocol, request_id, x)
            except Exception as exc:  # any failure of one attempt: record it, retry the same request
                outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                time.sleep(RETRY_PAUSE_S)
                continue
            expected = dict(zip(OUTPUTS, self.session.run(list(OUTPUTS), {"x": x})))
            outcome.answered = True
            outcome.right = all(np.allclose(answer[n], expected[n], rtol=1e-5, atol=1e-6) for n in OUTPUTS)
            break
        outcome.finished = time.monotonic()
        return outcome

    def finish(self) -> None:
        self.stop.set()
        for future in self.futures:
            future.result(timeout=120)
        self.pool.shutdown()

    def answered_since(self, moment: float, protocol: str) -> int:
        with self.lock:
            return sum(o.answered and o.finished > moment and o.protocol == protocol for o in self.outcomes.values())


# -- the test ---------------------------------------------------------------------------------------------------


@pytest.fixture
def nginx_binary() -> str:
    return find_nginx()


@pytest.fixture
def cluster(tmp_path, nginx_binary) -> Iterator[tuple[list[TritonServer], Nginx, Path, list[TritonServer]]]:
    """Two servers of one generated repository, nginx in front; all stopped at the end."""
    onnx = models.linear(tmp_path / "linear.onnx")
    repo = tmp_path / "repo"
    generate(onnx, repo, GenerateOptions(name=MODEL, instance_count=2))
    servers = [TritonServer(repo, startup_timeout=120) for _ in range(2)]
    stopped: list[TritonServer] = []  # servers the test replaced (their workspaces are removed too)
    nginx = Nginx(nginx_binary, tmp_path / "nginx")
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(TritonServer.start, servers))
        nginx.start(servers)
        yield servers, nginx, onnx, stopped
    finally:
        nginx.stop()
        for server in servers:
            server.stop()
        for server in servers + stopped:
            shutil.rmtree(server.workspace, ignore_errors=True)


def test_one_server_killed_under_load(cluster):
    servers, nginx, onnx, stopped = cluster
    victim, survivor = servers
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    load = Load(nginx, session)
    leaked: list[Path] = []
    try:
        # Both servers take load through the balancer.
        wait_for(lambda: min(success_count(s) for s in servers) >= 200, 20, "both servers answering")

        killed_at = time.monotonic()
        leaked = kill_hard(victim)
        survivor_at_kill = success_count(survivor)
        time.sleep(3)
        for protocol in ("http", "grpc"):
            assert load.answered_since(killed_at + 0.5, protocol) > 0, f"no {protocol} answers after the kill"
        assert success_count(survivor) > survivor_at_kill, "the survivor stopped serving"

        # The killed server comes back on its own ports and gets requests again.
        restarted = TritonServer(
            victim.model_repository,
            http_port=victim.http_port,
            grpc_port=victim.grpc_port,
            metrics_port=victim.metrics_port,
            startup_timeout=120,
        )
        stopped.append(victim)
        servers[0] = restarted  # stopped by the fixture
        restarted.start()
        survivor_at_restart = success_count(survivor)
        wait_for(lambda: success_count(restarted) >= 200, 20, "the restarted server receiving requests")
        assert success_count(survivor) > survivor_at_restart, "the survivor stopped serving after the restart"
    finally:
        load.finish()
        for region in leaked:
            with contextlib.suppress(FileNotFoundError):
                region.unlink()

    outcomes = load.outcomes
    failed = {rid: o.errors for rid, o in outcomes.items() if not o.answered}
    wrong = [rid for rid, o in outcomes.items() if o.answered and not o.right]
    retried = {rid: o for rid, o in outcomes.items() if o.attempts > 1}
    per_protocol = Counter(o.protocol for o in outcomes.values() if o.answered)
    upstreams, nginx_retried = nginx.upstream_counts()
    report = (
        f"{len(outcomes)} requests: {sum(o.answered for o in outcomes.values())} answered "
        f"({dict(per_protocol)}), {len(retried)} retried by the client, {len(failed)} failed, {len(wrong)} wrong; "
        f"nginx: answers per upstream {dict(upstreams)}, {nginx_retried} retried on the other server"
    )
    print(report)
    for rid, o in sorted(retried.items())[:10]:
        print(f"  retried {rid} ({o.attempts} attempts): {o.errors[0]}")
    assert not load.duplicates, f"request ids answered twice: {load.duplicates[:5]}"
    assert not wrong, f"wrong answers: {wrong[:5]}; {report}"
    assert not failed, f"failed after {ATTEMPTS} attempts: {list(failed.items())[:3]}; {report}"
    assert min(per_protocol["http"], per_protocol["grpc"]) >= 50, report
