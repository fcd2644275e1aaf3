"""Shape ranges (``a~b`` in ``--input_shape``) in the one ATC builder: compile at load's
``atc_flags`` and ``atc-cmd`` pass them to ATC, the compiled description (``compiled_spec``) says
what the simulator's ATC then builds, and what ATC refuses beside ranges (gears, E10040) is refused."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

from ge_python_backend.ascend.atc import ConfigFacts
from ge_python_backend.engines.compile import compiled_model_spec, offline_command
from ge_python_backend.engines.offline import read_model_spec
from ge_python_backend.engines.registry import detect_format, engine_info
from ge_python_backend.errors import ConfigError
from ge_python_backend.sim.atc import compile_with

SIM = engine_info("acl-sim")


def image_model(path: Path) -> Path:
    """``y = relu(x)`` over x FP32 [n, 3, h, w] with n, h and w open."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "image", [x], [y])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def flags_of(source: Path, max_batch_size: int, atc_flags: str) -> list[str]:
    facts = ConfigFacts("the config", max_batch_size)
    command = offline_command(SIM, source, facts, {"atc_flags": atc_flags}, source.parent)
    return shlex.split(command.shell())


@pytest.mark.parametrize(
    ("max_batch_size", "shape", "batch"),
    [(0, "x:1,3,32~960,32~960", ("none", None)), (8, "x:1~8,3,32~64,32~", ("dynamic", 8))],
)
def test_ranges_reach_atc_and_the_description_is_what_atc_builds(tmp_path, max_batch_size, shape, batch):
    source = image_model(tmp_path / "image.onnx")
    flags = flags_of(source, max_batch_size, f"--input_shape={shape}")
    assert f"--input_shape={shape}" in flags
    assert not [f for f in flags if f.startswith(("--dynamic_batch_size", "--dynamic_dims"))]
    described = compiled_model_spec(
        source, ConfigFacts("the config", max_batch_size), {"atc_flags": f"--input_shape={shape}"}, tmp_path
    )
    built = compile_with(
        {
            "model": str(source),
            "output": str(tmp_path / "model"),
            "framework": "5",
            "soc_version": "Ascend310P3",
            "input_shape": shape,
        }
    )
    compiled = read_model_spec(built, detect_format(built))
    assert [(t.name, t.shape, t.ranges) for t in described.inputs] == [
        (t.name, t.shape, t.ranges) for t in compiled.inputs
    ]
    assert (described.batch.kind, described.batch.limit) == (compiled.batch.kind, compiled.batch.limit) == batch


@pytest.mark.parametrize(
    ("max_batch_size", "atc_flags", "message"),
    [
        (
            0,
            "--input_shape=x:1,3,32~64,-1 --dynamic_dims=32;64",
            "parameter 'atc_flags': --input_shape has shape ranges (a~b) and --dynamic_dims gives gears: ATC refuses "
            "ranges together with --dynamic_batch_size, --dynamic_image_size or --dynamic_dims (E10040)",
        ),
        (
            8,
            "--input_shape=x:1~4,3,32~64,32~64",
            "the config: max_batch_size 8 batches requests along axis 0, but the shape ranges of --input_shape in "
            "parameter 'atc_flags' give axis 0 x [1~4]",
        ),
        (0, "--input_shape=x:1,2~4,32~64,32~64", "the range 2~4 on axis 1, which the model fixes at 3"),
    ],
)
def test_what_atc_refuses_beside_ranges_is_refused_in_the_builder_and_the_description(
    tmp_path, max_batch_size, atc_flags, message
):
    source = image_model(tmp_path / "image.onnx")
    with pytest.raises(ConfigError) as built:
        flags_of(source, max_batch_size, atc_flags)
    with pytest.raises(ConfigError) as described:
        compiled_model_spec(source, ConfigFacts("the config", max_batch_size), {"atc_flags": atc_flags}, tmp_path)
    assert message in str(built.value)
    assert str(built.value) == str(described.value)
