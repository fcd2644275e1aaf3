"""GEModel on the Triton release under test (the 24.02 lane: ``--tritonserver=24.02``, tritonserver
2.43.0; else the bundled 2.51): the server is the release it says it is, and both engines answer
from execute, several slots each, as ONNX Runtime does.
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ops.server import TritonServer
from tests.support import reliability_repos as rr
from tests.support.clients import infer_many, url
from tests.support.versions import under_test

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
MODELS = ("ort", "npu")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    sources = rr.Sources(root / "sources")
    repo = root / "repo"
    rr.model(repo, sources.linear, "ort", {}, streams=2)
    rr.model(repo, sources.linear_om, "npu", {}, streams=2, instance_count=1)
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    with TritonServer(built[0]) as running:
        yield running


def test_the_server_is_the_release_under_test(server):
    with urllib.request.urlopen(f"http://{server.http_address}/v2", timeout=10) as response:
        metadata = json.loads(response.read())
    assert metadata["name"] == "triton" and metadata["version"] == under_test().server


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", MODELS)
def test_models_answer_from_execute_as_onnxruntime(server, built, protocol, model):
    session = ort.InferenceSession(str(built[1].linear))
    rng = np.random.default_rng(len(model) + len(protocol))
    requests = [{"x": rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)} for _ in range(100)]
    for sent, (outputs, error) in zip(requests, infer_many(protocol, url(server, protocol), model, requests)):
        assert error is None, error
        logits, probs = session.run(None, sent)
        np.testing.assert_allclose(outputs["logits"], logits, atol=1e-5)
        np.testing.assert_allclose(outputs["probs"], probs, atol=1e-5)
