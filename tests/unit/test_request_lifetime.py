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


class Note:
    """What preprocess leaves for postprocess: an object, so a test can see when it dies."""

    def __init__(self, marker: float) -> None:
        self.marker = marker


#: markers a request's x[0, 0] may carry: preprocess refuses it, or breaks the engine's contract
REFUSE, BREAK_CONTRACT = 99.0, 77.0


def _noting(notes: weakref.WeakSet):
    from ge_python_backend import GEModel, InputError

    class Noting(GEModel):
        """Leaves a Note in each request's context; postprocess answers with the note's marker."""

        def preprocess(self, inputs, request):
            note = Note(float(inputs["x"][0, 0]))
            notes.add(note)
            request.context["note"] = note
            if note.marker == REFUSE:
                raise InputError("refused after preprocess left a note")
            if note.marker == BREAK_CONTRACT:
                return {"x": inputs["x"].astype(np.float64)}  # the engine cannot take FP64
            return inputs

        def postprocess(self, outputs, request):
            marker = request.context["note"].marker
            return {"logits": np.full_like(outputs["logits"], marker), "probs": outputs["probs"]}

    return Noting


@pytest.fixture
def faulty_folder(tmp_path):
    """A linear model on acl-sim (gears 1-8) whose 2nd execution fails and whose 4th loses the
    device (the simulator is reset afterwards: a lost device stays lost in this process)."""
    from ge_python_backend import sim
    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import models
    from tests.support import repos

    sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "linear.om", batch_gears=(1, 2, 4, 8))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "m")
    set_parameters(folder / "config.pbtxt", acl_sim_faults="execute_async:2=507011, execute_async:4=lost")
    yield folder
    sim.get_simulator().reset()


def _request(pb_utils, marker: float, rows: int = 1):
    x = np.zeros((rows, 4), np.float32)
    x[:, 0] = marker
    return pb_utils.InferenceRequest([pb_utils.Tensor("x", x)])


def test_each_request_reads_its_own_context_and_no_context_outlives_its_request(faulty_folder):
    """Answered, refused by preprocess, refused for breaking the engine's contract, failed by the
    engine, refused out of service after the device is lost, and the model unloaded: every note
    dies with its request (two requests with equal fields have equal infos but their own contexts)."""
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

    pb_utils = install_fake_pb_utils()
    notes: weakref.WeakSet = weakref.WeakSet()

    def left() -> int:
        gc.collect()
        return len(notes)

    with ModelHarness(_noting(notes), faulty_folder) as harness:
        markers = [1.0, 2.0, 1.0, REFUSE, 3.0, BREAK_CONTRACT, 2.0]
        answers = harness.infer([_request(pb_utils, m, rows=1 + i % 2) for i, m in enumerate(markers)])  # run 1
        for marker, answer in zip(markers, answers):
            if marker in (REFUSE, BREAK_CONTRACT):
                assert answer.has_error()
                continue
            assert not answer.has_error(), answer.error().message()
            logits = pb_utils.get_output_tensor_by_name(answer, "logits").as_numpy()
            assert (logits == marker).all(), "a request read another request's context"
        assert left() == 0, "a context outlived its answered or refused request"
        (failed,) = harness.infer([_request(pb_utils, 4.0, rows=3)])  # run 2: the engine fails it
        assert failed.has_error() and "507011" in failed.error().message()
        assert left() == 0, "a context outlived the engine's failure"
        (served,) = harness.infer([_request(pb_utils, 5.0)])  # run 3
        assert not served.has_error()
        (lost,) = harness.infer([_request(pb_utils, 6.0, rows=2)])  # run 4 loses the device
        refused = harness.infer([_request(pb_utils, 7.0), _request(pb_utils, 8.0)])
        assert lost.has_error() and "507899" in lost.error().message()
        assert all("out of service" in answer.error().message() for answer in refused)
        assert left() == 0, "a context outlived the loss of the device"
        del answers, failed, served, lost, refused
    assert left() == 0, "a context outlived the model's unload"


def test_the_contexts_of_an_execute_cut_short_by_an_unload_die_with_their_answers(tmp_path):
    """The server goes away while an execute's batches still wait for the slot: the runner closes,
    the waiting batches are answered "shutting down", and nothing of their requests stays."""
    import threading

    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils, models
    from tests.support import repos

    pb_utils = install_fake_pb_utils()
    sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "linear.om", batch_gears=(1, 2, 4))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "slow", max_batch_size=4)
    set_parameters(folder / "config.pbtxt", acl_sim_device_ms="300", streams="1")
    notes: weakref.WeakSet = weakref.WeakSet()
    answers: list = []
    harness = ModelHarness(_noting(notes), folder).__enter__()
    started = threading.Event()
    original = harness.model.engine.slots[0].run

    def run():
        started.set()
        return original()

    harness.model.engine.slots[0].run = run
    execute = threading.Thread(
        target=lambda: answers.extend(harness.infer([_request(pb_utils, m, 4) for m in (1, 2, 3)]))
    )
    execute.start()
    assert started.wait(30)
    harness.model.runner.close()  # what the stub does when the server is gone, before closing the engine
    execute.join(60)
    assert not execute.is_alive()
    assert not answers[0].has_error()
    assert all("shutting down" in answer.error().message() for answer in answers[1:])
    del harness.model.engine.slots[0].run
    harness.__exit__(None, None, None)
    answers.clear()
    gc.collect()
    assert len(notes) == 0, "a context outlived the unload"


def test_a_context_is_freed_when_its_request_is_answered_not_when_its_execute_returns(tmp_path):
    """An execute of three requests runs three batches (4 rows each, the largest gear): when the
    third request's postprocess runs, the first two are answered and their notes are gone."""
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils, models
    from tests.support import repos

    pb_utils = install_fake_pb_utils()
    sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "linear.om", batch_gears=(1, 2, 4))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "m", max_batch_size=4)
    notes: weakref.WeakSet = weakref.WeakSet()
    alive_at_last: list[list[float]] = []

    class Watching(_noting(notes)):  # type: ignore[misc]
        def postprocess(self, outputs, request):
            if request.context["note"].marker == 3.0:
                gc.collect()
                alive_at_last.append(sorted(note.marker for note in notes))
            return super().postprocess(outputs, request)

    with ModelHarness(Watching, folder) as harness:
        answers = harness.infer([_request(pb_utils, marker, rows=4) for marker in (1.0, 2.0, 3.0)])
        assert not any(answer.has_error() for answer in answers)
    assert alive_at_last == [[3.0]]


def test_no_context_outlives_a_batch_hook_that_failed_its_requests(faulty_folder, monkeypatch):
    """Batch hooks fail requests in every way they can: a result that is an exception (the
    client's, a crash), a hook that raises, one that returns another number of results; the
    contexts the pre hook filled die with those answers (the tracebacks are logged, not kept)."""
    import logging

    from ge_python_backend import GEModel, InputError
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

    pb_utils = install_fake_pb_utils()
    notes: weakref.WeakSet = weakref.WeakSet()
    #: markers: refused by preprocess_batch's result, crashed in it, preprocess_batch raises,
    #: refused/crashed by postprocess_batch's result, postprocess_batch raises / miscounts
    PRE_REFUSED, PRE_CRASHED, PRE_RAISES = 11.0, 12.0, 13.0
    POST_REFUSED, POST_CRASHED, POST_RAISES, POST_MISCOUNTS = 21.0, 22.0, 23.0, 24.0

    class Failing(GEModel):
        def preprocess_batch(self, inputs, requests):
            results: list = []
            for each, request in zip(inputs, requests):
                note = Note(float(each["x"][0, 0]))
                notes.add(note)
                request.context["note"] = note
                results.append(
                    {PRE_REFUSED: InputError("refused"), PRE_CRASHED: ZeroDivisionError("crashed")}.get(
                        note.marker, each
                    )
                )
            if any(request.context["note"].marker == PRE_RAISES for request in requests):
                raise RuntimeError("preprocess_batch is down")
            return results

        def postprocess_batch(self, outputs, requests):
            markers = [request.context["note"].marker for request in requests]
            if POST_RAISES in markers:
                raise RuntimeError("postprocess_batch is down")
            if POST_MISCOUNTS in markers:
                return outputs[:-1]
            faults = {POST_REFUSED: InputError("refused"), POST_CRASHED: KeyError("crashed")}
            return [faults.get(marker, each) for marker, each in zip(markers, outputs)]

    def left() -> int:
        gc.collect()
        return len(notes)

    # pytest's log capture keeps each record with its traceback (and so its frames) until the test
    # ends; a server's log writes the record and drops it. Keep the package's records from it.
    monkeypatch.setattr(logging.getLogger("ge_python_backend"), "propagate", False)
    with ModelHarness(Failing, faulty_folder) as harness:
        calls = [
            [1.0, PRE_REFUSED, PRE_CRASHED, POST_REFUSED, 2.0, POST_CRASHED],  # run 1: served
            [3.0, PRE_RAISES],  # no engine run
            [POST_RAISES, 4.0],  # run 2: the engine fails it (acl_sim_faults)
            [POST_RAISES, 5.0],  # run 3
            [POST_MISCOUNTS, 6.0, 7.0],  # run 4 loses the device
        ]
        outcomes = []
        for markers in calls:
            answers = harness.infer([_request(pb_utils, m) for m in markers])
            outcomes.append([not a.has_error() for a in answers])
            del answers
            assert left() == 0, f"a context outlived its answer in the call of {markers}"
    assert outcomes == [
        [True, False, False, False, True, False],
        [False, False],
        [False, False],
        [False, False],
        [False, False, False],
    ]
    assert left() == 0, "a context outlived the model's unload"
