"""ge-triton atc-cmd: the ATC command for an ONNX model and a Triton config."""

from __future__ import annotations

import shlex

import onnx
import pytest
from onnx import TensorProto, helper

from ge_python_backend.cli import main
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.atc import AtcRequest, atc_command, config_gears
from ge_python_backend.repository.config import parse_config
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim.compile import sim_compile
from ge_python_backend.testing import models


def identity(path, shape, name="image"):
    """An ONNX Identity model whose single input has ``shape`` (strings are symbolic axes)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], ["out"])],
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def args_of(request: AtcRequest) -> list[str]:
    return list(atc_command(request).arguments)


@pytest.fixture
def classifier(tmp_path):
    return models.image_classifier(tmp_path / "clf.onnx", size=16, channels=(4,), classes=5)


def test_dynamic_batch_with_gears(classifier, tmp_path):
    command = atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(8, 1, 2, 4)))
    assert command.shell() == (
        f"atc --model={classifier} --framework=5 --output={tmp_path / 'clf'} --soc_version=Ascend310P3 "
        '--input_format=NCHW --input_shape="image:-1,3,16,16" --dynamic_batch_size="1,2,4,8"'
    )
    assert command.notes == ()


def test_the_shell_line_round_trips_through_a_shell_parser(classifier, tmp_path):
    command = atc_command(AtcRequest(classifier, "Ascend910B", batch_gears=(1, 2), output=str(tmp_path / "a b" / "m")))
    assert shlex.split(command.shell()) == list(command.arguments)
    assert f"--output={tmp_path / 'a b' / 'm'}" in command.arguments


@pytest.mark.parametrize(
    "config, gears",
    [
        ("max_batch_size: 8", (1, 2, 4, 8)),
        ("max_batch_size: 6", (1, 2, 4, 6)),
        ("max_batch_size: 1", (1,)),
        ("max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 4] }", (2, 4, 8)),
        ("max_batch_size: 0", ()),
    ],
)
def test_gears_a_config_implies(config, gears):
    assert config_gears(parse_config(config)) == gears


def test_config_gives_gears_and_output_path(classifier, tmp_path):
    folder = generate(classifier, tmp_path / "repo", GenerateOptions(name="clf", max_batch_size=4)).model_dir
    (folder / "3").mkdir()
    command = atc_command(AtcRequest(classifier, "Ascend310P3", config=folder / "config.pbtxt"))
    assert f"--output={folder / '3' / 'model'}" in command.arguments
    assert "--dynamic_batch_size=1,2,4" in command.arguments
    assert command.notes[0].startswith("batch gears 1,2,4 derived from")


@pytest.mark.parametrize(
    "config, gears, message",
    [
        ("max_batch_size: 16", (1, 2, 4, 8), "max_batch_size 16 is above the largest gear 8"),
        (
            "max_batch_size: 8 dynamic_batching { preferred_batch_size: [3] }",
            (1, 2, 4, 8),
            "preferred_batch_size 3 is not one of the gears",
        ),
        ("max_batch_size: 0", (1, 2), "max_batch_size 0 means requests carry the full shape"),
    ],
)
def test_gears_that_contradict_the_config_are_refused(classifier, tmp_path, config, gears, message):
    path = tmp_path / "config.pbtxt"
    path.write_text(config)
    with pytest.raises(
        ConfigError, match=f"--batch-gears {','.join(map(str, gears))} conflicts with {path}: {message}"
    ):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=gears, config=path))


def test_consistent_gears_and_config_are_accepted(classifier, tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 8] }")
    arguments = args_of(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2, 4, 8, 16), config=path))
    assert "--dynamic_batch_size=1,2,4,8,16" in arguments


def test_one_gear_is_a_fixed_batch(classifier):
    command = atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(4,)))
    assert "--input_shape=image:4,3,16,16" in command.arguments
    assert not any(a.startswith("--dynamic_batch_size") for a in command.arguments)
    assert "fixed batch of 4" in command.notes[0]


def test_a_dynamic_batch_without_gears_is_refused(classifier):
    with pytest.raises(
        ConfigError, match="input 'image' has a dynamic batch axis \\(\\[-1,3,16,16\\]\\): give --batch-gears"
    ):
        atc_command(AtcRequest(classifier, "Ascend310P3"))


def test_a_fixed_batch_model_needs_no_gears_and_refuses_them(tmp_path):
    model = identity(tmp_path / "fixed.onnx", [2, 3, 8, 8])
    assert "--input_shape=image:2,3,8,8" in args_of(AtcRequest(model, "Ascend310P3"))
    with pytest.raises(ConfigError, match="fixed axis 0 of 2 .* batch gears need a batch axis on axis 0"):
        atc_command(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2)))


def test_unsized_axes_need_input_shape(tmp_path):
    """Finding: the message suggested the very shape that had just failed (image:-1,3,-1,-1)."""
    model = identity(tmp_path / "hw.onnx", ["n", 3, "h", "w"])
    with pytest.raises(ConfigError) as error:
        atc_command(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2)))
    assert str(error.value).startswith(
        "input 'image' is [-1,3,-1,-1]: axis 2, 3 have no size; give each one with "
        "--input-shape image:-1,3,<size of axis 2>,<size of axis 3> "
    )
    assert "image:-1,3,-1,-1" not in str(error.value)
    arguments = args_of(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2), input_shapes={"image": (-1, 3, 64, 48)}))
    assert "--input_shape=image:-1,3,64,48" in arguments


def test_input_shape_that_contradicts_the_model_or_names_nothing(classifier):
    with pytest.raises(ConfigError, match="--input-shape gives input 'image' size 32 on axis 2, but it is 16 already"):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), input_shapes={"image": (-1, 3, 32, 32)}))
    with pytest.raises(ConfigError, match="rank 3"):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), input_shapes={"image": (-1, 3, 16)}))
    with pytest.raises(
        ConfigError, match="--input-shape names 'img', which is not a model input; the model takes \\['image'\\]"
    ):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), input_shapes={"img": (1, 3, 16, 16)}))


def test_config_dims_size_the_unsized_axes(tmp_path, onnx_dir):
    folder = generate(onnx_dir / "two_inputs.onnx", tmp_path / "repo", GenerateOptions(name="pair")).model_dir
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: -1", "dims: 5"))
    arguments = args_of(AtcRequest(onnx_dir / "two_inputs.onnx", "Ascend310P3", config=config))
    assert "--input_shape=a:-1,5;b:-1,5" in arguments
    assert "--input_format=ND" in arguments
    with pytest.raises(ConfigError, match="--input-shape gives input 'a' size 6 on axis 1, but it is 5 already"):
        atc_command(AtcRequest(onnx_dir / "two_inputs.onnx", "Ascend310P3", config=config, input_shapes={"a": (-1, 6)}))


@pytest.mark.parametrize(
    "precision, flag",
    [
        ("fp16", "--precision_mode_v2=fp16"),
        ("origin", "--precision_mode_v2=origin"),
        ("must_keep_origin_dtype", "--precision_mode=must_keep_origin_dtype"),
        ("force_fp16", "--precision_mode=force_fp16"),
    ],
)
def test_precision_flags(classifier, precision, flag):
    arguments = args_of(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), precision=precision))
    assert arguments[-1] == flag
    assert sum(a.startswith("--precision") for a in arguments) == 1


def test_refusals(classifier, tmp_path):
    with pytest.raises(ConfigError, match="--precision 'fast': accepted fp16, origin"):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), precision="fast"))
    with pytest.raises(ConfigError, match="--soc-version 'Ascend 310': expected a name such as Ascend310P3"):
        atc_command(AtcRequest(classifier, "Ascend 310", batch_gears=(1, 2)))
    om = tmp_path / "clf.om"
    sim_compile(classifier, om, batch_gears="1,2")
    with pytest.raises(ConfigError, match="is a simulated .om; atc-cmd compiles an ONNX model"):
        atc_command(AtcRequest(om, "Ascend310P3"))


def test_om_suffix_on_output_is_dropped_with_a_note(classifier):
    command = atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), output="out/model.om"))
    assert "--output=out/model" in command.arguments
    assert command.notes == ("the .om suffix is dropped from the output path: ATC appends it (out/model.om)",)


def test_cli_prints_the_command_and_notes(classifier, capsys):
    assert (
        main(
            [
                "atc-cmd",
                str(classifier),
                "--soc-version",
                "Ascend310P3",
                "--batch-gears",
                "4",
                "--input-shape",
                "image:-1,3,16,16",
                "--precision",
                "origin",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert shlex.split(captured.out) == [
        "atc",
        f"--model={classifier}",
        "--framework=5",
        f"--output={classifier.with_suffix('')}",
        "--soc_version=Ascend310P3",
        "--input_format=NCHW",
        "--input_shape=image:4,3,16,16",
        "--precision_mode_v2=origin",
    ]
    assert captured.err.startswith("note: one batch gear")
