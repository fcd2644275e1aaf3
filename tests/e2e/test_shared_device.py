"""One simulated NPU per device id, shared by every instance (stub process) of a tritonserver.

Two instances of a model that keeps every AI Core busy serve no more than one device can run
when both are on device 0, and more than that when each has a device of its own. The reference
is the modelled device itself: the test reads the server's shared device state (its process
group is the scope, hostshm.py) for the busy seconds of each device, beside the rows served and
the model's ge_device_busy_seconds_total.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.sim import sim_compile
from ge_python_backend.sim.device import SharedDevice
from ge_python_backend.testing import models
from ge_python_backend.triton.metrics import DEVICE_BUSY, FLUSH_INTERVAL
from tests.support import clients, repos

pytestmark = pytest.mark.e2e

#: modelled device time per batch: the host's share of a batch (a few ms) is small beside it
DEVICE_MS = 60.0
MAX_BATCH = 8
#: rows per second one device runs at most
DEVICE_BOUND = MAX_BATCH / (DEVICE_MS / 1000)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared_device")
    onnx_file = models.linear(folder / "linear.onnx")
    om = folder / "linear.om"
    sim_compile(onnx_file, om, batch_gears=(1, 2, 4, MAX_BATCH))
    repo = folder / "repo"
    for name, devices in (("one_device", (0,)), ("two_devices", (0, 1))):
        model = repos.generated(
            repo, om, name, instance_count=2, device_ids=devices, max_batch_size=MAX_BATCH, max_queue_delay_us=2000
        )
        # every batch timed by events: the metric is then the device's own time, which the modelled
        # devices must equal; the estimate for untimed batches (host clock) is test_device_busy's
        set_parameters(model / "config.pbtxt", acl_sim_device_ms=f"{DEVICE_MS:g}", acl_timing_every="1")
    with TritonServer(repo) as server:
        yield server, onnx_file


def metric_busy(server, model: str) -> float:
    """ge_device_busy_seconds_total of ``model``, summed over its instances (after their flush)."""
    time.sleep(2 * FLUSH_INTERVAL)
    return metrics.fetch(server.metrics_url).value(DEVICE_BUSY, model=model)


def measure(server, model: str, onnx_file) -> tuple[float, list[float]]:
    """Rows per second served to 64 concurrent batch-1 requests, and the busy fraction of
    devices 0 and 1 over the same window (from the modelled devices); the model's metric
    ge_device_busy_seconds_total over the window agrees with their busy seconds."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    requests = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(64)]
    clients.infer_many("grpc", server.grpc_address, model, requests[:16])  # warm-up
    scope = f"pg{server.process.pid}"
    devices = [SharedDevice(d, scope=scope) for d in (0, 1)]
    try:
        counted = metric_busy(server, model)
        before = [d.usage().busy_seconds for d in devices]
        started = time.monotonic()
        results = []
        for _ in range(3):
            results += clients.infer_many("grpc", server.grpc_address, model, requests, concurrency=64)
        wall = time.monotonic() - started
        counted = metric_busy(server, model) - counted
        modelled = [d.usage().busy_seconds - b for d, b in zip(devices, before)]
        busy = [m / wall for m in modelled]
    finally:
        for device in devices:
            device.close()
    assert counted == pytest.approx(sum(modelled), rel=0.1)
    session = ort.InferenceSession(str(onnx_file))
    names = [o.name for o in session.get_outputs()]
    for request, (outputs, error) in zip(requests * 3, results):
        assert error is None, error
        for name, expected in zip(names, session.run(None, request)):
            np.testing.assert_allclose(outputs[name], expected, rtol=1e-5, atol=1e-5)
    return len(results) / wall, busy


def test_two_instances_on_one_device_serve_what_one_device_runs(served):
    server, onnx_file = served
    rows_per_s, busy = measure(server, "one_device", onnx_file)
    assert rows_per_s <= 1.15 * DEVICE_BOUND  # the modelled device cannot run more
    assert busy[0] >= 0.7 and busy[1] == 0.0, busy  # queued batches kept device 0 busy; device 1 idle


def test_two_instances_on_two_devices_serve_more_than_one_device_runs(served):
    server, onnx_file = served
    rows_per_s, busy = measure(server, "two_devices", onnx_file)
    assert busy[0] > 0.3 and busy[1] > 0.3 and sum(busy) > 1.0, busy  # both devices ran at once
    assert rows_per_s > 1.15 * DEVICE_BOUND
