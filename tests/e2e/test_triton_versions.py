"""The same model folders on a Python backend without non-decoupled response senders (Triton 24.02).

``response_mode: sender`` needs python_backend r24.06; GEModel probes for it at initialize and
otherwise returns its answers from execute. Here the probe is forced off on the bundled
tritonserver 2.51 (``GE_TRITON_NO_RESPONSE_SENDER=1``, a switch read only by the probe). When
``GE_TRITONSERVER_2402`` names an unpacked nvidia-pytriton 0.5.3 wheel (tritonserver 2.43.0,
Triton 24.02: ``pip download nvidia-pytriton==0.5.3 --no-deps`` and unzip it), the same folders
are served on that real 24.02 server too, where the probe finds no senders by itself.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.triton.capabilities import NO_SENDER_ENV
from tests.support import reliability_repos as rr
from tests.support.clients import infer_many, url
from tests.support.versions import install_2402

pytestmark = pytest.mark.e2e
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


@pytest.fixture(scope="module", params=["2.51 probe forced off", "2.43 (24.02)"])
def server(request, built):
    options = {"env": {NO_SENDER_ENV: "1"}} if request.param.startswith("2.51") else {"install": install_2402()}
    with TritonServer(built[0], **options) as running:
        yield running


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
