"""A model's stub process killed under load, kill + reload cycles, and metrics across reloads,
through a real tritonserver in explicit model-control mode.

Every model here is written by ``generate`` with its defaults (answers returned from execute;
four instances on the NPU engine), plus the one other shape generate can write, ``--streams 2``.
16 client threads send requests whose answers are checked against ONNX Runtime; the stubs are
killed with SIGKILL, found through /proc by their parent (this tritonserver) and their model.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.triton.metrics import HEARTBEAT
from tests.support import reliability_repos as rr
from tests.support.load import Load, linear_requests, stub_pids

pytestmark = pytest.mark.e2e
#: every request in flight at a kill must be answered (with an error) within this long
ANSWER_WITHIN_S = 10.0
CYCLES = 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("stub_death")
    repo = root / "repo"
    sources = rr.Sources(root / "sources")
    rr.model(repo, sources.linear, "plain")
    rr.model(repo, sources.linear, "plain_s2", streams=2)
    rr.model(repo, sources.linear_om, "npu", {"acl_sim_device_ms": "5"})
    rr.model(repo, sources.linear, "reloaded")
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    # A dead stub's model never finishes unloading (its response factories leak): shutdown waits
    # --exit-timeout-secs for it.
    with TritonServer(built[0], model_control_mode="explicit", extra_args=["--exit-timeout-secs=3"]) as running:
        yield running


@pytest.fixture
def client(server):
    """An HTTP client, closed after the test (tritonclient's finalizer would complain otherwise)."""
    with contextlib.closing(httpclient.InferenceServerClient(server.http_address)) as opened:
        yield opened


@pytest.fixture(scope="module")
def session(built):
    return ort.InferenceSession(str(built[1].linear))


def stubs(server, model: str) -> list[int]:
    return stub_pids(server.process.pid, model)


def load_on(server, model: str, built) -> Load:
    """16 clients sending the linear model's requests, checked against ONNX Runtime."""
    return Load(server.http_address, model, linear_requests(built[1].linear), log_tail=lambda: server.log_tail(40))


def kill(server, model: str) -> tuple[float, int]:
    pids = stubs(server, model)
    assert pids, f"no stub process serves {model}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return time.monotonic(), len(pids)


def heartbeat_ages(server, model: str) -> dict[str, float]:
    """Per instance, the age of its newest heartbeat: what the documented alert computes,
    time() - max by (model, version, instance) (ge_heartbeat_timestamp_seconds)."""
    newest: dict[str, float] = {}
    for (name, labels), value in metrics.fetch(server.metrics_url).samples.items():
        found = dict(labels)
        if name == HEARTBEAT and found["model"] == model:
            newest[found["instance"]] = max(newest.get(found["instance"], 0.0), value)
    return {instance: time.time() - beat for instance, beat in newest.items()}


@pytest.mark.parametrize("model", ["plain", "plain_s2", "npu"])
def test_every_request_in_flight_when_the_stub_dies_is_answered_within_seconds(server, client, built, model):
    client.load_model(model)
    backend_failures = metrics.fetch(server.metrics_url).value("nv_inference_request_failure", model=model)
    with load_on(server, model, built) as load:
        load.wait_for("ok", 50)
        assert max(heartbeat_ages(server, model).values()) < 3
        killed_at, killed = kill(server, model)
        load.wait_for("error")
        time.sleep(2.0)  # requests sent after the kill fail too
    in_flight = [r for r in load.records if r[0] < killed_at < r[1]]
    late = [r for r in load.records if r[1] > killed_at]
    print(
        f"{model}: {killed} stub(s) killed, {len(in_flight)} request(s) in flight, all answered, the last "
        f"{max(r[1] for r in in_flight) - killed_at:.1f} s after the kill; {len(late)} answered after it"
    )
    assert in_flight, "no request was in flight at the kill"
    assert not load.unanswered_or_wrong()
    assert all(r[1] - max(r[0], killed_at) < ANSWER_WITHIN_S for r in late)
    errors = {r[2] for r in late if r[2] != "ok"}
    assert errors and all(e.startswith("error: Stub process ") and e.endswith(" is not healthy.") for e in errors)
    # Triton counts each of them as a failure of the model (reason BACKEND) ...
    failed = sum(r[2] != "ok" for r in load.records)
    found = metrics.fetch(server.metrics_url)
    assert found.value("nv_inference_request_failure", model=model) - backend_failures == failed
    assert found.value("nv_inference_request_failure", model=model, reason="BACKEND") - backend_failures == failed
    # ... while the dead stub's series stay exported with their last values; its heartbeat stops.
    assert metrics.fetch(server.metrics_url).value("ge_engine_healthy", model=model) == killed
    time.sleep(1.5)
    assert min(heartbeat_ages(server, model).values()) > 2.5
    client.unload_model(model)


def test_kill_and_reload_cycles_under_load_leave_tritonserver_serving(server, client, built):
    model = "npu"
    client.load_model(model)
    with load_on(server, model, built) as load:
        for cycle in range(CYCLES):
            load.wait_for("ok", 20 * (cycle + 1))
            kill(server, model)
            load.wait_for("error", cycle + 1)
            client.unload_model(model)
            client.load_model(model)
            assert server.process.poll() is None, f"tritonserver died in cycle {cycle}"
            assert max(heartbeat_ages(server, model).values()) < 3  # the alert clears after the reload
        load.wait_for("ok", 20 * (CYCLES + 1))
    assert not load.unanswered_or_wrong()
    assert client.is_server_live() and client.is_model_ready(model)
    print(f"{CYCLES} kill + reload cycles, {sum(r[2] == 'ok' for r in load.records)} right answers")
    client.unload_model(model)


def test_an_in_place_reload_keeps_every_series_and_counts_on(server, client, built, session):
    model = "reloaded"
    client.load_model(model)

    def send(rows: int) -> None:
        x = np.ones((rows, 4), np.float32)
        tensor = httpclient.InferInput("x", [rows, 4], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_allclose(
            client.infer(model, [tensor]).as_numpy("probs"), session.run(None, {"x": x})[1], atol=1e-5
        )

    def series(name: str) -> dict[str, float]:
        return {
            dict(labels)["pid"]: value
            for (n, labels), value in metrics.fetch(server.metrics_url).samples.items()
            if n == name and dict(labels)["model"] == model
        }

    def eventually(check) -> None:
        deadline = time.monotonic() + 15
        while not check() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert check()

    send(3)
    (old,) = stubs(server, model)
    eventually(lambda: series("ge_batch_rows") == {str(old): 3})
    set_parameters(built[0] / model / "config.pbtxt", reject_nonfinite="true")  # a change that needs a full load
    client.load_model(model)
    (new,) = set(stubs(server, model)) - {old}
    send(2)
    send(4)
    # The old instance finalizes after the new one initialized; its series go, the new ones count.
    eventually(lambda: series("ge_batch_rows") == {str(new): 6})
    for name in ("ge_batches", "ge_request_failures", "ge_engine_healthy", HEARTBEAT):
        assert set(series(name)) == {str(new)}, name
    assert series("ge_batches") == {str(new): 2}
    client.unload_model(model)
