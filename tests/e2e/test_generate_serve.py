"""generate -> check -> serve -> infer, against ONNX Runtime called directly.

One tritonserver for the module: every model folder is generated first (through the
``ge-triton generate`` command line), the repository is checked with ``ge-triton check``'s
library, then one server serves them all. Backend "ge" with no model.py is covered in
test_serving.py (model ``linear_ge``).
"""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.cli import main
from ge_python_backend.hooks.postprocessing import top_k
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import read_config_file
from ge_python_backend.sim.compile import sim_compile
from ge_python_backend.testing import models
from tests.support.clients import infer_many, url

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
PROTOCOLS = ["grpc", "http"]
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
LABELS = tuple(f"kind {i}" for i in range(10))


def generate(*argv: str) -> None:
    assert main(["generate", *argv]) == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(repository, ONNX files by model name): every folder made by `ge-triton generate`."""
    root = tmp_path_factory.mktemp("generated")
    repo = root / "repo"
    sources = {
        "dynamic": models.linear(root / "dynamic.onnx"),
        "fixed": models.linear(root / "fixed.onnx", batch=3, seed=1),
        "classifier": models.image_classifier(root / "classifier.onnx", size=8, channels=(4, 8), classes=10),
    }
    generate(str(sources["dynamic"]), "-o", str(repo))
    generate(str(sources["fixed"]), "-o", str(repo))
    labels = root / "labels.txt"
    labels.write_text("".join(f"{label}\n" for label in LABELS))
    generate(
        str(sources["classifier"]),
        "-o",
        str(repo),
        "--template",
        "classification",
        "--set",
        f"labels={labels}",
        "--set",
        "top_k=3",
    )
    sources["gears"] = models.linear(root / "gears.onnx", seed=2)
    sim_compile(sources["gears"], root / "gears.om", batch_gears="1,2,4,8")
    generate(str(root / "gears.om"), "-o", str(repo))
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    repo, _ = built
    with TritonServer(repo) as running:
        yield running


def test_generated_repository_checks_clean(built):
    repo, sources = built
    report = check_repository(repo, backends=repo)  # backend ge is not used here
    assert report.problems == ()
    assert read_config_file(repo / "fixed" / "config.pbtxt").max_batch_size == 0
    assert read_config_file(repo / "dynamic" / "config.pbtxt").max_batch_size == 8


def linear_requests_match_onnxruntime(server, built, protocol: str, model: str, seed: int) -> None:
    """60 concurrent requests of 1..8 rows to a generated linear model, against ONNX Runtime."""
    session = ort.InferenceSession(str(built[1][model]))
    rng = np.random.default_rng(seed)
    requests = [{"x": rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)} for _ in range(60)]
    for request, (outputs, error) in zip(requests, infer_many(protocol, url(server, protocol), model, requests)):
        assert error is None, error
        logits, probs = session.run(None, request)
        assert np.abs(outputs["logits"] - logits).max() <= 1e-5
        assert np.abs(outputs["probs"] - probs).max() <= 1e-5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dynamic_batch_onnx_model(server, built, protocol):
    linear_requests_match_onnxruntime(server, built, protocol, "dynamic", 21)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_model_with_a_fixed_axis_0_runs_each_request_alone(server, built, protocol):
    session = ort.InferenceSession(str(built[1]["fixed"]))
    rng = np.random.default_rng(22)
    requests = [{"x": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(20)]
    requests.append({"x": np.ones((2, 4), np.float32)})
    results = infer_many(protocol, url(server, protocol), "fixed", requests)
    for request, (outputs, error) in zip(requests[:-1], results[:-1]):
        assert error is None, error
        logits, probs = session.run(None, request)
        np.testing.assert_allclose(outputs["logits"], logits, atol=1e-5)
        np.testing.assert_allclose(outputs["probs"], probs, atol=1e-5)
    assert results[-1][1] is not None and "[3,4]" in results[-1][1].message()


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_classification_template(server, built, protocol):
    pytest.importorskip("PIL")
    session = ort.InferenceSession(str(built[1]["classifier"]))
    rng = np.random.default_rng(23)
    batches = [rng.integers(0, 256, (int(rng.integers(1, 4)), 8, 8, 3), dtype=np.uint8) for _ in range(30)]
    requests = []
    for index, batch in enumerate(batches):
        blobs = [_png(image) if (index + row) % 2 else image.tobytes() for row, image in enumerate(batch)]
        requests.append({"IMAGE": np.array([[blob] for blob in blobs], dtype=np.object_)})
    requests.append({"IMAGE": np.array([[_png(np.zeros((4, 8, 3), np.uint8))]], dtype=np.object_)})
    results = infer_many(protocol, url(server, protocol), "classifier", requests)
    for batch, (outputs, error) in zip(batches, results[:-1]):
        assert error is None, error
        normalised = ((batch.astype(np.float32) / 255 - MEAN) / STD).transpose(0, 3, 1, 2)
        (logits,) = session.run(None, {"image": np.ascontiguousarray(normalised, np.float32)})
        labels, scores = top_k(logits, 3, LABELS)
        assert outputs["LABELS"].tolist() == labels.tolist()
        np.testing.assert_allclose(outputs["SCORES"], scores, atol=1e-5)
    error = results[-1][1]
    assert error is not None and "images are not resized" in error.message()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_simulated_om_with_batch_gears(server, built, protocol):
    config = read_config_file(built[0] / "gears" / "config.pbtxt")
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    assert config.parameters["engine"].string_value == "acl-sim"
    linear_requests_match_onnxruntime(server, built, protocol, "gears", 24)
