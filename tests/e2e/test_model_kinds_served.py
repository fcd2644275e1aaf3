"""The acl engine's model kinds through a real tritonserver, over HTTP and gRPC, against ONNX
Runtime run directly on the ONNX files: a dims model (a static input listed first, the dynamic ones
in reverse order), a static-AIPP model (UINT8 NHWC images in), a dynamic-AIPP model set per request
through request parameters, and a shape-range model. Every folder is made by ``ge-triton
generate`` from a sim-OM; one server serves all four.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode
from ge_python_backend.cli import main
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing.aipp_reference import crop, normalise
from tests.support import acl_sim_nets as nets
from tests.support.clients import infer_many, url

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
PROTOCOLS = ["grpc", "http"]
#: inputs ATC adds that no client sends (multi_batch_clone_pass.cc 470-511; aipp_op.cc 1145-1276)
RUNTIME_INPUTS = {"ascend_mbatch_shape_data", "ascend_dynamic_aipp_data"}
STATIC_AIPP = AippConfig(
    input_format=AippInputFormat.RGB888_U8,
    src_image_size_w=12,
    src_image_size_h=10,
    crop=True,
    load_start_pos_w=2,
    load_start_pos_h=3,
    crop_size_w=8,
    crop_size_h=6,
    mean_chn=(120, 110, 100, 0),
    min_chn=(0.5, 0.0, 1.0, 0.0),
    var_reci_chn=(0.02, 0.025, 0.03, 1.0),
)
DYNAMIC_DEFAULTS = """aipp_op {
    aipp_mode: dynamic
    related_input_rank: 0
    input_format: RGB888_U8
    crop: true
    crop_size_w: 8
    crop_size_h: 6
    mean_chn_0: 30
    mean_chn_1: 40
    mean_chn_2: 50
}
"""


def generate(*argv: str) -> None:
    assert main(["generate", *argv]) == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    repo = root / "repo"
    sources = {
        "dims": nets.three_inputs(root / "three.onnx"),
        "conv": nets.image_conv(root / "conv.onnx", batch="N"),
        "range": nets.matmul_add(root / "matmul.onnx"),
    }
    sim_compile(sources["dims"], root / "dims.om", input_shapes="s:2,3;b:-1,-1;a:-1,4", dynamic_dims="2,3,1;4,5,2")
    sim_compile(
        sources["conv"],
        root / "static_aipp.om",
        input_shapes="x:-1,3,6,8",
        batch_gears="1,2,4",
        insert_op_conf=[STATIC_AIPP],
    )
    dynamic = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=4 * 10 * 12 * 3)
    sim_compile(
        sources["conv"],
        root / "dynamic_aipp.om",
        input_shapes="x:-1,3,6,8",
        batch_gears="1,2,4",
        insert_op_conf=[dynamic],
    )
    sim_compile(sources["range"], root / "range.om", input_shapes="x:1~8,4")
    for name in ("dims", "static_aipp", "dynamic_aipp", "range"):
        generate(str(root / f"{name}.om"), "-o", str(repo), "--instances", "1")
    folder = repo / "dynamic_aipp"
    (folder / "1" / "defaults.cfg").write_text(DYNAMIC_DEFAULTS)
    with (folder / "config.pbtxt").open("a") as config:
        config.write('parameters { key: "aipp_config" value: { string_value: "defaults.cfg" } }\n')
    return repo, sources


@pytest.fixture(scope="module")
def server(built):
    repo, _ = built
    with TritonServer(repo) as running:
        yield running


def infer_all(protocol, address, model, requests):
    """Send every (inputs, parameters) request at once; [(outputs | None, error | None)] in order."""
    arrays = [a for a, _ in requests]
    return infer_many(protocol, address, model, arrays, len(requests), [p for _, p in requests])


def assert_as_onnxruntime(outputs, onnx_path, feeds, tolerance=1e-6):
    expected = nets.reference(onnx_path, feeds)
    assert set(outputs) == set(expected)
    for name, want in expected.items():
        assert outputs[name].shape == want.shape, name
        np.testing.assert_allclose(outputs[name], want, atol=tolerance, rtol=tolerance, err_msg=name)


def test_the_served_configs_have_no_runtime_inputs(server):
    client = httpclient.InferenceServerClient(server.http_address)
    inputs = {}
    for model in ("dims", "static_aipp", "dynamic_aipp", "range"):
        assert client.is_model_ready(model)
        inputs[model] = {i["name"]: i for i in client.get_model_config(model)["input"]}
        assert not RUNTIME_INPUTS & set(inputs[model])
    assert sorted(inputs["dims"]) == ["a", "b", "s"]
    assert inputs["static_aipp"]["x"]["data_type"] == "TYPE_UINT8" and inputs["static_aipp"]["x"]["dims"] == [10, 12, 3]
    assert inputs["dynamic_aipp"]["x"]["data_type"] == "TYPE_UINT8"
    assert inputs["range"]["x"]["dims"] == [4]
    client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dims_model_answers_as_onnxruntime(server, built, protocol):
    rng = np.random.default_rng(1)
    requests = []
    for b0, b1, a0 in ((2, 3, 1), (4, 5, 2), (2, 3, 1)):  # --dynamic_dims in --input_shape order s, b, a
        shapes = {"a": (a0, 4), "b": (b0, b1), "s": (2, 3)}
        requests.append(({n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}, {}))
    requests.append(
        ({"a": np.ones((3, 4), np.float32), "b": np.ones((2, 3), np.float32), "s": np.ones((2, 3), np.float32)}, {})
    )
    results = infer_all(protocol, url(server, protocol), "dims", requests)
    for (feeds, _), (outputs, error) in zip(requests[:-1], results[:-1]):
        assert error is None, error
        assert_as_onnxruntime(outputs, built[1]["dims"], feeds)
    error = results[-1][1]  # a shape no gear has: the client's error, listing the gears
    assert error is not None and "no compiled shape of the model is the request's" in error.message()
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_static_aipp_model_takes_uint8_nhwc_images(server, built, protocol):
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, (int(n), 10, 12, 3), dtype=np.uint8) for n in (1, 3, 2, 4)]
    results = infer_all(protocol, url(server, protocol), "static_aipp", [({"x": image}, {}) for image in images])
    for image, (outputs, error) in zip(images, results):
        assert error is None, error
        network = normalise(
            crop(image, 2, 3, 8, 6), STATIC_AIPP.mean_chn, STATIC_AIPP.min_chn, STATIC_AIPP.var_reci_chn
        )
        assert_as_onnxruntime(outputs, built[1]["conv"], {"x": network}, tolerance=1e-3)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dynamic_aipp_is_set_per_request_by_request_parameters(server, built, protocol):
    rng = np.random.default_rng(3)
    cases = [  # parameters, image shape, crop start (w, h), mean, var_reci
        ({}, (1, 10, 12, 3), (0, 0), (30, 40, 50), (1.0, 1.0, 1.0)),
        ({"load_start_pos_w": 4, "load_start_pos_h": 2}, (2, 10, 12, 3), (4, 2), (30, 40, 50), (1.0, 1.0, 1.0)),
        ({"mean_chn_1": 90, "var_reci_chn_2": "0.5"}, (1, 10, 12, 3), (0, 0), (30, 90, 50), (1.0, 1.0, 0.5)),
        ({"crop": True, "load_start_pos_w": 1}, (1, 7, 9, 3), (1, 0), (30, 40, 50), (1.0, 1.0, 1.0)),
    ]
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for _, shape, _, _, _ in cases]
    requests = [({"x": image}, parameters) for image, (parameters, *_) in zip(images, cases)]
    requests.append(({"x": images[0]}, {"load_start_pos_w": 5}))  # the crop leaves the 12-wide image
    results = infer_all(protocol, url(server, protocol), "dynamic_aipp", requests)
    for image, (_, _, (start_w, start_h), mean, var_reci), (outputs, error) in zip(images, cases, results):
        assert error is None, error
        network = normalise(crop(image, start_w, start_h, 8, 6), mean, (0, 0, 0), var_reci)
        assert_as_onnxruntime(outputs, built[1]["conv"], {"x": network}, tolerance=1e-3)
    error = results[-1][1]
    assert error is not None and "input 'x'" in error.message() and "leaves the 12x10 image" in error.message()
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shape_range_model_answers_as_onnxruntime(server, built, protocol):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((int(n), 4)).astype(np.float32) for n in (1, 5, 8, 3, 2, 7)]
    results = infer_all(protocol, url(server, protocol), "range", [({"x": a}, {}) for a in arrays])
    for array, (outputs, error) in zip(arrays, results):
        assert error is None, error
        assert_as_onnxruntime(outputs, built[1]["range"], {"x": array}, tolerance=1e-3)
