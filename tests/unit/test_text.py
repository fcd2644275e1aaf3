"""Token padding for BERT-style encoders: requests of mixed lengths in one padded call answer as the
encoder run on each request alone, unpadded (ONNX Runtime called directly), with sequence buckets
and with dims gears over (batch, sequence)."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.errors import ConfigError, EngineError, InputError
from ge_python_backend.hooks.text import TEXT_PARAMETERS, TokenPadder
from ge_python_backend.specs import BatchSupport, ModelSpec, ShapeGear, TensorSpec
from ge_python_backend.testing import models

DEFAULTS = {p.name: p.default for p in TEXT_PARAMETERS}
NAMES = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """The encoder run by ONNX Runtime called directly: inputs -> outputs by name."""
    import onnxruntime as ort

    path = models.text_encoder(tmp_path_factory.mktemp("text") / "encoder.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds)))


def spec(gears=(), names=NAMES) -> ModelSpec:
    inputs = tuple(TensorSpec(n, "INT64", (-1, -1)) for n in names)
    outputs = (TensorSpec("last_hidden_state", "FP32", (-1, -1, 16)), TensorSpec("pooler_output", "FP32", (-1, 16)))
    shape_gears = tuple(ShapeGear({n: (b, s) for n in names}) for b, s in gears)
    return ModelSpec(
        inputs, outputs, BatchSupport("none" if gears else "dynamic"), shape_gears, "dims" if gears else ""
    )


def requests(seed: int, count: int = 12, longest: int = 60):
    rng = np.random.default_rng(seed)
    found = []
    for index in range(count):
        length, rows = int(rng.integers(1, longest + 1)), 1 + index % 3
        request = {"input_ids": rng.integers(1, 50, (rows, length))}
        if index % 2:
            request["attention_mask"] = np.ones((rows, length), np.int64)
        if index % 3 == 2:
            request["token_type_ids"] = rng.integers(0, 2, (rows, length))
        found.append(request)
    return found


def unpadded(encoder, request):
    ids = request["input_ids"]
    feeds = {
        "input_ids": ids,
        "attention_mask": request.get("attention_mask", np.ones_like(ids)),
        "token_type_ids": request.get("token_type_ids", np.zeros_like(ids)),
    }
    return encoder(feeds)


@pytest.mark.parametrize(
    "gears", [(), tuple((b, s) for b in (1, 2, 4, 8) for s in (16, 32, 64))], ids=["buckets", "dims-gears"]
)
def test_mixed_lengths_in_one_call_answer_as_each_request_alone(encoder, gears):
    padder = TokenPadder.build(spec(gears), dict(DEFAULTS, sequence_buckets=(16, 32, 64)))
    calls = []

    def model(inputs):
        calls.append({n: a.shape for n, a in inputs.items()})
        if gears:
            assert inputs["input_ids"].shape in gears
        return encoder(inputs)

    batch = requests(seed=len(gears))
    answers = padder.run(batch, model)
    for request, answer in zip(batch, answers):
        expected = unpadded(encoder, request)
        assert answer["last_hidden_state"].shape == expected["last_hidden_state"].shape
        np.testing.assert_allclose(answer["last_hidden_state"], expected["last_hidden_state"], atol=1e-5)
        np.testing.assert_allclose(answer["pooler_output"], expected["pooler_output"], atol=1e-5)
    assert len(calls) < len(batch), "requests of different lengths share calls"
    assert all(shape["input_ids"][1] in (16, 32, 64) for shape in calls)


def test_bad_requests_fail_alone_naming_the_tensor(encoder):
    padder = TokenPadder.build(spec(), dict(DEFAULTS, sequence_buckets=(16, 32)))
    good = {"input_ids": np.ones((1, 4), np.int64)}
    bad = [
        ({"input_ids": np.ones((1, 33), np.int64)}, "input_ids has 33 tokens; the model takes at most 32"),
        ({"input_ids": np.ones((9, 3), np.int64)}, "input_ids has 9 rows; a request may carry at most 8"),
        (
            {"input_ids": np.ones((1, 3), np.int64), "attention_mask": np.ones((1, 4), np.int64)},
            "attention_mask is [1, 4]; it must have input_ids's shape [1, 3]",
        ),
        ({"input_ids": np.ones((1, 3), np.float32)}, "input_ids is float32 [1, 3]; expected integers"),
        ({"attention_mask": np.ones((1, 3), np.int64)}, "the request has no input_ids"),
    ]
    answers = padder.run([good, *(b for b, _ in bad), good], lambda inputs: encoder(inputs))
    assert isinstance(answers[0], dict) and isinstance(answers[-1], dict)
    for (_, message), answer in zip(bad, answers[1:-1]):
        assert isinstance(answer, InputError) and message in str(answer)


def test_a_model_without_token_types_refuses_non_zero_ones(encoder):
    padder = TokenPadder.build(spec(names=NAMES[:2]), DEFAULTS)
    zeros = {"input_ids": np.ones((1, 3), np.int64), "token_type_ids": np.zeros((1, 3), np.int64)}
    ones = dict(zeros, token_type_ids=np.ones((1, 3), np.int64))
    assert padder.checked(zeros).keys() == {"input_ids", "attention_mask"}
    with pytest.raises(InputError, match="the model takes no token_type_ids; send none \\(or all 0\\)"):
        padder.checked(ones)


def test_a_failed_call_fails_only_its_requests():
    padder = TokenPadder.build(spec(), dict(DEFAULTS, max_rows=2))

    def model(inputs):
        if inputs["input_ids"].shape[1] > 16:
            raise EngineError("the device failed")
        return {"last_hidden_state": np.zeros(inputs["input_ids"].shape + (16,), np.float32)}

    short, long = {"input_ids": np.ones((2, 5), np.int64)}, {"input_ids": np.ones((2, 20), np.int64)}
    answers = padder.run([long, short], model)
    assert isinstance(answers[0], EngineError) and answers[1]["last_hidden_state"].shape == (2, 5, 16)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ((TensorSpec("input_ids", "INT64", (-1, -1)), TensorSpec("pixels", "FP32", (-1, 3))), "this model takes"),
        ((TensorSpec("input_ids", "FP32", (-1, -1)),), "token inputs are INT64 or INT32 [batch, sequence]"),
    ],
)
def test_a_model_that_takes_no_tokens_is_refused(inputs, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TokenPadder.build(ModelSpec(inputs, (), BatchSupport("dynamic")), DEFAULTS)
