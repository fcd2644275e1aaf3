"""The server command ``ge-triton deploy`` writes runs: the image's preparation step, its
entrypoint, the init container's check and the tritonserver arguments of the Deployment, here on
loopback with the bundled tritonserver (what the image does, without docker)."""

from __future__ import annotations

import os
import re
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
import tritonclient.http as httpclient
import yaml

from ge_python_backend.cli import main
from ge_python_backend.ops.deploy.manifests import BACKENDS_DIR, MODELS_DIR
from ge_python_backend.ops.server import free_port
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import models

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


def test_the_deployments_commands_run(tmp_path):
    onnx = models.linear(tmp_path / "linear.onnx")
    repo = tmp_path / "repo"
    generate(onnx, repo, GenerateOptions(name="linear", streams=2))
    out = tmp_path / "out"
    assert main(["deploy", str(repo), "-o", str(out), "--image", "registry.example.com/ge:1"]) == 0
    pod = _documents(out / "manifests" / "deployment.yaml")["spec"]["template"]["spec"]

    # The image build: prepare.py (bin and ld.so.conf redirected here).
    workspace, bin_dir = tmp_path / "opt", tmp_path / "bin"
    bin_dir.mkdir()
    prepare = [sys.executable, str(out / "image" / "prepare.py"), str(workspace)]
    subprocess.run([*prepare, "--bin-dir", str(bin_dir), "--ld-conf", str(tmp_path / "ld.conf")], check=True)
    backends = workspace / "backends"
    assert (backends / "python" / "triton_python_backend_stub").is_file() and (backends / "ge").is_dir()
    assert Path(BACKENDS_DIR).name == backends.name

    def local(arg: str) -> str:
        return arg.replace(BACKENDS_DIR, str(backends)).replace(MODELS_DIR, str(repo))

    # ldconfig in the image makes the libraries prepare.py lists visible; here LD_LIBRARY_PATH does.
    libraries = (tmp_path / "ld.conf").read_text().split()
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), os.environ["PATH"]]),
        LD_LIBRARY_PATH=os.pathsep.join(libraries),
    )
    entrypoint = ["bash", str(out / "image" / "entrypoint.sh")]

    # The init container: ge-triton check on the mounted repository.
    check = subprocess.run(
        [*entrypoint, *map(local, pod["initContainers"][0]["args"])], env=env, capture_output=True, text=True
    )
    assert check.returncode == 0 and check.stdout.startswith("ok: 1 model checked"), check.stdout + check.stderr

    # The server container: its args with loopback ports.
    container = pod["containers"][0]
    ports = {p["name"]: free_port() for p in container["ports"]}
    renamed = {
        f"--{name}-port={p['containerPort']}": f"--{name}-port={ports[p['name']]}"
        for name, p in ((p["name"], p) for p in container["ports"])
    }
    args = [renamed.get(a, local(a)) for a in container["args"]]
    args += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [*entrypoint, *args], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        http = f"127.0.0.1:{ports['http']}"
        deadline = time.monotonic() + 120
        ready = container["readinessProbe"]["httpGet"]["path"]
        while _status(f"http://{http}{ready}") != 200:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, "not ready after 120 s"
            time.sleep(0.2)
        for probe in ("startupProbe", "livenessProbe"):
            assert _status(f"http://{http}{container[probe]['httpGet']['path']}") == 200
        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        request = httpclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        with httpclient.InferenceServerClient(http) as client:
            result = client.infer("linear", [request])
        expected = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
        np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)
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
    finally:
        server.send_signal(signal.SIGINT)  # a clean exit frees the Python backend's shared memory
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
