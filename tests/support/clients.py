"""tritonclient helpers: many concurrent requests over HTTP or gRPC, results in order."""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

#: The HTTP request that aborts tritonserver 2.51 (std::bad_alloc): 1.2e11 bytes declared by an
#: input "x" in a body of a few bytes (server r24.10 src/http_server.cc ParseJsonTritonIO).
HUGE_SHAPE_REQUEST = {"inputs": [{"name": "x", "shape": [1, 3, 100000, 100000], "datatype": "FP32", "data": [1.0]}]}


def _inputs(module, arrays: Mapping[str, np.ndarray]):
    result = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        result.append(tensor)
    return result


def infer_many(
    protocol: str,
    url: str,
    model: str,
    requests: Sequence[Mapping[str, np.ndarray]],
    concurrency: int = 32,
    parameters: Sequence[Mapping[str, object]] | None = None,
):
    """Send every request concurrently (``parameters``: each one's request parameters); return a
    list of (outputs dict | None, error | None) in order."""
    given = [dict(p) or None for p in parameters] if parameters is not None else [None] * len(requests)
    if protocol == "http":
        client = httpclient.InferenceServerClient(url, concurrency=concurrency)
        pending = [client.async_infer(model, _inputs(httpclient, r), parameters=p) for r, p in zip(requests, given)]
        results = []
        for job in pending:
            try:
                result = job.get_result()
                names = [o["name"] for o in result.get_response()["outputs"]]
                results.append(({n: result.as_numpy(n) for n in names}, None))
            except InferenceServerException as exc:
                results.append((None, exc))
        client.close()
        return results
    client = grpcclient.InferenceServerClient(url)
    done: queue.Queue = queue.Queue()
    for index, (arrays, request_parameters) in enumerate(zip(requests, given)):
        client.async_infer(
            model,
            _inputs(grpcclient, arrays),
            callback=lambda result, error, i=index: done.put((i, result, error)),
            parameters=request_parameters,
        )
    results = [None] * len(requests)
    for _ in requests:
        index, result, error = done.get(timeout=120)
        if error is not None:
            results[index] = (None, error)
        else:
            names = [o.name for o in result.get_response().outputs]
            results[index] = ({n: result.as_numpy(n) for n in names}, None)
    client.close()
    return results


def url(server, protocol: str) -> str:
    return server.http_address if protocol == "http" else server.grpc_address


def infer_one(
    protocol: str,
    address: str,
    model: str,
    arrays: Mapping[str, np.ndarray],
    outputs: Sequence[str] = (),
    parameters: Mapping[str, object] | None = None,
    request_id: str = "",
) -> dict[str, np.ndarray]:
    """One request; its outputs by name (InferenceServerException for an error answer)."""
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(address)
    try:
        result = client.infer(
            model,
            _inputs(module, arrays),
            outputs=[module.InferRequestedOutput(name) for name in outputs] or None,
            parameters=dict(parameters) if parameters else None,
            request_id=request_id,
        )
        response = result.get_response()
        names = [o["name"] for o in response["outputs"]] if protocol == "http" else [o.name for o in response.outputs]
        return {name: result.as_numpy(name) for name in names}
    finally:
        client.close()
