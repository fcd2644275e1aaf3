"""Tiny ONNX models for the simulator and acl engine tests, plus ONNX Runtime as the reference (the kinds
``ge-triton conformance`` uses too live in ``ge_python_backend.testing.models``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.testing.models import conv, image_conv, matmul_add, reference, three_inputs

__all__ = [
    "conv",
    "conv_classifier",
    "image_conv",
    "matmul_add",
    "open_sim",
    "random_like",
    "reference",
    "scaled",
    "static_beside_batch",
    "three_inputs",
    "two_inputs",
]


def _save(graph, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def two_inputs(path: Path) -> Path:
    """a FP32 [N,L], b INT32 [N,L] -> s = a + float(b) [N,L] and m = max over L of a [N,1]."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["a", "bf"], ["s"]),
            helper.make_node("ReduceMax", ["a"], ["m"], axes=[1], keepdims=1),
        ],
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", "L"]),
            helper.make_tensor_value_info("b", TensorProto.INT32, ["N", "L"]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", "L"]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", 1]),
        ],
    )
    return _save(graph, path)


def random_like(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def static_beside_batch(path: Path) -> Path:
    """a FP32 [N,4], b FP32 [N,6], s FP32 [2,3] -> ya = a + sum(s) [N,4], yb = b x max(s) [N,6].

    For a static input beside --dynamic_batch_size: every output carries the batch, and each
    depends on ``s``, so serving ``s`` wrongly shows up in every answer."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["s"], ["total"], keepdims=0),
            helper.make_node("ReduceMax", ["s"], ["largest"], keepdims=0),
            helper.make_node("Add", ["a", "total"], ["ya"]),
            helper.make_node("Mul", ["b", "largest"], ["yb"]),
        ],
        "static_beside_batch",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 6]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("ya", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("yb", TensorProto.FLOAT, ["N", 6]),
        ],
    )
    return _save(graph, path)


def conv_classifier(path: Path) -> Path:
    """image FP32 [1,3,H,W] -> logits = Flatten(GlobalAveragePool(Relu(Conv3x3(image)))) [1,8].

    Zero-padding H or W changes the average (and the convolution at the border): an image-size
    gear answering a smaller image from a padded one gives other logits."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "K"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["p"]),
            helper.make_node("Flatten", ["p"], ["logits"]),
        ],
        "conv_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "K")],
    )
    return _save(graph, path)


def scaled(path: Path, inputs: dict[str, list]) -> Path:
    """Each input ``name`` (FP32, the given dims, str for a free axis) -> ``name_out`` = (i + 1) x input."""
    nodes, values = [], []
    for i, name in enumerate(inputs):
        nodes.append(helper.make_node("Mul", [name, f"k{i}"], [f"{name}_out"]))
        values.append(numpy_helper.from_array(np.array(i + 1.0, np.float32), f"k{i}"))
    graph = helper.make_graph(
        nodes,
        "scaled",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs.items()],
        [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, d) for n, d in inputs.items()],
        values,
    )
    return _save(graph, path)


def open_sim(path, slots=1, peers=1, **options):
    """Engine acl-sim on ``path`` (device 0); ``options`` are its parameters."""
    from ge_python_backend.engines import open_engine

    return open_engine("acl-sim", path, device_id=0, slots=slots, options=options, peers=peers)
