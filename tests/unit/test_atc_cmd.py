"""ge-triton atc-cmd: the ATC command for an ONNX model and a Triton config."""

from __future__ import annotations

import dataclasses
import shlex

import onnx
import pytest
from onnx import TensorProto, helper

from ge_python_backend.ascend.atc import AtcRequest, config_gears
from ge_python_backend.cli import main
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.atc import atc_command, config_facts
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


def args_of(request: AtcRequest, config=None) -> list[str]:
    return list(atc_command(request, config).arguments)


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
def test_gears_a_config_implies(config, gears, tmp_path):
    (tmp_path / "config.pbtxt").write_text(config)
    assert config_gears(config_facts(tmp_path / "config.pbtxt")) == gears


def test_config_gives_gears_and_output_path(classifier, tmp_path):
    folder = generate(classifier, tmp_path / "repo", GenerateOptions(name="clf", max_batch_size=4)).model_dir
    (folder / "3").mkdir()
    command = atc_command(AtcRequest(classifier, "Ascend310P3"), folder / "config.pbtxt")
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
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=gears), path)


def test_consistent_gears_and_config_are_accepted(classifier, tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 8] }")
    arguments = args_of(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2, 4, 8, 16)), path)
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
    with pytest.raises(ConfigError, match=r"batch gears 1,2, but no input has a dynamic axis 0 \(image \[2,3,8,8\]\)"):
        atc_command(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2)))


@pytest.mark.parametrize("given", [{}, {"image": (-1, 3, -1, -1)}], ids=["from-the-model", "from-input-shape"])
def test_unsized_axes_get_a_suggestion_that_is_not_the_shape_that_failed(tmp_path, given):
    # finding: atc-cmd suggested "--input-shape x:-1,3,-1,-1", the very shape that had just failed
    model = identity(tmp_path / "hw.onnx", ["n", 3, "h", "w"])
    with pytest.raises(ConfigError) as failure:
        atc_command(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2), input_shapes=given))
    message = str(failure.value)
    assert message.startswith("input 'image' is [-1,3,-1,-1]: axes 2, 3 have no size")
    assert "image:-1,3,-1,-1" not in message
    assert '--input-shape "image:-1,3,<size>,<size>"' in message
    assert "instead of batch gears, compile the -1 axes as gears with --dynamic-dims" in message
    # both ways out work
    arguments = args_of(AtcRequest(model, "Ascend310P3", batch_gears=(1, 2), input_shapes={"image": (-1, 3, 64, 48)}))
    assert "--input_shape=image:-1,3,64,48" in arguments
    arguments = args_of(
        AtcRequest(
            model, "Ascend310P3", input_shapes={"image": (-1, 3, -1, -1)}, dynamic_dims=((1, 64, 48), (2, 128, 96))
        )
    )
    assert "--input_shape=image:-1,3,-1,-1" in arguments and "--dynamic_dims=1,64,48;2,128,96" in arguments


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
    arguments = args_of(AtcRequest(onnx_dir / "two_inputs.onnx", "Ascend310P3"), config)
    assert "--input_shape=a:-1,5;b:-1,5" in arguments
    assert "--input_format=ND" in arguments
    with pytest.raises(ConfigError, match="--input-shape gives input 'a' size 6 on axis 1, but it is 5 already"):
        atc_command(AtcRequest(onnx_dir / "two_inputs.onnx", "Ascend310P3", input_shapes={"a": (-1, 6)}), config)


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


# ----- dynamic dims


def doc_model(path):
    """The doc's inputs data(1,1,40,-1), label(1,-1), mask(-1,-1), plus a static scale(1,4), in that graph order."""
    names = ("data", "label", "mask", "scale")
    graph = helper.make_graph(
        [helper.make_node("Identity", [n], [f"{n}_out"]) for n in names],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 1, 40, "t"]),
            helper.make_tensor_value_info("label", TensorProto.FLOAT, [1, "u"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["a", "b"]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 4]),
        ],
        [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None) for n in names],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


#: --input_shape with the static input first and the dynamic inputs in reverse graph order
REVERSED = {"scale": (1, 4), "mask": (-1, -1), "label": (1, -1), "data": (1, 1, 40, -1)}
GEARS = ((1, 1, 20, 20), (2, 2, 30, 40))


def test_dims_keep_the_users_order_and_expand_each_gear_atcs_way(tmp_path):
    model = doc_model(tmp_path / "doc.onnx")
    command = atc_command(AtcRequest(model, "Ascend310P3", input_shapes=REVERSED, dynamic_dims=GEARS))
    assert list(command.arguments[5:]) == [
        "--input_format=ND",
        "--input_shape=scale:1,4;mask:-1,-1;label:1,-1;data:1,1,40,-1",
        "--dynamic_dims=1,1,20,20;2,2,30,40",
    ]
    assert '--dynamic_dims="1,1,20,20;2,2,30,40"' in command.shell()
    assert shlex.split(command.shell()) == list(command.arguments)
    # each gear lists the -1 values of --input_shape in its order (--dynamic_dims.md:31)
    assert command.notes == (
        "dims gear 1,1,20,20: scale [1,4], mask [1,1], label [1,20], data [1,1,40,20]",
        "dims gear 2,2,30,40: scale [1,4], mask [2,2], label [1,30], data [1,1,40,40]",
    )


def test_the_doc_example_in_graph_order(tmp_path):
    model = doc_model(tmp_path / "doc.onnx")
    shapes = {"data": (1, 1, 40, -1), "label": (1, -1), "mask": (-1, -1)}
    command = atc_command(
        AtcRequest(model, "Ascend310P3", input_shapes=shapes, dynamic_dims=((20, 20, 1, 1), (40, 30, 2, 2)))
    )
    assert (
        command.notes[0]
        == "inputs scale are not in --input-shape: ATC keeps their model shapes and they take no part in the dims gears"
    )
    assert command.notes[1] == "dims gear 20,20,1,1: data [1,1,40,20], label [1,20], mask [1,1]"


def test_the_printed_flags_compile_with_sim_compile_to_the_same_gears(tmp_path):
    model = doc_model(tmp_path / "doc.onnx")
    command = atc_command(AtcRequest(model, "Ascend310P3", input_shapes=REVERSED, dynamic_dims=GEARS))
    flags = dict(a.split("=", 1) for a in command.arguments[1:])
    spec = sim_compile(
        model, tmp_path / "doc.om", input_shapes=flags["--input_shape"], dynamic_dims=flags["--dynamic_dims"]
    )
    assert [dict(g.shapes) for g in spec.shape_gears] == [
        {"scale": (1, 4), "mask": (1, 1), "label": (1, 20), "data": (1, 1, 40, 20)},
        {"scale": (1, 4), "mask": (2, 2), "label": (1, 30), "data": (1, 1, 40, 40)},
    ]


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"dynamic_dims": ((1, 1, 20), (2, 2, 30))},
            r"--dynamic-dims gear 1,1,20 has 3 value\(s\); --input-shape has 4 -1 axes \(mask 2, label 1, data 1, "
            r"in that order\)",
        ),
        ({"dynamic_dims": ((1, 1, 20, 20),)}, r"1 gear\(s\); ATC takes 2 to 100"),
        ({"dynamic_dims": tuple((1, 1, 1, g) for g in range(1, 102))}, r"101 gear\(s\); ATC takes 2 to 100"),
        ({"dynamic_dims": ((1, 1, 20, 20), (2, 2, 30, 40), (1, 1, 20, 20))}, r"gear 1,1,20,20 is given twice"),
        ({"dynamic_dims": ((1, 0, 20, 20), (2, 2, 30, 40))}, r"gear 1,0,20,20: every value must be >= 1"),
        (
            {"input_shapes": {"scale": (1, 4), "label": (1, -1), "data": (1, 1, 40, -1)}},
            r"input 'mask' is \[-1,-1\]: with --dynamic-dims every input with -1 axes must be named in --input-shape",
        ),
        ({"batch_gears": (1, 2)}, r"--dynamic-dims and --batch-gears are mutually exclusive"),
        (
            {"input_shapes": {"scale": (-1, 4), **{k: v for k, v in REVERSED.items() if k != "scale"}}},
            r"--input-shape gives input 'scale' -1 on axis 0, which the model fixes at 1",
        ),
        (
            {"input_shapes": {"data": (1, 1, 40, 8), "label": (1, 8), "mask": (2, 2)}},
            r"--input-shape has no -1 axis",
        ),
    ],
)
def test_dims_are_checked_as_atc_checks_them(tmp_path, changes, message):
    request = AtcRequest(doc_model(tmp_path / "doc.onnx"), "Ascend310P3", input_shapes=REVERSED, dynamic_dims=GEARS)
    with pytest.raises(ConfigError, match=message):
        atc_command(dataclasses.replace(request, **changes))


def test_dims_are_refused_with_aipp(tmp_path, classifier):
    config = tmp_path / "aipp.cfg"
    config.write_text(RGB_AIPP)
    with pytest.raises(ConfigError, match="--dynamic-dims cannot be combined with --insert-op-conf"):
        atc_command(
            AtcRequest(
                classifier,
                "Ascend310P3",
                input_shapes={"image": (-1, 3, 16, 16)},
                dynamic_dims=((1,), (2,)),
                insert_op_conf=config,
            )
        )


def test_cli_dims_and_option_errors(tmp_path, capsys):
    model = doc_model(tmp_path / "doc.onnx")
    argv = ["atc-cmd", str(model), "--soc-version", "Ascend310P3"]
    shape = "scale:1,4;mask:-1,-1;label:1,-1;data:1,1,40,-1"
    assert main([*argv, "--input-shape", shape, "--dynamic-dims", "1,1,20,20;2,2,30,40"]) == 0
    captured = capsys.readouterr()
    assert shlex.split(captured.out)[-2:] == [f"--input_shape={shape}", "--dynamic_dims=1,1,20,20;2,2,30,40"]
    assert "note: dims gear 1,1,20,20: scale [1,4], mask [1,1], label [1,20], data [1,1,40,20]" in captured.err
    for flags, fragment in (
        (["--input-shape", "mask:1~8,-1", "--dynamic-dims", "1;2"], "ATC refuses ranges together with"),
        (["--input-shape", "mask:-1,-1;mask:2,2"], "names input 'mask' twice"),
        (["--input-shape", shape, "--dynamic-dims", "1,1,x,20;2,2,30,40"], "--dynamic-dims: '1,1,x,20' is not"),
    ):
        assert main([*argv, *flags]) == 2
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1


# ----- AIPP

RGB_AIPP = "aipp_op {\n aipp_mode: static\n input_format: RGB888_U8\n src_image_size_w: 16\n src_image_size_h: 16\n}\n"


def test_an_aipp_config_is_checked_and_passed_through(tmp_path, classifier):
    config = tmp_path / "aipp.cfg"
    config.write_text(RGB_AIPP)
    arguments = args_of(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), insert_op_conf=config))
    assert f"--insert_op_conf={config}" in arguments and "--dynamic_batch_size=1,2" in arguments
    config.write_text(RGB_AIPP.replace("}", " crop: true\n load_start_pos_w: 4\n crop_size_w: 16\n crop_size_h: 16\n}"))
    with pytest.raises(
        ConfigError, match="the AIPP of input 'image': the crop 16x16 at \\(4,0\\) leaves the 16x16 image"
    ):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), insert_op_conf=config))
    config.write_text(RGB_AIPP.replace("}", " related_input_rank: 1\n}"))
    with pytest.raises(ConfigError, match="related_input_rank 1, but the model has 1 input\\(s\\) \\(image\\)"):
        atc_command(AtcRequest(classifier, "Ascend310P3", batch_gears=(1, 2), insert_op_conf=config))
