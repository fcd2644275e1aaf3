"""ge-triton generate from .om files, and its one-line errors (exit 2, no traceback); every verb's
errors are in test_cli_error_matrix.py."""

from __future__ import annotations

import pytest

from ge_python_backend.cli import main
from ge_python_backend.repository.config import mc, read_config_file
from ge_python_backend.repository.modelfile import read_model_file
from ge_python_backend.specs import api_type
from tests.support.om_builder import Header, Model, Tensor, standard_om
from tests.support.samples import OM_SAMPLES, OM_SAMPLES_DIR


def gear_om() -> bytes:
    """A CANN .om laid out byte by byte: x FP32 [-1,3,32,32] NCHW, y FP32 [-1,10], gears 1,4,8."""
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (8, 3, 32, 32), "NCHW", origin_dims=(-1, 3, 32, 32))],
        outputs=[Tensor("y", "DT_FLOAT", (8, 10), "ND", src=("fc", 0))],
        dynamic_type=1,
        gears=[[8], [1], [4]],
    )
    return standard_om(model)


def config_io(config):
    return [(e.name, api_type(mc.DataType.Name(e.data_type)), tuple(e.dims)) for e in config.input], [
        (e.name, api_type(mc.DataType.Name(e.data_type)), tuple(e.dims)) for e in config.output
    ]


def test_generate_from_a_dynamic_batch_om(tmp_path, capsys):
    om = tmp_path / "net.om"
    om.write_bytes(gear_om())
    assert main(["generate", str(om), "-o", str(tmp_path / "repo")]) == 0
    config = read_config_file(tmp_path / "repo" / "net" / "config.pbtxt")
    assert config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 4, 8]
    assert config.parameters["engine"].string_value == "acl"
    assert config_io(config) == ([("x", "FP32", (3, 32, 32))], [("output_0_fc_0", "FP32", (10,))])
    assert (tmp_path / "repo" / "net" / "1" / "model.om").read_bytes() == om.read_bytes()


@pytest.mark.skipif(not OM_SAMPLES, reason=f"no public .om samples in {OM_SAMPLES_DIR}")
@pytest.mark.parametrize("sample", OM_SAMPLES, ids=lambda p: p.stem)
def test_generate_from_real_om_samples_matches_the_reader(tmp_path, sample, capsys):
    assert main(["generate", str(sample), "-o", str(tmp_path), "--name", "m"]) == 0
    config = read_config_file(tmp_path / "m" / "config.pbtxt")
    spec = read_model_file(sample).spec
    batching = config.max_batch_size > 0
    expected = tuple(
        [(t.name, t.dtype, t.shape[1:] if batching else t.shape) for t in tensors]
        for tensors in (spec.inputs, spec.outputs)
    )
    assert config_io(config) == expected
    assert config.parameters["engine"].string_value == "acl"


def one_line_error(capsys, verb):
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ge-triton {verb}: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize(
    "content, message",
    [
        (
            lambda: standard_om(
                Model(inputs=[Tensor("x", shape=(1, 4))], outputs=[Tensor("y", shape=(1, 4))]), Header(is_encrypt=1)
            ),
            "is an encrypted OM",
        ),
        (lambda: gear_om()[:300], "secret.om"),
        (lambda: b"IMOD" + b"\xff" * 500, "secret.om"),
        (lambda: b"hello world", "not a model file ge-triton knows"),
        (lambda: b"", "secret.om"),
    ],
    ids=["encrypted", "truncated", "garbage", "text", "empty"],
)
def test_bad_model_files_give_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "secret.om"
    path.write_bytes(content())
    assert main(["generate", str(path), "-o", str(tmp_path / "repo")]) == 2
    assert message in one_line_error(capsys, "generate")
    assert not (tmp_path / "repo").exists()


def test_missing_model_file_gives_one_line(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "repo")]) == 2
    assert f"cannot read model file {tmp_path / 'nope.onnx'}" in one_line_error(capsys, "generate")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max-batch-size", "-1"], "--max-batch-size -1: expected an integer >= 0"),
        (["--instances", "0"], "--instances 0: expected an integer >= 1"),
        (["--max-batch-size", "4", "--name", "pair"], None),
        (
            ["--template", "nope"],
            "no template named 'nope'; available: classification, detection, detection-hooks, generic, ocr",
        ),
        (["--set", "x=1"], "template 'generic' has no option 'x'; its options: none"),
        (["--name", "../up"], "model name '../up' is not safe as a folder name"),
    ],
)
def test_bad_generate_flags_give_one_line(tmp_path, capsys, onnx_dir, flags, message):
    assert main(["generate", str(onnx_dir / "linear.onnx"), "-o", str(tmp_path / "repo"), *flags]) == (
        2 if message else 0
    )
    if message:
        assert message in one_line_error(capsys, "generate")


def test_flags_that_contradict_the_model_name_the_conflict(tmp_path, capsys, onnx_dir):
    assert (
        main(
            [
                "generate",
                str(onnx_dir / "linear_static.onnx"),
                "-o",
                str(tmp_path),
                "--max-batch-size",
                "4",
                "--preferred-batch-sizes",
                "8",
            ]
        )
        == 2
    )
    assert "preferred batch size 8 is outside 1..max_batch_size (4)" in one_line_error(capsys, "generate")
    assert (
        main(["generate", str(onnx_dir / "linear_static.onnx"), "-o", str(tmp_path), "--preferred-batch-sizes", "2"])
        == 2
    )
    assert "--preferred-batch-sizes 2 conflicts with max_batch_size 0" in one_line_error(capsys, "generate")
    assert (
        main(
            [
                "generate",
                str(onnx_dir / "two_inputs.onnx"),
                "-o",
                str(tmp_path),
                "--max-batch-size",
                "0",
                "--preferred-batch-sizes",
                "2",
            ]
        )
        == 2
    )
    assert "--preferred-batch-sizes 2 conflicts with max_batch_size 0" in one_line_error(capsys, "generate")
    om = tmp_path / "net.om"
    om.write_bytes(gear_om())
    assert main(["generate", str(om), "-o", str(tmp_path), "--max-batch-size", "16"]) == 2
    assert "--max-batch-size 16 is above the model's largest batch gear 8" in one_line_error(capsys, "generate")
    assert main(["generate", str(om), "-o", str(tmp_path), "--preferred-batch-sizes", "2"]) == 2
    assert "preferred batch size 2 is not one of the model's batch gears 1, 4, 8" in one_line_error(capsys, "generate")


def test_a_model_that_cannot_batch_gets_max_batch_size_0_and_a_note(tmp_path, capsys, onnx_dir):
    assert main(["generate", str(onnx_dir / "linear_static.onnx"), "-o", str(tmp_path)]) == 0
    assert "note: max_batch_size 0: axis 0 is fixed at 1 in the model file" in capsys.readouterr().out
    assert read_config_file(tmp_path / "linear_static" / "config.pbtxt").max_batch_size == 0


def test_the_library_refuses_what_the_flags_refuse_and_what_gemodel_would(tmp_path, onnx_dir):
    from ge_python_backend.errors import ConfigError
    from ge_python_backend.repository.generate import GenerateOptions, generate

    with pytest.raises(ConfigError, match="--instances 0: expected an integer >= 1"):
        GenerateOptions(name="m", instance_count=0)
    with pytest.raises(ConfigError, match=r"--queue-timeout-ms -1: expected a number >= 0"):
        GenerateOptions(name="m", queue_timeout_us=-1000)
    # streams 100 passes the flag's lower bound, but GEModel accepts 1..64: refused before writing.
    with pytest.raises(ConfigError, match="parameter 'streams' has value '100'"):
        generate(onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="m", streams=100))
    assert not (tmp_path / "repo").exists()
