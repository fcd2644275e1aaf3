"""Gear boundaries through a real tritonserver, over gRPC and HTTP, against ONNX Runtime run directly:
no answer from a padded non-batch axis, shape ranges honoured when batching, a range without an
upper bound served, a static input beside batch gears, the client's errors answered as the
client's (400 / INVALID_ARGUMENT, ``ge_request_failures{kind="input"}``), and ``ge-triton
serve``'s one-line refusals. Every folder is written by ``ge-triton generate`` from a sim-OM; one
server serves them all.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ge_python_backend.ascend.aipp import AippConfig, AippMode
from ge_python_backend.cli import main
from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.sim import sim_compile
from tests.support import acl_sim_nets as nets
from tests.support.clients import infer_many, url

pytestmark = pytest.mark.e2e
PROTOCOLS = ["grpc", "http"]
BAD_REQUEST = ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("gears")
    repo = root / "repo"
    sources = {
        "classifier": nets.conv_classifier(root / "classifier.onnx"),
        "conv": nets.image_conv(root / "conv.onnx", batch=1, height="H", width="W"),
        "matmul": nets.matmul_add(root / "matmul.onnx"),
        "static": nets.static_beside_batch(root / "static.onnx"),
        "aipp": nets.image_conv(root / "aipp.onnx", batch="N"),
    }
    compiled = {
        "hw": ("classifier", {"input_shapes": "image:1,3,-1,-1", "dynamic_image_size": "16,16;32,32"}),
        "dims": ("conv", {"input_shapes": "x:1,3,-1,-1", "dynamic_dims": "16,16;32,32;24,40"}),
        "range4": ("matmul", {"input_shapes": "x:1~4,4"}),
        "range_alone": ("matmul", {"input_shapes": "x:2~6,4"}),
        "unbounded": ("matmul", {"input_shapes": "x:-1,4"}),
        "static": ("static", {"input_shapes": "s:2,3;b:-1,6;a:-1,4", "batch_gears": "1,2,4"}),
        "aipp_range": (
            "aipp",
            {
                "input_shapes": "x:1~4,3,6,8",
                "insert_op_conf": [AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=4 * 6 * 8 * 3)],
            },
        ),
    }
    for name, (source, options) in compiled.items():
        sim_compile(sources[source], root / f"{name}.om", **options)
        assert main(["generate", str(root / f"{name}.om"), "-o", str(repo), "--instances", "1"]) == 0, name
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    with TritonServer(built[0]) as running:
        yield running


def failures(server, model: str, kind: str) -> float:
    return metrics.fetch(server.metrics_url).value("ge_request_failures", model=model, kind=kind)


def assert_refused(error, *words: str) -> None:
    assert error is not None
    assert str(error.status()) in BAD_REQUEST, (error.status(), error.message())
    for word in words:
        assert word in error.message(), error.message()


def assert_as_onnxruntime(outputs, error, onnx_file, feeds, tolerance=1e-4):
    assert error is None, error
    expected = nets.reference(onnx_file, feeds)
    for name, want in expected.items():
        assert outputs[name].shape == want.shape, name
        np.testing.assert_allclose(outputs[name], want, rtol=tolerance, atol=tolerance, err_msg=name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_between_image_size_gears_is_refused_listing_the_gears(server, built, protocol):
    """Finding: a 20x20 image to gears 16x16 and 32x32 was zero-padded to 32x32 and answered with
    logits up to 1.02 away from ONNX Runtime's (16x24: 1.24)."""
    rng = np.random.default_rng(1)
    sizes = [(16, 16), (32, 32), (20, 20), (16, 24)]
    requests = [{"image": rng.standard_normal((1, 3, h, w)).astype(np.float32)} for h, w in sizes]
    before = failures(server, "hw", "input")
    results = infer_many(protocol, url(server, protocol), "hw", requests)
    for feeds, (outputs, error) in zip(requests[:2], results[:2]):
        assert_as_onnxruntime(outputs, error, built[1]["classifier"], feeds)
    for _, error in results[2:]:
        assert_refused(error, "only the batch axis may be padded", "16x16", "32x32")
    assert failures(server, "hw", "input") == before + 2
    assert failures(server, "hw", "engine") == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_between_dims_gears_is_an_input_error_not_a_padded_answer(server, built, protocol):
    """Finding: with gears 16x16, 32x32 and 24x40 a 20x20 request got a [1,2,24,40] output; a dims
    request whose dims match no gear was an engine failure (HTTP 500)."""
    rng = np.random.default_rng(2)
    sizes = [(24, 40), (16, 16), (20, 20), (40, 24)]
    requests = [{"x": rng.standard_normal((1, 3, h, w)).astype(np.float32)} for h, w in sizes]
    results = infer_many(protocol, url(server, protocol), "dims", requests)
    for feeds, (outputs, error) in zip(requests[:2], results[:2]):
        assert_as_onnxruntime(outputs, error, built[1]["conv"], feeds)
    for _, error in results[2:]:
        assert_refused(error, "no compiled shape of the model is the request's", "x [3,24,40]")
    assert failures(server, "dims", "engine") == 0


def test_64_concurrent_requests_to_a_bounded_range_all_run(server, built):
    """Finding: x:1~4 was generated with max_batch_size 8 and 30 of 64 valid requests failed ("'x'
    axis 0 is 7; the model's range is 1..4")."""
    rng = np.random.default_rng(3)
    requests = [{"x": rng.standard_normal((int(rows), 4)).astype(np.float32)} for rows in rng.integers(1, 5, 64)]
    for protocol in PROTOCOLS:
        results = infer_many(protocol, url(server, protocol), "range4", requests, concurrency=64)
        for feeds, (outputs, error) in zip(requests, results):
            assert_as_onnxruntime(outputs, error, built[1]["matmul"], feeds, tolerance=1e-3)
    assert failures(server, "range4", "engine") == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rows_outside_a_range_are_the_clients_error(server, built, protocol):
    """Finding: a request outside the range got HTTP 500 / INTERNAL and counted as an engine failure."""
    rng = np.random.default_rng(4)
    requests = [{"x": rng.standard_normal((rows, 4)).astype(np.float32)} for rows in (2, 6, 7, 1)]
    before = failures(server, "range_alone", "input")
    results = infer_many(protocol, url(server, protocol), "range_alone", requests)
    for feeds, (outputs, error) in zip(requests[:2], results[:2]):
        assert_as_onnxruntime(outputs, error, built[1]["matmul"], feeds, tolerance=1e-3)
    for rows, (_, error) in zip((7, 1), results[2:]):
        assert_refused(error, f"input 'x' axis 0 is {rows}; the model's range is 2..6", "x [2~6,4]")
    assert failures(server, "range_alone", "input") == before + 2
    assert failures(server, "range_alone", "engine") == 0
    (_, error), *_ = infer_many(protocol, url(server, protocol), "range4", [{"x": np.ones((5, 4), np.float32)}])
    assert_refused(error)  # above max_batch_size 4: Triton's own refusal


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_range_without_an_upper_bound_is_served(server, built, protocol):
    """Finding: generate wrote a folder for x:-1,4 that check passed and the load refused."""
    rng = np.random.default_rng(5)
    requests = [{"x": rng.standard_normal((rows, 4)).astype(np.float32)} for rows in (1, 8, 5, 3)]
    results = infer_many(protocol, url(server, protocol), "unbounded", requests)
    for feeds, (outputs, error) in zip(requests, results):
        assert_as_onnxruntime(outputs, error, built[1]["matmul"], feeds, tolerance=1e-3)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_static_input_beside_batch_gears_is_one_value_per_request(server, built, protocol):
    """Finding: s:2,3 beside b:-1,6 and a:-1,4 on gears 1,2,4: requests of 1 and 4 rows were refused."""
    rng = np.random.default_rng(6)
    feeds, requests = [], []
    for rows in (1, 4, 2, 3, 1):
        feed = {
            "a": rng.standard_normal((rows, 4)).astype(np.float32),
            "b": rng.standard_normal((rows, 6)).astype(np.float32),
            "s": rng.standard_normal((2, 3)).astype(np.float32),
        }
        feeds.append(feed)
        requests.append({**feed, "s": np.repeat(feed["s"][None], rows, axis=0)})
    mixed = dict(requests[1], s=requests[1]["s"] + np.arange(4, dtype=np.float32)[:, None, None])
    results = infer_many(protocol, url(server, protocol), "static", requests + [mixed])
    for feed, (outputs, error) in zip(feeds, results):
        assert_as_onnxruntime(outputs, error, built[1]["static"], feed)
    assert_refused(results[-1][1], "unbatched input 's' must be the same for every row of the request")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dynamic_aipp_on_a_shape_range_is_served(server, built, protocol):
    """Finding: sim-compile refused AIPP on a range model and the engine refused such a model."""
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, (rows, 6, 8, 3), dtype=np.uint8) for rows in (1, 3, 4)]
    results = infer_many(protocol, url(server, protocol), "aipp_range", [{"x": image} for image in images])
    for image, (outputs, error) in zip(images, results):
        network = np.ascontiguousarray(image.transpose(0, 3, 1, 2)).astype(np.float16).astype(np.float32)
        assert_as_onnxruntime(outputs, error, built[1]["aipp"], {"x": network}, tolerance=1e-3)


def serve(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ge_python_backend", "serve", *argv], capture_output=True, text=True, timeout=120
    )


def test_serve_refuses_a_model_folder_and_shared_ports_in_one_line(built):
    """Findings: `serve <model folder>` said "ready" with no model and health 200; --grpc-port 8101
    --metrics-port 8101 printed about 100 lines of tritonserver's usage."""
    folder = built[0] / "hw"
    result = serve(str(folder))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert f"{folder} is a model folder (it holds config.pbtxt), not a repository" in result.stderr
    assert f"({built[0]})" in result.stderr
    result = serve(str(built[0]), "--grpc-port", "8101", "--metrics-port", "8101")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "--grpc-port and --metrics-port are both 8101" in result.stderr and "Usage" not in result.stdout
