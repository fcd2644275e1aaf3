"""The request path through a real tritonserver, over HTTP and gRPC, against ONNX Runtime."""

from __future__ import annotations

import re
import time
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from tests.models.hooked_classifier import decode, top_k
from tests.support.clients import infer_many, url

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
PROTOCOLS = ["grpc", "http"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["linear", "linear_s2", "linear_ge", "linear_sim"])
def test_mixed_concurrent_requests_match_onnxruntime(server, sources, protocol, model):
    session = ort.InferenceSession(str(sources["linear"]))
    rng = np.random.default_rng(hash((protocol, model)) % 2**32)
    requests = [{"x": rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)} for _ in range(200)]
    results = infer_many(protocol, url(server, protocol), model, requests)
    for request, (outputs, error) in zip(requests, results):
        assert error is None, error
        logits, probs = session.run(None, request)
        assert np.abs(outputs["logits"] - logits).max() <= 1e-5
        assert np.abs(outputs["probs"] - probs).max() <= 1e-5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_requests_among_good_ones_fail_alone(server, sources, protocol):
    session = ort.InferenceSession(str(sources["linear"]))
    rng = np.random.default_rng(7)
    good = [{"x": rng.standard_normal((2, 4)).astype(np.float32)} for _ in range(20)]
    bad = [{"x": np.ones((2, 4), np.float64)}, {"x": np.ones((2, 5), np.float32)}, {"x": np.ones((9, 4), np.float32)}]
    requests = good[:10] + bad + good[10:]
    results = infer_many(protocol, url(server, protocol), "linear", requests)
    errors = [error for _, error in results[10:13]]
    assert all(e is not None for e in errors)
    if protocol == "http":
        assert all(e.status() == "400" for e in errors)
    else:
        assert all(e.status() == "StatusCode.INVALID_ARGUMENT" for e in errors)
    assert "FP64" in errors[0].message() and "FP32" in errors[0].message()
    assert "Expected [-1,4], got [2,5]" in errors[1].message()
    assert "batch-size must be <= 8" in errors[2].message()
    for request, (outputs, error) in zip(good, results[:10] + results[13:]):
        assert error is None
        np.testing.assert_allclose(outputs["probs"], session.run(None, request)[1], atol=1e-5)
    assert httpclient.InferenceServerClient(server.http_address).is_server_ready()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requests_the_engine_refuses_fail_alone_among_concurrent_good_ones(server, sources, protocol):
    """Two inputs whose lengths the config leaves open but the model needs equal: every 7th
    request's differ, the engine refuses its batch (its group: requests of other shapes never
    share it), and the others are answered as ONNX Runtime answers them."""
    session = ort.InferenceSession(str(sources["two_inputs"]))
    rng = np.random.default_rng(25)
    requests = []
    for index in range(120):
        rows, length = int(rng.integers(1, 5)), (3, 5)[index % 2]
        a = rng.standard_normal((rows, length)).astype(np.float32)
        b = rng.standard_normal((rows, length + 1 if index % 7 == 3 else length)).astype(np.float32)
        requests.append({"a": a, "b": b})
    results = infer_many(protocol, url(server, protocol), "pair_batching", requests)
    for index, (request, (outputs, error)) in enumerate(zip(requests, results)):
        if index % 7 == 3:
            assert error is not None and "broadcast" in error.message()
            continue
        assert error is None, error
        for name, want in zip(("sum", "count"), session.run(None, request)):
            np.testing.assert_array_equal(outputs[name], want)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subclass_hooks_serve_label_strings(server, sources, protocol):
    session = ort.InferenceSession(str(sources["hooked"]))
    rng = np.random.default_rng(11)
    images = [rng.integers(0, 256, (int(rng.integers(1, 4)), 8, 8, 3), dtype=np.uint8) for _ in range(40)]
    requests = [{"IMAGE": np.array([[img.tobytes()] for img in batch], dtype=np.object_)} for batch in images]
    requests.append({"IMAGE": np.array([[b"not an image"]], dtype=np.object_)})
    results = infer_many(protocol, url(server, protocol), "hooked", requests)
    for request, (outputs, error) in zip(requests[:-1], results[:-1]):
        assert error is None, error
        (logits,) = session.run(None, {"image": decode(request["IMAGE"], 8)})
        labels, scores = top_k(logits, 3, [f"class_{i}" for i in range(10)])
        assert outputs["LABELS"].tolist() == labels.tolist()
        np.testing.assert_allclose(outputs["SCORES"], scores, atol=1e-5)
    error = results[-1][1]
    assert error is not None and "IMAGE[0] has 12 bytes; expected 192 (8x8 RGB)" in error.message()


def _phase_us(metrics_text: str, model: str, phase: str) -> float:
    """The summed ge_phase_duration_us of ``model``'s instances for ``phase``."""
    pattern = re.compile(r"^ge_phase_duration_us\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)
    return sum(
        float(value)
        for labels, value in pattern.findall(metrics_text)
        if f'model="{model}"' in labels and f'phase="{phase}"' in labels
    )


def test_the_hooks_time_is_reported_as_their_phases(server):
    """ge_phase_duration_us counts the preprocess and postprocess hooks (phases preprocess and
    postprocess) beside the batch's own phases, so the phases add up to the model's compute time."""
    before = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    rng = np.random.default_rng(3)
    requests = [{"IMAGE": np.array([[rng.integers(0, 256, 192, dtype=np.uint8).tobytes()]], dtype=np.object_)}] * 20
    assert all(error is None for _, error in infer_many("grpc", url(server, "grpc"), "hooked", requests))
    time.sleep(1.5)  # GEModel flushes its metrics at most once a second
    after = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    for phase in ("preprocess", "postprocess"):
        assert _phase_us(after, "hooked", phase) > _phase_us(before, "hooked", phase), phase
    assert _phase_us(after, "linear", "preprocess") == 0, "a model without hooks has no hook phases"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_batching_model_runs_each_request_alone(server, sources, protocol):
    session = ort.InferenceSession(str(sources["two_inputs"]))
    rng = np.random.default_rng(5)
    requests = []
    for _ in range(30):
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 6)))
        requests.append({n: rng.standard_normal(shape).astype(np.float32) for n in ("a", "b")})
    for request, (outputs, error) in zip(requests, infer_many(protocol, url(server, protocol), "pair", requests)):
        assert error is None, error
        total, count = session.run(None, request)
        np.testing.assert_allclose(outputs["sum"], total, atol=1e-6)
        np.testing.assert_array_equal(outputs["count"], count)


def test_a_raising_hook_answers_one_line_and_leaves_its_traceback_in_the_server_log(server, sources):
    """model.py's postprocess raises ZeroDivisionError for divisor 0: that request gets a 500
    with one line; tritonserver's log gets the traceback, once per failed request."""
    import tritonclient.grpc as grpcclient

    session = ort.InferenceSession(str(sources["linear"]))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    before = server.log_text().count("ZeroDivisionError: integer division or modulo by zero")
    http = httpclient.InferenceServerClient(server.http_address)
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        tensor = module.InferInput("x", [2, 4], "FP32")
        tensor.set_data_from_numpy(x)
        good = client.infer("fragile", [tensor], parameters={"divisor": 1})
        np.testing.assert_allclose(good.as_numpy("probs"), session.run(None, {"x": x})[1], atol=1e-5)
        with pytest.raises(Exception) as raised:
            client.infer("fragile", [tensor], parameters={"divisor": 0})
        assert raised.value.status() in ("500", "StatusCode.INTERNAL")
        assert raised.value.message() == "postprocess failed: ZeroDivisionError: integer division or modulo by zero"
    log = server.log_text()
    tracebacks = log.count("ZeroDivisionError: integer division or modulo by zero") - before
    # each failure: the traceback's last line in the log (once) — the client's line is not logged by Triton
    assert tracebacks == 2, log[-3000:]
    assert "Traceback (most recent call last)" in log and "model.py" in log
    assert "postprocess failed for request" in log
    assert http.is_server_ready()
