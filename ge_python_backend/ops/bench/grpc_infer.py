"""Triton's gRPC inference calls made directly with ``grpc.aio`` and tritonclient's protobuf
messages: the request is built once, and the caller decides what to decode.

Shared by the load generator (``bench.load``) and the soak (``ge_python_backend.ops.soak``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
#: Largest message either way: tensors of any size a server accepts.
_MESSAGE_LIMIT = 2**31 - 1


def infer_request(model: str, inputs: Mapping[str, np.ndarray], *, request_id: str = "", outputs: Sequence[str] = ()):
    """A ``ModelInferRequest`` carrying ``inputs`` as raw contents (and the named ``outputs``).
    BYTES tensors (object, bytes or str arrays) go in Triton's layout, each element behind its
    4-byte length, serialized by tritonclient itself (as its ``InferInput.set_data_from_numpy``)."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=np_to_triton_dtype(array.dtype), shape=list(array.shape))
        if np_to_triton_dtype(array.dtype) == "BYTES":
            serialized = serialize_byte_tensor(array)
            request.raw_input_contents.append(serialized.item() if serialized.size else b"")
        else:
            request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request


def open_channel(url: str):
    """A ``grpc.aio`` channel to ``url`` (HOST:PORT) with no practical message size limit."""
    import grpc

    options = [("grpc.max_send_message_length", _MESSAGE_LIMIT), ("grpc.max_receive_message_length", _MESSAGE_LIMIT)]
    return grpc.aio.insecure_channel(url, options=options)
