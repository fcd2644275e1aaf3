"""Integrity under load through the real tritonserver: tools/soak.py's models, 2,000 requests per engine.

Every answer is compared with ONNX Runtime called directly; nothing may be lost, wrong,
duplicated or errored. The soak is also shown to notice answers that do not match.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.ops.soak import OnnxReference, SoakSettings, run_soak
from ge_python_backend.testing import models

pytestmark = pytest.mark.e2e
TOOL = Path(__file__).resolve().parents[2] / "tools" / "soak.py"
REQUESTS = 2000


def _tool():
    spec = importlib.util.spec_from_file_location("soak_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tool = _tool()
    repo, references = tool.build_repository(tmp_path_factory.mktemp("soak"))
    with TritonServer(repo) as server:
        yield server, references, tool.MODELS


@pytest.mark.parametrize("engine", ["onnxruntime", "acl-sim"])
def test_every_answer_is_verified(served, engine):
    server, references, names = served
    model = names[engine]
    plan = SoakSettings(requests=REQUESTS, concurrency=128, streams=4, stream_share=0.5, seed=len(engine))
    report = run_soak(server.grpc_address, model, OnnxReference(references[model]), plan)
    print(report.describe())
    assert (report.sent, report.verified) == (REQUESTS, REQUESTS), report.describe()
    assert (report.lost, report.wrong, report.duplicated, report.errored) == (0, 0, 0, 0), report.describe()
    assert report.rows > REQUESTS  # random batch sizes, not all 1


def test_the_soak_notices_answers_that_are_not_the_reference(served, tmp_path):
    server, references, names = served
    other = OnnxReference(models.linear(tmp_path / "other.onnx", features=16, classes=10, seed=99))
    report = run_soak(server.grpc_address, names["onnxruntime"], other, SoakSettings(requests=40, concurrency=8))
    assert (report.sent, report.wrong, report.verified) == (40, 40, 0)
    assert not report.clean
