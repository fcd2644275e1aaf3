"""Every device-loss code takes a model out of service through the real tritonserver; others do not.

The codes are ascend.constants.DEVICE_FATAL_RETS (from CANN's rt_error_codes.h and
25-01_aclError.md, hicann/runtime); each model's second execution fails with one of them
(``acl_sim_faults: execute_async:2=CODE``). 507011 (a model execution failure) and 507056 (a
link error: "retry", 25-01_aclError.md 227) are transient: only that batch fails.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ge_python_backend.ascend.constants import DEVICE_FATAL_RETS, describe_ret
from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from tests.support import reliability_repos as rr

pytestmark = pytest.mark.e2e

FATAL = sorted(DEVICE_FATAL_RETS)
TRANSIENT = (507011, 507056)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("fatal")
    repo = root / "repo"
    sources = rr.Sources(root / "sources")
    for code in (*FATAL, *TRANSIENT):
        rr.model(
            repo, sources.linear_om, f"fails_{code}", {"acl_sim_faults": f"execute_async:2={code}"}, instance_count=1
        )
    with TritonServer(repo) as server:
        yield server, ort.InferenceSession(str(sources.linear))


def ask(client, model: str, session, seed: int) -> tuple[str | None, str | None]:
    """(None, None) for an answer equal to ONNX Runtime's, else (HTTP status, message)."""
    x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
    tensor = httpclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    try:
        answer = client.infer(model, [tensor]).as_numpy("probs")
    except InferenceServerException as exc:
        return exc.status(), exc.message()
    np.testing.assert_allclose(answer, session.run(None, {"x": x})[1], atol=1e-5)
    return None, None


def healthy(server, model: str) -> float:
    return metrics.fetch(server.metrics_url).value("ge_engine_healthy", model=model)


@pytest.mark.parametrize("code", FATAL)
def test_a_device_loss_code_takes_the_model_out_of_service(served, code):
    server, session = served
    client = httpclient.InferenceServerClient(server.http_address)
    model = f"fails_{code}"
    assert ask(client, model, session, 0) == (None, None)
    status, message = ask(client, model, session, 1)
    assert status == "503", message  # UNAVAILABLE: another instance or replica may serve it
    assert f"acl.mdl.execute_async returned {describe_ret(code)}" in message
    status, later = ask(client, model, session, 2)
    assert status == "503" and later.startswith("the model is out of service after a fatal engine failure"), later
    assert healthy(server, model) == 0
    assert f"refusing every request from now on: acl.mdl.execute_async returned {code}" in server.log_text()


@pytest.mark.parametrize("code", TRANSIENT)
def test_a_transient_code_fails_only_its_batch(served, code):
    server, session = served
    client = httpclient.InferenceServerClient(server.http_address)
    model = f"fails_{code}"
    assert ask(client, model, session, 0) == (None, None)
    status, message = ask(client, model, session, 1)
    assert status == "500" and f"returned {describe_ret(code)}" in message, message
    assert [ask(client, model, session, seed) for seed in range(2, 6)] == [(None, None)] * 4
    assert healthy(server, model) == 1
