"""`ge-triton serve`: prints the endpoints, answers, and stops cleanly on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from ge_python_backend.ops.server import free_port
from ge_python_backend.testing import models
from tests.support import repos

pytestmark = pytest.mark.e2e


def test_serve_prints_endpoints_serves_and_stops_on_ctrl_c(tmp_path):
    repo = tmp_path / "repo"
    repos.generated(repo, models.linear(tmp_path / "linear.onnx"), "linear")
    ports = [str(free_port()) for _ in range(3)]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ge_python_backend",
            "serve",
            str(repo),
            "--http-port",
            ports[0],
            "--grpc-port",
            ports[1],
            "--metrics-port",
            ports[2],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "ge-triton serve exited early:\n" + "".join(lines)
            lines.append(line)
            if line.startswith("Ctrl-C stops the server"):
                break
        text = "".join(lines)
        assert f"HTTP    http://127.0.0.1:{ports[0]}" in text
        assert f"gRPC    127.0.0.1:{ports[1]}" in text
        assert f"metrics http://127.0.0.1:{ports[2]}/metrics" in text
        client = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
        x = httpclient.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("linear", [x]).as_numpy("probs").shape == (1, 3)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 0, text + rest
        assert "stopping tritonserver" in rest
        assert "Traceback" not in text + rest
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with pytest.raises(ConnectionRefusedError):  # the server is gone
        socket.create_connection(("127.0.0.1", int(ports[0])), timeout=5)


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
