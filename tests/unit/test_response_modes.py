"""GEModel returns its answers from execute (response senders were removed: they served no more on
a shared NPU, docs/reliability.md), what generate writes for the overlap instead (instances), and the
probe of a Python backend's non-decoupled response senders (the router's)."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.repository.config import read_config_file, set_parameters
from ge_python_backend.repository.generate import (
    DEFAULT_NPU_INSTANCES,
)
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import ModelHarness
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton import capabilities
from ge_python_backend.triton.model import GEModel
from tests.support import repos


class TritonPythonModel(GEModel):
    pass


@pytest.fixture
def folders(tmp_path, onnx_dir):
    om = tmp_path / "linear.om"
    sim_compile(onnx_dir / "linear.onnx", om, batch_gears=(1, 2, 4, 8))
    return {
        "onnx": repos.generated(tmp_path / "repo", onnx_dir / "linear.onnx", "plain", streams=2),
        "om": repos.generated(tmp_path / "repo", om, "npu", streams=2),
    }


def returned(model: ModelHarness, rows: int = 3) -> list:
    """What execute returns for two requests."""
    requests = [pb.InferenceRequest([pb.Tensor("x", np.ones((rows, 4), np.float32))]) for _ in range(2)]
    entries = model.model.execute(requests)
    for entry in entries:
        assert entry is not None and not entry.has_error(), entry
    return entries


@pytest.mark.parametrize("mode", [None, "auto", "return"])
@pytest.mark.parametrize("kind", ["onnx", "om"])
def test_answers_are_returned_from_execute_for_every_engine_and_any_streams(folders, kind, mode):
    if mode is not None:
        set_parameters(folders[kind] / "config.pbtxt", response_mode=mode)
    pb.Logger.lines.clear()
    with ModelHarness(TritonPythonModel, folders[kind]) as model:
        returned(model)
    assert any("answers returned from execute" in line for _, line in pb.Logger.lines)


def test_sender_mode_is_refused_saying_what_to_use_instead(folders):
    set_parameters(folders["om"] / "config.pbtxt", response_mode="sender")
    with pytest.raises(pb.TritonModelException) as failure, ModelHarness(TritonPythonModel, folders["om"]):
        pass
    message = str(failure.value)
    assert "parameter 'response_mode' has value 'sender' (response senders were removed" in message
    assert "remove the parameter (return is the default)" in message and "instance_group count" in message


def test_generate_writes_two_instances_for_npu_engines_and_one_otherwise(folders, tmp_path, onnx_dir):
    assert read_config_file(folders["om"] / "config.pbtxt").instance_group[0].count == DEFAULT_NPU_INSTANCES == 2
    assert read_config_file(folders["onnx"] / "config.pbtxt").instance_group[0].count == 1
    om = folders["om"] / "1" / "model.om"
    chosen = repos.generated(tmp_path / "other", om, "one", instance_count=1)
    assert read_config_file(chosen / "config.pbtxt").instance_group[0].count == 1
    for folder in folders.values():  # the mode is left to auto: one place decides it
        assert "response_mode" not in read_config_file(folder / "config.pbtxt").parameters


def test_a_model_with_real_weights_gets_the_same_two_instances(tmp_path):
    """The file's size no longer picks the count: on one shared device 2 instances kept it as busy as
    4 at every device time measured (BENCHMARKS.md), with half the model copies."""
    from ge_python_backend.testing import models

    om = tmp_path / "classifier.om"
    sim_compile(models.image_classifier(tmp_path / "classifier.onnx", size=32), om, batch_gears=(1, 2, 4, 8))
    assert om.stat().st_size >= 1 << 20  # 2.6 MB of convolution and Gemm weights
    folder = repos.generated(tmp_path / "repo", om, "classifier")
    assert read_config_file(folder / "config.pbtxt").instance_group[0].count == DEFAULT_NPU_INSTANCES


def test_the_probe_reads_the_24_02_exception_as_no_senders(monkeypatch):
    def refuse(self):  # python_backend r24.02 src/infer_request.cc:416-426
        raise pb.TritonModelException("'get_response_sender' function must be called only when the model is using")

    assert capabilities.response_sender_supported(pb)
    monkeypatch.setattr(pb.InferenceRequest, "get_response_sender", refuse)
    assert not capabilities.response_sender_supported(pb)


def test_a_bad_test_switch_value_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(capabilities.NO_SENDER_ENV, "maybe")
    with pytest.raises(Exception, match=f"environment variable {capabilities.NO_SENDER_ENV}='maybe'"):
        capabilities.response_sender_supported(pb)


def test_a_stub_without_an_api_gemodel_calls_fails_the_load_naming_it(folders, monkeypatch):
    monkeypatch.delattr(pb, "MetricFamily")
    with pytest.raises(pb.TritonModelException) as failure, ModelHarness(TritonPythonModel, folders["onnx"]):
        pass
    assert str(failure.value) == (
        "model 'plain': this Triton's Python backend lacks pb_utils.MetricFamily (since r23.05); "
        "GEModel needs Triton 24.02 or later"
    )
