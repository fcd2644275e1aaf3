"""The runner on a deterministic fake engine: every request answered once, errors isolated."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ge_python_backend.engines.base import PhaseTimes
from ge_python_backend.errors import ContractError, EngineError, InputError
from ge_python_backend.serving.observers import Observer
from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.specs import BatchSupport
from tests.support.fakes import DoublingEngine, declared


class Answers:
    """Collects respond() calls and fails a test that sees a request answered twice.

    ``copy``: take the data during respond(), as Triton's response sender does; without it the
    answers are kept as given, as the answers ``execute`` returns are until it returns.
    """

    def __init__(self, count: int, copy: bool = True) -> None:
        self.copy = copy
        self.results: dict[int, tuple] = {}
        self.twice: list[int] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._count = count

    def respond(self, index: int):
        def respond(outputs, error):
            with self._lock:
                if index in self.results:  # recorded, not raised: the runner logs and swallows raises
                    self.twice.append(index)
                    return
                if self.copy and outputs is not None:
                    outputs = {name: np.array(array) for name, array in outputs.items()}
                self.results[index] = (outputs, error)
                if len(self.results) == self._count:
                    self._done.set()

        return respond

    def wait(self) -> dict[int, tuple]:
        assert self._done.wait(30), f"only {len(self.results)} of {self._count} requests answered"
        assert not self.twice, f"requests answered twice: {self.twice}"
        return self.results


def make_runner(engine, *, batching=True, max_batch_size=8, preprocess=None, postprocess=None, **kwargs):
    return Runner(
        engine,
        batching=batching,
        max_batch_size=max_batch_size,
        outputs=declared(engine.spec, batching),
        preprocess=preprocess,
        postprocess=postprocess,
        **kwargs,
    )


def run(engine, arrays, *, wait=False, **kwargs):
    runner = make_runner(engine, **kwargs)
    answers = Answers(len(arrays), copy=not wait)
    requests = [
        Request(RequestInfo(request_id=str(i)), a if isinstance(a, dict) else {"x": a}, answers.respond(i))
        for i, a in enumerate(arrays)
    ]
    runner.submit(requests, wait=wait)
    results = answers.wait()
    runner.close()
    return results


def rows(*sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((s, 2)).astype(np.float32) for s in sizes]


def test_requests_are_batched_padded_to_gears_and_answered_with_their_own_rows():
    engine = DoublingEngine(BatchSupport("gears", (1, 2, 4, 8)))
    arrays = rows(3, 1, 4, 2, 3)  # 13 rows
    results = run(engine, arrays)
    assert sorted(engine.batches) == [8, 8]
    for i, array in enumerate(arrays):
        outputs, error = results[i]
        assert error is None
        np.testing.assert_array_equal(outputs["y"], array * 2)


def test_a_request_above_the_largest_gear_is_split_and_reassembled():
    engine = DoublingEngine(BatchSupport("gears", (1, 2, 4)))
    arrays = rows(7, 2)
    results = run(engine, arrays, max_batch_size=8)
    assert sorted(engine.batches) == [1, 4, 4]
    for i, array in enumerate(arrays):
        np.testing.assert_array_equal(results[i][0]["y"], array * 2)


def test_bad_requests_fail_alone_with_clear_messages():
    engine = DoublingEngine(BatchSupport("dynamic"))
    good = rows(2, 1)
    arrays = [
        good[0],
        np.zeros((1, 2), np.float64),
        np.zeros((1, 3), np.float32),
        np.zeros((0, 2), np.float32),
        good[1],
    ]
    results = run(engine, arrays)
    np.testing.assert_array_equal(results[0][0]["y"], good[0] * 2)
    np.testing.assert_array_equal(results[4][0]["y"], good[1] * 2)
    messages = [str(results[i][1]) for i in (1, 2, 3)]
    assert all(isinstance(results[i][1], InputError) for i in (1, 2, 3))
    assert messages[0] == "input 'x' has data type FP64; the model expects FP32"
    assert messages[1] == "input 'x' has shape [1,3]; the model expects [-1,2]"
    assert messages[2] == "input 'x' is empty (shape [0,2])"


def test_a_missing_input_and_a_batch_above_max_are_the_clients_fault_without_a_hook():
    engine = DoublingEngine(BatchSupport("dynamic"))
    results = run(engine, [{"y": np.zeros((1, 2), np.float32)}, np.zeros((5, 2), np.float32)], max_batch_size=4)
    assert isinstance(results[0][1], InputError) and isinstance(results[1][1], InputError)
    assert str(results[0][1]) == "missing input 'x' (FP32 [-1,2])"
    assert str(results[1][1]) == "batch size 5 is above max_batch_size 4"


def test_a_preprocess_that_returns_what_the_engine_cannot_take_is_the_servers_fault():
    engine = DoublingEngine(BatchSupport("dynamic"))
    returned = {"0": {}, "1": {"x": np.zeros((5, 2), np.float32)}, "2": [np.zeros((1, 2), np.float32)]}
    results = run(engine, rows(1, 1, 1), max_batch_size=4, preprocess=lambda inputs, info: returned[info.request_id])
    assert all(type(error) is ContractError for _, error in results.values())
    assert str(results[0][1]).startswith("preprocess returned {}, which the engine cannot take: missing input 'x'")
    assert str(results[1][1]) == (
        "preprocess returned {'x': FP32 [5,2]}, which the engine cannot take: batch size 5 is above max_batch_size 4 "
        "(the engine's inputs: x FP32 [-1,2])"
    )
    assert str(results[2][1]) == (
        "preprocess returned list; it must return a dict of the engine's inputs (x FP32 [-1,2])"
    )


def test_an_engine_failure_fails_only_the_chunk_that_was_running():
    engine = DoublingEngine(BatchSupport("gears", (1, 2)), slots=1)
    arrays = rows(2, 2, 2)
    arrays[1][0, 0] = engine.poison
    results = run(engine, arrays)
    assert results[1][0] is None and isinstance(results[1][1], EngineError)
    assert "poison" in str(results[1][1])
    for i in (0, 2):
        np.testing.assert_array_equal(results[i][0]["y"], arrays[i] * 2)


def test_a_failing_hook_fails_only_its_request():
    engine = DoublingEngine(BatchSupport("dynamic"))

    def postprocess(outputs, info):
        if info.request_id == "1":
            raise RuntimeError("boom")
        return outputs

    results = run(engine, rows(1, 1, 1), postprocess=postprocess)
    assert str(results[1][1]) == "postprocess failed: RuntimeError: boom"
    assert results[0][1] is None and results[2][1] is None


def test_without_batching_each_request_runs_alone():
    engine = DoublingEngine(BatchSupport("dynamic"))
    arrays = rows(3, 5, 1)
    results = run(engine, arrays, batching=False, max_batch_size=0)
    assert sorted(engine.batches) == [1, 3, 5]
    for i, array in enumerate(arrays):
        np.testing.assert_array_equal(results[i][0]["y"], array * 2)


def test_nonfinite_inputs_are_refused_when_asked():
    engine = DoublingEngine(BatchSupport("dynamic"))
    bad = np.array([[np.nan, 1.0]], np.float32)
    results = run(engine, [bad, rows(1)[0]], reject_nonfinite=True)
    assert "contains NaN or Inf" in str(results[0][1])
    assert results[1][1] is None


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_many_concurrent_submits_on_several_slots_lose_nothing(slots):
    engine = DoublingEngine(BatchSupport("gears", (1, 2, 4, 8)), slots=slots)
    runner = make_runner(engine)
    rng = np.random.default_rng(slots)
    arrays = [rng.standard_normal((int(rng.integers(1, 9)), 2)).astype(np.float32) for _ in range(300)]
    answers = Answers(len(arrays))
    for start in range(0, len(arrays), 7):
        batch = range(start, min(start + 7, len(arrays)))
        runner.submit([Request(RequestInfo(), {"x": arrays[i]}, answers.respond(i)) for i in batch])
    results = answers.wait()
    runner.close()
    for i, array in enumerate(arrays):
        np.testing.assert_array_equal(results[i][0]["y"], array * 2)


def test_a_fatal_engine_failure_takes_the_model_out_of_service():
    engine = DoublingEngine(BatchSupport("dynamic"), fatal=True)
    runner = make_runner(engine)
    bad = np.full((1, 2), engine.poison, np.float32)
    first = Answers(1)
    runner.submit([Request(RequestInfo(), {"x": bad}, first.respond(0))])
    assert "poison" in str(first.wait()[0][1])
    runner.drain()
    later = Answers(2)
    runner.submit([Request(RequestInfo(), {"x": a}, later.respond(i)) for i, a in enumerate(rows(1, 2))])
    for _, error in later.wait().values():
        assert error.fatal and "out of service after a fatal engine failure" in str(error)
    assert engine.batches == [1]  # nothing else reached the engine
    runner.close()


@pytest.mark.parametrize("slots", [1, 2])
def test_answers_read_after_a_waiting_submit_survive_slot_reuse(slots):
    # Answers returned from execute are read only after it returns, when later batches of the
    # same call may have reused the slot's output buffer.
    engine = DoublingEngine(BatchSupport("gears", (1, 2)), slots=slots)
    arrays = rows(2, 2, 2, 1, 2)
    results = run(engine, arrays, wait=True)
    assert len(engine.batches) == 5
    for i, array in enumerate(arrays):
        np.testing.assert_array_equal(results[i][0]["y"], array * 2)


def test_a_single_batch_waiting_submit_hands_out_views_without_copying():
    engine = DoublingEngine(BatchSupport("gears", (1, 2, 4, 8)))
    results = run(engine, rows(3, 4), wait=True)
    assert np.shares_memory(results[0][0]["y"], results[1][0]["y"].base)


def test_a_waiting_submit_returns_only_after_every_answer_is_delivered():
    # With several slots the answers are delivered on worker threads; execute returns the list
    # of answers right after submit, so they must all be in place by then.
    engine = DoublingEngine(BatchSupport("gears", (1, 2)), slots=2)
    runner = make_runner(engine)
    answers = Answers(3, copy=False)

    def slow(index):
        deliver = answers.respond(index)

        def respond(outputs, error):
            time.sleep(0.05)
            deliver(outputs, error)

        return respond

    arrays = rows(2, 2, 2)
    runner.submit([Request(RequestInfo(), {"x": a}, slow(i)) for i, a in enumerate(arrays)], wait=True)
    assert sorted(answers.results) == [0, 1, 2]
    runner.close()


def test_a_failing_observer_never_leaves_a_request_unanswered(caplog):
    class Broken(Observer):
        def failure(self, kind):
            raise RuntimeError("metrics server gone")

        def batch(self, rows, padding):
            raise RuntimeError("metrics server gone")

    engine = DoublingEngine(BatchSupport("dynamic"))
    runner = make_runner(engine, observers=[Broken()])
    answers = Answers(2)
    good, bad = rows(1)[0], np.zeros((1, 3), np.float32)
    runner.submit(
        [
            Request(RequestInfo(), {"x": good}, answers.respond(0)),
            Request(RequestInfo(), {"x": bad}, answers.respond(1)),
        ]
    )
    results = answers.wait()
    runner.close()
    np.testing.assert_array_equal(results[0][0]["y"], good * 2)
    assert "has shape [1,3]" in str(results[1][1])
    failures = [r for r in caplog.records if r.name == "ge_python_backend.serving.observers"]
    # each failing method is logged once, with the traceback of its first failure
    assert sorted(r.getMessage() for r in failures) == [
        "observer Broken.batch failed (the request path goes on)",
        "observer Broken.failure failed (the request path goes on)",
    ]
    assert all(r.exc_info and "metrics server gone" in str(r.exc_info[1]) for r in failures)


def test_a_crashing_preprocess_is_the_servers_fault_not_the_clients():
    def preprocess(inputs, info):
        raise KeyError("IMAGE")

    results = run(DoublingEngine(BatchSupport("dynamic")), rows(1), preprocess=preprocess)
    error = results[0][1]
    assert not isinstance(error, InputError) and str(error) == "preprocess failed: KeyError: 'IMAGE'"


def test_observers_hear_only_the_phases_a_batch_measured():
    """An engine without copies (and an acl batch that was not timed) reports 0 for a phase:
    observers never hear those, so a metric's rate stays an average over batches that measured it."""
    heard = []

    class Recorder(Observer):
        def phase(self, name, seconds):
            heard.append((name.value, seconds))

    engine = DoublingEngine(BatchSupport("dynamic"))
    slot = engine.slots[0]
    run = slot.run

    def timed_run():  # as an engine without copies reports a run
        outputs = run()
        slot.last_times = PhaseTimes(execute=0.002)
        return outputs

    slot.run = timed_run
    runner = make_runner(engine, observers=[Recorder()])
    answers = Answers(1)
    runner.submit([Request(RequestInfo(), {"x": rows(1)[0]}, answers.respond(0))], wait=True)
    runner.close()
    assert sorted({name for name, _ in heard}) == ["execute", "gather", "scatter"]
    assert ("execute", 0.002) in heard and all(seconds > 0 for _, seconds in heard)
