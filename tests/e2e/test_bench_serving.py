"""ge-triton bench against the real tritonserver of the end-to-end tests (a few seconds)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ge_python_backend.cli import main as ge_triton
from ge_python_backend.ops.bench import Sweep, Target, random_inputs, run_sweep

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sweep_counts_match_the_servers_own_counters(server, protocol):
    url = server.grpc_address if protocol == "grpc" else server.http_address
    inputs = random_inputs(url, protocol, "linear", batch_size=3)
    assert inputs["x"].shape == (3, 4) and inputs["x"].dtype == np.float32
    target = Target(url, "linear", inputs, protocol, metrics_url=server.metrics_url)
    points = run_sweep(target, Sweep(levels=(1, 4), duration_s=0.5, warmup_s=0.2))
    assert [p.level for p in points] == [1, 4]
    for point in points:
        assert point.errors == 0 and point.requests > 0
        # Triton counted the same successful requests and rows in the same window.
        assert point.server["requests"] == point.requests
        assert point.server["inferences"] == 3 * point.requests


def test_failures_are_counted_not_raised(server):
    inputs = {"x": np.zeros((1, 5), np.float32)}  # the model takes [-1, 4]
    target = Target(server.grpc_address, "linear", inputs)
    (point,) = run_sweep(target, Sweep(levels=(2,), duration_s=0.3, warmup_s=0.0))
    assert point.requests == 0 and point.errors > 0
    assert "[-1,4]" in point.error_samples[0]


def test_cli_writes_json_and_plot(server, tmp_path, capsys):
    code = ge_triton(
        [
            "bench",
            "linear",
            "-u",
            server.grpc_address,
            "--metrics-url",
            server.metrics_url,
            "--concurrency",
            "1,2",
            "--duration",
            "0.5",
            "--warmup",
            "0.1",
            "--json",
            str(tmp_path / "run.json"),
            "--plot",
            str(tmp_path / "run.png"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "p99 ms" in out and "c.infer" in out
    doc = json.loads((tmp_path / "run.json").read_text())
    assert [p["level"] for p in doc["points"]] == [1, 2]
    assert all(p["server"]["requests"] == p["requests"] for p in doc["points"])
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_names_an_unknown_model(server, capsys):
    assert ge_triton(["bench", "no_such_model", "-u", server.grpc_address, "--duration", "0.1"]) == 2
    assert "no_such_model" in capsys.readouterr().err
