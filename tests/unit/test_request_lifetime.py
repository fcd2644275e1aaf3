"""Nothing of a request outlives its answer: its tensors, what hooks know of it and the call it
came in are freed on every path, whoever keeps the answer (counted with weakrefs after gc)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.specs import BatchSupport
from tests.support.fakes import DoublingEngine, declared


def _submitted(runner: Runner, arrays: list[np.ndarray]) -> tuple[list[weakref.ref], list[tuple]]:
    """Submit one request per array; weakrefs to what each request was made of, and the answers
    (kept, as a client keeps what it got)."""
    answers: list[tuple] = []
    requests = [
        Request(RequestInfo(request_id=str(i)), {"x": x}, lambda outputs, error: answers.append((outputs, error)))
        for i, x in enumerate(arrays)
    ]
    alive = [weakref.ref(o) for r in requests for o in (r.info, r.inputs["x"])]
    runner.submit(requests, wait=True)
    return alive, answers


@pytest.mark.parametrize(
    ("case", "preprocess"),
    [
        ("the client's data type", None),
        (
            "preprocess broke the engine's contract",
            lambda inputs, info: {"x": inputs["x"].astype(np.float64)} if not inputs["x"].any() else inputs,
        ),
    ],
)
def test_a_refused_request_keeps_nothing_of_its_call_alive(case, preprocess):
    """A refused key is remembered (the next request of it costs one lookup); what is remembered
    must not be the raised exception, whose traceback holds the frames of the call that met it
    first, and with them every request of that call."""
    engine = DoublingEngine(BatchSupport("dynamic"))
    runner = Runner(
        engine,
        batching=True,
        max_batch_size=8,
        outputs=declared(engine.spec),
        preprocess=preprocess,
        postprocess=None,
    )
    try:
        kept = []
        for _ in range(2):  # the first call checks the key, the second hits what was remembered
            bad = np.zeros((1, 2), np.float32 if preprocess else np.float64)
            alive, answers = _submitted(runner, [np.ones((2, 2), np.float32), bad])
            assert sorted(error is None for _, error in answers) == [False, True], case
            kept.append(answers)
            del bad
            gc.collect()
            assert [ref() for ref in alive] == [None] * len(alive), f"{case}: a request outlived its answer"
    finally:
        runner.close()


def test_a_request_no_compiled_shape_takes_keeps_nothing_of_its_call_alive(tmp_path):
    """The group of a shape between image-size gears remembers why it is refused (so does a
    composition of rows an exact-batch model cannot run): as a message, not with its call."""
    from ge_python_backend import GEModel
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils, models
    from tests.support import repos

    pb_utils = install_fake_pb_utils()
    sim_compile(
        models.conv(tmp_path / "conv.onnx"),
        tmp_path / "hw.om",
        input_shapes="x:1,3,-1,-1",
        dynamic_image_size="8,8;16,12",
    )
    folder = repos.generated(tmp_path / "repo", tmp_path / "hw.om", "hw")
    seen: list[weakref.ref] = []

    class Watched(GEModel):
        def preprocess(self, inputs, request):
            seen.extend(weakref.ref(o) for o in (request, inputs["x"]))
            return inputs

    def image(height: int, width: int):
        return pb_utils.InferenceRequest([pb_utils.Tensor("x", np.ones((1, 3, height, width), np.float32))])

    with ModelHarness(Watched, folder) as harness:
        for _ in range(2):
            answers = harness.infer([image(8, 8), image(10, 10)])
            assert not answers[0].has_error() and "no compiled shape" in answers[1].error().message()
            gc.collect()
            assert [ref() for ref in seen] == [None] * len(seen), "a request outlived its answer"
