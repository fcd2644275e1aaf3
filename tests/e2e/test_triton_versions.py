"""What differs between the Triton releases GEModel supports, on the release under test.

``response_mode: sender`` needs python_backend r24.06: GEModel probes for it at initialize and
otherwise returns its answers from execute. In the 24.02 lane (``--tritonserver=24.02``: tritonserver
2.43.0) the probe finds no senders by itself; on the bundled 2.51 it is forced off
(``GE_TRITON_NO_RESPONSE_SENDER=1``, a switch read only by the probe), so the fallback is served on
both. The first test proves the lane runs the server it says it does.
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.triton.capabilities import NO_SENDER_ENV
from tests.support import reliability_repos as rr
from tests.support.clients import infer_many, url
from tests.support.versions import under_test

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
MODELS = ("ort_sender", "npu_sender")
FALLBACK = "response_mode sender needs Triton 24.06 or later"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    sources = rr.Sources(root / "sources")
    repo = root / "repo"
    rr.model(repo, sources.linear, "ort_sender", {"response_mode": "sender"}, streams=2)
    rr.model(repo, sources.linear_om, "npu_sender", {"response_mode": "sender"}, streams=2, instance_count=1)
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    env = {NO_SENDER_ENV: "1"} if under_test().response_senders else {}
    with TritonServer(built[0], env=env) as running:
        yield running


def test_the_server_is_the_release_under_test(server):
    with urllib.request.urlopen(f"http://{server.http_address}/v2", timeout=10) as response:
        metadata = json.loads(response.read())
    assert metadata["name"] == "triton" and metadata["version"] == under_test().server


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", MODELS)
def test_sender_models_fall_back_to_returning_and_match_onnxruntime(server, built, protocol, model):
    session = ort.InferenceSession(str(built[1].linear))
    rng = np.random.default_rng(len(model) + len(protocol))
    requests = [{"x": rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)} for _ in range(100)]
    for sent, (outputs, error) in zip(requests, infer_many(protocol, url(server, protocol), model, requests)):
        assert error is None, error
        logits, probs = session.run(None, sent)
        np.testing.assert_allclose(outputs["logits"], logits, atol=1e-5)
        np.testing.assert_allclose(outputs["probs"], probs, atol=1e-5)


def test_the_log_says_what_the_fallback_loses(server):
    log = server.log_text()
    for model in MODELS:
        (line,) = [line for line in log.splitlines() if FALLBACK in line and f"{model}_0_0" in line]
        assert "answers are returned from execute. Lost: overlap" in line and "2 slot(s)" in line
        assert f"{model}_0_0: " in log and "answers returned from execute" in log
