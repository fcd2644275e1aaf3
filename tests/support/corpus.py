"""A corpus of small ONNX models, one per tensor shape or type case a user's model may have.

Each ``Case`` builds its model, says which ``ge-triton generate`` flags it needs (most need
none), which requests to send, and, where the case is valid for an ``.om``, how to
``sim_compile`` it. ``reference`` runs the ONNX file on ONNX Runtime directly, the way a client
sends the tensors (a scalar as ``[1]``, strings as UTF-8 bytes), so served answers can be
compared with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

Requests = list[dict[str, np.ndarray]]


def _save(graph, path: Path, opset: int = 17, check: bool = True) -> Path:
    """``check`` False: onnx's checker refuses graph inputs without a shape, which ONNX Runtime runs."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="corpus")
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _value(name: str, elem: int, shape) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


# -- builders -------------------------------------------------------------------------------------


def rank0(path: Path) -> Path:
    """x [N,3] and a rank-0 gain s -> y = x * s [N,3] and the rank-0 sum t of x."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0)],
        "rank0",
        [_value("x", TensorProto.FLOAT, ["N", 3]), _value("s", TensorProto.FLOAT, [])],
        [_value("y", TensorProto.FLOAT, ["N", 3]), _value("t", TensorProto.FLOAT, [])],
    )
    return _save(graph, path)


def unary(path: Path, op: str, elem: int, out_elem: int | None = None, **attributes) -> Path:
    """x [N,4] -> op(x) [N,4]."""
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attributes)],
        op.lower(),
        [_value("x", elem, ["N", 4])],
        [_value("y", out_elem or elem, ["N", 4])],
    )
    return _save(graph, path)


def strings(path: Path) -> Path:
    """x STRING [N] -> Identity -> y STRING [N]."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "strings",
        [_value("x", TensorProto.STRING, ["N"])],
        [_value("y", TensorProto.STRING, ["N"])],
    )
    return _save(graph, path)


def argmax(path: Path) -> Path:
    """x [N,5] -> the INT64 index of each row's largest value, [N]."""
    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["index"], axis=1, keepdims=0)],
        "argmax",
        [_value("x", TensorProto.FLOAT, ["N", 5])],
        [_value("index", TensorProto.INT64, ["N"])],
    )
    return _save(graph, path)


def two_dynamic(path: Path) -> Path:
    """x [N,T] -> y = x * 3 [N,T]: a batch axis and a length that varies by request."""
    three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "three"], ["y"])],
        "two_dynamic",
        [_value("x", TensorProto.FLOAT, ["N", "T"])],
        [_value("y", TensorProto.FLOAT, ["N", "T"])],
        [three],
    )
    return _save(graph, path)


def open_rank(path: Path) -> Path:
    """x of no declared rank -> y = x + 1 (no declared rank either)."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "open_rank",
        [_value("x", TensorProto.FLOAT, None)],
        [_value("y", TensorProto.FLOAT, None)],
        [one],
    )
    return _save(graph, path, check=False)


def transposed(path: Path) -> Path:
    """x [N,4] -> Transpose -> y [4,N]: the output keeps the batch on axis 1."""
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        "transposed",
        [_value("x", TensorProto.FLOAT, ["N", 4])],
        [_value("y", TensorProto.FLOAT, [4, "N"])],
    )
    return _save(graph, path)


def scalar_sum(path: Path) -> Path:
    """x [N,4] -> the rank-0 sum of every element (an output that does not carry the batch)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)],
        "scalar_sum",
        [_value("x", TensorProto.FLOAT, ["N", 4])],
        [_value("total", TensorProto.FLOAT, [])],
    )
    return _save(graph, path)


ODD_IN, ODD_OUT = "in.put/0 x", "out/put.y z"


def odd_names(path: Path) -> Path:
    """Tensor names with dots, slashes and spaces: [N,2] -> Neg -> [N,2]."""
    graph = helper.make_graph(
        [helper.make_node("Neg", [ODD_IN], [ODD_OUT])],
        "odd_names",
        [_value(ODD_IN, TensorProto.FLOAT, ["N", 2])],
        [_value(ODD_OUT, TensorProto.FLOAT, ["N", 2])],
    )
    return _save(graph, path)


def zero_axis(path: Path) -> Path:
    """x [N,2] -> y = x[:, 0:0], an output with a zero-size axis [N,0], and z = -x [N,2]."""
    bounds = ((0, "s"), (0, "e"), (1, "a"))
    starts, ends, axes = (numpy_helper.from_array(np.array([v], np.int64), n) for v, n in bounds)
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
        "zero_axis",
        [_value("x", TensorProto.FLOAT, ["N", 2])],
        [_value("y", TensorProto.FLOAT, ["N", 0]), _value("z", TensorProto.FLOAT, ["N", 2])],
        [starts, ends, axes],
    )
    return _save(graph, path)


def no_inputs(path: Path) -> Path:
    """No inputs: a constant output [3]."""
    constant = numpy_helper.from_array(np.array([1.5, -2.0, 3.25], np.float32), "value")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=constant)],
        "no_inputs",
        [],
        [_value("y", TensorProto.FLOAT, [3])],
    )
    return _save(graph, path)


def two_batch_names(path: Path) -> Path:
    """a [N,2] and b [M,2]: their axis 0 is named differently; c = concat(a, b) [N+M,2]."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=0)],
        "two_batch_names",
        [_value("a", TensorProto.FLOAT, ["N", 2]), _value("b", TensorProto.FLOAT, ["M", 2])],
        [_value("c", TensorProto.FLOAT, ["NM", 2])],
    )
    return _save(graph, path)


def silero_vad(path: Path) -> Path:
    """A stand-in with silero VAD's signature: input [N,T], state [2,N,128], rank-0 INT64 sr ->
    output [N,1], stateN [2,N,128]; every output depends on every input."""
    rate = numpy_helper.from_array(np.array(16000.0, np.float32), "rate")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    shape3 = numpy_helper.from_array(np.array([1, -1, 1], np.int64), "shape3")
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["input"], ["mean"], axes=[1], keepdims=1),
            helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["srf", "rate"], ["scale"]),
            helper.make_node("Mul", ["mean", "scale"], ["scaled"]),
            helper.make_node("ReduceMean", ["state"], ["state_mean"], axes=[0, 2], keepdims=0),
            helper.make_node("Unsqueeze", ["state_mean", "one_axis"], ["state_col"]),
            helper.make_node("Add", ["scaled", "state_col"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["output"]),
            helper.make_node("Mul", ["state", "half"], ["decayed"]),
            helper.make_node("Reshape", ["scaled", "shape3"], ["scaled3"]),
            helper.make_node("Add", ["decayed", "scaled3"], ["stateN"]),
        ],
        "silero_vad_standin",
        [
            _value("input", TensorProto.FLOAT, ["batch", "samples"]),
            _value("state", TensorProto.FLOAT, [2, "batch", 128]),
            _value("sr", TensorProto.INT64, []),
        ],
        [_value("output", TensorProto.FLOAT, ["batch", 1]), _value("stateN", TensorProto.FLOAT, [2, "batch", 128])],
        [rate, half, shape3, numpy_helper.from_array(np.array([1], np.int64), "one_axis")],
    )
    return _save(graph, path)


# -- requests -------------------------------------------------------------------------------------


def _rows(rng, low=1, high=5) -> int:
    return int(rng.integers(low, high))


def _floats(rng, *shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


@dataclass(frozen=True)
class Case:
    """One model of the corpus. ``flags``: extra ``generate`` arguments; ``sim``: keyword
    arguments of ``sim_compile`` when the case is valid for an .om (None: it is not)."""

    name: str
    build: Callable[[Path], Path]
    requests: Callable[[np.random.Generator], Requests]
    flags: tuple[str, ...] = ()
    sim: Mapping[str, Any] | None = None
    sim_requests: Callable[[np.random.Generator], Requests] | None = None
    expect_max_batch: int | None = None
    sim_max_batch: int | None = None
    notes: tuple[str, ...] = field(default=())


def _each(count: int, make: Callable[[np.random.Generator], dict[str, np.ndarray]]):
    return lambda rng: [make(rng) for _ in range(count)]


UTF8_WORDS = [b"ab\xc3\xa9", b"", "日本語".encode(), b"plain", "ok \U0001f600".encode()]

CASES = (
    Case(
        "rank0",
        rank0,
        _each(8, lambda r: {"x": _floats(r, _rows(r), 3), "s": _floats(r, 1)}),
        expect_max_batch=0,
    ),
    Case(
        "fp16",
        lambda p: unary(p, "Neg", TensorProto.FLOAT16),
        _each(10, lambda r: {"x": _floats(r, _rows(r), 4, dtype=np.float16)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=8,
        sim_max_batch=4,
    ),
    Case(
        "int8",
        lambda p: unary(p, "Neg", TensorProto.INT8),
        _each(10, lambda r: {"x": r.integers(-100, 100, (_rows(r), 4)).astype(np.int8)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=8,
        sim_max_batch=4,
    ),
    Case(
        "bool",
        lambda p: unary(p, "Not", TensorProto.BOOL),
        _each(10, lambda r: {"x": r.integers(0, 2, (_rows(r), 4)).astype(bool)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=8,
        sim_max_batch=4,
    ),
    Case(
        "strings",
        strings,
        _each(10, lambda r: {"x": np.array([[UTF8_WORDS[int(i)]] for i in r.integers(0, 5, _rows(r))], np.object_)}),
        expect_max_batch=8,
    ),
    Case(
        "int64_out",
        argmax,
        _each(10, lambda r: {"x": _floats(r, _rows(r), 5)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=8,
        sim_max_batch=4,
    ),
    Case(
        "two_dynamic",
        two_dynamic,
        _each(12, lambda r: {"x": _floats(r, _rows(r), int(r.integers(1, 7)))}),
        expect_max_batch=8,
    ),
    Case(
        "open_rank",
        open_rank,
        _each(8, lambda r: {"x": _floats(r, _rows(r), 3)}),
        flags=("--shape", "x:-1,3", "--shape", "y:-1,3"),
        expect_max_batch=8,
    ),
    Case(
        "transposed",
        transposed,
        _each(10, lambda r: {"x": _floats(r, _rows(r, 1, 7), 4)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=0,
        sim_max_batch=0,
    ),
    Case(
        "scalar_sum",
        scalar_sum,
        _each(10, lambda r: {"x": _floats(r, _rows(r, 1, 7), 4)}),
        sim={"batch_gears": (1, 2, 4)},
        sim_requests=_each(10, lambda r: {"x": _floats(r, (1, 2, 4)[int(r.integers(0, 3))], 4)}),
        expect_max_batch=0,
        sim_max_batch=0,
    ),
    Case(
        "odd_names",
        odd_names,
        _each(10, lambda r: {ODD_IN: _floats(r, _rows(r), 2)}),
        sim={"batch_gears": (1, 2, 4)},
        expect_max_batch=8,
        sim_max_batch=4,
    ),
    Case("zero_axis", zero_axis, _each(6, lambda r: {"x": _floats(r, _rows(r), 2)}), expect_max_batch=8),
    Case("no_inputs", no_inputs, _each(3, lambda r: {}), expect_max_batch=0),
    Case(
        "two_batch_names",
        two_batch_names,
        _each(8, lambda r: {"a": _floats(r, _rows(r), 2), "b": _floats(r, _rows(r), 2)}),
        expect_max_batch=0,
    ),
    Case(
        "silero_vad",
        silero_vad,
        _each(
            8,
            lambda r: (
                lambda n: {
                    "input": _floats(r, n, int(r.integers(64, 512))),
                    "state": _floats(r, 2, n, 128),
                    "sr": np.array([(8000, 16000)[int(r.integers(0, 2))]], np.int64),
                }
            )(_rows(r, 1, 3)),
        ),
        expect_max_batch=0,
    ),
)


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


# -- the reference ----------------------------------------------------------------------------------


def reference(onnx_file: Path, request: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime's answer to ``request`` as a client sends it: rank-0 inputs arrive as [1]
    (squeezed here), strings as UTF-8 bytes (decoded here); rank-0 results come back as [1]
    and strings as bytes, as the server returns them."""
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    scalars = {node.name for node in session.get_inputs() if node.shape == []}
    feeds = {}
    for name, array in request.items():
        if name in scalars and array.shape == (1,):
            array = array.reshape(())
        if array.dtype == np.object_:
            array = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).reshape(array.shape)
            if array.ndim == 2 and array.shape[1] == 1:
                array = array.reshape(-1)
        feeds[name] = array
    names = [node.name for node in session.get_outputs()]
    results = {}
    for name, value in zip(names, session.run(names, feeds)):
        value = np.asarray(value)
        if value.ndim == 0:
            value = value.reshape(1)
        if value.dtype == np.object_:
            value = np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(value).reshape(value.shape)
        results[name] = value
    return results
