"""Which way GEModel answers (returned from execute, or through response senders), what generate
writes for it, and the fallback on a Python backend without non-decoupled response senders (24.02)."""

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
    """What execute returns for two requests (None entries: answered through senders)."""
    requests = [pb.InferenceRequest([pb.Tensor("x", np.ones((rows, 4), np.float32))]) for _ in range(2)]
    entries = model.model.execute(requests)
    for request, entry in zip(requests, entries):
        response = entry if entry is not None else (request.sender.done.wait(30), request.sender.response)[1]
        assert not response.has_error(), response.error().message()
    return entries


@pytest.mark.parametrize("kind", ["onnx", "om"])
def test_auto_returns_answers_from_execute_for_every_engine_and_any_streams(folders, kind):
    pb.Logger.lines.clear()
    with ModelHarness(TritonPythonModel, folders[kind]) as model:
        assert all(entry is not None for entry in returned(model))
    assert any("answers returned from execute" in line for _, line in pb.Logger.lines)


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


def test_sender_mode_answers_through_senders_where_the_stub_has_them(folders):
    set_parameters(folders["om"] / "config.pbtxt", response_mode="sender")
    with ModelHarness(TritonPythonModel, folders["om"]) as model:
        assert returned(model) == [None, None]


def test_without_senders_sender_mode_falls_back_to_returning_and_says_what_is_lost(folders, monkeypatch):
    set_parameters(folders["om"] / "config.pbtxt", response_mode="sender")
    monkeypatch.setenv(capabilities.NO_SENDER_ENV, "1")
    pb.Logger.lines.clear()
    with ModelHarness(TritonPythonModel, folders["om"]) as model:
        assert all(entry is not None for entry in returned(model))
    (warning,) = [line for level, line in pb.Logger.lines if level == "WARNING"]
    assert "response_mode sender needs Triton 24.06 or later" in warning
    assert "answers are returned from execute. Lost: overlap" in warning and "2 slot(s)" in warning


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
