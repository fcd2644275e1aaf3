"""modelconfig.derive: the config a model needs, never one tritonserver 2.51 refuses at load.

The expected entries follow the server's rules (CORE r24.10 model_config_utils.cc): dims are
never empty, an empty reshape only with batching, dims >= 1 or -1, a data type always set. That
the server accepts what the derivation writes is proven by loading it, in tests/e2e/test_config_rules.py
and tests/e2e/test_model_corpus.py.
"""

from __future__ import annotations

import pytest

from ge_python_backend.errors import ConfigError
from ge_python_backend.modelconfig.derive import ConfigChoices, ConfigTensor, derive_config
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.sequences import parse_state_pairs
from ge_python_backend.sim import sim_compile
from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec
from tests.support import corpus


def onnx_spec(tmp_path, case_name):
    from ge_python_backend.engines.onnxruntime import read_onnx_spec

    return read_onnx_spec(corpus.case(case_name).build(tmp_path / f"{case_name}.onnx"))


def test_rank0_tensors_of_a_model_without_batching_are_dims_1_without_reshape(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "rank0"), ConfigChoices())
    assert derived.max_batch_size == 0
    assert derived.inputs == (ConfigTensor("x", "TYPE_FP32", (-1, 3)), ConfigTensor("s", "TYPE_FP32", (1,)))
    assert derived.outputs == (ConfigTensor("y", "TYPE_FP32", (-1, 3)), ConfigTensor("t", "TYPE_FP32", (1,)))
    assert any("--unbatched-inputs s lets the other inputs batch" in note for note in derived.notes)


def test_an_unbatched_scalar_of_a_batching_model_keeps_its_empty_reshape(tmp_path):
    spec = onnx_spec(tmp_path, "rank0")
    scalar_sum_free = ModelSpec(spec.inputs, spec.outputs[:1], BatchSupport("none"))
    derived = derive_config(scalar_sum_free, ConfigChoices(layout=Layout.of(("s",))))
    assert derived.max_batch_size == 8
    assert derived.inputs[1] == ConfigTensor("s", "TYPE_FP32", (1,), ())
    assert derived.inputs[1].as_dict() == {"name": "s", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}}


def test_a_rank1_batched_tensor_is_dims_1_with_an_empty_reshape(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "strings"), ConfigChoices())
    assert derived.inputs == (ConfigTensor("x", "TYPE_STRING", (1,), ()),)
    assert derived.outputs == (ConfigTensor("y", "TYPE_STRING", (1,), ()),)


def test_silero_vad_is_derived_without_flags_and_hints_at_the_flags_that_batch_it(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "silero_vad"), ConfigChoices())
    assert derived.max_batch_size == 0
    assert [(t.name, t.dims, t.reshape) for t in derived.inputs] == [
        ("input", (-1, -1), None),
        ("state", (2, -1, 128), None),
        ("sr", (1,), None),
    ]
    assert [(t.name, t.data_type) for t in derived.inputs][2] == ("sr", "TYPE_INT64")
    notes = " ".join(derived.notes)
    assert "--unbatched-inputs sr" in notes and "--state-batch-axis 1" in notes


def test_silero_vad_with_its_state_flags_batches(tmp_path):
    states = parse_state_pairs("state=stateN")
    request = ConfigChoices(layout=Layout.of(("sr",), states, 1), states=frozenset({"state", "stateN"}))
    derived = derive_config(onnx_spec(tmp_path, "silero_vad"), request)
    assert derived.max_batch_size == 8
    assert [(t.name, t.dims, t.reshape) for t in derived.inputs] == [("input", (-1,), None), ("sr", (1,), ())]


def test_a_zero_size_output_axis_becomes_minus_1_and_an_input_one_is_refused(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "zero_axis"), ConfigChoices())
    assert derived.outputs[0] == ConfigTensor("y", "TYPE_FP32", (-1,))
    assert any("zero-size axis" in note for note in derived.notes)
    spec = ModelSpec((TensorSpec("x", "FP32", (-1, 0)),), (TensorSpec("y", "FP32", (-1, 2)),), BatchSupport("dynamic"))
    with pytest.raises(ConfigError, match=r"input 'x' \[-1,0\] has a zero-size axis"):
        derive_config(spec, ConfigChoices())


def test_a_tensor_of_open_rank_needs_dims(tmp_path):
    with pytest.raises(ConfigError, match=r"input 'x' has no rank in the model file .* --shape x:-1,-1"):
        derive_config(onnx_spec(tmp_path, "open_rank"), ConfigChoices())


def test_bf16_and_typeless_tensors_are_refused():
    for tensor in (TensorSpec("x", "BF16", (-1, 2)), TensorSpec("x", "", (-1, 2), native_type="tensor(complex64)")):
        spec = ModelSpec((tensor,), (TensorSpec("y", "FP32", (-1, 2)),), BatchSupport("dynamic"))
        with pytest.raises(ConfigError, match="input 'x' has type .* cannot carry as a numpy array"):
            derive_config(spec, ConfigChoices())


def test_inputs_naming_their_batch_axes_differently_do_not_batch(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "two_batch_names"), ConfigChoices())
    assert derived.max_batch_size == 0
    assert [t.dims for t in derived.inputs] == [(-1, 2), (-1, 2)]


def test_a_model_without_inputs_does_not_batch(tmp_path):
    derived = derive_config(onnx_spec(tmp_path, "no_inputs"), ConfigChoices())
    assert (derived.max_batch_size, derived.inputs, derived.outputs) == (0, (), (ConfigTensor("y", "TYPE_FP32", (3,)),))


def test_an_om_output_batched_on_axis_1_is_served_without_batching(tmp_path):
    """Finding: a simulated .om with y [4,N] got max_batch_size 4 and output dims [-1]."""
    onnx_file = corpus.transposed(tmp_path / "t.onnx")
    spec = sim_compile(onnx_file, tmp_path / "t.om", batch_gears=(1, 2, 4))
    assert spec.output("y").shape == (4, -1)  # what the reader gives: the gear varies axis 1
    derived = derive_config(spec, ConfigChoices())
    assert derived.max_batch_size == 0
    assert (derived.inputs[0].dims, derived.outputs[0].dims) == ((-1, 4), (4, -1))
    assert "keeps the batch on axis 1" in derived.notes[0]
    with pytest.raises(ConfigError, match="--max-batch-size 4 conflicts with the model: output 'y' .* axis 1"):
        derive_config(spec, ConfigChoices(max_batch_size=4))


def test_an_om_scalar_output_is_served_without_batching_on_exact_gears(tmp_path):
    """Finding: a simulated .om with a scalar output and gears failed every request."""
    spec = sim_compile(corpus.scalar_sum(tmp_path / "s.onnx"), tmp_path / "s.om", batch_gears=(1, 2, 4))
    derived = derive_config(spec, ConfigChoices())
    assert derived.max_batch_size == 0
    assert derived.outputs == (ConfigTensor("total", "TYPE_FP32", (1,)),)
    assert "does not carry the batch" in derived.notes[0]
    assert "must hold exactly 1, 2, 4 row(s)" in derived.notes[1]


def test_an_output_varying_on_two_axes_with_the_gear_is_refused():
    spec = ModelSpec(
        (TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (4, -1, -1)),), BatchSupport("gears", (1, 2))
    )
    with pytest.raises(ConfigError, match="output 'y' \\[4,-1,-1\\]: axes 1, 2 all change with the batch gear"):
        derive_config(spec, ConfigChoices())
