"""The shared table of ``tests/support/parity.py`` through ModelHarness; the same table through a
real tritonserver is ``tests/e2e/test_harness_parity.py``."""

from __future__ import annotations

import importlib.util

import pytest

from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
from tests.support import parity

pb = install_fake_pb_utils()
CODES = {parity.BAD_REQUEST: pb.TritonError.INVALID_ARG, parity.SERVER_FAULT: pb.TritonError.INTERNAL}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    repo = tmp_path_factory.mktemp("parity")
    onnx_file = parity.breaker(repo)
    spec = importlib.util.spec_from_file_location("contract_breaker", repo / parity.NAME / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with ModelHarness(module.TritonPythonModel, repo / parity.NAME) as running:
        yield running, onnx_file


def failures() -> dict[str, float]:
    family = pb.MetricFamily.registry["ge_request_failures"]
    return {m.labels["kind"]: m.value() for m in family.metrics if m.labels["model"] == parity.NAME}


@pytest.mark.parametrize("name", list(parity.CASES))
def test_the_harness_answers_each_case_as_the_server_does(harness, name):
    model, onnx_file = harness
    case = parity.CASES[name]
    request = pb.InferenceRequest(
        [pb.Tensor(n, a) for n, a in case.inputs.items()], case.outputs, request_id=name, parameters=case.parameters
    )
    before = failures()
    (response,) = model.infer([request])
    model.model.metrics.flush()
    counted = {kind: value - before[kind] for kind, value in failures().items() if value != before[kind]}
    if case.status is None:
        assert not response.has_error(), response.error().message()
        parity.check_answer(
            {t.name(): t.as_numpy() for t in response.output_tensors()}, parity.expected_answer(onnx_file, case)
        )
        assert counted == {}
        return
    assert response.has_error(), f"{name} was answered"
    assert response.error().code() == CODES[case.status]
    assert case.message in response.error().message()
    assert counted == ({case.kind: 1} if case.kind else {})
