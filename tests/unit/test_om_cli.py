"""``ge-triton inspect``: tables and JSON, in process and through the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ge_python_backend.cli import main
from tests.support.om_builder import Header, Model, Tensor, attr_s, standard_om

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
    assert "SoC            Ascend310P3" in out and "ATC version    7.0.RC1" in out and "Framework      onnx" in out
    assert CMDLINE in out
    assert "gears 1,4 (dynamic batch; axis 0 is -1)" in out
    assert "ascend_mbatch_shape_data (runtime-internal" in out
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
    assert doc["inputs"] == [
        {"name": "images", "dtype": "FP16", "native_type": "DT_FLOAT16", "format": "NCHW", "shape": [-1, 3, 64, 64]}
    ]
    assert [o["dtype"] for o in doc["outputs"]] == ["FP32", ""]
    assert doc["batch"] == {"kind": "gears", "sizes": [1, 4]}
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


def test_bad_input_in_process(tmp_path, capsys):
    path = tmp_path / "sim.om"
    path.write_bytes(b"GESIMOM\x00" + bytes(64))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "simulated OM" in err and "acl-sim" in err
