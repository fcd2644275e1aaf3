"""The shared table of ``tests/support/parity.py`` through the real tritonserver, over HTTP and
gRPC; the same table through ModelHarness is ``tests/unit/test_harness_parity.py``."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from ge_python_backend.ops.bench import metrics
from tests.support import parity
from tests.support.clients import infer_one, url
from tests.support.versions import known_gap, under_test

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
STATUS = {
    "http": {parity.BAD_REQUEST: "400", parity.SERVER_FAULT: "500"},
    "grpc": {parity.BAD_REQUEST: "StatusCode.INVALID_ARGUMENT", parity.SERVER_FAULT: "StatusCode.INTERNAL"},
}


def failures(server) -> dict[str, float]:
    scrape = metrics.fetch(server.metrics_url)
    return {
        kind: scrape.value("ge_request_failures", model=parity.NAME, kind=kind)
        for kind in ("input", "engine", "postprocess", "internal")
    }


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("name", list(parity.CASES))
def test_the_server_answers_each_case_as_the_harness_does(request, server, sources, protocol, name):
    case = parity.CASES[name]
    if "input byte size mismatch" in case.message:
        known_gap(request, under_test().checks_input_sizes, "the core does not check an input's size (core r24.06)")
    request_id = f"{name} over {protocol}"
    before = failures(server)
    outputs, error = None, None
    try:
        outputs = infer_one(
            protocol, url(server, protocol), parity.NAME, case.inputs, case.outputs, case.parameters, request_id
        )
    except InferenceServerException as exc:
        error = exc
    counted = {kind: value - before[kind] for kind, value in failures(server).items() if value != before[kind]}
    if case.status is None:
        assert error is None, error
        parity.check_answer(outputs, parity.expected_answer(sources["breaker"], case))
        assert counted == {}
        return
    assert error is not None, f"{name} was answered"
    assert error.status() == STATUS[protocol][case.status]
    assert case.message in error.message()
    assert counted == ({case.kind: 1} if case.kind else {})
    if case.kind is not None:  # the server's fault: logged once, with the hook's file and lines
        logged = [r.message for r in server.log_records() if f"request '{request_id}': " in r.message]
        assert len(logged) == 1 and case.message in logged[0] and "the hook: File " in logged[0], logged
