"""Stateful models under Triton's sequence batcher, and model versions, through a real tritonserver."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from ge_python_backend.ops.bench import metrics
from tests.support.clients import infer_many
from tests.support.repos import IDLE_TIMEOUT_MS

pytestmark = [pytest.mark.e2e, pytest.mark.contract]


def step_by_step(session, steps, gain):
    """The cell run alone on one sequence, one step at a time, from the zero initial state."""
    h = np.zeros((1, 1, 6), np.float32)
    outputs = []
    for x in steps:
        y, h = session.run(None, {"x": x, "h_in": h, "gain": np.array(gain, np.float32)})
        outputs.append(y)
    return outputs


def run_sequence(address, model, sequence_id, steps, gain, results, errors):
    client = grpcclient.InferenceServerClient(address)
    try:
        for index, x in enumerate(steps):
            inputs = [grpcclient.InferInput("x", [1, 4], "FP32"), grpcclient.InferInput("gain", [1, 1], "FP32")]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(np.array([[gain]], np.float32))
            result = client.infer(
                model,
                inputs,
                sequence_id=sequence_id,
                sequence_start=index == 0,
                sequence_end=index == len(steps) - 1,
            )
            results[sequence_id].append(result.as_numpy("y"))
    except Exception as exc:  # reported by the test thread
        errors.append(exc)
    finally:
        client.close()


def metric(server, name, model, **labels) -> float:
    scrape = metrics.fetch(server.metrics_url)
    assert any(n == name and ("model", model) in ls for n, ls in scrape.samples), f"GEModel's {name} is missing"
    return scrape.value(name, model=model, **labels)


@pytest.mark.parametrize("model", ["cell_direct", "cell_oldest"])
def test_interleaved_sequences_match_step_by_step_runs(server, sources, model):
    session = ort.InferenceSession(str(sources["cell"]))
    rng = np.random.default_rng(42)
    lengths = {1000 + i: int(rng.integers(3, 9)) for i in range(16)}
    gains = {sid: float(rng.choice([0.5, 1.0, 2.0])) for sid in lengths}
    steps = {sid: [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(n)] for sid, n in lengths.items()}
    results = {sid: [] for sid in lengths}
    errors: list[Exception] = []
    threads = [
        threading.Thread(
            target=run_sequence, args=(server.grpc_address, model, sid, steps[sid], gains[sid], results, errors)
        )
        for sid in lengths
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    for sid in lengths:
        expected = step_by_step(session, steps[sid], gains[sid])
        assert len(results[sid]) == len(expected)
        for got, want in zip(results[sid], expected):
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert metric(server, "ge_sequences_active", model) == 0  # END freed every sequence's state
    # Steps of concurrent sequences shared engine calls.
    assert metric(server, "ge_batch_rows", model) > metric(server, "ge_batches", model)


def test_padding_slots_of_the_direct_batcher_are_skipped_not_counted_as_failures(server, sources):
    """Triton's direct sequence batcher fills empty slots below the highest busy one with padding
    requests (READY false, correlation ID 0). 8 sequences x 5 steps, all answered correctly at
    the client: GEModel counts no failure and exactly the clients' rows."""
    model = "cell_direct"
    session = ort.InferenceSession(str(sources["cell"]))
    rng = np.random.default_rng(8)
    steps = {2000 + i: [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(5)] for i in range(8)}
    failures_before = metric(server, "ge_request_failures", model, kind="input")
    rows_before = metric(server, "ge_batch_rows", model)
    results = {sid: [] for sid in steps}
    errors: list[Exception] = []
    threads = [
        threading.Thread(target=run_sequence, args=(server.grpc_address, model, sid, steps[sid], 1.0, results, errors))
        for sid in steps
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    answered = 0
    for sid, sequence in steps.items():
        for got, want in zip(results[sid], step_by_step(session, sequence, 1.0), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
            answered += 1
    assert answered == 40
    deadline = time.monotonic() + 10  # batch counts are sent about 0.1 s after the model goes idle
    while metric(server, "ge_batch_rows", model) - rows_before < answered and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(server, "ge_batch_rows", model) - rows_before == answered
    assert metric(server, "ge_request_failures", model, kind="input") == failures_before


def test_idle_sequences_are_dropped_after_the_timeout_without_another_request(server):
    """3 sequences started and left open: their state goes IDLE_TIMEOUT_MS after their last step,
    on GEModel's timer, with no request to the model after them."""
    model = "cell_idle"
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        for sid in (3001, 3002, 3003):
            inputs = [grpcclient.InferInput("x", [1, 4], "FP32"), grpcclient.InferInput("gain", [1, 1], "FP32")]
            inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
            inputs[1].set_data_from_numpy(np.ones((1, 1), np.float32))
            client.infer(model, inputs, sequence_id=sid, sequence_start=True)
    finally:
        client.close()
    started = time.monotonic()
    assert metric(server, "ge_sequences_active", model) == 3
    while metric(server, "ge_sequences_active", model) and time.monotonic() - started < IDLE_TIMEOUT_MS / 1000 + 3:
        time.sleep(0.05)
    dropped_after = time.monotonic() - started
    assert metric(server, "ge_sequences_active", model) == 0, f"still held {dropped_after:.1f} s after the last step"
    assert dropped_after >= IDLE_TIMEOUT_MS / 1000 - 0.1
    print(f"3 idle sequences dropped {dropped_after:.2f} s after their last step (timeout {IDLE_TIMEOUT_MS} ms)")


def test_two_versions_are_loaded_and_addressed_separately(server, sources):
    client = grpcclient.InferenceServerClient(server.grpc_address)
    assert client.is_model_ready("versioned", "1") and client.is_model_ready("versioned", "2")
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    outputs = {}
    for version in ("1", "2"):
        tensor = grpcclient.InferInput("x", [3, 4], "FP32")
        tensor.set_data_from_numpy(x)
        outputs[version] = client.infer("versioned", [tensor], model_version=version).as_numpy("logits")
    np.testing.assert_allclose(
        outputs["1"], ort.InferenceSession(str(sources["linear"])).run(None, {"x": x})[0], atol=1e-5
    )
    np.testing.assert_allclose(
        outputs["2"], ort.InferenceSession(str(sources["linear_v2"])).run(None, {"x": x})[0], atol=1e-5
    )
    assert np.abs(outputs["1"] - outputs["2"]).max() > 0.1  # the versions really differ
    latest = infer_many("http", server.http_address, "versioned", [{"x": x}])[0][0]["logits"]
    np.testing.assert_allclose(latest, outputs["2"], atol=1e-6)  # no version given: the latest
