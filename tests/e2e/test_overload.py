"""Overload: with a bounded queue, excess requests are refused at once instead of waiting.

An acl-sim model whose every execution keeps the simulated device busy for a while
(``acl_sim_device_ms``), one execution slot, and a queue policy from ``ge-triton generate
--max-queue-size 4``: a flood of concurrent requests fills the slot, the batch Triton hands to
the model next and the 4 queue places; every other request is refused with Triton's queue-full
error. Refusals are asserted by order, not by time: each one arrives before the first accepted
request is answered.
"""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import read_config_file
from tests.support import reliability_repos as rr

pytestmark = pytest.mark.e2e
MODEL = "bounded"
FLOOD = 64
DEVICE_MS = 500  # long enough that the whole flood is sent before the first batch is done
QUEUE = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("overload")
    sources = rr.Sources(root / "sources")
    rr.model(root / "repo", sources.linear_om, MODEL, {"acl_sim_device_ms": DEVICE_MS}, max_queue_size=QUEUE)
    with TritonServer(root / "repo") as server:
        yield server, sources, root / "repo"


async def flood(
    url: str, requests: list[np.ndarray]
) -> list[tuple[int, np.ndarray | None, InferenceServerException | None]]:
    """Send every request at once; (order of arrival of the answer, probs, error) per request."""
    client = grpcaio.InferenceServerClient(url)
    arrival = itertools.count()

    async def one(x: np.ndarray):
        tensor = grpcaio.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            result = await client.infer(MODEL, [tensor])
        except InferenceServerException as exc:
            return next(arrival), None, exc
        return next(arrival), result.as_numpy("probs"), None

    try:
        return await asyncio.gather(*(one(x) for x in requests))
    finally:
        await client.close()


def test_excess_load_is_refused_at_once_and_the_accepted_requests_are_correct(served):
    server, sources, repo = served
    policy = read_config_file(repo / MODEL / "config.pbtxt").dynamic_batching.default_queue_policy
    assert policy.max_queue_size == QUEUE
    rng = np.random.default_rng(5)
    requests = [rng.standard_normal((int(rng.integers(1, 5)), 4)).astype(np.float32) for _ in range(FLOOD)]
    results = asyncio.run(flood(server.grpc_address, requests))
    accepted = [(order, x, probs) for x, (order, probs, error) in zip(requests, results) if error is None]
    refused = [(order, error) for order, _, error in results if error is not None]
    assert accepted and refused
    assert len(accepted) + len(refused) == FLOOD
    for _, error in refused:
        assert "Exceeds maximum queue size" in error.message(), error
        assert error.status() == "StatusCode.UNAVAILABLE", error
    first_answer = min(order for order, _, _ in accepted)
    assert all(order < first_answer for order, _ in refused)
    session = ort.InferenceSession(str(sources.linear))
    for _, x, probs in accepted:
        np.testing.assert_allclose(probs, session.run(None, {"x": x})[1], atol=1e-5)
    # tritonserver 2.51 counts the accepted requests; queue-full refusals appear in no nv_* counter.
    assert metrics.fetch(server.metrics_url).value("nv_inference_request_success", model=MODEL) == len(accepted)
