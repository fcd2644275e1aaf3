"""GEModel in-process (fake pb_utils): outputs equal ONNX Runtime's, loads fail clearly."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.repository.config import set_parameters
from ge_python_backend.testing import ModelHarness
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel
from tests.support import repos


class TritonPythonModel(GEModel):
    pass


def load_model_class(model_dir):
    spec = importlib.util.spec_from_file_location(f"model_{model_dir.name}", model_dir / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel


def request(requested=(), **arrays):
    return pb.InferenceRequest([pb.Tensor(n, a) for n, a in arrays.items()], requested_output_names=requested)


def test_generated_folder_matches_onnxruntime_on_random_batches(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    session = ort.InferenceSession(str(onnx_dir / "linear.onnx"))
    rng = np.random.default_rng(1)
    with ModelHarness(load_model_class(folder), folder) as model:
        for _ in range(5):
            xs = [rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32) for _ in range(6)]
            responses = model.infer([request(x=x) for x in xs])
            for x, response in zip(xs, responses):
                assert not response.has_error()
                logits, probs = session.run(None, {"x": x})
                got = {t.name(): t.as_numpy() for t in response.output_tensors()}
                np.testing.assert_allclose(got["logits"], logits, atol=1e-5)
                np.testing.assert_allclose(got["probs"], probs, atol=1e-5)


def test_only_requested_outputs_are_returned(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    with ModelHarness(TritonPythonModel, folder) as model:
        (response,) = model.infer([request(("probs",), x=np.ones((2, 4), np.float32))])
        assert [t.name() for t in response.output_tensors()] == ["probs"]


def test_bad_request_in_a_batch_gets_invalid_arg_alone(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    with ModelHarness(TritonPythonModel, folder) as model:
        good = np.ones((1, 4), np.float32)
        responses = model.infer([request(x=good), request(x=np.ones((1, 4), np.int32)), request(x=good)])
        assert [r.has_error() for r in responses] == [False, True, False]
        assert responses[1].error().code() == pb.TritonError.INVALID_ARG
        assert responses[1].error().message() == (  # Triton's core refuses it, in the harness as on the server
            "[request id: <id_unknown>] inference input 'x' data-type is 'INT32', but model 'linear' expects 'FP32'"
        )


def test_hooks_turn_bytes_into_tensors_and_logits_into_label_strings(tmp_path):
    folder, onnx_file = repos.hooked_classifier(tmp_path)
    from tests.models.hooked_classifier import decode, top_k

    session = ort.InferenceSession(str(onnx_file))
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, (b, 8, 8, 3), dtype=np.uint8) for b in (1, 3, 2)]
    with ModelHarness(load_model_class(folder), folder) as model:
        blobs = [np.array([[img.tobytes()] for img in batch], dtype=np.object_) for batch in images]
        bad = np.array([[b"short"]], dtype=np.object_)
        responses = model.infer([request(IMAGE=b) for b in blobs] + [request(IMAGE=bad)])
    for blob, response in zip(blobs, responses):
        (logits,) = session.run(None, {"image": decode(blob, 8)})
        labels, scores = top_k(logits, 3, [f"class_{i}" for i in range(10)])
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        assert got["LABELS"].tolist() == labels.tolist()
        np.testing.assert_allclose(got["SCORES"], scores, atol=1e-5)
    assert responses[-1].error().message() == "IMAGE[0] has 5 bytes; expected 192 (8x8 RGB)"


@pytest.mark.parametrize(
    "parameter, value, message",
    [
        ("bogus", "1", "unknown parameter 'bogus' (value '1'); accepted parameters: acl_dump_config, acl_json, "),
        ("streams", "0", "parameter 'streams' has value '0' (must be >= 1); accepted: an integer from 1 to 64"),
        ("engine", "tpu", "parameter 'engine' has value 'tpu'; accepted: auto | onnxruntime | acl | acl-sim"),
        ("model_file", "nope.onnx", "model file"),
    ],
)
def test_bad_parameters_fail_the_load_naming_them(tmp_path, onnx_dir, parameter, value, message):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    set_parameters(folder / "config.pbtxt", **{parameter: value})
    with pytest.raises(pb.TritonModelException, match="^model 'linear': ") as failure:
        ModelHarness(TritonPythonModel, folder).__enter__()
    assert message in str(failure.value)


def test_config_that_contradicts_the_model_fails_the_load(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: 4", "dims: 5", 1))
    with pytest.raises(pb.TritonModelException, match=r"input 'x': config dims \[5\] do not match the model's \[4\]"):
        ModelHarness(TritonPythonModel, folder).__enter__()


def test_max_batch_size_zero_runs_each_request_alone(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "two_inputs.onnx", "pair", max_batch_size=0)
    session = ort.InferenceSession(str(onnx_dir / "two_inputs.onnx"))
    rng = np.random.default_rng(3)
    with ModelHarness(TritonPythonModel, folder) as model:
        pairs = [
            (rng.standard_normal((b, n)).astype(np.float32), rng.standard_normal((b, n)).astype(np.float32))
            for b, n in ((2, 5), (1, 3), (4, 5))
        ]
        responses = model.infer([request(a=a, b=b) for a, b in pairs])
    for (a, b), response in zip(pairs, responses):
        total, count = session.run(None, {"a": a, "b": b})
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        np.testing.assert_allclose(got["sum"], total, atol=1e-6)
        np.testing.assert_array_equal(got["count"], count)


def test_acl_sim_requests_above_the_largest_gear_are_chunked_padded_and_reassembled(tmp_path, onnx_dir):
    from ge_python_backend import sim

    sim.sim_compile(onnx_dir / "linear.onnx", tmp_path / "linear.om", batch_gears=(1, 2, 4, 8))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "gears", streams=2)
    config = folder / "config.pbtxt"
    # A hand-written config may allow more rows than the largest gear: GEModel splits them.
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 16"))
    session = ort.InferenceSession(str(onnx_dir / "linear.onnx"))
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((n, 4)).astype(np.float32) for n in (13, 5, 16, 1)]
    with ModelHarness(TritonPythonModel, folder) as model:
        responses = model.infer([request(x=x) for x in xs])
    for x, response in zip(xs, responses):
        assert not response.has_error(), response.error().message()
        got = pb.get_output_tensor_by_name(response, "logits").as_numpy()
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], atol=1e-5)
    assert sim.live() == []  # the engine released everything at finalize
    # 35 rows on gears 1,2,4,8: the fewest engine calls are 8+8+8+8+4, 1 row of padding.
    counted = {name: pb.MetricFamily.registry[name].metrics[0].value() for name in ("ge_batches", "ge_padding_rows")}
    assert counted == {"ge_batches": 5, "ge_padding_rows": 1}


class _CountingRequest(pb.InferenceRequest):
    """Records which request fields GEModel fetched from Triton."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fetched: list[str] = []

    def correlation_id(self):
        self.fetched.append("correlation_id")
        return super().correlation_id()

    def flags(self):
        self.fetched.append("flags")
        return super().flags()

    def requested_output_names(self):
        self.fetched.append("requested_output_names")
        return super().requested_output_names()


def test_hooks_see_every_request_field_and_a_plain_model_fetches_only_what_it_uses(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    seen = []

    class Hooked(GEModel):
        def postprocess(self, outputs, request):
            seen.append((request.request_id, request.correlation_id, request.flags, request.requested_outputs))
            return outputs

    def counting():
        return _CountingRequest(
            [pb.Tensor("x", np.ones((1, 4), np.float32))], ("probs",), request_id="r7", correlation_id=42, flags=1
        )

    with ModelHarness(Hooked, folder) as model:
        hooked = counting()
        (response,) = model.infer([hooked])
    assert seen == [("r7", 42, 1, ("probs",))]
    assert [t.name() for t in response.output_tensors()] == ["probs"]
    with ModelHarness(TritonPythonModel, folder) as model:
        plain = counting()
        (response,) = model.infer([plain])
    # two outputs: which ones were asked for matters; correlation ID and flags serve only sequences and hooks
    assert plain.fetched == ["requested_output_names"]
    assert [t.name() for t in response.output_tensors()] == ["probs"]


def test_the_engine_auto_line_names_the_instance_and_the_simulated_om_it_skipped(tmp_path, onnx_dir):
    """Finding: "engine auto: chose onnxruntime" named no model or instance, and kept quiet about
    the simulated model.om next to model.onnx."""
    from ge_python_backend.sim import sim_compile

    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "picked")
    set_parameters(folder / "config.pbtxt", engine="auto")
    sim_compile(onnx_dir / "linear.onnx", folder / "1" / "model.om", batch_gears=(1, 2, 4, 8))
    pb.Logger.lines.clear()
    with ModelHarness(TritonPythonModel, folder):
        pass
    (line,) = [m for _, m in pb.Logger.lines if "engine auto:" in m]
    assert line.startswith("picked_0_0: engine auto: chose onnxruntime (model.onnx present;")
    assert "not picked: model.om is a simulated .om" in line and "set parameter engine to acl-sim" in line


def test_instances_take_device_ids_round_robin_and_know_their_peers():
    """Three instances over device_ids 4,5: 4, 5, 4; the two on device 4 share it (parameter peers)."""
    import json

    from ge_python_backend.triton.settings import read_settings

    config = {"name": "m", "instance_group": [{"count": 3}], "parameters": {"device_ids": {"string_value": "4,5"}}}
    seen = [
        read_settings({"model_config": json.dumps(config), "model_instance_name": f"m_0_{index}"}) for index in range(3)
    ]
    assert [(s.device_id, s.instances_on_device) for s in seen] == [(4, 2), (5, 1), (4, 2)]


def test_instances_of_several_instance_groups_take_device_ids_in_turn():
    """Triton counts an instance's index within its group: two groups of one instance each are
    m_0_0 and m_1_0, and over device_ids 4,5 they take 4 and 5 (not 4 twice)."""
    import json

    from ge_python_backend.triton.settings import read_settings

    groups = [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}, {"name": "m_1", "count": 2, "kind": "KIND_CPU"}]
    config = {"name": "m", "instance_group": groups, "parameters": {"device_ids": {"string_value": "4,5"}}}
    names = ["m_0_0", "m_1_0", "m_1_1"]
    seen = [read_settings({"model_config": json.dumps(config), "model_instance_name": n}) for n in names]
    assert [(s.instance_index, s.device_id, s.instances_on_device) for s in seen] == [(0, 4, 2), (1, 5, 1), (2, 4, 2)]


def test_a_declared_tensor_is_written_as_triton_declares_it():
    from ge_python_backend import Tensor

    assert Tensor("IMAGE", "BYTES", [1]).config_entry() == {"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}
    assert Tensor("x", "TYPE_FP16", (-1, 4)).dtype == "FP16"
    with pytest.raises(ValueError, match="tensor 'x': data type 'FLOAT'; accepted: BOOL"):
        Tensor("x", "FLOAT", (4,))
