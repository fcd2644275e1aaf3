"""``ge-triton inspect``: tables and JSON, in process and through the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from ge_python_backend.cli import main
from ge_python_backend.sim.compile import sim_compile
from tests.support.om_builder import Header, Model, Tensor, aipp_attr, attr_s, standard_om

SCRIPT = Path(sys.executable).parent / "ge-triton"
CMDLINE = "atc --model=det.onnx --framework=5 --output=det --soc_version=Ascend310P3 --dynamic_batch_size=1,4"


@pytest.fixture
def om_path(tmp_path) -> Path:
    model = Model(
        name="det",
        inputs=[Tensor("images", "DT_FLOAT16", (4, 3, 64, 64), "NCHW", origin_dims=(-1, 3, 64, 64))],
        outputs=[
            Tensor("boxes", "DT_FLOAT", (4, 100, 4), "ND", src=("nms", 0)),
            Tensor("scores", "DT_COMPLEX64", (4, 100), "ND", src=("nms", 1)),
        ],
        dynamic_type=1,
        gears=[[1], [4]],
        model_attrs={
            "soc_version": attr_s("Ascend310P3"),
            "atc_version": attr_s("7.0.RC1"),
            "atc_cmdline": attr_s(CMDLINE),
            "framework_type": attr_s("5"),
        },
    )
    path = tmp_path / "det.om"
    path.write_bytes(standard_om(model, Header(name="det")))
    return path


def test_table(om_path, capsys):
    assert main(["inspect", str(om_path)]) == 0
    out = capsys.readouterr().out
    assert f"{om_path} ({om_path.stat().st_size:,} bytes)" in out
    assert "SoC             Ascend310P3" in out and "ATC version     7.0.RC1" in out and "Framework       onnx" in out
    assert CMDLINE in out
    assert "gears 1,4 (dynamic batch; axis 0 is -1)" in out
    assert "Runtime inputs  ascend_mbatch_shape_data (input 1: the gear selector; runtime-internal" in out
    lines = out.splitlines()
    assert any(line.split() == ["0", "images", "FP16", "NCHW", "[-1,3,64,64]"] for line in lines)
    assert any(line.split() == ["0", "output_0_nms_0", "FP32", "ND", "[-1,100,4]"] for line in lines)
    assert any(line.split() == ["1", "output_1_nms_1", "-", "[DT_COMPLEX64]", "ND", "[-1,100]"] for line in lines)
    assert any(line.split()[:3] == ["0", "32-bit", "MODEL_INOUT_INFO"] for line in lines)


def test_json(om_path, capsys):
    assert main(["inspect", str(om_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["file"] == str(om_path) and doc["file_size"] == om_path.stat().st_size
    assert doc["header"]["name"] == "det" and doc["header"]["version"] == "2.0" and doc["header"]["model_num"] == 1
    assert doc["io_source"] == "MODEL_INOUT_INFO" and doc["dynamic_input"] == "ascend_mbatch_shape_data"
    assert doc["runtime_inputs"] == [
        {"name": "ascend_mbatch_shape_data", "index": 1, "role": "dynamic_shape", "image": ""}
    ]
    assert doc["shape_order"] == [] and doc["aipp"] == {}
    assert doc["inputs"] == [
        {"name": "images", "dtype": "FP16", "native_type": "DT_FLOAT16", "format": "NCHW", "shape": [-1, 3, 64, 64]}
    ]
    assert [o["dtype"] for o in doc["outputs"]] == ["FP32", ""]
    assert doc["batch"] == {"kind": "gears", "sizes": [1, 4], "limit": None}
    assert doc["gear_kind"] == "" and doc["shape_gears"] == []
    assert doc["facts"]["atc_cmdline"] == CMDLINE and doc["facts"]["framework"] == "onnx"
    (model,) = doc["models"]
    assert model["table_bits"] == 32 and [p["type_name"] for p in model["partitions"]][:2] == [
        "MODEL_INOUT_INFO",
        "MODEL_DEF",
    ]


def test_shape_gears_and_submodels_in_the_table(tmp_path, capsys):
    model = Model(
        inputs=[Tensor("img", "DT_UINT8", (1, 3, 64, 64), "NCHW", origin_dims=(1, 3, -1, -1))],
        outputs=[Tensor("o", "DT_FLOAT", (1, 2), "ND", src=("op", 0))],
        dynamic_type=2,
        gears=[[32, 48]],
    )
    path = tmp_path / "hw.om"
    path.write_bytes(standard_om(model))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Shape gears (hw, 1)" in out and "img [1,3,32,48]" in out


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_installed_script(om_path, flag):
    result = subprocess.run([str(SCRIPT), "inspect", str(om_path), *flag], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    if flag:
        assert json.loads(result.stdout)["inputs"][0]["name"] == "images"
    else:
        assert "images" in result.stdout and "Ascend310P3" in result.stdout


def _one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("ge-triton inspect: error: ")
    for fragment in fragments:
        assert fragment in result.stderr


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "inspect", str(path)], capture_output=True, text=True, timeout=60)


def test_bad_inputs_exit_2_with_one_line(tmp_path, om_path):
    _one_line_error(run(tmp_path / "nope.om"), "nope.om", "No such file")
    truncated = tmp_path / "cut.om"
    truncated.write_bytes(om_path.read_bytes()[:-10])
    _one_line_error(run(truncated), "cut.om", "truncated")
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch" + bytes(300))
    _one_line_error(run(onnx), "model.onnx", "ONNX")
    _one_line_error(run(tmp_path), str(tmp_path))


def test_a_broken_simulated_om_is_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "sim.om"
    path.write_bytes(b"GESIMOM\x00" + bytes(64))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sim.om" in err and "simulated .om" in err and "acl-sim" in err


def dims_om(tmp_path) -> Path:
    """--input_shape="scale:1,4;mask:-1,-1;label:1,-1;data:1,1,40,-1" --dynamic_dims="1,1,20,20;2,2,30,40"."""
    model = Model(
        inputs=[
            Tensor("data", "DT_FLOAT", (1, 1, 40, 40), "ND", origin_dims=(1, 1, 40, -1)),
            Tensor("label", "DT_FLOAT", (1, 30), "ND", origin_dims=(1, -1)),
            Tensor("mask", "DT_FLOAT", (2, 2), "ND", origin_dims=(-1, -1)),
            Tensor("scale", "DT_FLOAT", (1, 4), "ND"),
        ],
        outputs=[Tensor("out", "DT_FLOAT", (1, 40), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=[[1, 1, 20, 20], [2, 2, 30, 40]],
        shape_order=["scale", "mask", "label", "data"],
    )
    path = tmp_path / "dims.om"
    path.write_bytes(standard_om(model))
    return path


def test_dims_gears_per_input_in_input_shape_order(tmp_path, capsys):
    path = dims_om(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Input order     scale, mask, label, data (ATC --input_shape order of the dims gears)" in out
    assert "  gear 1: scale [1,4], mask [1,1], label [1,20], data [1,1,40,20]  (1,1,20,20)" in out
    assert "  gear 2: scale [1,4], mask [2,2], label [1,30], data [1,1,40,40]  (2,2,30,40)" in out
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["shape_order"] == ["scale", "mask", "label", "data"]
    assert doc["shape_gears"][0] == {
        "label": "1,1,20,20",
        "shapes": {"scale": [1, 4], "mask": [1, 1], "label": [1, 20], "data": [1, 1, 40, 20]},
    }


def aipp_om(tmp_path) -> Path:
    static = aipp_attr(
        aipp_mode=1,
        related_input_rank=0,
        input_format=1,
        csc_switch=True,
        crop=True,
        load_start_pos_w=2,
        load_start_pos_h=4,
        crop_size_w=200,
        crop_size_h=220,
        padding=True,
        left_padding_size=12,
        right_padding_size=12,
        top_padding_size=2,
        bottom_padding_size=2,
        src_image_size_w=0,
        src_image_size_h=0,
        mean_chn_0=104,
        var_reci_chn_0=0.5,
        matrix_r0c0=298,
        matrix_r0c1=516,
        matrix_r0c2=0,
        matrix_r1c0=298,
        matrix_r1c1=-100,
        matrix_r1c2=-208,
        matrix_r2c0=298,
        matrix_r2c1=0,
        matrix_r2c2=409,
        input_bias_0=16,
        input_bias_1=128,
        input_bias_2=128,
    )
    dynamic = aipp_attr(aipp_mode=2, related_input_rank=1, max_src_image_size=150528)
    model = Model(
        inputs=[
            Tensor(
                "image",
                "DT_UINT8",
                (1, 224, 224, 3),
                "NHWC",
                input_dims=(1, 336, 224, 1),
                attrs={
                    "_data_related_aipp_mode": "static_aipp",
                    "aipp": static,
                    "_aipp_inputs": ["NCHW:DT_FLOAT:image:602112:4:1,3,224,224"],
                },
            ),
            Tensor(
                "photo",
                "DT_UINT8",
                (1, 150528),
                "NHWC",
                aipp_dims=(1, -1, -1, -1),
                attrs={"_data_related_aipp_mode": "dynamic_aipp", "aipp": dynamic},
            ),
            Tensor(
                "ascend_dynamic_aipp_data",
                "DT_UINT8",
                (160,),
                "ND",
                op_type="AippData",
                attrs={"_data_related_aipp_mode": "dynamic_aipp_conf", "_data_aipp_data_name_map": "photo"},
            ),
        ],
        outputs=[Tensor("prob", "DT_FLOAT", (1, 10), "ND", src=("fc", 0))],
    )
    path = tmp_path / "aipp.om"
    path.write_bytes(standard_om(model))
    return path


def test_aipp_of_each_input(tmp_path, capsys):
    path = aipp_om(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    for line in (
        "Runtime inputs  ascend_dynamic_aipp_data (input 2: dynamic-AIPP parameters of photo; runtime-internal",
        "AIPP (2 inputs)",
        "  image: static AIPP (related_input_rank 0)",
        "    input format   YUV420SP_U8: the client sends UINT8 [1,336,224,1] NHWC",
        "    source size    224x224 (w x h; src_image_size 0: the model's own)",
        "    crop           200x220 at (2,4)",
        "    CSC            on: matrix [[298,516,0], [298,-100,-208], [298,0,409]], input bias [16, 128, 128], "
        "output bias [16, 128, 128]",
        "    channel swap   R/B or U/V swap off, A/X swap off",
        "    mean/min/var   mean [104, 0, 0, 0], min [0.0, 0.0, 0.0, 0.0], var_reci [0.5, 1.0, 1.0, 1.0]: "
        "normalised on the device (clients must not normalise again)",
        "    padding        top 2, bottom 2, left 12, right 12",
        "    network input  DT_FLOAT [1,3,224,224] NCHW (what the AIPP feeds)",
        "  photo: dynamic AIPP (related_input_rank 1)",
        "    max_src_image_size  150,528 bytes (the largest image buffer)",
        "    parameters          set per request, in ascend_dynamic_aipp_data (input 2)",
    ):
        assert line in out, line
    lines = out.splitlines()
    assert any(line.split() == ["0", "image", "UINT8", "NHWC", "[1,336,224,1]"] for line in lines)
    assert any(line.split() == ["1", "photo", "UINT8", "NHWC", "[1,-1,-1,-1]"] for line in lines)
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    image = doc["aipp"]["image"]
    assert (image["aipp_mode"], image["input_format"], image["crop_size_w"], image["image_size"]) == (
        "static",
        "YUV420SP_U8",
        200,
        [224, 224],
    )
    assert image["matrix"] == [[298, 516, 0], [298, -100, -208], [298, 0, 409]]
    assert image["network"] == "DT_FLOAT [1,3,224,224] NCHW" and image["notes"] == []
    assert doc["aipp"]["photo"]["aipp_mode"] == "dynamic" and doc["aipp"]["photo"]["max_src_image_size"] == 150528
    assert doc["inputs"][0]["preprocessing"]["kind"] == "aipp-static"
    assert doc["runtime_inputs"] == [
        {"name": "ascend_dynamic_aipp_data", "index": 2, "role": "aipp_data", "image": "photo"}
    ]


def test_a_simulated_om_from_sim_compile_is_reported_as_one(tmp_path, capsys):
    graph = helper.make_graph(
        [helper.make_node("Identity", [n], [f"{n}_out"]) for n in ("data", "label", "mask", "scale")],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 1, 40, "t"]),
            helper.make_tensor_value_info("label", TensorProto.FLOAT, [1, "u"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["a", "b"]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 4]),
        ],
        [
            helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None)
            for n in ("data", "label", "mask", "scale")
        ],
    )
    onnx_path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(onnx_path))
    om = tmp_path / "m.om"
    sim_compile(
        onnx_path,
        om,
        input_shapes="scale:1,4;mask:-1,-1;label:1,-1;data:1,1,40,-1",
        dynamic_dims="1,1,20,20;2,2,30,40",
    )
    assert main(["inspect", str(om)]) == 0
    out = capsys.readouterr().out
    assert "simulated .om" in out and "acl-sim" in out
    assert "  gear 1: scale [1,4], mask [1,1], label [1,20], data [1,1,40,20]" in out
    assert "ascend_mbatch_shape_data (input 4: the gear selector" in out
    assert main(["inspect", str(om), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["simulated"] is True and doc["shape_order"] == ["scale", "mask", "label", "data"]
    assert [t["name"] for t in doc["inputs"]] == ["data", "label", "mask", "scale"]
    assert doc["runtime_inputs"] == [
        {"name": "ascend_mbatch_shape_data", "index": 4, "role": "dynamic_shape", "image": ""}
    ]


def test_a_simulated_om_with_aipp(tmp_path, capsys):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    onnx_path = tmp_path / "net.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(onnx_path))
    config = tmp_path / "aipp.cfg"
    config.write_text(
        "aipp_op {\n aipp_mode: static\n input_format: RGB888_U8\n src_image_size_w: 8\n src_image_size_h: 8\n"
        " mean_chn_0: 10\n}\n"
    )
    om = tmp_path / "net.om"
    sim_compile(onnx_path, om, insert_op_conf=config)
    assert main(["inspect", str(om)]) == 0
    out = capsys.readouterr().out
    assert "  x: static AIPP (related_input_rank 0)" in out
    assert "    input format   RGB888_U8: the client sends UINT8 [1,8,8,3] NHWC" in out
    assert "    source size    8x8 (w x h)" in out
    assert "mean [10, 0, 0, 0]" in out
