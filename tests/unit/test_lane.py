"""The fast lane (serving/lane.py): the same answers and errors as the general path, and only
for the models that can use it."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ge_python_backend import sim
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.lane import refusal
from ge_python_backend.serving.outputs import DeclaredTensor
from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec
from ge_python_backend.testing import ModelHarness, models
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel
from tests.support import repos


class TritonPythonModel(GEModel):
    pass


#: batching on and off (onnxruntime, two inputs and outputs), batch gears (acl-sim)
KINDS = ("pair_batching", "pair_alone", "gears_sim")


@pytest.fixture(scope="module")
def pairs_of_models(tmp_path_factory):
    """Per model kind, the same folder with fast_lane true and false, both loaded (log_verbosity 1
    lowers the package logger's level for the process: put back afterwards)."""
    level = logging.getLogger("ge_python_backend").level
    root = tmp_path_factory.mktemp("lane")
    pair = models.two_inputs(root / "two_inputs.onnx")
    scale = models.scale_shift(root / "scale_shift.onnx")
    om = root / "scale_shift.om"
    sim.sim_compile(scale, om, batch_gears=(1, 2, 4))
    sources = {
        "pair_batching": (pair, {"max_batch_size": 8}),
        "pair_alone": (pair, {"max_batch_size": 0}),
        "gears_sim": (om, {}),
    }
    loaded = {}
    for kind, (source, options) in sources.items():
        harnesses = []
        for lane in ("true", "false"):
            folder = repos.generated(root / lane, source, kind, **options)
            set_parameters(folder / "config.pbtxt", fast_lane=lane, log_verbosity="1")
            harnesses.append(ModelHarness(TritonPythonModel, folder).__enter__())
        loaded[kind] = harnesses
    yield loaded
    for harnesses in loaded.values():
        for harness in harnesses:
            harness.__exit__(None, None, None)
    logging.getLogger("ge_python_backend").setLevel(level)


def _valid(draw, kind: str, rng) -> dict[str, np.ndarray]:
    rows = draw(st.integers(1, 4))
    if kind == "gears_sim":
        return {"x": rng.standard_normal((rows, 8)).astype(np.float32)}
    length = draw(st.sampled_from([3, 5]))
    return {n: rng.standard_normal((rows, length)).astype(np.float32) for n in ("a", "b")}


BAD = ("dtype", "rank", "missing", "extra", "rows", "empty", "disagree", "length")


def _bad(draw, kind: str, rng) -> dict[str, np.ndarray]:
    arrays = _valid(draw, kind, rng)
    first = next(iter(arrays))
    how = draw(st.sampled_from(BAD))
    if how == "dtype":
        arrays[first] = arrays[first].astype(np.float64)
    elif how == "rank":
        arrays[first] = arrays[first][..., None]
    elif how == "missing":
        del arrays[first]
    elif how == "extra":
        arrays["zzz"] = np.ones((1, 2), np.float32)
    elif how == "rows":
        arrays = {n: np.repeat(a[:1], 9, axis=0) for n, a in arrays.items()}
    elif how == "empty":
        arrays = {n: a[:0] for n, a in arrays.items()}
    elif how == "disagree":
        arrays[first] = np.concatenate([arrays[first], arrays[first]])
    else:
        arrays[first] = arrays[first][:, :2]
    return arrays


@st.composite
def request_lists(draw, kind: str):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(1, 8))
    return [(_bad if draw(st.integers(0, 4)) == 0 else _valid)(draw, kind, rng) for _ in range(count)]


def _answers(harness, arrays_list, requested):
    requests = [
        pb.InferenceRequest([pb.Tensor(n, a) for n, a in arrays.items()], requested_output_names=requested)
        for arrays in arrays_list
    ]
    # two acl-sim engines run inline on this one thread: make this one's context current (in Triton
    # each instance is a process of its own)
    harness.model.engine.bind_thread()
    return harness.model.execute(requests)


def _same(lane, general) -> None:
    assert lane.has_error() == general.has_error()
    if general.has_error():
        assert (lane.error().message(), lane.error().code()) == (general.error().message(), general.error().code())
        return
    got = [(t.name(), t.as_numpy()) for t in lane.output_tensors()]
    want = [(t.name(), t.as_numpy()) for t in general.output_tensors()]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _lane_served() -> int:
    return sum(int(m.group(1)) for _, line in pb.Logger.lines if (m := re.search(r", (\d+) in the fast lane", line)))


@pytest.mark.parametrize("kind", KINDS)
def test_the_fast_lane_answers_random_requests_as_the_general_path_does(pairs_of_models, kind):
    lane, general = pairs_of_models[kind]
    pb.Logger.lines.clear()

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(request_lists(kind), st.sampled_from([(), ("sum",), ("count",)] if kind != "gears_sim" else [()]))
    def check(arrays_list, requested):
        for got, want in zip(_answers(lane, arrays_list, requested), _answers(general, arrays_list, requested)):
            _same(got, want)

    check()
    assert _lane_served() > 0  # the lane did serve (signatures repeat), and the general model has none
    assert general.model._lane is None


def test_the_load_line_says_whether_the_lane_is_on_and_why_not(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path / "plain", onnx_dir / "two_inputs.onnx", "plain")
    off = repos.generated(tmp_path / "off", onnx_dir / "two_inputs.onnx", "off")
    set_parameters(off / "config.pbtxt", fast_lane="false")

    class Hooked(GEModel):
        def postprocess(self, outputs, request):
            return outputs

    pb.Logger.lines.clear()
    for model_class, model_dir in ((TritonPythonModel, folder), (TritonPythonModel, off), (Hooked, folder)):
        with ModelHarness(model_class, model_dir) as harness:
            assert (harness.model._lane is None) == (model_class is Hooked or model_dir == off)
    lines = [line for _, line in pb.Logger.lines if "fast lane" in line]
    assert [line.rsplit("; fast lane ", 1)[1] for line in lines] == [
        "on",
        "off (parameter fast_lane is false)",
        "off (a postprocess hook)",
    ]


def test_models_that_need_more_than_a_requests_signature_are_refused():
    spec = ModelSpec(
        inputs=(TensorSpec("x", "FP32", (-1, 4)), TensorSpec("s", "BYTES", (-1, 1))),
        outputs=(TensorSpec("y", "FP32", (-1, 4)),),
        batch=BatchSupport("dynamic"),
    )
    declared = [DeclaredTensor("y", "FP32", (4,))]
    reasons = refusal(
        spec,
        Layout.of(unbatched=["s"]),
        declared,
        hooks=["preprocess"],
        sequences=True,
        reject_nonfinite=True,
        engine_settings=True,
    )
    assert reasons.split("; ") == [
        "a preprocess hook",
        "sequence state",
        "reject_nonfinite checks values",
        "the engine has settings per request (dynamic AIPP)",
        "tensors without a batch axis",
        "string tensors",
    ]
    plain = ModelSpec(spec.inputs[:1], spec.outputs, BatchSupport("dynamic"))
    assert (
        refusal(plain, Layout(), declared, hooks=[], sequences=False, reject_nonfinite=False, engine_settings=False)
        == ""
    )


def test_a_lane_that_cannot_batch_hands_every_request_to_the_general_path(tmp_path, onnx_dir, monkeypatch):
    folder = repos.generated(tmp_path, onnx_dir / "two_inputs.onnx", "pair", max_batch_size=8)
    arrays = {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)}
    with ModelHarness(TritonPythonModel, folder) as harness:
        (first,) = _answers(harness, [arrays], ())  # learns the signature
        monkeypatch.setattr(harness.model._lane, "_plan", lambda members: 1 / 0)
        for response in _answers(harness, [arrays, arrays], ()):
            _same(response, first)
