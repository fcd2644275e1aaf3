"""Sequence state: the pure store, and a stateful model driven in-process like the sequence batcher."""

from __future__ import annotations

import os
import time

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.errors import InputError
from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import _waves
from ge_python_backend.serving.sequences import SequenceStates, StatePair, parse_state_pairs
from ge_python_backend.testing import ModelHarness, models
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel

START, END = 1, 2


class TritonPythonModel(GEModel):
    pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_state_store_lifecycle():
    clock = Clock()
    store = SequenceStates((StatePair("h_in", "h_out"),), {"h_in": np.zeros(3)}, idle_timeout=5, clock=clock)
    first = store.inject(7, START, {"x": 1})
    assert first["x"] == 1 and (first["h_in"] == 0).all()
    store.capture(7, START, {"h_out": np.array([1.0, 2.0, 3.0]), "y": 0})
    assert len(store) == 1
    np.testing.assert_array_equal(store.inject(7, 0, {})["h_in"], [1, 2, 3])
    with pytest.raises(InputError, match="sequence 8 has no state: its first request must carry the START flag"):
        store.inject(8, 0, {})
    with pytest.raises(InputError, match="no sequence correlation ID"):
        store.inject(0, START, {})
    clock.now = 4
    assert store.expire() == 0 and store.until_expiry() == 1
    clock.now = 10
    assert store.until_expiry() == 0
    assert store.expire() == 1 and len(store) == 0
    store.inject(9, START, {})
    store.capture(9, START | END, {"h_out": np.ones(3)})
    assert len(store) == 0 and store.until_expiry() is None


def test_state_pairs_parse_and_refuse_garbage():
    assert parse_state_pairs("a=b, c=d") == (StatePair("a", "b"), StatePair("c", "d"))
    with pytest.raises(ValueError):
        parse_state_pairs("a")


def test_waves_keep_one_step_per_sequence_in_order():
    requests = [
        Request(RequestInfo(request_id=f"{c}{i}", correlation_id=c), {}, None)
        for c, i in [(1, 0), (2, 0), (1, 1), (3, 0), (1, 2), (2, 1)]
    ]
    waves = [[r.info.request_id for r in wave] for wave in _waves(requests)]
    assert waves == [["10", "20", "30"], ["11", "21"], ["12"]]


CONFIG = """
name: "cell"
backend: "python"
max_batch_size: 8
input [
  {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "gain" data_type: TYPE_FP32 dims: [ 1 ] reshape: {{ shape: [ ] }} }}
]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 6 ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 60000000
  {strategy} {{ }}
}}
parameters [
  {{ key: "engine" value: {{ string_value: "onnxruntime" }} }},
  {{ key: "sequence_state" value: {{ string_value: "h_in=h_out" }} }},
  {{ key: "sequence_state_batch_axis" value: {{ string_value: "1" }} }},
  {{ key: "sequence_state_initial" value: {{ string_value: "h_in=0.25" }} }},
  {{ key: "unbatched_inputs" value: {{ string_value: "gain" }} }}
]
"""


def reference_run(session, steps, gain):
    """The model run step by step on one sequence alone."""
    h = np.full((1, 1, 6), 0.25, np.float32)
    outputs = []
    for x in steps:
        y, h = session.run(None, {"x": x, "h_in": h, "gain": np.array(gain, np.float32)})
        outputs.append(y)
    return outputs


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_interleaved_sequences_keep_their_own_state(tmp_path, strategy):
    folder = tmp_path / "cell"
    onnx_file = models.recurrent_cell(folder / "1" / "model.onnx", layers_first=True, with_gain=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(strategy=strategy))
    session = ort.InferenceSession(str(onnx_file))
    rng = np.random.default_rng(0)
    lengths = {cid: int(rng.integers(1, 7)) for cid in range(100, 116)}
    gains = {cid: (1.0 if cid % 2 else 0.5) for cid in lengths}
    steps = {cid: [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(n)] for cid, n in lengths.items()}
    served = {cid: [] for cid in lengths}
    with ModelHarness(TritonPythonModel, folder) as model:
        position = dict.fromkeys(lengths, 0)
        while any(position[c] < lengths[c] for c in lengths):
            live = [c for c in lengths if position[c] < lengths[c]]
            batch = [live[i] for i in rng.permutation(len(live))[: int(rng.integers(1, 9))]]
            requests = []
            for cid in batch:
                step = position[cid]
                flags = (START if step == 0 else 0) | (END if step == lengths[cid] - 1 else 0)
                gain = np.array([[gains[cid]]], np.float32)  # [rows, 1]: the config reshapes it to []
                requests.append(
                    pb.InferenceRequest(
                        [pb.Tensor("x", steps[cid][step]), pb.Tensor("gain", gain)], correlation_id=cid, flags=flags
                    )
                )
                position[cid] += 1
            for cid, response in zip(batch, model.infer(requests)):
                assert not response.has_error(), response.error().message()
                served[cid].append(pb.get_output_tensor_by_name(response, "y").as_numpy())
        assert len(model.model.runner._sequences) == 0  # END freed every state
    for cid in lengths:
        for got, want in zip(served[cid], reference_run(session, steps[cid], gains[cid])):
            np.testing.assert_allclose(got, want, atol=1e-6)


def test_a_step_without_start_fails_alone(tmp_path):
    folder = tmp_path / "cell"
    models.recurrent_cell(folder / "1" / "model.onnx", layers_first=True, with_gain=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(strategy="direct"))
    gain = pb.Tensor("gain", np.array([[1.0]], np.float32))
    with ModelHarness(TritonPythonModel, folder) as model:
        responses = model.infer(
            [
                pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32)), gain], correlation_id=1, flags=START),
                pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32)), gain], correlation_id=2, flags=0),
            ]
        )
    assert not responses[0].has_error()
    assert "sequence 2 has no state" in responses[1].error().message()


def test_state_parameters_need_sequence_batching(tmp_path):
    folder = tmp_path / "cell"
    models.recurrent_cell(folder / "1" / "model.onnx", layers_first=True, with_gain=True)
    text = CONFIG.format(strategy="direct")
    start = text.index("sequence_batching")
    end = text.index("parameters")
    (folder / "config.pbtxt").write_text(text[:start] + text[end:])
    with pytest.raises(pb.TritonModelException, match="'sequence_state' needs sequence_batching"):
        ModelHarness(TritonPythonModel, folder).__enter__()


def cell_with(tmp_path, key: str, value: str):
    """The direct-strategy cell folder with one more parameter."""
    folder = tmp_path / "cell"
    models.recurrent_cell(folder / "1" / "model.onnx", layers_first=True, with_gain=True)
    parameter = f'parameters [\n  {{ key: "{key}" value: {{ string_value: "{value}" }} }},'
    (folder / "config.pbtxt").write_text(CONFIG.format(strategy="direct").replace("parameters [", parameter))
    return folder


def test_a_failed_step_drops_the_sequence_so_nothing_runs_on_stale_state(tmp_path):
    folder = cell_with(tmp_path, "reject_nonfinite", "true")
    gain = pb.Tensor("gain", np.array([[1.0]], np.float32))

    def step(x, flags=0):
        return pb.InferenceRequest([pb.Tensor("x", x), gain], correlation_id=5, flags=flags)

    with ModelHarness(TritonPythonModel, folder) as model:
        (first,) = model.infer([step(np.ones((1, 4), np.float32), START)])
        (bad,) = model.infer([step(np.full((1, 4), np.nan, np.float32))])  # passes Triton, refused by GEModel
        (after,) = model.infer([step(np.ones((1, 4), np.float32))])
        (again,) = model.infer([step(np.ones((1, 4), np.float32), START)])
    assert not first.has_error() and not again.has_error()
    assert "input 'x' contains NaN or Inf" in bad.error().message()
    assert after.error().message() == (
        "sequence 5 has no state: its previous step failed (input 'x' contains NaN or Inf, which parameter "
        "reject_nonfinite forbids); start it again with the START flag"
    )


READY_CONTROL = """
  control_input [ {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }} ]
"""


@pytest.mark.parametrize("signal", ["ready", "correlation id"])
def test_padding_slots_get_an_empty_answer_and_count_nowhere(tmp_path, signal):
    """The direct batcher's padding requests (READY 0, correlation ID 0, uninitialised inputs)
    are answered empty (Triton discards it) and neither run nor counted as failures."""
    folder = tmp_path / "cell"
    models.recurrent_cell(folder / "1" / "model.onnx", layers_first=True, with_gain=True)
    config = CONFIG.format(strategy="direct")
    if signal == "ready":
        config = config.replace("  direct { }\n", "  direct { }\n" + READY_CONTROL.format())
    (folder / "config.pbtxt").write_text(config)
    gain = pb.Tensor("gain", np.array([[1.0]], np.float32))
    x = pb.Tensor("x", np.ones((1, 4), np.float32))
    ready, not_ready = (pb.Tensor("READY", np.array([[v]], np.int32)) for v in (1, 0))
    controls = {"ready": ([ready], [not_ready]), "correlation id": ([], [])}[signal]
    garbage = pb.Tensor("x", np.full((1, 4), np.nan, np.float32))
    # each signal alone: with a READY control, READY false marks padding whatever the ID says
    padding = pb.InferenceRequest([garbage, gain, *controls[1]], correlation_id=9 if signal == "ready" else 0)
    real = pb.InferenceRequest([x, gain, *controls[0]], correlation_id=7, flags=START)
    with ModelHarness(TritonPythonModel, folder) as model:
        empty, answered = model.infer([padding, real])
        assert not empty.has_error() and empty.output_tensors() == []
        assert not answered.has_error()
        model.model.runner.drain()
        model.model.metrics.flush()
        counted = {
            tuple(sorted(m.labels.items())): m.value()
            for name in ("ge_request_failures", "ge_batch_rows")
            for m in pb.MetricFamily.registry[name].metrics
            if m.labels["instance"] == "cell_0_0" and m.labels["pid"] == str(os.getpid())
        }
    assert sum(v for labels, v in counted.items() if ("kind", "input") in labels) == 0
    assert sum(v for labels, v in counted.items() if not any(k == "kind" for k, _ in labels)) == 1


def test_an_idle_sequence_is_dropped_on_a_timer_without_another_request(tmp_path):
    folder = cell_with(tmp_path, "sequence_idle_timeout_ms", "200")
    gain = pb.Tensor("gain", np.array([[1.0]], np.float32))
    with ModelHarness(TritonPythonModel, folder) as model:
        (first,) = model.infer(
            [pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32)), gain], correlation_id=4, flags=START)]
        )
        assert not first.has_error()
        states = model.model.runner._sequences
        started = time.monotonic()
        assert len(states) == 1
        while len(states) and time.monotonic() - started < 3:
            time.sleep(0.01)
        assert len(states) == 0 and time.monotonic() - started >= 0.15
        (active,) = [m for m in pb.MetricFamily.registry["ge_sequences_active"].metrics if m.labels["model"] == "cell"]
        assert active.value() == 0
