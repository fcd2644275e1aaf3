"""Small synthetic ONNX models built with ``onnx.helper``, for tests, the demo and benchmarks.

Weights come from a seeded generator, so a model file is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _onnx():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


def _save(model, path: Path) -> Path:
    onnx, *_ = _onnx()
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _model(graph, opset: int = 17, ir_version: int | None = None):
    _, _, helper, _ = _onnx()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ge-python-backend")
    if ir_version is not None:  # the tiny kind models: IR 8, which every ATC of CANN 7 and later reads
        model.ir_version = ir_version
    return model


def linear(path: Path, features: int = 4, classes: int = 3, batch: int | str = "batch", seed: int = 0) -> Path:
    """``logits = x @ W + b`` and ``probs = softmax(logits)``; x FP32 [batch, features].

    ``batch`` is a symbolic name (dynamic batch axis) or a fixed size.
    """
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((features, classes)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes]),
        ],
        [weight, bias],
    )
    return _save(_model(graph), path)


def two_inputs(path: Path, length: int | str = "length", seed: int = 0) -> Path:
    """``sum = a + b * scale`` (FP32 [batch, length]) and ``count = cast(a > 0)`` summed (INT64 [batch, 1])."""
    _, TensorProto, helper, numpy_helper = _onnx()
    scale = numpy_helper.from_array(np.array([1.5], np.float32), "scale")
    zero = numpy_helper.from_array(np.array([0.0], np.float32), "zero")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["b", "scale"], ["bs"]),
            helper.make_node("Add", ["a", "bs"], ["sum"]),
            helper.make_node("Greater", ["a", "zero"], ["positive"]),
            helper.make_node("Cast", ["positive"], ["positive64"], to=TensorProto.INT64),
            helper.make_node("ReduceSum", ["positive64"], ["count"], keepdims=1),
        ],
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", length]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", length]),
        ],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", length]),
            helper.make_tensor_value_info("count", TensorProto.INT64, ["batch", 1]),
        ],
        [scale, zero],
    )
    # ReduceSum takes axes as an input from opset 13.
    graph.node[-1].input.append("axes")
    graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    return _save(_model(graph), path)


def image_classifier(
    path: Path,
    size: int = 224,
    channels: tuple[int, ...] = (32, 64, 128, 256),
    classes: int = 1000,
    batch: int | str = "batch",
    seed: int = 0,
    image_channels: int = 3,
) -> Path:
    """A small CNN on FP32 NCHW [batch, image_channels, size, size] (RGB by default): 3x3
    stride-2 convolutions with ReLU, global average pooling and a ``classes``-way Gemm; output
    ``logits`` [batch, classes]."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    previous, width = "image", image_channels
    for index, out_channels in enumerate(channels):
        fan_in = width * 9
        weight = (rng.standard_normal((out_channels, width, 3, 3)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"conv{index}_w"),
            numpy_helper.from_array(np.zeros(out_channels, np.float32), f"conv{index}_b"),
        ]
        nodes += [
            helper.make_node(
                "Conv",
                [previous, f"conv{index}_w", f"conv{index}_b"],
                [f"conv{index}"],
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
            ),
            helper.make_node("Relu", [f"conv{index}"], [f"relu{index}"]),
        ]
        previous, width = f"relu{index}", out_channels
    fc = (rng.standard_normal((classes, width)) * np.sqrt(1.0 / width)).astype(np.float32)
    initializers += [
        numpy_helper.from_array(fc, "fc_w"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [previous], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "image_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, image_channels, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        initializers,
    )
    return _save(_model(graph), path)


def recurrent_cell(
    path: Path, features: int = 4, hidden: int = 6, layers_first: bool = False, with_gain: bool = False, seed: int = 0
) -> Path:
    """A stateful step ``h = tanh((x @ W + h_in @ U + b) * gain)``; outputs ``y = h`` and ``h_out = h``.

    x FP32 [batch, features]; h_in/h_out FP32 [batch, hidden], or [1, batch, hidden] with
    ``layers_first`` (the batch on axis 1, as recurrent layers lay out their state). With
    ``with_gain`` a scalar FP32 input ``gain`` (no batch axis) scales the pre-activation.
    """
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    initializers = [
        numpy_helper.from_array((rng.standard_normal((features, hidden)) * 0.5).astype(np.float32), "W"),
        numpy_helper.from_array((rng.standard_normal((hidden, hidden)) * 0.5).astype(np.float32), "U"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32) * 0.1, "b"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
    ]
    nodes = []
    state = "h_in"
    if layers_first:
        nodes.append(helper.make_node("Squeeze", ["h_in", "axis0"], ["h_prev"]))
        state = "h_prev"
    nodes += [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("MatMul", [state, "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre0"]),
        helper.make_node("Add", ["pre0", "b"], ["pre"]),
    ]
    activation_input = "pre"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])]
    if with_gain:
        nodes.append(helper.make_node("Mul", ["pre", "gain"], ["scaled"]))
        activation_input = "scaled"
    nodes.append(helper.make_node("Tanh", [activation_input], ["y"]))
    state_shape = [1, "batch", hidden] if layers_first else ["batch", hidden]
    if layers_first:
        nodes.append(helper.make_node("Unsqueeze", ["y", "axis0"], ["h_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["y"], ["h_out"]))
    inputs.append(helper.make_tensor_value_info("h_in", TensorProto.FLOAT, state_shape))
    if with_gain:
        inputs.append(helper.make_tensor_value_info("gain", TensorProto.FLOAT, []))
    graph = helper.make_graph(
        nodes,
        "recurrent_cell",
        inputs,
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden]),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, state_shape),
        ],
        initializers,
    )
    return _save(_model(graph), path)


# --- tiny models of each kind the acl engine serves (the simulator's tests and ge-triton conformance)


def matmul_add(path: Path) -> Path:
    """x FP32 [N,4] -> y = x @ W + B FP32 [N,3] and h = fp16(y) FP16 [N,3]."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "B"], ["y"]),
            helper.make_node("Cast", ["y"], ["h"], to=TensorProto.FLOAT16),
        ],
        "matmul_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["N", 3]),
        ],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B"),
        ],
    )
    return _save(_model(graph, ir_version=8), path)


def three_inputs(path: Path) -> Path:
    """a FP32 [N,4], b FP32 [M,K], s FP32 [2,3] -> ya = 2a [N,4], yb = b + sum(s) [M,K], ys = 2s [2,3].

    For dims models: two dynamic inputs of different ranks and a static one, each output tied to
    one input, so a wrong gear layout shows up as a wrong shape or value."""
    _, TensorProto, helper, numpy_helper = _onnx()
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["s"], ["total"], keepdims=0),
            helper.make_node("Add", ["b", "total"], ["yb"]),
            helper.make_node("Mul", ["a", "two"], ["ya"]),
            helper.make_node("Mul", ["s", "two"], ["ys"]),
        ],
        "three_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M", "K"]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("ya", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("yb", TensorProto.FLOAT, ["M", "K"]),
            helper.make_tensor_value_info("ys", TensorProto.FLOAT, [2, 3]),
        ],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    return _save(_model(graph, ir_version=8), path)


def conv(path: Path) -> Path:
    """x FP32 [1,3,H,W] (NCHW) -> c = conv3x3(x) [1,2,H,W] and p = global average of c [1,2,1,1]."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "K"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        ],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2, "H", "W"]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 2, 1, 1]),
        ],
        [numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "K")],
    )
    return _save(_model(graph, ir_version=8), path)


def image_conv(path: Path, batch: int | str = 1, height: int | str = 6, width: int | str = 8) -> Path:
    """x FP32 [batch,3,H,W] (NCHW) -> c = conv3x3(x) [batch,2,H,W]: a network behind an AIPP (a str
    names a dynamic axis)."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "K"], ["c"], pads=[1, 1, 1, 1])],
        "image_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, height, width])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [batch, 2, height, width])],
        [numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "K")],
    )
    return _save(_model(graph, ir_version=8), path)


def scale_shift(path: Path) -> Path:
    """x FP32 [N,8] -> y = x * C + D FP32 [N,8]: element-wise operators every AI Core runs in FP32
    and FP16, so the precision ATC compiles in shows in the values (C and D are not FP16 numbers)."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "C"], ["xc"]), helper.make_node("Add", ["xc", "D"], ["y"])],
        "scale_shift",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [
            numpy_helper.from_array((1 + rng.random(8) / 3).astype(np.float32), "C"),
            numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "D"),
        ],
    )
    return _save(_model(graph, ir_version=8), path)


def custom_operator(path: Path) -> Path:
    """``y = CustomOp(x)`` in a domain of its own: no ONNX parser is registered for it (ATC: E16002)."""
    onnx, TensorProto, helper, _ = _onnx()
    graph = helper.make_graph(
        [helper.make_node("CustomOp", ["x"], ["y"], domain="com.example")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))  # no check_model: its op has no schema
    return path


def yolo(
    path: Path,
    head: str,
    classes: int = 3,
    size: int = 64,
    stride: int = 8,
    batch: int | str = "batch",
    score_bias: float = 0.0,
) -> Path:
    """A small detector with a real YOLO head layout: ``images`` FP32 [batch, 3, size, size] (RGB
    in [0, 1]) -> ``output0`` v5 [batch, cells, 5 + classes] (cx, cy, w, h, objectness, class
    scores) or v8 [batch, 4 + classes, cells] (cx, cy, w, h, class scores), one anchor per
    ``stride`` x ``stride`` cell. Centres sit in their cell (grid + sigmoid, times the stride), sizes
    are up to six cells: neighbouring boxes overlap, so NMS has work to do. ``score_bias`` is added
    to the class (and objectness) logits: negative, few anchors score high, as in a real image."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(11 if head == "v5" else 12)
    cells = (size // stride) ** 2
    channels = 4 + classes + (1 if head == "v5" else 0)
    grid_y, grid_x = np.mgrid[0 : size // stride, 0 : size // stride].astype(np.float32)
    offset = np.zeros((1, channels, cells), np.float32)
    offset[0, 0], offset[0, 1] = grid_x.reshape(-1), grid_y.reshape(-1)
    scale = np.ones((1, channels, 1), np.float32)
    scale[0, :2], scale[0, 2:4] = stride, 6 * stride
    weights = rng.standard_normal((channels, 3, 1, 1)).astype(np.float32) * 3
    nodes = [
        helper.make_node(
            "AveragePool", ["images"], ["pooled"], kernel_shape=[stride, stride], strides=[stride, stride]
        ),
        helper.make_node("Conv", ["pooled", "K", "B"], ["raw"]),
        helper.make_node("Sigmoid", ["raw"], ["unit"]),
        helper.make_node("Reshape", ["unit", "flat"], ["cellwise"]),
        helper.make_node("Add", ["cellwise", "grid"], ["placed"]),
        helper.make_node("Mul", ["placed", "scale"], ["v8" if head == "v8" else "head"]),
    ]
    if head == "v8":
        nodes[-1].output[0] = "output0"
    else:
        nodes.append(helper.make_node("Transpose", ["head"], ["output0"], perm=[0, 2, 1]))
    out_shape = [batch, channels, cells] if head == "v8" else [batch, cells, channels]
    graph = helper.make_graph(
        nodes,
        f"yolo_{head}",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_shape)],
        [
            numpy_helper.from_array(weights, "K"),
            numpy_helper.from_array(
                (rng.standard_normal(channels) * 0.5 + np.r_[np.zeros(4), np.full(channels - 4, score_bias)]).astype(
                    np.float32
                ),
                "B",
            ),
            numpy_helper.from_array(np.array([0, channels, cells], np.int64), "flat"),
            numpy_helper.from_array(offset, "grid"),
            numpy_helper.from_array(scale, "scale"),
        ],
    )
    return _save(_model(graph, ir_version=8), path)


def text_encoder(path: Path, vocab: int = 50, hidden: int = 16, max_length: int = 128, seed: int = 13) -> Path:
    """A one-layer BERT-style encoder: ``input_ids``, ``attention_mask``, ``token_type_ids`` INT64
    [batch, sequence] -> ``last_hidden_state`` FP32 [batch, sequence, hidden] and ``pooler_output``
    FP32 [batch, hidden] (tanh of a dense layer on the first token). Token, position and type
    embeddings, one self-attention head whose scores get (1 - mask) * -10000 as BERT adds them,
    a residual and a layer norm: a padded token with mask 0 changes no other token's output."""
    _, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int, scale: float = 0.5):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    constants = [
        weight("tokens", vocab, hidden),
        weight("positions", max_length, hidden),
        weight("types", 2, hidden),
        weight("Wq", hidden, hidden),
        weight("Wk", hidden, hidden),
        weight("Wv", hidden, hidden),
        weight("Wp", hidden, hidden),
        numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
        numpy_helper.from_array(np.array(1 / np.sqrt(hidden), np.float32), "scale"),
        numpy_helper.from_array(np.array(-10000.0, np.float32), "masked"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array([1], np.int64), "one1"),
        numpy_helper.from_array(np.array([2], np.int64), "two1"),
    ]
    nodes = [
        helper.make_node("Gather", ["tokens", "input_ids"], ["token_embedding"]),
        helper.make_node("Gather", ["types", "token_type_ids"], ["type_embedding"]),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Slice", ["ids_shape", "one1", "two1"], ["length"]),
        helper.make_node("Slice", ["positions", "zero1", "length", "zero1"], ["position_embedding"]),
        helper.make_node("Add", ["token_embedding", "type_embedding"], ["embedded0"]),
        helper.make_node("Add", ["embedded0", "position_embedding"], ["embedded"]),
        helper.make_node("MatMul", ["embedded", "Wq"], ["q"]),
        helper.make_node("MatMul", ["embedded", "Wk"], ["k"]),
        helper.make_node("MatMul", ["embedded", "Wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["raw_scores"]),
        helper.make_node("Mul", ["raw_scores", "scale"], ["scores"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mask_float"], ["unmasked"]),
        helper.make_node("Mul", ["unmasked", "masked"], ["penalty"]),
        helper.make_node("Unsqueeze", ["penalty", "axis1"], ["penalty_rows"]),
        helper.make_node("Add", ["scores", "penalty_rows"], ["masked_scores"]),
        helper.make_node("Softmax", ["masked_scores"], ["attention"], axis=-1),
        helper.make_node("MatMul", ["attention", "v"], ["attended"]),
        helper.make_node("Add", ["attended", "embedded"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["last_hidden_state"], axis=-1),
        helper.make_node("Gather", ["last_hidden_state", "zero1"], ["first"], axis=1),
        helper.make_node("Squeeze", ["first", "axis1"], ["first_token"]),
        helper.make_node("MatMul", ["first_token", "Wp"], ["pooled"]),
        helper.make_node("Tanh", ["pooled"], ["pooler_output"]),
    ]
    ids = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes,
        "text_encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ids)
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden]),
        ],
        constants,
    )
    return _save(_model(graph, ir_version=8), path)


def reference(onnx_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What ONNX Runtime, called directly on the ONNX file, returns for ``feeds``."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
