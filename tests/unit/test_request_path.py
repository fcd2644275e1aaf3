"""The one request path against a deliberately simple reference executor
(tests/support/reference_path.py: each request alone, each row alone, on ONNX Runtime called
directly): random lists of good and bad requests of several signatures, batching on and off,
batch gears on acl-sim, two execution slots, hooks per request and per batch; answers bitwise,
errors by message and code."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ge_python_backend import sim
from ge_python_backend.errors import InputError
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.testing import ModelHarness, models
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel
from tests.support import repos
from tests.support.reference_path import reference_model


def refuse_large(inputs, request):
    """A preprocess hook: a request whose first value is above 1.5 is the client's error."""
    if float(inputs["a"].reshape(-1)[0]) > 1.5:
        raise InputError("input 'a' starts above 1.5, which this model refuses")
    return {"a": inputs["a"], "b": inputs["b"] + 1}


def doubled_sum(outputs, request):
    """A postprocess hook: the sum doubled, the count as it is."""
    return {"sum": outputs["sum"] * 2, "count": outputs["count"]}


class Plain(GEModel):
    pass


class Hooked(GEModel):
    def preprocess(self, inputs, request):
        return refuse_large(inputs, request)

    def postprocess(self, outputs, request):
        return doubled_sum(outputs, request)


class BatchHooked(GEModel):
    """Hooked's work over each batch: a request refused (or crashed on) has its error in its own
    place, and the sums of an engine batch are doubled in one numpy pass."""

    def preprocess_batch(self, inputs, requests):
        results = []
        for arrays, request in zip(inputs, requests):
            try:
                results.append(refuse_large(arrays, request))
            except Exception as exc:
                results.append(exc)
        return results

    def postprocess_batch(self, outputs, requests):
        doubled = np.concatenate([each["sum"] for each in outputs]) * 2
        bounds = np.cumsum([0] + [len(each["sum"]) for each in outputs])
        return [
            {"sum": doubled[start:end], "count": each["count"]} for each, start, end in zip(outputs, bounds, bounds[1:])
        ]


#: model kind -> (source, generate options, config parameters, GEModel class, reference hooks)
KINDS = {
    "pair_batching_two_slots": ("pair", {"max_batch_size": 8}, {"streams": "2"}, Plain, {}),
    "pair_alone": ("pair", {"max_batch_size": 0}, {}, Plain, {}),
    "gears_sim": ("gears", {}, {}, Plain, {}),
    "pair_hooked": (
        "pair",
        {"max_batch_size": 8},
        {},
        Hooked,
        {"preprocess": refuse_large, "postprocess": doubled_sum},
    ),
    "pair_batch_hooked": (
        "pair",
        {"max_batch_size": 8},
        {"streams": "2"},
        BatchHooked,
        {"preprocess": refuse_large, "postprocess": doubled_sum},
    ),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Per kind: (the one path, the reference executor), both loaded on the same folder (log
    verbosity 1 lowers the package logger's level for the process: put back afterwards)."""
    level = logging.getLogger("ge_python_backend").level
    root = tmp_path_factory.mktemp("paths")
    pair = models.two_inputs(root / "two_inputs.onnx")
    scale = models.scale_shift(root / "scale_shift.onnx")
    om = root / "scale_shift.om"
    sim.sim_compile(scale, om, batch_gears=(1, 2, 4))
    sources = {"pair": (pair, pair), "gears": (om, scale)}
    loaded = {}
    for kind, (source, options, parameters, model_class, hooks) in KINDS.items():
        served_file, onnx_file = sources[source]
        folder = repos.generated(root / kind, served_file, kind, **options)
        set_parameters(folder / "config.pbtxt", log_verbosity="1", **parameters)
        loaded[kind] = (
            ModelHarness(model_class, folder).__enter__(),
            ModelHarness(reference_model(onnx_file, **hooks), folder).__enter__(),
        )
    yield loaded
    for pair_of_harnesses in loaded.values():
        for harness in pair_of_harnesses:
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
    engine = getattr(harness.model, "engine", None)
    if engine is not None:  # acl-sim engines of several models share this thread: make this one's context current
        engine.bind_thread()
    return harness.model.execute(requests)


def _same(got, want) -> None:
    assert got.has_error() == want.has_error(), (got.error(), want.error())
    if want.has_error():
        assert (got.error().message(), got.error().code()) == (want.error().message(), want.error().code())
        return
    answered = [(t.name(), t.as_numpy()) for t in got.output_tensors()]
    expected = [(t.name(), t.as_numpy()) for t in want.output_tensors()]
    assert [n for n, _ in answered] == [n for n, _ in expected]
    for (_, a), (_, b) in zip(answered, expected):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("kind", KINDS)
def test_the_request_path_answers_random_requests_as_the_reference_executor(served, kind):
    path, reference = served[kind]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(request_lists(kind), st.sampled_from([(), ("sum",), ("count",)] if kind != "gears_sim" else [()]))
    def check(arrays_list, requested):
        got = _answers(path, arrays_list, requested)
        want = _answers(reference, arrays_list, requested)
        assert len(got) == len(want) == len(arrays_list)
        for answer, expected in zip(got, want):
            _same(answer, expected)

    check()
