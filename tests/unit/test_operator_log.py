"""What an operator sees: unexpected exceptions reach the server log once, with their traceback.

In-process through the fake pb_utils, whose Logger records (level, message); the end-to-end
counterpart reads tritonserver's own log (tests/e2e/test_serving.py).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ge_python_backend.testing import ModelHarness
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.metrics import TritonMetrics
from tests.models.fragile import TritonPythonModel as Fragile
from tests.support import repos
from tests.support.pb_log import errors, fresh_log  # noqa: F401 (fresh_log: an autouse fixture)


def request(divisor: int) -> pb.InferenceRequest:
    return pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32))], parameters={"divisor": divisor})


def test_a_raising_hook_fails_its_request_alone_and_logs_one_traceback(tmp_path, onnx_dir):
    folder = repos.fragile(tmp_path, onnx_dir / "linear.onnx")
    with ModelHarness(Fragile, folder) as model:
        responses = model.infer([request(1), request(0), request(2)])
    assert [r.has_error() for r in responses] == [False, True, False]
    error = responses[1].error()
    assert error.code() == pb.TritonError.INTERNAL
    assert error.message() == "postprocess failed: ZeroDivisionError: integer division or modulo by zero"
    assert "\n" not in error.message()  # one line for the client
    (logged,) = errors()  # once
    assert "postprocess failed for request" in logged
    assert "Traceback (most recent call last)" in logged and "fragile.py" in logged
    assert logged.rstrip().endswith("ZeroDivisionError: integer division or modulo by zero")


def test_a_raising_metrics_observer_is_logged_with_its_traceback_and_serving_goes_on(tmp_path, onnx_dir, monkeypatch):
    def broken(self, rows, padding):
        raise KeyError("ge_batches")

    monkeypatch.setattr(TritonMetrics, "batch", broken)
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "metered")
    with ModelHarness(Fragile, folder) as model:
        for _ in range(3):
            (response,) = model.infer([request(1)])
            assert not response.has_error()
    (logged,) = errors()  # the first failure with its traceback; the next ones are counted, not repeated
    assert "observer TritonMetrics.batch failed" in logged
    assert "Traceback (most recent call last)" in logged and "KeyError: 'ge_batches'" in logged


def test_a_bug_during_load_is_logged_with_its_traceback_and_fails_the_load_with_one_line(
    tmp_path, onnx_dir, monkeypatch
):
    def broken(*args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'spec'")

    monkeypatch.setattr("ge_python_backend.triton.model.compare_io", broken)
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "broken")
    with pytest.raises(pb.TritonModelException) as raised, ModelHarness(Fragile, folder):
        pass
    assert str(raised.value) == "model 'broken': AttributeError: 'NoneType' object has no attribute 'spec'"
    (logged,) = errors()
    assert "loading model 'broken' failed" in logged and "Traceback (most recent call last)" in logged


def test_a_config_mistake_is_one_line_with_no_traceback(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "misconfigured")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('key: "streams"', 'key: "stream"'))
    with pytest.raises(pb.TritonModelException, match="unknown parameter 'stream'"), ModelHarness(Fragile, folder):
        pass
    assert errors() == []


def test_package_logging_reaches_the_server_log_with_levels_mapped(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "chatty")
    with ModelHarness(Fragile, folder):
        logger = logging.getLogger("ge_python_backend.engines.acl.slot")
        logger.warning("a warning from %s", "the engine")
        logger.debug("not shown at log_verbosity 0")
    assert ("WARNING", "[chatty_0_0] ge_python_backend.engines.acl.slot: a warning from the engine") in pb.Logger.lines
    assert not any("not shown" in message for _, message in pb.Logger.lines)
