"""sim_compile, the sim-OM file format, read_sim_om and the `ge-triton sim-compile` verb."""

from __future__ import annotations

import json
import struct

import pytest

from ge_python_backend.cli import main
from ge_python_backend.errors import ConfigError, OmFormatError
from ge_python_backend.sim import read_sim_om, sim_compile
from ge_python_backend.specs import BatchSupport, ShapeGear, TensorSpec
from tests.support import acl_sim_nets as nets


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compile")
    return {
        "matmul": nets.matmul_add(folder / "matmul.onnx"),
        "two": nets.two_inputs(folder / "two.onnx"),
        "conv": nets.conv(folder / "conv.onnx"),
    }


def description(path):
    """The JSON description of a sim-OM, read with the layout from the format's docstring."""
    data = path.read_bytes()
    magic, version, json_len, onnx_len = struct.unpack_from("<8sIIQ", data)
    assert (magic, version) == (b"GESIMOM\x00", 2)
    assert len(data) == 24 + json_len + onnx_len
    return json.loads(data[24 : 24 + json_len])


def test_batch_gears_add_the_dynamic_input_last(onnx_files, tmp_path):
    om = tmp_path / "m.om"
    sim_compile(onnx_files["matmul"], om, batch_gears=[4, 1, 2])
    text = description(om)
    assert [i["name"] for i in text["inputs"]] == ["x", "ascend_mbatch_shape_data"]
    assert text["inputs"][1] == {
        "name": "ascend_mbatch_shape_data",
        "role": "dynamic_shape",
        "dtype": "INT32",
        "format": "ND",
        "dims": [1],
        "size": 4,
    }
    assert text["inputs"][0]["dims"] == [-1, 4] and text["inputs"][0]["size"] == 4 * 4 * 4
    assert text["gears"] == [[1], [2], [4]]
    assert text["gear_outputs"] == [[[1, 3], [1, 3]], [[2, 3], [2, 3]], [[4, 3], [4, 3]]]
    assert text["outputs"][1] == {"name": "h", "dtype": "FLOAT16", "format": "ND", "dims": [4, 3], "size": 24}
    spec = read_sim_om(om)
    assert spec.inputs == (TensorSpec("x", "FP32", (-1, 4), "ND", native_type="DT_FLOAT"),)
    assert [o.shape for o in spec.outputs] == [(-1, 3), (-1, 3)]
    assert [o.dtype for o in spec.outputs] == ["FP32", "FP16"]
    assert spec.batch == BatchSupport("gears", (1, 2, 4))
    assert spec.source == "sim-om" and spec.facts["producer"] == "ge-triton sim-compile"
    assert "--dynamic_batch_size=4,1,2" in spec.facts["options"]


def test_static_shapes(onnx_files, tmp_path):
    spec = sim_compile(onnx_files["matmul"], tmp_path / "s.om", input_shapes="x:2,4")
    assert spec.batch == BatchSupport("static", (2,))
    assert [t.name for t in read_sim_om(tmp_path / "s.om").inputs] == ["x"]
    assert "ascend_mbatch_shape_data" not in [i["name"] for i in description(tmp_path / "s.om")["inputs"]]


def test_dynamic_image_size(onnx_files, tmp_path):
    spec = sim_compile(
        onnx_files["conv"], tmp_path / "c.om", input_shapes={"x": (1, 3, -1, -1)}, dynamic_image_size=[(8, 8), (16, 12)]
    )
    text = description(tmp_path / "c.om")
    assert text["inputs"][-1]["dims"] == [2] and text["inputs"][-1]["size"] == 8
    assert text["inputs"][0]["format"] == "NCHW"
    assert spec.gear_kind == "hw"
    assert spec.shape_gears == (ShapeGear({"x": (1, 3, 8, 8)}, "8x8"), ShapeGear({"x": (1, 3, 16, 12)}, "16x12"))
    assert spec.inputs[0].shape == (1, 3, -1, -1)
    assert [o.shape for o in spec.outputs] == [(1, 2, -1, -1), (1, 2, 1, 1)]
    assert text["outputs"][0]["dims"] == [1, 2, 16, 12]


def test_dynamic_dims_take_one_value_per_free_axis(onnx_files, tmp_path):
    spec = sim_compile(
        onnx_files["two"], tmp_path / "d.om", input_shapes="a:-1,-1;b:-1,-1", dynamic_dims="1,2,1,2;3,5,3,5"
    )
    assert spec.gear_kind == "dims"
    assert [g.shapes for g in spec.shape_gears] == [{"a": (1, 2), "b": (1, 2)}, {"a": (3, 5), "b": (3, 5)}]
    assert description(tmp_path / "d.om")["gears"] == [[1, 2, 1, 2], [3, 5, 3, 5]]
    assert spec.batch.kind == "none"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_gears": [1, 2], "dynamic_image_size": [(8, 8)]}, "mutually exclusive"),
        ({}, "dynamic axes"),
        ({"batch_gears": [1, 2], "input_shapes": "a:-1,-1;b:-1,-1"}, "only on axis 0"),
        ({"batch_gears": [1, 1], "input_shapes": "a:-1,3;b:-1,3"}, "repeat"),
        ({"dynamic_dims": "1,2;3", "input_shapes": "a:-1,-1;b:-1,-1"}, "4 -1 axes"),
        ({"batch_gears": [2], "input_shapes": "a:-1,3;c:-1,3"}, "does not have"),
        ({"dynamic_dims": "1,2,1,3;2,2,2,2", "input_shapes": "a:-1,-1;b:-1,-1"}, "ONNX Runtime cannot run"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(onnx_files, tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        sim_compile(onnx_files["two"], tmp_path / "bad.om", **kwargs)


def test_reader_refuses_damaged_files(onnx_files, tmp_path):
    om = tmp_path / "m.om"
    sim_compile(onnx_files["matmul"], om, batch_gears=[1, 2])
    data = om.read_bytes()
    (tmp_path / "short.om").write_bytes(data[:-1])
    with pytest.raises(OmFormatError, match="the file has"):
        read_sim_om(tmp_path / "short.om")
    (tmp_path / "magic.om").write_bytes(b"IMOD" + data[4:])
    with pytest.raises(OmFormatError, match="offset 0"):
        read_sim_om(tmp_path / "magic.om")


def test_cli_writes_an_om_that_reads_back(onnx_files, tmp_path, capsys):
    out = tmp_path / "cli.om"
    code = main(
        ["sim-compile", str(onnx_files["matmul"]), "--batch-gears", "1,2,8", "--input-shape", "x:-1,4", "-o", str(out)]
    )
    assert code == 0
    assert "batch gears: 1, 2, 8" in capsys.readouterr().out
    assert read_sim_om(out).batch == BatchSupport("gears", (1, 2, 8))


def test_cli_reports_errors_in_one_line(onnx_files, tmp_path, capsys):
    code = main(["sim-compile", str(onnx_files["conv"]), "--dynamic-image-size", "8,x", "-o", str(tmp_path / "x.om")])
    assert code == 2
    assert "--dynamic_image_size: '8,x' is not" in capsys.readouterr().err
