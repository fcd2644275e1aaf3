"""Compile at load through a real tritonserver 2.51 on acl-sim: a folder with only ``model.onnx``
and a two-line config is compiled with (the simulator's) ATC when it loads and answers as ONNX
Runtime does; two instances compile once; a model ATC cannot compile fails the load with ATC's
E-code line and the command; the GE backend's own example config serves unchanged under
``backend: "npu_ge"`` (with a ``--backend-config=npu_ge,...`` key); a restart loads from the cache
without compiling.

``GE_ACL_SIMULATOR=1`` makes engine ``acl`` (chosen by ``engine: auto`` because a device and an
ATC are present) run on the simulator, whose ATC is ``python -m ge_python_backend.sim.atc``.
One server for the compiling loads, a second one for the restart.
"""

from __future__ import annotations

import re
import time

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ops.loadcheck import load_models
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.testing import models
from tests.support import npu_ge
from tests.support.clients import infer_many, url

pytestmark = [pytest.mark.e2e, pytest.mark.contract]

TWO_LINE = 'name: "{name}"\nbackend: "ge"\n'
AICORE = "--backend-config=npu_ge,ge.aicoreNum=8|"  # the 310P3 has 8 AI Cores and one kind (row 131)
DECLARED_IO = 'input [{name: "x" data_type: TYPE_FP32 dims: [4]}] output [{name: "y" data_type: TYPE_FP32 dims: [4]}]'


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("compile_at_load")
    repo, sources = root / "repo", root / "sources"
    sources.mkdir()
    files = {
        "onnx_only": models.linear(sources / "linear.onnx"),
        "two_instances": models.linear(sources / "linear_two.onnx", seed=3),
        "uncompilable": npu_ge.custom_operator(sources / "custom.onnx"),
    }
    for name, source in files.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.onnx").write_bytes(source.read_bytes())
        (repo / name / "config.pbtxt").write_text(TWO_LINE.format(name=name))
    with (repo / "two_instances" / "config.pbtxt").open("a") as config:
        config.write("instance_group [{ count: 2 kind: KIND_CPU }]\n")
    with (repo / "uncompilable" / "config.pbtxt").open("a") as config:  # no runtime reads it: declared
        config.write(f"max_batch_size: 8\n{DECLARED_IO}\n")
    files["resnet"] = npu_ge.tiny_resnet(sources / "resnet.onnx")
    (repo / "resnet" / "1").mkdir(parents=True)
    # their example's folder holds the ONNX under its own name; the backend takes the first .onnx
    (repo / "resnet" / "1" / "resnet18-tiny.onnx").write_bytes(files["resnet"].read_bytes())
    (repo / "resnet" / "config.pbtxt").write_text(npu_ge.example_config())
    # a GE backend folder that leaves inputs and outputs out ("input output 可以不填")
    (repo / "npu_ge_bare" / "1").mkdir(parents=True)
    (repo / "npu_ge_bare" / "1" / "linear.onnx").write_bytes(files["onnx_only"].read_bytes())
    (repo / "npu_ge_bare" / "config.pbtxt").write_text('name: "npu_ge_bare"\nbackend: "npu_ge"\nmax_batch_size: 8\n')
    return repo, files, root / "cache"


def _server(built):
    repo, _, cache = built
    env = {"GE_ACL_SIMULATOR": "1", "GE_TRITON_ATC_CACHE": str(cache)}
    return TritonServer(repo, model_control_mode="explicit", exit_on_error=False, env=env, extra_args=[AICORE])


@pytest.fixture(scope="module")
def first(built):
    """The first server: every model compiled at load (the cache starts empty); load seconds of each."""
    repo = built[0]
    with _server(built) as running:
        results, seconds = {}, {}
        for name in ("onnx_only", "two_instances", "uncompilable", "resnet", "npu_ge_bare"):
            started = time.monotonic()
            (results[name],) = load_models(repo, [name], server=running, unload=False)
            seconds[name] = time.monotonic() - started
        yield running, results, seconds


def _compile_lines(log: str, model_file: str) -> list[str]:
    return [line for line in log.splitlines() if f"compiling {model_file} for " in line and "with ATC" in line]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_two_line_onnx_folder_compiles_at_load_and_answers_as_onnxruntime(first, built, protocol):
    server, results, _ = first
    assert results["onnx_only"].loaded, results["onnx_only"].message
    log = server.log_text()
    assert "engine auto: chose acl (model.onnx present; compiled with ATC at load" in log
    (compiled,) = [
        r.message
        for r in server.log_records()
        if "compiling model.onnx for " in r.message and "onnx_only_0" in r.message
    ]
    # max_batch_size 8 without preferred sizes (the server fills in [8]): the powers of two up to 8
    assert '--dynamic_batch_size="1,2,4,8"' in compiled, compiled
    session = ort.InferenceSession(str(built[1]["onnx_only"]))
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32) for _ in range(12)]
    for x, (outputs, error) in zip(
        xs, infer_many(protocol, url(server, protocol), "onnx_only", [{"x": x} for x in xs])
    ):
        assert error is None, error
        logits, probs = session.run(None, {"x": x})
        np.testing.assert_allclose(outputs["logits"], logits, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(outputs["probs"], probs, rtol=1e-6, atol=1e-6)


def test_two_instances_compile_once(first, built):
    server, results, _ = first
    assert results["two_instances"].loaded, results["two_instances"].message
    log = server.log_text()
    ours = [line for line in log.splitlines() if "two_instances_0_" in line]
    compiled = [line for line in ours if "compile at load: compiling" in line]
    reused = [line for line in ours if "while this one waited" in line or "cache hit" in line]
    assert len(compiled) == 1, "\n".join(ours)
    assert len(reused) == 1, "\n".join(ours)
    cache = built[2]
    assert len([p for p in cache.iterdir() if p.name.startswith("model-") and p.is_dir()]) == 2


def test_a_model_atc_cannot_compile_fails_the_load_with_atcs_message_and_the_command(first):
    _, results, _ = first
    result = results["uncompilable"]
    assert not result.loaded
    assert "E16002: No ONNX parser is registered for optype com.example::1::CustomOp." in result.message
    assert re.search(
        r"command: \S+ -m ge_python_backend\.sim\.atc --model=\S+/uncompilable/1/model\.onnx", result.message
    )
    assert "--soc_version=Ascend310P3" in result.message


def test_the_ge_backends_example_config_serves_unchanged_under_npu_ge(first, built):
    server, results, _ = first
    assert results["resnet"].loaded, results["resnet"].message
    log = server.log_text()
    assert "ge.aicoreNum=8| -> ATC --aicore_num=8|" in log  # from --backend-config=npu_ge,...
    assert "model file resnet18-tiny.onnx" in log
    assert "on device 4" in log  # device_ids "4,5": the first instance on the first id
    session = ort.InferenceSession(str(built[1]["resnet"]))
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((rows, 3, 224, 224)).astype(np.float32) for rows in (1, 3)]
    for data, (outputs, error) in zip(
        batches, infer_many("grpc", server.grpc_address, "resnet", [{"data": d} for d in batches])
    ):
        assert error is None, error
        (expected,) = session.run(None, {"data": data})
        np.testing.assert_allclose(outputs["resnetv24_dense0_fwd"], expected, rtol=1e-5, atol=1e-5)


def test_a_ge_backend_folder_without_inputs_and_outputs_is_completed_and_served(first, built):
    server, results, _ = first
    assert results["npu_ge_bare"].loaded, results["npu_ge_bare"].message
    assert "+ input[x].dims: [4]" in results["npu_ge_bare"].changes
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ((outputs, error),) = infer_many("http", server.http_address, "npu_ge_bare", [{"x": x}])
    assert error is None, error
    expected = ort.InferenceSession(str(built[1]["onnx_only"])).run(None, {"x": x})
    np.testing.assert_allclose(outputs["probs"], expected[1], rtol=1e-6, atol=1e-6)


def test_a_restart_loads_from_the_cache_without_compiling(first, built):
    """Last in the module: it stops the first server. The load times are printed (speed is not asserted)."""
    server, _, seconds = first
    server.stop()
    repo = built[0]
    with _server(built) as restarted:
        started = time.monotonic()
        (result,) = load_models(repo, ["onnx_only"], server=restarted, unload=False)
        cached = time.monotonic() - started
        assert result.loaded, result.message
        log = restarted.log_text()
        assert _compile_lines(log, "model.onnx") == []
        assert "compile at load: cache hit for model.onnx for Ascend310P3" in log
        x = np.ones((2, 4), np.float32)
        ((outputs, error),) = infer_many("grpc", restarted.grpc_address, "onnx_only", [{"x": x}])
        assert error is None, error
        np.testing.assert_allclose(
            outputs["logits"], ort.InferenceSession(str(built[1]["onnx_only"])).run(None, {"x": x})[0], rtol=1e-6
        )
    print(f"onnx_only load: {seconds['onnx_only']:.2f} s compiling, {cached:.2f} s from the cache")
