"""The server command ``ge-triton deploy`` writes runs: the image's preparation step, its
entrypoint, the init container's check and the tritonserver arguments of the Deployment, here on
loopback with the bundled tritonserver (what the image does, without docker), on a read-only root
filesystem with the pod's emptyDirs writable (``tests/support/readonly_root.py``, where this
machine allows it), and the APIs the manifests restrict refuse clients without the operator key."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import yaml
from tritonclient.utils import InferenceServerException

from ge_python_backend.cli import main
from ge_python_backend.ops.access import API_KEY_ENV, API_KEY_HEADER, GRPC_HEADER_PREFIX, HTTP_INFERENCE_OFF_HEADER
from ge_python_backend.ops.deploy.manifests import ASCEND_LOG_DIR, BACKENDS_DIR, MODELS_DIR
from ge_python_backend.ops.server import free_port
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import models
from tests.support import readonly_root
from tests.support import reliability_repos as rr
from tests.support.clients import HUGE_SHAPE_REQUEST
from tests.support.load import stub_pids

pytestmark = pytest.mark.e2e


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _documents(path: Path) -> dict:
    (document,) = yaml.safe_load_all(path.read_text())
    return document


def _request(url: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _kubelet_expand(arg: str, env: dict[str, str]) -> str:
    """$(VAR) in a container's args, as the kubelet expands them from the container's env."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


class Pod:
    """A deployment's server pod run here as the image would run it, without docker: the image's
    preparation step, its entrypoint on a read-only root with the pod's emptyDirs writable (where
    this machine allows it), the init container's check, then the server container's args with
    loopback ports and the operator key expanded as the kubelet does."""

    def __init__(self, repo: Path, tmp_path: Path, *deploy_args: str) -> None:
        self.repo, self.tmp_path = repo, tmp_path
        self.out = tmp_path / "out"
        assert (
            main(["deploy", str(repo), "-o", str(self.out), "--image", "registry.example.com/ge:1", *deploy_args]) == 0
        )
        self.spec = _documents(self.out / "manifests" / "deployment.yaml")["spec"]["template"]["spec"]
        # The image build: prepare.py (bin and ld.so.conf redirected here).
        workspace, self.bin_dir = tmp_path / "opt", tmp_path / "bin"
        self.bin_dir.mkdir()
        prepare = [sys.executable, str(self.out / "image" / "prepare.py"), str(workspace)]
        subprocess.run([*prepare, "--bin-dir", str(self.bin_dir), "--ld-conf", str(tmp_path / "ld.conf")], check=True)
        self.backends = workspace / "backends"
        assert (self.backends / "python" / "triton_python_backend_stub").is_file() and (self.backends / "ge").is_dir()
        assert Path(BACKENDS_DIR).name == self.backends.name
        # ldconfig in the image makes the libraries prepare.py lists visible; here LD_LIBRARY_PATH does.
        self.libraries = (tmp_path / "ld.conf").read_text().split()
        self.key = secrets.token_hex(16)  # the operator key, from the Secret in a cluster
        self.container = self.spec["containers"][0]
        self.ports = {p["name"]: free_port() for p in self.container["ports"]}
        self.server: subprocess.Popen | None = None

    def local(self, arg: str) -> str:
        return arg.replace(BACKENDS_DIR, str(self.backends)).replace(MODELS_DIR, str(self.repo))

    def environment(self, container: dict) -> dict[str, str]:
        variables = {e["name"]: e.get("value", self.key if e["name"] == API_KEY_ENV else "") for e in container["env"]}
        return dict(
            os.environ,
            **variables,
            PATH=os.pathsep.join([str(Path(sys.executable).parent), str(self.bin_dir), os.environ["PATH"]]),
            LD_LIBRARY_PATH=os.pathsep.join(self.libraries),
        )

    def as_in_the_pod(self, container: dict) -> list[str]:
        """The entrypoint on a read-only root with the container's emptyDirs writable (where possible)."""
        entrypoint = ["bash", str(self.out / "image" / "entrypoint.sh")]
        if not readonly_root.available():
            return entrypoint
        writable = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in ("tmp", "ascend-log")]
        # /dev/shm stays the machine's own tmpfs; CANN's log folder: a tmpfs on its parent (it creates it)
        writable = [str(Path(w).parent) if w == ASCEND_LOG_DIR else w for w in writable]
        return [*readonly_root.prefix(self.tmp_path, writable, container["workingDir"]), *entrypoint]

    def check_repository(self) -> subprocess.CompletedProcess:
        """The init container: ge-triton check on the mounted repository."""
        init = self.spec["initContainers"][0]
        command = [*self.as_in_the_pod(init), *map(self.local, init["args"])]
        return subprocess.run(command, env=self.environment(init), capture_output=True, text=True)

    def start(self) -> None:
        """The server container, with loopback ports (its log in server.log)."""
        container, env = self.container, self.environment(self.container)
        renamed = {
            f"--{p['name']}-port={p['containerPort']}": f"--{p['name']}-port={self.ports[p['name']]}"
            for p in container["ports"]
        }
        renamed["--address=0.0.0.0"] = "--address=127.0.0.1"
        args = [_kubelet_expand(renamed.get(a, self.local(a)), env) for a in container["args"]]
        self.log = (self.tmp_path / "server.log").open("wb")
        self.server = subprocess.Popen(
            [*self.as_in_the_pod(container), *args],
            env=env,
            cwd=self.tmp_path,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while self.probe("startupProbe") != 200:
            assert self.server.poll() is None, self.output()
            assert time.monotonic() < deadline, "the startup probe still fails after 120 s"
            time.sleep(0.2)

    def probe(self, name: str) -> int:
        """What the kubelet's httpGet probe ``name`` of the server container gets (0: no answer)."""
        get = self.container[name]["httpGet"]
        return _status(f"http://127.0.0.1:{self.ports[get['port']]}{get['path']}")

    def output(self) -> str:
        return (self.tmp_path / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.server is None:
            return
        self.server.send_signal(signal.SIGINT)  # a clean exit frees the Python backend's shared memory
        try:
            self.server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
        self.log.close()


def test_the_deployments_commands_run(tmp_path):
    onnx = models.linear(tmp_path / "linear.onnx")
    repo = tmp_path / "repo"
    generate(onnx, repo, GenerateOptions(name="linear", streams=2))
    pod = Pod(repo, tmp_path)
    check = pod.check_repository()
    assert check.returncode == 0 and check.stdout.startswith("ok: 1 model checked"), check.stdout + check.stderr
    key, ports = pod.key, pod.ports
    try:
        pod.start()
        http = f"127.0.0.1:{ports['http']}"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert pod.probe(probe) == 200, probe
        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        request = grpcclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
        result = grpc.infer("linear", [request])  # clients infer over gRPC
        expected = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
        np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)
        # HTTP inference is refused before tritonserver 2.51 parses the request that aborts it.
        status, body = _request(f"http://{http}/v2/models/linear/infer", body=json.dumps(HUGE_SHAPE_REQUEST).encode())
        assert (status, json.loads(body)["error"]) == (
            403,
            f"This API is restricted, expecting header '{HTTP_INFERENCE_OFF_HEADER}'",
        )
        # The operator APIs need the key from the Secret, on HTTP and gRPC; health and metadata do not.
        restricted = f"This API is restricted, expecting header '{API_KEY_HEADER}'"
        for path, body in (
            ("/v2/models/linear/config", None),
            ("/v2/repository/index", b"{}"),
            (
                "/v2/systemsharedmemory/region/r/register",
                json.dumps({"key": "/x", "offset": 0, "byte_size": 8}).encode(),
            ),
            ("/v2/logging", json.dumps({"log_verbose_level": 1}).encode()),
            ("/v2/trace/setting", json.dumps({"trace_rate": "1"}).encode()),
        ):
            status, answer = _request(f"http://{http}{path}", body=body)
            assert (status, json.loads(answer)) == (403, {"error": restricted}), path
        status, body = _request(f"http://{http}/v2/models/linear/config", {API_KEY_HEADER: key})
        assert status == 200 and json.loads(body)["name"] == "linear"
        assert _status(f"http://{http}/v2/models/linear") == 200
        with pytest.raises(InferenceServerException, match=f"expecting header '{GRPC_HEADER_PREFIX}{API_KEY_HEADER}'"):
            grpc.get_model_config("linear")
        assert grpc.get_model_config("linear", headers={GRPC_HEADER_PREFIX + API_KEY_HEADER: key}).config.name == (
            "linear"
        )
        grpc.close()
        # Triton publishes its counters a moment after the request.
        success = re.compile(r'^nv_inference_request_success\{model="linear",version="1"\} 1$', re.M)
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5) as response:
                text = response.read().decode()
            if success.search(text) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert success.search(text), text
        # tritonserver's log is the container's output (serve copies it)
        assert "Started GRPCInferenceService" in pod.output() and "ready  HTTP" in pod.output()
    finally:
        pod.stop()


def test_the_pods_probes_follow_a_killed_stub_and_a_lost_device(tmp_path):
    """Readiness fails while a model is broken or being recovered and comes back by itself;
    liveness holds while serve can recover in-process, and fails once a model that loses its
    device again at once is left unloaded: then Kubernetes restarts the container."""
    sources = rr.Sources(tmp_path / "sources")
    repo = tmp_path / "repo"
    rr.model(repo, sources.linear, "linear")
    rr.model(repo, sources.linear_om, "lossy", {"acl_sim_faults": "execute_async:3=lost"}, instance_count=1)
    pod = Pod(repo, tmp_path)
    try:
        pod.start()
        assert [pod.probe(p) for p in ("livenessProbe", "readinessProbe")] == [200, 200]
        tritonserver = int(subprocess.check_output(["pgrep", "-f", "-n", f"tritonserver --model-repository={repo}"]))
        (victim,) = stub_pids(tritonserver, "linear")
        os.kill(victim, signal.SIGKILL)
        seen = _probe_until(pod, "readinessProbe", 503, 200)
        assert seen["readinessProbe"] == [200, 503, 200] and seen["livenessProbe"] == [200], seen
        assert f"supervisor: model linear: stub of instance linear_0_0 (pid {victim}) died" in pod.output()

        # The device is lost at the 3rd execution of every load: three recoveries, then left unloaded.
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{pod.ports['grpc']}")
        x = np.ones((1, 4), np.float32)
        request = grpcclient.InferInput("x", [1, 4], "FP32")
        request.set_data_from_numpy(x)
        deadline = time.monotonic() + 90
        while pod.probe("livenessProbe") != 503 and time.monotonic() < deadline:
            with contextlib.suppress(InferenceServerException):
                grpc.infer("lossy", [request])
            time.sleep(0.05)
        grpc.close()
        assert pod.probe("livenessProbe") == 503 and pod.probe("readinessProbe") == 503, pod.output()
        get = pod.container["livenessProbe"]["httpGet"]
        status, reasons = _request(f"http://127.0.0.1:{pod.ports[get['port']]}{get['path']}")
        assert status == 503 and reasons.startswith("model lossy: broken again after 3 recoveries in a row"), reasons
        assert "supervisor: model lossy broken again after 3 recoveries in a row" in pod.output()
    finally:
        pod.stop()


def _probe_until(pod: Pod, name: str, *values: int, timeout: float = 30.0) -> dict[str, list[int]]:
    """Probe the pod every 0.1 s until probe ``name`` has answered ``values`` in turn; what every
    probe answered, repeats collapsed."""
    seen: dict[str, list[int]] = {"readinessProbe": [], "livenessProbe": []}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for probe, answers in seen.items():
            status = pod.probe(probe)
            if not answers or answers[-1] != status:
                answers.append(status)
        if seen[name][-len(values) :] == list(values):
            break
        time.sleep(0.1)
    return seen


def test_the_pods_read_only_root_keeps_the_checkout_and_its_python_wherever_they_are(tmp_path):
    """The pod's emptyDirs are tmpfs mounts (``/tmp`` among them); a checkout under one of them (CI
    clones into /tmp) must still run its ``.venv`` there: here the checkout's parent is the tmpfs."""
    if not readonly_root.available() or readonly_root.CHECKOUT.parent == Path("/"):
        pytest.skip("needs root with unshare and mount, and a checkout below a folder of its own")
    parent = str(readonly_root.CHECKOUT.parent)
    script = (
        "import pathlib, ge_python_backend, sys; pathlib.Path(sys.argv[1], 'w').write_text(''); "
        "print(ge_python_backend.__file__)"
    )
    done = subprocess.run(
        [*readonly_root.prefix(tmp_path, [parent], str(tmp_path)), sys.executable, "-c", script, parent],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(readonly_root.CHECKOUT))
    assert not Path(parent, "w").exists()  # written into the namespace's tmpfs only
