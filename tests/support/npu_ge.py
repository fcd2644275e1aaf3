"""Model folders as CANN's C++ GE backend (``backend: "npu_ge"``) users write them, and ONNX models
for the compile at load: a stand-in for their ResNet example with its tensor names, and a model
ATC cannot compile (an operator type without an ONNX parser)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.testing.models import custom_operator  # noqa: F401 - the model ATC cannot compile

#: hicann/triton-inference-server-ge-backend example/resnet/config.pbtxt, read when this machine has it
EXAMPLE_CONFIG = Path("/work/src/triton-inference-server-ge-backend/example/resnet/config.pbtxt")
#: the same fields when it is absent (CI without the source mirror): name, backend, max_batch_size,
#: the input data [3,224,224] FP32, the output resnetv24_dense0_fwd [1000] FP32, one instance, device_ids
EXAMPLE_FIELDS = """name: "resnet"
backend: "npu_ge"
max_batch_size: 64
input [ { name: "data" data_type: TYPE_FP32 dims: [3, 224, 224] } ]
output [ { name: "resnetv24_dense0_fwd" data_type: TYPE_FP32 dims: [1000] } ]
instance_group [ { count: 1 } ]
parameters: [ { key: "device_ids", value: { string_value: "4,5" } } ]
"""


def example_config() -> str:
    """Their example config, byte for byte where the mirror is present."""
    return EXAMPLE_CONFIG.read_text(encoding="utf-8") if EXAMPLE_CONFIG.is_file() else EXAMPLE_FIELDS


def tiny_resnet(path: Path, seed: int = 0) -> Path:
    """``data`` [N,3,224,224] -> global average pool -> a 3x1000 dense layer -> ``resnetv24_dense0_fwd`` [N,1000]."""
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((3, 1000)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(1000).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["data"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("Gemm", ["flat", "W", "b"], ["resnetv24_dense0_fwd"]),
        ],
        "tiny_resnet",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("resnetv24_dense0_fwd", TensorProto.FLOAT, ["N", 1000])],
        initializer=[weight, bias],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path
