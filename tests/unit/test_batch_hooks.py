"""GEModel's batch hooks: ``preprocess_batch`` once over the requests of an execute,
``postprocess_batch`` once over the requests an engine batch answers; a request's own error fails
it alone, a hook that raises fails its batch with one traceback in the log; answers compared with
ONNX Runtime called directly on what the hooks gave the engine."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend import GEModel, InputError
from ge_python_backend.repository.modelcode import read_model_code
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import ModelHarness, models
from ge_python_backend.testing import fake_pb_utils as pb
from tests.support import repos
from tests.support.pb_log import errors, fresh_log  # noqa: F401 (fresh_log: an autouse fixture)


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    """(the ONNX file, a folder serving it on acl-sim with batch gears 1, 2, 4, 8)."""
    root = tmp_path_factory.mktemp("batch_hooks")
    onnx_file = models.linear(root / "linear.onnx")
    sim_compile(onnx_file, root / "linear.om", batch_gears=(1, 2, 4, 8))
    return onnx_file, repos.generated(root / "repo", root / "linear.om", "linear", max_batch_size=8)


def request(x: np.ndarray) -> pb.InferenceRequest:
    return pb.InferenceRequest([pb.Tensor("x", x)])


def split(rows: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    return np.split(rows, np.cumsum(counts)[:-1])


class Scaling(GEModel):
    """x doubled in one pass over the execute; each request's scale left in its context; logits
    times that scale in one pass over each engine batch. Calls recorded per hook."""

    calls: dict[str, list[list[int]]]

    def initialize(self, args):
        super().initialize(args)
        self.calls = {"preprocess_batch": [], "postprocess_batch": []}

    def preprocess_batch(self, inputs, requests):
        counts = [len(each["x"]) for each in inputs]
        self.calls["preprocess_batch"].append(counts)
        for each, request in zip(inputs, requests):
            request.context["scale"] = float(each["x"][0, 0])
        return [{"x": x} for x in split(np.concatenate([each["x"] for each in inputs]) * 2, counts)]

    def postprocess_batch(self, outputs, requests):
        counts = [len(each["logits"]) for each in outputs]
        self.calls["postprocess_batch"].append(counts)
        scales = np.repeat([request.context["scale"] for request in requests], counts).astype(np.float32)
        logits = np.concatenate([each["logits"] for each in outputs]) * scales[:, None]
        return [{"logits": part, "probs": each["probs"]} for part, each in zip(split(logits, counts), outputs)]


def test_preprocess_batch_sees_the_whole_execute_and_postprocess_batch_each_engine_batch(linear):
    onnx_file, folder = linear
    rng = np.random.default_rng(0)
    counts = [5, 6, 7]  # 18 rows: 3 or more engine batches of at most 8, some request split between two
    arrays = [rng.standard_normal((n, 4)).astype(np.float32) for n in counts]
    for array, scale in zip(arrays, (1.5, -2.0, 0.5)):
        array[0, 0] = scale
    with ModelHarness(Scaling, folder) as harness:
        runs = []
        slot = harness.model.engine.slots[0]
        original = slot.run

        def counted():
            runs.append(1)
            return original()

        slot.run = counted
        answers = harness.infer([request(x) for x in arrays])
        calls = harness.model.calls
    assert calls["preprocess_batch"] == [counts]
    seen = sorted(n for call in calls["postprocess_batch"] for n in call)
    assert seen == sorted(counts), "each request once, with all its rows (a split one with its last part)"
    assert 1 < len(calls["postprocess_batch"]) <= len(runs)
    for x, answer in zip(arrays, answers):
        assert not answer.has_error(), answer.error().message()
        want = models.reference(onnx_file, {"x": x * 2})["logits"] * x[0, 0]
        got = pb.get_output_tensor_by_name(answer, "logits").as_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class Refusing(GEModel):
    """Each request's own error in its place: x[0, 0] == 9 is refused (the client's), == 8 crashes
    preprocess, == 7 is refused by postprocess, == 6 crashes postprocess."""

    def preprocess_batch(self, inputs, requests):
        results = []
        for each in inputs:
            mark = each["x"][0, 0]
            if mark == 9:
                results.append(InputError("x starts with 9, which this model refuses"))
            elif mark == 8:
                results.append(ZeroDivisionError("division by zero"))
            else:
                results.append(each)
        for each, request in zip(inputs, requests):
            request.context["mark"] = each["x"][0, 0]
        return results

    def postprocess_batch(self, outputs, requests):
        results = []
        for each, request in zip(outputs, requests):
            if request.context["mark"] == 7:
                results.append(InputError("this request's answer is refused"))
            elif request.context["mark"] == 6:
                results.append(KeyError("label"))
            else:
                results.append(each)
        return results


def marked(mark: float, rows: int = 1) -> pb.InferenceRequest:
    x = np.ones((rows, 4), np.float32)
    x[0, 0] = mark
    return request(x)


def test_a_request_whose_batch_hook_result_is_an_error_fails_alone(linear):
    _, folder = linear
    with ModelHarness(Refusing, folder) as harness:
        answers = harness.infer([marked(1), marked(9), marked(8), marked(7, 2), marked(6), marked(2, 3)])
    ok = [not a.has_error() for a in answers]
    assert ok == [True, False, False, False, False, True]
    messages = [(a.error().code(), a.error().message()) for a in answers[1:5]]
    assert messages == [
        (pb.TritonError.INVALID_ARG, "x starts with 9, which this model refuses"),
        (pb.TritonError.INTERNAL, "preprocess failed: ZeroDivisionError: division by zero"),
        (pb.TritonError.INVALID_ARG, "this request's answer is refused"),
        (pb.TritonError.INTERNAL, "postprocess failed: KeyError: 'label'"),
    ]
    logged = errors()
    assert len(logged) == 2, logged  # the two crashes, once each with its traceback; refusals are not logged
    assert all("Traceback (most recent call last)" in line for line in logged)


class Raising(GEModel):
    """preprocess_batch raises when a request starts with 5; postprocess_batch when one starts with 4."""

    def preprocess_batch(self, inputs, requests):
        if any(each["x"][0, 0] == 5 for each in inputs):
            raise RuntimeError("the batch service is down")
        for each, request in zip(inputs, requests):
            request.context["mark"] = each["x"][0, 0]
        return inputs

    def postprocess_batch(self, outputs, requests):
        if any(request.context.get("mark") == 4 for request in requests):
            raise RuntimeError("the decoder is down")
        return outputs

    def preprocess(self, inputs, request):  # never called: the batch hook takes its side
        raise AssertionError("preprocess must not run beside preprocess_batch")


def test_a_batch_hook_that_raises_fails_the_requests_it_had_with_one_logged_traceback(linear):
    _, folder = linear
    with ModelHarness(Raising, folder) as harness:
        answers = harness.infer([marked(1), marked(5, 2), marked(3)])
        assert [a.error().message() for a in answers] == [
            "preprocess_batch failed: RuntimeError: the batch service is down"
        ] * 3
        (logged,) = errors()
        assert "preprocess_batch failed for the 3 request(s) of a batch" in logged and "Traceback" in logged
        answers = harness.infer([marked(1), marked(4, 3)])  # one engine batch of 4 rows
        assert [a.error().message() for a in answers] == [
            "postprocess_batch failed: RuntimeError: the decoder is down"
        ] * 2
        assert len(errors()) == 2
        assert [a.has_error() for a in harness.infer([marked(1), marked(3)])] == [False, False]


class Miscounting(GEModel):
    def postprocess_batch(self, outputs, requests):
        return outputs[:1]


def test_a_batch_hook_that_returns_another_number_of_results_breaks_its_contract(linear):
    _, folder = linear
    with ModelHarness(Miscounting, folder) as harness:
        answers = harness.infer([marked(1), marked(2, 2), marked(3)])
    expected = (
        "postprocess_batch returned 1 results for 3 request(s); it must return one result per request, in order "
        "(its tensors, or the exception that fails it)"
    )
    assert [(a.error().code(), a.error().message()) for a in answers] == [(pb.TritonError.INTERNAL, expected)] * 3
    (logged,) = errors()
    assert expected in logged and "the hook: File" in logged and "in postprocess_batch" in logged


def test_check_reads_a_batch_hook_as_making_its_side(tmp_path):
    code = tmp_path / "model.py"
    code.write_text(
        "from ge_python_backend import GEModel\n\n"
        "class TritonPythonModel(GEModel):\n"
        "    def postprocess_batch(self, outputs, requests):\n"
        "        return outputs\n"
    )
    assert read_model_code(code).overrides == frozenset({"postprocess"})
    assert Raising._overridden() == frozenset({"preprocess", "postprocess"})
    assert Miscounting._overridden() == frozenset({"postprocess"})
