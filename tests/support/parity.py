"""One table of requests and what each must get, run against both ModelHarness
(``tests/unit/test_harness_parity.py``) and a real tritonserver (``tests/e2e/test_harness_parity.py``):
the harness exists to predict the server, so they must agree case by case.

The model is ``tests/models/contract_breaker.py`` on the ``linear`` ONNX model: requests Triton's
core refuses, hooks that break their contract (the server's fault: HTTP 500, counted as
``internal`` for preprocess and ``postprocess`` for postprocess), and good requests whose answer
is computed here from ONNX Runtime directly.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ge_python_backend.testing import models
from tests.support.repos import MODELS

NAME = "breaker"
CONFIG = f"""
name: "{NAME}"
backend: "python"
max_batch_size: 4
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "SCORE" data_type: TYPE_FP32 dims: [ 3 ] }},
  {{ name: "LEVEL" data_type: TYPE_INT8 dims: [ 1 ] }},
  {{ name: "HALF" data_type: TYPE_FP16 dims: [ 1 ] }},
  {{ name: "NAME" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters [ {{ key: "engine" value: {{ string_value: "onnxruntime" }} }} ]
"""
BAD_REQUEST, SERVER_FAULT = "400", "500"


def breaker(repo: Path) -> Path:
    """The model folder; returns the engine's ONNX file."""
    folder = Path(repo) / NAME
    (folder / "1").mkdir(parents=True)
    onnx_file = models.linear(folder / "1" / "model.onnx")
    shutil.copyfile(MODELS / "contract_breaker.py", folder / "1" / "model.py")
    (folder / "config.pbtxt").write_text(CONFIG)
    return onnx_file


@dataclass(frozen=True)
class Case:
    """A request, and what it must get: the answer (``status`` None) or an error with ``status``
    (HTTP) whose message contains ``message``; ``kind``: the ge_request_failures kind GEModel
    counts it as (None: Triton's core refuses it before GEModel sees it)."""

    inputs: dict[str, np.ndarray]
    parameters: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    status: str | None = None
    message: str = ""
    kind: str | None = None


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 4)).astype(np.float32)


TWO = {"X": rows(2)}
CASES = {
    "good": Case({"X": rows(3, 1)}),
    "good, two outputs asked for": Case(TWO, outputs=("NAME", "LEVEL")),
    # what Triton's core refuses before the model sees it
    "INT32 for an FP32 input": Case(
        {"X": rows(2).astype(np.int32)},
        status=BAD_REQUEST,
        message="inference input 'X' data-type is 'INT32', but model 'breaker' expects 'FP32'",
    ),
    "wrong dims": Case(
        {"X": np.ones((2, 5), np.float32)},
        status=BAD_REQUEST,
        message="unexpected shape for input 'X' for model 'breaker'. Expected [-1,4], got [2,5]",
    ),
    "an output the config lacks": Case(
        TWO, outputs=("NOPE",), status=BAD_REQUEST, message="unexpected inference output 'NOPE' for model 'breaker'"
    ),
    "an input the config lacks": Case(
        {"Y": rows(2)}, status=BAD_REQUEST, message="unexpected inference input 'Y' for model 'breaker'"
    ),
    "a batch above max_batch_size": Case(
        {"X": rows(5)}, status=BAD_REQUEST, message="inference request batch-size must be <= 4 for 'breaker'"
    ),
    "an empty batch": Case(
        {"X": rows(0)},
        status=BAD_REQUEST,
        message="input byte size mismatch for input 'X' for model 'breaker'. Expected 16, got 0",
    ),
    # preprocess broke its contract: the server's fault, counted as internal
    "preprocess returns a list": Case(
        TWO,
        {"pre": "list"},
        status=SERVER_FAULT,
        message="preprocess returned list; it must return a dict of the engine's inputs (x FP32 [-1,4])",
        kind="internal",
    ),
    "preprocess returns FP64": Case(
        TWO,
        {"pre": "fp64"},
        status=SERVER_FAULT,
        message="preprocess returned {'x': FP64 [2,4]}, which the engine cannot take: input 'x' has data type FP64; "
        "the model expects FP32",
        kind="internal",
    ),
    "preprocess returns a wrong shape": Case(
        TWO,
        {"pre": "shape"},
        status=SERVER_FAULT,
        message="preprocess returned {'x': FP32 [2,3]}, which the engine cannot take: input 'x' has shape [2,3]",
        kind="internal",
    ),
    "preprocess returns {}": Case(
        TWO,
        {"pre": "empty"},
        status=SERVER_FAULT,
        message="preprocess returned {}, which the engine cannot take: missing input 'x'",
        kind="internal",
    ),
    "preprocess returns more rows than max_batch_size": Case(
        TWO,
        {"pre": "many"},
        status=SERVER_FAULT,
        message="which the engine cannot take: batch size 10 is above max_batch_size 4",
        kind="internal",
    ),
    # an answer that contradicts the config: postprocess's fault
    "preprocess doubles the rows": Case(
        TWO,
        {"pre": "double"},
        status=SERVER_FAULT,
        message="postprocess returned output 'SCORE' with 4 rows for a request of 2",
        kind="postprocess",
    ),
    "postprocess returns None": Case(
        TWO,
        {"post": "none"},
        status=SERVER_FAULT,
        message="postprocess returned NoneType; it must return a dict of output arrays",
        kind="postprocess",
    ),
    "postprocess returns a wrong shape": Case(
        TWO,
        {"post": "shape"},
        status=SERVER_FAULT,
        message="postprocess returned output 'SCORE' of shape [2,2]; the config declares [3], so the answer must be "
        "[2,3]",
        kind="postprocess",
    ),
    "postprocess returns rank 1": Case(
        TWO,
        {"post": "rank1"},
        status=SERVER_FAULT,
        message="postprocess returned output 'SCORE' of shape [6]",
        kind="postprocess",
    ),
    "postprocess doubles the rows": Case(
        TWO,
        {"post": "double"},
        status=SERVER_FAULT,
        message="postprocess returned output 'SCORE' with 4 rows for a request of 2",
        kind="postprocess",
    ),
    "postprocess returns 300 for INT8": Case(
        TWO,
        {"post": "int8_overflow"},
        status=SERVER_FAULT,
        message="postprocess returned output 'LEVEL' as INT64 with value 300 (range -128..127), which the config's "
        "TYPE_INT8 cannot hold",
        kind="postprocess",
    ),
    "postprocess returns 70000.0 for FP16": Case(
        TWO,
        {"post": "fp16_overflow"},
        status=SERVER_FAULT,
        message="postprocess returned output 'HALF' as FP64 with value 70000.0 (beyond ±65504), which the config's "
        "TYPE_FP16 cannot hold",
        kind="postprocess",
    ),
    "postprocess returns numbers for a string output": Case(
        TWO,
        {"post": "number_for_string"},
        status=SERVER_FAULT,
        message="postprocess returned output 'NAME' as INT64; the config declares TYPE_STRING",
        kind="postprocess",
    ),
}


def expected_answer(onnx_file: Path, case: Case) -> dict[str, np.ndarray]:
    """What a good case must get, from ONNX Runtime run directly (the config's types and shapes)."""
    logits, probs = ort.InferenceSession(str(onnx_file)).run(None, {"x": case.inputs["X"]})
    best = np.argmax(logits, axis=1)
    answer = {
        "SCORE": logits,
        "LEVEL": best.reshape(-1, 1).astype(np.int8),
        "HALF": probs.max(axis=1, keepdims=True).astype(np.float16),
        "NAME": np.array([[f"class {i}".encode()] for i in best], dtype=object),
    }
    return {name: answer[name] for name in case.outputs or answer}


def check_answer(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, (name, got[name])
        if value.dtype == np.dtype(object):
            assert got[name].tolist() == value.tolist(), name
        else:
            np.testing.assert_allclose(got[name], value, rtol=1e-3 if value.dtype == np.float16 else 1e-6)
