"""GEModel's auto-complete (``triton.settings.auto_complete``), in process.

The reference for "the values generate writes" is generate's own config.pbtxt for the same model
file, read back through Triton's schema; that the real server takes the completed config (and
keeps what is described here) is proven in tests/e2e/test_autocomplete.py.
"""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.config import read_config_file
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from ge_python_backend.triton.settings import auto_complete
from tests.support import corpus

COMPLETED = ("max_batch_size", "input", "output", "dynamic_batching")


def two_lines(name: str, backend: str = "ge", **extra) -> dict:
    config = {"name": name, "backend": backend, "max_batch_size": 0, "input": [], "output": []}
    config.update(extra)
    return config


def folder(tmp_path, name: str, model_file) -> object:
    version = tmp_path / "repo" / name / "1"
    version.mkdir(parents=True)
    (version / model_file.name).write_bytes(model_file.read_bytes())
    return version


def generated(tmp_path, model_file, name: str) -> dict:
    """What ge-triton generate writes for ``model_file``, in Triton's JSON form."""
    config = read_config_file(
        generate(model_file, tmp_path / "gen", GenerateOptions(name=name)).model_dir / "config.pbtxt"
    )
    return json.loads(json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)))


def normalised(config: dict) -> dict:
    data = {key: config.get(key) for key in COMPLETED if config.get(key) not in (None, [], 0)}
    for key in ("input", "output"):
        for entry in data.get(key, []):
            entry["dims"] = [int(d) for d in entry["dims"]]
    if "dynamic_batching" in data:
        batching = data["dynamic_batching"]
        data["dynamic_batching"] = {
            "preferred_batch_size": [int(p) for p in batching.get("preferred_batch_size", [])],
            "max_queue_delay_microseconds": int(batching.get("max_queue_delay_microseconds", 0)),
        }
    return data


@pytest.mark.parametrize("source", ["onnx", "sim-om", "rank0"])
def test_a_two_line_config_completes_to_what_generate_writes(tmp_path, source):
    if source == "onnx":
        model_file = models.linear(tmp_path / "model.onnx")
    elif source == "rank0":
        model_file = corpus.rank0(tmp_path / "model.onnx")
    else:
        sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "model.om", batch_gears=(1, 2, 4))
        model_file = tmp_path / "model.om"
    version_dir = folder(tmp_path, "m", model_file)
    parameters = {"engine": {"string_value": "acl-sim"}} if source == "sim-om" else {}
    config = two_lines("m", parameters=parameters)
    filled = auto_complete(config, version_dir)
    assert filled and filled[0].startswith("max_batch_size") or source == "rank0"
    assert normalised(config) == normalised(generated(tmp_path, model_file, "m"))


def test_declared_values_are_kept_and_used(tmp_path):
    sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "model.om", batch_gears=(1, 2, 4))
    version_dir = folder(tmp_path, "m", tmp_path / "model.om")
    config = two_lines("m", max_batch_size=2, parameters={"engine": {"string_value": "acl-sim"}})
    config["output"] = [{"name": "probs", "data_type": "TYPE_FP32", "dims": [3]}]
    auto_complete(config, version_dir)
    assert config["max_batch_size"] == 2
    assert config["dynamic_batching"]["preferred_batch_size"] == [1, 2]
    assert [o["name"] for o in config["output"]] == ["probs", "logits"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_batch_size": 16}, "max_batch_size 16 is above the model's largest batch gear 4 (gears 1, 2, 4)"),
        (
            {"input": [{"name": "x", "data_type": "TYPE_INT32", "dims": []}]},
            "input 'x' data_type: the model has TYPE_FP32, the config says TYPE_INT32",
        ),
        (
            {"max_batch_size": 4, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [5]}]},
            "input 'x' dims: the model has [4], the config says [5]",
        ),
        (
            {"output": [{"name": "nope", "data_type": "TYPE_FP32", "dims": [3]}]},
            "config output 'nope' is not a model output; the model has ['logits', 'probs']",
        ),
    ],
)
def test_a_contradiction_names_the_field_the_models_value_and_the_configs(tmp_path, change, message):
    sim_compile(models.linear(tmp_path / "linear.onnx"), tmp_path / "model.om", batch_gears=(1, 2, 4))
    version_dir = folder(tmp_path, "m", tmp_path / "model.om")
    config = two_lines("m", parameters={"engine": {"string_value": "acl-sim"}}, **change)
    with pytest.raises(ConfigError) as error:
        auto_complete(config, version_dir)
    assert message in str(error.value)


def test_hooks_leave_their_side_to_the_config(tmp_path):
    version_dir = folder(tmp_path, "m", models.linear(tmp_path / "model.onnx"))
    config = two_lines("m", backend="python")
    auto_complete(config, version_dir, overridden=frozenset({"preprocess"}))
    assert config["input"] == [] and [o["name"] for o in config["output"]] == ["logits", "probs"]


def test_a_transposed_om_output_completes_without_batching(tmp_path):
    sim_compile(corpus.transposed(tmp_path / "t.onnx"), tmp_path / "model.om", batch_gears=(1, 2, 4))
    version_dir = folder(tmp_path, "m", tmp_path / "model.om")
    config = two_lines("m", parameters={"engine": {"string_value": "acl-sim"}})
    auto_complete(config, version_dir)
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert (config["input"][0]["dims"], config["output"][0]["dims"]) == ([-1, 4], [4, -1])


def test_parameters_are_read_as_initialize_reads_them_and_a_missing_file_is_left_to_it(tmp_path):
    version_dir = folder(tmp_path, "m", models.linear(tmp_path / "model.onnx"))
    with pytest.raises(ConfigError, match="unknown parameter 'strems'"):
        auto_complete(two_lines("m", parameters={"strems": {"string_value": "2"}}), version_dir)
    empty = tmp_path / "empty" / "1"
    empty.mkdir(parents=True)
    config = two_lines("m")
    (note,) = auto_complete(config, empty)  # initialize reports the missing file in its own words
    assert "engine auto finds no model file" in note and config == two_lines("m")
