"""The fast lane through a real tritonserver: the same answers as ONNX Runtime called directly and
the same errors as with the lane off, for concurrent mixed good and bad requests."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.support.clients import infer_many, url

pytestmark = [pytest.mark.e2e, pytest.mark.contract]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_lane_on_and_off_answer_concurrent_mixed_requests_alike(server, sources, protocol):
    session = ort.InferenceSession(str(sources["two_inputs"]))
    rng = np.random.default_rng(25)
    requests = []
    for index in range(120):
        rows, length = int(rng.integers(1, 5)), (3, 5)[index % 2]
        a = rng.standard_normal((rows, length)).astype(np.float32)
        # every 7th is bad: b's length differs from a's, which the config allows and the engine refuses
        b = rng.standard_normal((rows, length + 1 if index % 7 == 3 else length)).astype(np.float32)
        requests.append({"a": a, "b": b})
    results = {
        lane: infer_many(protocol, url(server, protocol), f"pair_lane_{lane}", requests) for lane in ("true", "false")
    }
    for index, request in enumerate(requests):
        (on, on_error), (off, off_error) = results["true"][index], results["false"][index]
        if index % 7 == 3:
            assert on_error is not None and off_error is not None
            assert (on_error.status(), on_error.message()) == (off_error.status(), off_error.message())
            assert "broadcast" in on_error.message()
            continue
        assert on_error is None and off_error is None, (on_error, off_error)
        expected = dict(zip(("sum", "count"), session.run(None, request)))
        for name, want in expected.items():
            np.testing.assert_array_equal(on[name], want)
            np.testing.assert_array_equal(off[name], want)
