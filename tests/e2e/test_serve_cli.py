"""`ge-triton serve`: says which models are up and which failed and why, refuses ports in use,
stops tritonserver and removes its temporary folder on every stop signal, keeps HTTP inference
off where HTTP listens off loopback (tritonserver 2.51 aborts on one small HTTP JSON request), and
keeps the operator APIs behind its key."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ge_python_backend.ops.access import API_KEY_HEADER, GRPC_HEADER_PREFIX, HTTP_INFERENCE_OFF_HEADER
from ge_python_backend.ops.bench import random_inputs
from ge_python_backend.ops.server import free_port
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support import repos
from tests.support.clients import HUGE_SHAPE_REQUEST

pytestmark = pytest.mark.e2e
SLOW_MODEL = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)

    def execute(self, requests):
        return []
"""
SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


PROFILING_TOKEN = "ops-team-0123456789abcdef"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """linear (serves), broken (its model file is missing) and linear_sim (acl-sim, profiling on
    demand with a token file)."""
    root = tmp_path_factory.mktemp("serve")
    linear = models.linear(root / "linear.onnx")
    repo = root / "repo"
    repos.generated(repo, linear, "linear")
    (repos.generated(repo, linear, "broken") / "1" / "model.onnx").unlink()
    sim_compile(linear, root / "linear.om", batch_gears=(1, 2, 4))
    sim = repos.generated(repo, root / "linear.om", "linear_sim")
    (sim / "1" / "profiling-tokens").write_text(f"{PROFILING_TOKEN}\n")
    set_parameters(
        sim / "config.pbtxt", acl_profiling_dir=str(root / "prof"), acl_profiling_tokens_file="profiling-tokens"
    )
    return repo


class Serve:
    """``ge-triton serve REPO`` on free ports, its output read line by line."""

    def __init__(self, repo: Path, *args: str, cwd: Path | None = None) -> None:
        self.ports = [free_port() for _ in range(3)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ge_python_backend", "serve", str(repo)]
            + ["--http-port", str(self.ports[0]), "--grpc-port", str(self.ports[1])]
            + ["--metrics-port", str(self.ports[2]), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            cwd=cwd,
        )
        self.lines: list[str] = []
        self.workspace = Path(re.search(r"\(log: (.+)/tritonserver\.log\)", self.readline()).group(1))

    def readline(self) -> str:
        line = self.process.stdout.readline()
        self.lines.append(line)
        return line

    def until(self, prefix: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.readline()
            assert line, "ge-triton serve exited early:\n" + self.text
            if line.startswith(prefix):
                return self.text
        raise AssertionError(f"no line starting {prefix!r}:\n{self.text}")

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def tritonserver(self) -> int:
        """The tritonserver process serve started (its child)."""
        children = (Path("/proc") / str(self.process.pid) / "task" / str(self.process.pid) / "children").read_text()
        (pid,) = children.split()
        return int(pid)

    def end(self, signum: int, timeout: float = 60) -> str:
        """Send ``signum``; wait for serve to exit; return the rest of its output."""
        self.process.send_signal(signum)
        rest, _ = self.process.communicate(timeout=timeout)
        self.lines.append(rest)
        return rest

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def gone(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def infer_http(port: int) -> np.ndarray:
    x = httpclient.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    return httpclient.InferenceServerClient(f"127.0.0.1:{port}").infer("linear", [x]).as_numpy("probs")


def test_serve_lists_the_models_up_and_those_that_failed_with_the_reason_and_stops_on_ctrl_c(repo):
    serve = Serve(repo)
    try:
        text = serve.until("Ctrl-C stops the server")
        assert f"ready  HTTP    http://127.0.0.1:{serve.ports[0]}" in text
        assert f"gRPC    127.0.0.1:{serve.ports[1]}" in text
        assert f"metrics http://127.0.0.1:{serve.ports[2]}/metrics" in text
        assert "model  ready   linear (version 1)\n" in text
        (failed,) = [line for line in serve.lines if line.startswith("model  FAILED  broken (version 1): ")]
        assert f"model file {repo / 'broken' / '1' / 'model.onnx'} does not exist" in failed
        assert "At:" not in text  # Triton's reason, not the traceback after it
        assert infer_http(serve.ports[0]).shape == (1, 3)
        triton = serve.tritonserver()
        rest = serve.end(signal.SIGINT)
        assert serve.process.returncode == 0, serve.text
        assert "stopping tritonserver (SIGINT)" in rest
        assert "Traceback" not in serve.text
        assert gone(triton) and not serve.workspace.exists()
    finally:
        serve.kill()
    with pytest.raises(ConnectionRefusedError):  # the server is gone
        socket.create_connection(("127.0.0.1", serve.ports[0]), timeout=5)


def test_with_exit_on_error_in_force_a_failed_model_ends_serve_with_its_reason(repo):
    serve = Serve(repo, "--server-arg=--exit-on-error=true")
    try:
        rest, _ = serve.process.communicate(timeout=120)
        assert serve.process.returncode == 2, rest
        assert "ge-triton serve: error: tritonserver exited with code 1 while starting:" in rest
        assert f"model 'broken': model file {repo / 'broken' / '1' / 'model.onnx'} does not exist" in rest
        assert "failed to load all models" in rest
        assert "Traceback" not in rest and not serve.workspace.exists()
    finally:
        serve.kill()


def test_a_port_in_use_is_refused_before_tritonserver_starts(repo):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "ge_python_backend", "serve", str(repo), "--grpc-port", str(taken)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert (
        f"ge-triton serve: error: gRPC port {taken} on 127.0.0.1 is in use by pid {os.getpid()} "
        "(python" in result.stderr
    )
    assert "choose another port (--grpc-port)" in result.stderr
    workspace = Path(re.search(r"\(log: (.+)/tritonserver\.log\)", result.stdout).group(1))
    assert not workspace.exists()


def _http(port: int, method: str, path: str, body: object = None, headers: dict | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = None if body is None else json.dumps(body)
        connection.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_off_loopback_serve_refuses_http_inference_and_the_operator_apis_without_its_key_and_ends_on_sighup(repo):
    """Finding 6: HTTP bound off loopback through --server-arg turns HTTP inference off; finding 1:
    the request that aborts 2.51 is refused; finding 2: model configs (and the other operator APIs)
    need the key, profiling tokens are nowhere in a config, and a window opened on demand is bounded
    and names its request in the log."""
    serve = Serve(repo, "--server-arg=--http-address=0.0.0.0")
    try:
        text = serve.until("Ctrl-C stops the server")
        assert "HTTP inference is off (--http-inference): send inference over gRPC" in text
        key = re.search(rf"need header {API_KEY_HEADER}: (\S+) ", text).group(1)
        port = serve.ports[0]
        status, answer = _http(port, "POST", "/v2/models/linear/infer", HUGE_SHAPE_REQUEST)
        assert (status, answer["error"]) == (
            403,
            f"This API is restricted, expecting header '{HTTP_INFERENCE_OFF_HEADER}'",
        )
        for method, path, body in (
            ("GET", "/v2/models/linear_sim/config", None),
            ("POST", "/v2/repository/index", {}),
            ("POST", "/v2/repository/models/linear/unload", {}),
            ("POST", "/v2/systemsharedmemory/region/r/register", {"key": "/x", "offset": 0, "byte_size": 8}),
        ):
            status, answer = _http(port, method, path, body)
            assert (status, answer["error"]) == (403, f"This API is restricted, expecting header '{API_KEY_HEADER}'")
        status, config = _http(port, "GET", "/v2/models/linear_sim/config", headers={API_KEY_HEADER: key})
        assert status == 200 and config["parameters"]["acl_profiling_tokens_file"]["string_value"] == "profiling-tokens"
        assert PROFILING_TOKEN not in json.dumps(config)

        client = grpcclient.InferenceServerClient(f"127.0.0.1:{serve.ports[1]}")
        assert client.is_server_live() and client.is_model_ready("linear")
        with pytest.raises(InferenceServerException, match=f"expecting header '{GRPC_HEADER_PREFIX}{API_KEY_HEADER}'"):
            client.get_model_config("linear_sim")
        x = grpcclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("linear", [x]).as_numpy("probs").shape == (1, 3)
        grpc_url = f"127.0.0.1:{serve.ports[1]}"
        assert random_inputs(grpc_url, "grpc", "linear", api_key=key)["x"].shape == (1, 4)  # ge-triton bench --api-key
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            random_inputs(grpc_url, "grpc", "linear")
        for count in ("\u0663", "99999999999999999999", "-5"):
            with pytest.raises(InferenceServerException, match="is not an integer from 1 to 1000 in ASCII digits"):
                client.infer("linear_sim", [x], parameters={"acl_profile": f"{PROFILING_TOKEN}:{count}"})
        client.infer("linear_sim", [x], request_id="profile-me", parameters={"acl_profile": f"{PROFILING_TOKEN}:2"})
        client.close()
        log = _read(serve.workspace / "tritonserver.log")
        assert "profiling started (2 batches, at most 60 s) for request 'profile-me'" in log
        assert PROFILING_TOKEN not in log
        triton = serve.tritonserver()
        rest = serve.end(signal.SIGHUP)
        assert serve.process.returncode == 0 and "stopping tritonserver (SIGHUP)" in rest
        assert gone(triton) and not serve.workspace.exists()
    finally:
        serve.kill()


def test_explicit_model_control_loads_the_named_models_at_start_and_the_others_on_request(repo):
    serve = Serve(repo, "--model-control-mode", "explicit", "--load-model", "linear")
    try:
        text = serve.until("Ctrl-C stops the server")
        assert "model  ready   linear (version 1)\n" in text
        assert "model  -       not loaded: broken, linear_sim (explicit mode: " in text
        assert "FAILED" not in text  # broken is not loaded, so not failed
        key = re.search(rf"need header {API_KEY_HEADER}: (\S+) ", text).group(1)
        port = serve.ports[0]
        assert _http(port, "POST", "/v2/repository/models/linear_sim/load", {}, {API_KEY_HEADER: key})[0] == 200
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_model_ready("linear_sim") and not client.is_model_ready("broken")
        status, answer = _http(port, "POST", "/v2/repository/models/linear/unload", {}, {API_KEY_HEADER: key})
        assert status == 200, answer
        assert not client.is_model_ready("linear")
        assert serve.end(signal.SIGINT) and serve.process.returncode == 0
    finally:
        serve.kill()


def test_load_model_without_explicit_mode_is_refused_before_tritonserver_starts(repo):
    command = [sys.executable, "-m", "ge_python_backend", "serve", str(repo), "--model-control-mode", "none"]
    result = subprocess.run(
        [*command, "--load-model", "linear"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "ge-triton serve: error: --load-model linear: models are loaded by name only in model control mode " in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


NPU_GE_DUMPS = """name: "dumps"
backend: "npu_ge"
max_batch_size: 8
parameters [
 {key: "dump_graph" value {string_value: "1"}},
 {key: "profiling" value {string_value: "true"}},
 {key: "engine" value {string_value: "acl-sim"}},
 {key: "atc_cache_dir" value {string_value: "%s"}}
]
"""


def test_a_ge_backend_folders_graph_dump_and_profiling_go_where_serve_was_started_and_outlive_it(tmp_path):
    """Their dump_graph and profiling write to ./dump_graph and ./profiling of the server's working
    directory, which under serve is its temporary folder, removed at exit: they go to the folder
    serve was started in instead, and the load's log says where."""
    repo, work = tmp_path / "repo", tmp_path / "work"
    models.linear(repo / "dumps" / "1" / "linear.onnx")
    (repo / "dumps" / "config.pbtxt").write_text(NPU_GE_DUMPS % (tmp_path / "cache"))
    work.mkdir()
    serve = Serve(repo, cwd=work)
    try:
        text = serve.until("Ctrl-C stops the server")
        assert "model  ready   dumps (version 1)" in text, text
        log = _read(serve.workspace / "tritonserver.log")
        serve.end(signal.SIGINT)
    finally:
        serve.kill()
    assert not serve.workspace.exists()
    assert f"dump_graph=1 -> ATC dumps GE graphs to {work / 'dump_graph'}" in log
    assert f"profiling=true -> PROFILING_MODE=true for CANN, results in {work / 'profiling'}" in log
    (dumped,) = (work / "dump_graph").glob("pid_*_deviceid_0/ge_sim_linear.txt")  # the simulator's ATC wrote it
    assert "MatMul" in dumped.read_text()


def test_sigterm_during_the_startup_wait_stops_everything_at_once(tmp_path):
    (tmp_path / "repo" / "slow" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (tmp_path / "repo" / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    serve = Serve(tmp_path / "repo")
    try:
        deadline = time.monotonic() + 60
        while "loading: slow:1" not in _read(serve.workspace / "tritonserver.log") and time.monotonic() < deadline:
            time.sleep(0.1)
        triton = serve.tritonserver()
        started = time.monotonic()
        rest = serve.end(signal.SIGTERM, timeout=45)
        assert time.monotonic() - started < 30
        assert serve.process.returncode == 0 and "stopping tritonserver (SIGTERM)" in rest
        assert gone(triton) and not serve.workspace.exists()
        assert not _processes_mentioning(str(tmp_path / "repo")), "a stub of the loading model is left"
    finally:
        serve.kill()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes() and not gone(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_serve_a_missing_repository_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "ge_python_backend", "serve", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "is not a folder" in result.stderr
