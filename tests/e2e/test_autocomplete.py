"""Auto-complete in a real tritonserver 2.51: a config of just ``name`` and ``backend`` loads and
answers right, with ``backend: "python"`` (a model.py subclassing GEModel) and ``backend: "ge"``.

The server completes the config with GEModel's ``auto_complete_config`` (the default: no
``--disable-auto-complete-config``). The reference for its values is ``ge-triton generate``'s
config.pbtxt for the same model file; answers are compared with ONNX Runtime run directly.
Contradictions between what a config declares and the model fail the load, naming the field,
the model's value and the config's. One server for the module, explicit model control.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format

from ge_python_backend.ops.loadcheck import load_models
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import mc
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.models.hooked_classifier import MEAN, STD
from tests.support import corpus
from tests.support.clients import infer_many, url

pytestmark = pytest.mark.e2e
SUBCLASS = "from ge_python_backend import GEModel\n\n\nclass TritonPythonModel(GEModel):\n    pass\n"
SIM = '\nparameters { key: "engine" value { string_value: "acl-sim" } }'
PROTOCOLS = ["grpc", "http"]
#: model files that generate writes a reference folder for (ref_<name>), served next to the others
REFERENCES = ("linear", "rank0", "gears", "transposed")

#: model -> (backend, model file key, extra config text)
TWO_LINE = {
    "onnx_python": ("python", "linear", ""),
    "onnx_ge": ("ge", "linear", ""),
    "rank0_ge": ("ge", "rank0", ""),
    "sim_python": ("python", "gears", SIM),
    "sim_ge": ("ge", "gears", SIM),
    "transposed_ge": ("ge", "transposed", SIM),
}
DECLARED = {
    "kept_max_batch": ("ge", "gears", SIM + "\nmax_batch_size: 2"),
}
CONTRADICTIONS = {
    "above_gears": (
        "ge",
        "gears",
        SIM + "\nmax_batch_size: 16",
        "max_batch_size 16 is above the model's largest batch gear 4 (gears 1, 2, 4)",
    ),
    "wrong_type": (
        "python",
        "linear",
        '\ninput [{name: "x" data_type: TYPE_INT32 dims: [-1, 4]}]',
        "input 'x' data_type: the model has TYPE_FP32, the config says TYPE_INT32",
    ),
    "wrong_dims": (
        "ge",
        "linear",
        '\nmax_batch_size: 4\ninput [{name: "x" data_type: TYPE_FP32 dims: [5]}]',
        "input 'x' dims: the model has [4], the config says [5]",
    ),
}


MODELS = Path(__file__).resolve().parents[1] / "models"
#: what a hooked subclass adds to load from a two-line config: the tensors its hooks take and give
DECLARATIONS = """

from ge_python_backend import Tensor

TritonPythonModel.inputs = (Tensor("IMAGE", "BYTES", (1,)),)
TritonPythonModel.outputs = (Tensor("LABELS", "BYTES", (3,)), Tensor("SCORES", "FP32", (3,)))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("autocomplete")
    sources = {"linear": models.linear(root / "linear.onnx"), "rank0": corpus.rank0(root / "rank0.onnx")}
    sim_compile(sources["linear"], root / "gears.om", batch_gears=(1, 2, 4))
    sim_compile(corpus.transposed(root / "t.onnx"), root / "transposed.om", batch_gears=(1, 2, 4))
    sources.update(gears=root / "gears.om", transposed=root / "transposed.om")
    repo = root / "repo"
    entries = {**TWO_LINE, **DECLARED, **{k: v[:3] for k, v in CONTRADICTIONS.items()}}
    for name, (backend, source, extra) in entries.items():
        version = repo / name / "1"
        version.mkdir(parents=True)
        model_file = sources[source]
        (version / f"model{model_file.suffix}").write_bytes(model_file.read_bytes())
        if backend == "python":
            (version / "model.py").write_text(SUBCLASS)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "{backend}"{extra}\n')
    for source in REFERENCES:
        generate(sources[source], repo, GenerateOptions(name=f"ref_{source}"))
    sources["classifier"] = models.image_classifier(root / "classifier.onnx", size=8, channels=(4, 8), classes=10)
    hooked = (MODELS / "hooked_classifier.py").read_text()
    for name, code in (("hooked_declared", hooked + DECLARATIONS), ("hooked_bare", hooked)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.onnx").write_bytes(sources["classifier"].read_bytes())
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n')
    return repo, sources


@pytest.fixture(scope="module")
def loaded(built):
    """(the server, each model's load result); the models that load stay loaded."""
    repo = built[0]
    with TritonServer(repo, model_control_mode="explicit", exit_on_error=False) as running:
        names = list(TWO_LINE) + list(DECLARED) + list(CONTRADICTIONS) + [f"ref_{source}" for source in REFERENCES]
        names += ["hooked_declared", "hooked_bare"]
        yield running, {r.model: r for r in load_models(repo, names, server=running, unload=False)}


def served_config(server, name) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://{server.http_address}/v2/models/{name}/config", timeout=30) as response:
        return json.loads(response.read())


def completed_fields(config) -> dict:
    """What auto-complete fills, through Triton's schema (defaults left out)."""
    message = json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)
    data = json_format.MessageToDict(message, preserving_proto_field_name=True)
    batching = data.get("dynamic_batching", {})
    return {
        "max_batch_size": data.get("max_batch_size", 0),
        "input": data.get("input", []),
        "output": data.get("output", []),
        "preferred_batch_size": batching.get("preferred_batch_size", []),
        "max_queue_delay_microseconds": batching.get("max_queue_delay_microseconds"),
        "dynamic_batching": "dynamic_batching" in data,
    }


@pytest.mark.parametrize("name", sorted(TWO_LINE))
def test_a_two_line_config_loads_with_the_values_generate_writes(server, results, built, name):
    """Both as the server serves them: its normalisation (e.g. an empty preferred_batch_size
    becomes [max_batch_size]) applies to both alike."""
    repo = built[0]
    assert results[name].loaded, results[name].message
    generated = served_config(server, f"ref_{TWO_LINE[name][1]}")
    assert completed_fields(served_config(server, name)) == completed_fields(generated)
    assert (repo / name / "config.pbtxt").read_text().count("\n") <= 3  # the file is left as it was


def test_a_declared_max_batch_size_is_kept(server):
    config = served_config(server, "kept_max_batch")
    assert config["max_batch_size"] == 2
    assert config["dynamic_batching"]["preferred_batch_size"] == [1, 2]


@pytest.mark.parametrize("name", sorted(CONTRADICTIONS))
def test_a_contradiction_fails_the_load_naming_field_and_values(results, name):
    result = results[name]
    assert not result.loaded
    assert f"model {name!r}: auto-complete: {CONTRADICTIONS[name][3]}" in result.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", ["onnx_python", "onnx_ge", "sim_python", "sim_ge", "kept_max_batch"])
def test_two_line_linear_models_answer_like_onnxruntime(server, built, name, protocol):
    session = ort.InferenceSession(str(built[1]["linear"]))
    rng = np.random.default_rng(5)
    limit = 2 if name == "kept_max_batch" else 4
    requests = [{"x": rng.standard_normal((int(rng.integers(1, limit + 1)), 4)).astype(np.float32)} for _ in range(40)]
    for request, (outputs, error) in zip(requests, infer_many(protocol, url(server, protocol), name, requests)):
        assert error is None, error
        logits, probs = session.run(None, request)
        np.testing.assert_allclose(outputs["logits"], logits, atol=1e-5)
        np.testing.assert_allclose(outputs["probs"], probs, atol=1e-5)


@pytest.mark.parametrize("name, source", [("rank0_ge", "rank0"), ("transposed_ge", "transposed")])
def test_two_line_configs_of_other_shapes_answer_like_onnxruntime(server, built, name, source):
    onnx_file = built[0].parent / f"{'rank0' if source == 'rank0' else 't'}.onnx"
    rng = np.random.default_rng(6)
    case = corpus.case(source)
    requests = case.requests(rng)
    for request, (outputs, error) in zip(requests, infer_many("grpc", url(server, "grpc"), name, requests)):
        assert error is None, error
        for output, value in corpus.reference(onnx_file, request).items():
            np.testing.assert_allclose(outputs[output], value, atol=1e-5)


@pytest.fixture(scope="module")
def server(loaded):
    return loaded[0]


@pytest.fixture(scope="module")
def results(loaded):
    return loaded[1]


def test_a_hooked_model_with_a_two_line_config_serves_the_tensors_its_class_declares(server, results, built):
    assert results["hooked_declared"].loaded, results["hooked_declared"].message
    config = completed_fields(served_config(server, "hooked_declared"))
    assert [(e["name"], e["data_type"], e["dims"]) for e in config["input"]] == [("IMAGE", "TYPE_STRING", ["1"])]
    assert [(e["name"], e["dims"]) for e in config["output"]] == [("LABELS", ["3"]), ("SCORES", ["3"])]
    assert config["max_batch_size"] > 0, "the engine's side is still completed from the model"
    image = np.random.default_rng(8).integers(0, 256, 192, dtype=np.uint8)
    ((outputs, error),) = infer_many(
        "grpc", url(server, "grpc"), "hooked_declared", [{"IMAGE": np.array([[image.tobytes()]], dtype=np.object_)}]
    )
    assert error is None, error
    pixels = (image.reshape(1, 8, 8, 3).transpose(0, 3, 1, 2).astype(np.float32) / 255.0 - MEAN) / STD
    (logits,) = ort.InferenceSession(str(built[1]["classifier"])).run(None, {"image": pixels})
    best = np.argsort(-logits, axis=1, kind="stable")[0, :3]
    assert outputs["LABELS"][0].tolist() == [f"class_{i}".encode() for i in best]


def test_a_hooked_model_whose_config_declares_no_tensors_is_refused_naming_what_to_add(results):
    result = results["hooked_bare"]
    assert not result.loaded
    assert (
        "TritonPythonModel overrides preprocess, so the config must declare the inputs clients send" in result.message
    )
    assert 'inputs = (Tensor("NAME", "FP32", (dims,)),)' in result.message
