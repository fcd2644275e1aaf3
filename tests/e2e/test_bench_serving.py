"""ge-triton bench against the real tritonserver of the end-to-end tests (a few seconds)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend.cli import main as ge_triton
from ge_python_backend.ops.bench import Sweep, Target, random_inputs, run_sweep
from ge_python_backend.testing import models
from tests.support import images, repos
from tests.support.repos import SIM_DEVICE_MS

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


def _bench(model: str, *args: str) -> list[str]:
    return ["bench", model, "--concurrency", "4", "--duration", "1", "--warmup", "0.3", "--no-progress", *args]


def test_durations_are_per_batch_of_each_instance(server, tmp_path, capsys):
    """Finding: with 2 instances, each one's phase total was divided by both instances'
    executions: half the truth. The simulator keeps each batch SIM_DEVICE_MS on its device."""
    run = tmp_path / "run.json"
    code = ge_triton(
        _bench("sim_timed", "-u", server.grpc_address, "--metrics-url", server.metrics_url, "--json", str(run))
    )
    assert code == 0
    (point,) = json.loads(run.read_text())["points"]
    executes = {k: v for k, v in point["server"]["per_batch_us"].items() if "phase=execute" in k}
    assert len(executes) == 2, executes  # one per instance
    with capsys.disabled():
        print("execute per batch, per instance:", {k: f"{v / 1000:.2f} ms" for k, v in executes.items()})
    for series, us in executes.items():
        # the modelled time exactly, less the untimed batches since an instance's last timed one
        # (acl_timing_every: they count when the next timed batch does); half of it was the bug
        assert SIM_DEVICE_MS * 1000 * 0.75 <= us <= SIM_DEVICE_MS * 1000 * 1.6, (series, us)
    out = capsys.readouterr().out
    assert "ms per batch of this instance" in out
    # its two instances run on devices 0 and 1: each device's busy seconds, beside throughput and latency
    busy = point["server"]["device_busy_s"]
    assert set(busy) == {"0", "1"} and all(0 < s <= 1.05 * point["duration_s"] for s in busy.values()), busy
    assert "device busy" in out


def test_string_inputs_are_sent_over_grpc_from_an_npz(server, tmp_path):
    """Finding: over gRPC (the default) a TYPE_STRING input went out without Triton's length
    prefixes, so every request failed; and .npz files with object arrays were refused."""
    pytest.importorskip("PIL")
    image = images.images()["PNG RGB"].data
    data = tmp_path / "request.npz"
    np.savez(data, IMAGE=np.array([[image], [image]], dtype=object))
    run = tmp_path / "run.json"
    code = ge_triton(
        _bench("classifier_rgb", "-u", server.grpc_address, "--metrics-url", server.metrics_url, "--data", str(data))
        + ["--json", str(run)]
    )
    (point,) = json.loads(run.read_text())["points"]
    assert code == 0 and point["errors"] == 0 and point["requests"] > 0
    assert point["server"]["inferences"] == 2 * point["requests"]


def test_an_early_error_leaves_no_server_and_no_folder(tmp_path, monkeypatch, capsys):
    """Finding: bench --repository left its temporary folder behind on an early error."""
    repo = tmp_path / "repo"
    repos.generated(repo, models.linear(tmp_path / "linear.onnx"), "linear")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert ge_triton(_bench("no_such_model", "--repository", str(repo))) == 2
    assert "cannot read model 'no_such_model'" in capsys.readouterr().err
    assert list((tmp_path / "tmp").iterdir()) == []  # the server's workspace is gone
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(repo).encode() in _read(p)]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
