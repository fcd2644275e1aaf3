"""repository.config.set_parameters: config.pbtxt parameters added and replaced, the rest kept."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.config import set_parameters

CONFIG = """name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
parameters { key: "engine" value { string_value: "onnxruntime" } }
parameters { key: "streams" value { string_value: "1" } }
"""


def test_parameters_are_added_and_replaced_and_the_rest_kept(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text(CONFIG)
    assert set_parameters(path, streams=2, top_k="3") == path
    written = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    expected = text_format.Parse(CONFIG, model_config_pb2.ModelConfig())
    assert {k: v.string_value for k, v in written.parameters.items()} == {
        "engine": "onnxruntime",
        "streams": "2",
        "top_k": "3",
    }
    written.ClearField("parameters")
    expected.ClearField("parameters")
    assert written == expected


def test_an_unreadable_config_is_named(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text("name: ")
    with pytest.raises(ConfigError, match=f"^{path}: "):
        set_parameters(path, streams=2)
