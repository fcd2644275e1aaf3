"""Compile at load at its edges, through a real tritonserver 2.51 on acl-sim: new weights in an
ONNX model's external-data file are a new model (the graph file unchanged), an entry that lost or
truncated its ``model.om`` is compiled again, a relative ``atc_cache_dir`` is refused by the load
and by ``check`` in the same words; a two-line folder with static AIPP in ``atc_flags`` serves the
UINT8 NHWC image, and a GE backend folder with dims gears and ``max_batch_size: 0`` serves its gears.

``GE_ACL_SIMULATOR=1`` makes ``engine: auto`` compile with the simulator's ATC. One server in
explicit mode; each test loads, reloads and unloads its own model.
"""

from __future__ import annotations

import urllib.request

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ge_python_backend.ops.loadcheck import load_models
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.check import check_repository
from ge_python_backend.testing import models
from ge_python_backend.testing.aipp_reference import normalise
from tests.support import refusals
from tests.support.clients import infer_many

pytestmark = pytest.mark.e2e

TWO_LINE = 'name: "{name}"\nbackend: "ge"\nmax_batch_size: 8\n'


def external_data_model(path, seed: int):
    """A linear model whose weights live in ``weights.bin`` beside ``path``."""
    models.linear(path, seed=seed)
    (path.parent / "weights.bin").unlink(missing_ok=True)  # onnx.save appends to it
    onnx.save(
        onnx.load(str(path)),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("compile_cache")
    repo = root / "repo"
    for name in ("external", "healing", "relative_cache"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(TWO_LINE.format(name=name))
    external_data_model(repo / "external" / "1" / "model.onnx", seed=1)
    models.linear(repo / "healing" / "1" / "model.onnx", seed=2)
    models.linear(repo / "relative_cache" / "1" / "model.onnx")
    with (repo / "relative_cache" / "config.pbtxt").open("a") as config:
        config.write('parameters [{key: "atc_cache_dir" value {string_value: "cache"}}]\n')
    for name, config_text, write_model, files in (
        ("static_aipp", refusals.TWO_LINE_AIPP, refusals._image, {"aipp.cfg": refusals.STATIC_AIPP}),
        ("npu_ge_dims", refusals.NPU_GE_DIMS, lambda v: models.linear(v / "linear.onnx"), {}),
    ):
        (repo / name / "1").mkdir(parents=True)
        write_model(repo / name / "1")
        for file_name, text in files.items():
            (repo / name / "1" / file_name).write_text(text)
        text = config_text.replace("{name}", name).replace("{cache}", str(root / "cache"))
        (repo / name / "config.pbtxt").write_text(text)
    return repo, root / "cache"


@pytest.fixture(scope="module")
def server(built):
    repo, cache = built
    env = {"GE_ACL_SIMULATOR": "1", "GE_TRITON_ATC_CACHE": str(cache)}
    with TritonServer(repo, model_control_mode="explicit", exit_on_error=False, env=env) as running:
        yield running


def _load(server, repo, name: str) -> str:
    """Load ``name`` (unloading it first when it is loaded); the log lines the load wrote."""
    urllib.request.urlopen(
        urllib.request.Request(f"http://{server.http_address}/v2/repository/models/{name}/unload", b"{}"), timeout=60
    )
    before = len(server.log_text())
    (result,) = load_models(repo, [name], server=server, unload=False)
    assert result.loaded, result.message
    return server.log_text()[before:]


def _answers_as_onnxruntime(server, name: str, source) -> None:
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    ((outputs, error),) = infer_many("grpc", server.grpc_address, name, [{"x": x}])
    assert error is None, error
    logits, _ = ort.InferenceSession(str(source)).run(None, {"x": x})
    np.testing.assert_allclose(outputs["logits"], logits, rtol=1e-6, atol=1e-6)


def test_new_weights_in_the_external_data_file_are_compiled_and_served(server, built):
    repo, _ = built
    source = repo / "external" / "1" / "model.onnx"
    log = _load(server, repo, "external")
    assert "compiling model.onnx for Ascend310P3 with ATC" in log
    _answers_as_onnxruntime(server, "external", source)
    graph = source.read_bytes()
    external_data_model(source, seed=9)  # other weights.bin, the same model.onnx
    assert source.read_bytes() == graph
    log = _load(server, repo, "external")
    assert "compiling model.onnx for Ascend310P3 with ATC" in log and "cache hit" not in log
    _answers_as_onnxruntime(server, "external", source)


def test_an_entry_that_lost_or_truncated_its_om_is_compiled_again(server, built):
    repo, cache = built
    source = repo / "healing" / "1" / "model.onnx"
    before = {p.name for p in cache.iterdir()} if cache.exists() else set()
    _load(server, repo, "healing")
    (entry,) = [p for p in cache.iterdir() if p.is_dir() and p.name not in before]
    (entry / "model.om").unlink()
    log = _load(server, repo, "healing")
    assert f"the cached entry {entry} has no model.om: compiling it again" in log
    _answers_as_onnxruntime(server, "healing", source)
    om = entry / "model.om"
    om.write_bytes(om.read_bytes()[: om.stat().st_size // 2])
    log = _load(server, repo, "healing")
    assert f"the cached entry {entry} has a model.om of " in log and "(truncated or replaced): compiling it" in log
    _answers_as_onnxruntime(server, "healing", source)


def test_a_relative_cache_folder_is_refused_by_the_load_and_by_check_in_the_same_words(server, built, tmp_path):
    repo, _ = built
    (result,) = load_models(repo, ["relative_cache"], server=server)
    assert not result.loaded
    words = "parameter 'atc_cache_dir' has value 'cache' (a relative path: the stub's working folder is not the model's"
    assert words in result.message
    errors = [p.message for p in check_repository(repo / "relative_cache", backends=tmp_path).errors]
    assert any(words in message for message in errors), errors
    assert not (repo / "relative_cache" / "1" / "cache").exists()


def test_a_two_line_folder_with_static_aipp_serves_the_image_the_aipp_takes(server, built):
    """atc_flags --insert_op_conf (static AIPP, RGB888_U8 8x8) on an FP32 NCHW ONNX: auto-complete
    describes the model ATC builds, so clients send UINT8 NHWC images, answered as ONNX Runtime
    answers the documented transform (no crop, no normalisation: the pixels as FP16)."""
    repo, _ = built
    (result,) = load_models(repo, ["static_aipp"], server=server, unload=False)
    assert result.loaded, result.message
    assert "+ input[x].data_type: TYPE_UINT8" in result.changes and "+ input[x].dims: [8, 8, 3]" in result.changes
    pixels = np.random.default_rng(6).integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    ((outputs, error),) = infer_many("grpc", server.grpc_address, "static_aipp", [{"x": pixels}])
    assert error is None, error
    network = normalise(pixels, (0, 0, 0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    (expected,) = ort.InferenceSession(str(repo / "static_aipp" / "1" / "model.onnx")).run(None, {"x": network})
    np.testing.assert_allclose(outputs["c"], expected, rtol=1e-3, atol=1e-3)


def test_a_ge_backend_folder_with_dims_gears_and_no_batching_serves_its_gears(server, built):
    repo, _ = built
    (result,) = load_models(repo, ["npu_ge_dims"], server=server, unload=False)
    assert result.loaded, result.message
    assert not any(change.startswith("~ max_batch_size") for change in result.changes), result.changes
    session = ort.InferenceSession(str(repo / "npu_ge_dims" / "1" / "linear.onnx"))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    ((outputs, error),) = infer_many("http", server.http_address, "npu_ge_dims", [{"x": x}])
    assert error is None, error
    np.testing.assert_allclose(outputs["logits"], session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    ((_, refused),) = infer_many("http", server.http_address, "npu_ge_dims", [{"x": np.ones((3, 4), np.float32)}])
    assert refused is not None and "dims 1" in str(refused), refused  # 3 rows is no gear: refused, never padded
