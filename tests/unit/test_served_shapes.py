"""GEModel on the shapes and types the adversarial findings named, in process (ModelHarness).

Each model folder comes from ``generate``; answers are compared with ONNX Runtime run directly
on the source ONNX file. Tensors are passed as Triton hands them to the model (after a config
``reshape``); the same models through a real tritonserver: tests/e2e/test_model_corpus.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend import GEModel
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import format_config, read_config_file
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
from tests.support import corpus

pb_utils = install_fake_pb_utils()


class Model(GEModel):
    pass


def request(**arrays):
    return pb_utils.InferenceRequest([pb_utils.Tensor(name, array) for name, array in arrays.items()])


def outputs(response):
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def served(tmp_path, case_name, sim=None, **options):
    onnx_file = corpus.case(case_name).build(tmp_path / f"{case_name}.onnx")
    model_file = onnx_file
    if sim is not None:
        model_file = tmp_path / f"{case_name}.om"
        sim_compile(onnx_file, model_file, **sim)
    folder = generate(model_file, tmp_path / "repo", GenerateOptions(name=case_name, **options)).model_dir
    return folder, onnx_file


def test_om_output_batched_on_axis_1_never_mixes_requests(tmp_path):
    """Finding: x [N,4] -> Transpose -> y [4,N] as a simulated .om with gears 1,2,4 was served
    with max_batch_size 4: a 3-row request lost a row, a 1-row request failed, concurrent
    requests got each other's values. Now each request runs alone, padded to a gear, and y is
    sliced on its real batch axis."""
    folder, onnx_file = served(tmp_path, "transposed", sim={"batch_gears": (1, 2, 4)})
    assert read_config_file(folder / "config.pbtxt").max_batch_size == 0
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (3, 1, 2, 2, 2, 2, 6, 4)]
    with ModelHarness(Model, folder) as model:
        responses = model.infer([request(x=x) for x in arrays])
    for x, response in zip(arrays, responses):
        np.testing.assert_array_equal(outputs(response)["y"], corpus.reference(onnx_file, {"x": x})["y"])


def test_a_batching_config_for_an_output_batched_on_axis_1_fails_the_load(tmp_path):
    """The config main's generate wrote for it: max_batch_size 4, x dims [4], y dims [-1]."""
    folder, _ = served(tmp_path, "transposed", sim={"batch_gears": (1, 2, 4)})
    config = read_config_file(folder / "config.pbtxt")
    config.max_batch_size = 4
    for entry, dims in ((config.input[0], [4]), (config.output[0], [-1])):
        del entry.dims[:]
        entry.dims.extend(dims)
    (folder / "config.pbtxt").write_text(format_config(config))
    message = "output 'y' keeps the batch on axis 1 \\(\\[4,-1\\]\\)"
    with pytest.raises(pb_utils.TritonModelException, match=message), ModelHarness(Model, folder):
        pass
    errors = check_repository(folder.parent, backends=tmp_path).errors
    assert any("output 'y' keeps the batch on axis 1 ([4,-1])" in e.message for e in errors)


def test_om_scalar_output_serves_exact_gears_and_refuses_others_alone(tmp_path):
    """Finding: a simulated .om with a scalar output and gears failed every request ("expected batch axis 4")."""
    folder, onnx_file = served(tmp_path, "scalar_sum", sim={"batch_gears": (1, 2, 4)})
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (1, 2, 3, 4)]
    with ModelHarness(Model, folder) as model:
        responses = model.infer([request(x=x) for x in arrays])
    for index in (0, 1, 3):
        expected = corpus.reference(onnx_file, {"x": arrays[index]})["total"]
        np.testing.assert_allclose(outputs(responses[index])["total"], expected, rtol=1e-6)
    error = responses[2].error()
    assert error.code() == pb_utils.TritonError.INVALID_ARG
    assert "the request has 3 row(s), but the model runs batches of 1, 2, 4 row(s)" in error.message()


def test_rank0_tensors_travel_as_1(tmp_path):
    folder, onnx_file = served(tmp_path, "rank0")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gain = np.array([2.5], np.float32)
    with ModelHarness(Model, folder) as model:
        (response,) = model.infer([request(x=x, s=gain)])
    got, expected = outputs(response), corpus.reference(onnx_file, {"x": x, "s": gain})
    assert got["t"].shape == (1,)
    for name in ("y", "t"):
        np.testing.assert_allclose(got[name], expected[name])


def test_onnxruntime_strings_keep_their_bytes(tmp_path):
    """Finding: b'ab\\xc3\\xa9' through an Identity came back as b"b'ab\\\\xc3\\\\xa9'"."""
    folder, _ = served(tmp_path, "strings")
    words = np.array([[b"ab\xc3\xa9"], [b""], ["日本".encode()]], np.object_)  # dims [1] (reshape [])
    with ModelHarness(Model, folder) as model:
        good, bad = model.infer([request(x=words), request(x=np.array([[b"\xff"]], np.object_))])
    assert outputs(good)["y"].tolist() == words.tolist()
    assert bad.error().code() == pb_utils.TritonError.INVALID_ARG
    assert "input 'x' element 0 is not UTF-8 text (byte 0xff at offset 0)" in bad.error().message()


def test_a_model_without_inputs_answers(tmp_path):
    """Finding: every request failed with "preprocess failed: StopIteration"."""
    folder, onnx_file = served(tmp_path, "no_inputs")
    with ModelHarness(Model, folder) as model:
        responses = model.infer([request(), request()])
    for response in responses:
        np.testing.assert_array_equal(outputs(response)["y"], corpus.reference(onnx_file, {})["y"])


def test_inputs_with_different_batch_names_run_as_declared(tmp_path):
    """Finding: a [N,2] and b [M,2] were batched together and failed with "expected batch axis 1"."""
    folder, onnx_file = served(tmp_path, "two_batch_names")
    a, b = np.ones((1, 2), np.float32), np.arange(6, dtype=np.float32).reshape(3, 2)
    with ModelHarness(Model, folder) as model:
        (response,) = model.infer([request(a=a, b=b)])
    np.testing.assert_array_equal(outputs(response)["c"], corpus.reference(onnx_file, {"a": a, "b": b})["c"])


def test_open_rank_tensors_take_the_configs_rank(tmp_path):
    folder, onnx_file = served(tmp_path, "open_rank", shapes={"x": (-1, 3), "y": (-1, 3)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ModelHarness(Model, folder) as model:
        (response,) = model.infer([request(x=x)])
    np.testing.assert_array_equal(outputs(response)["y"], corpus.reference(onnx_file, {"x": x})["y"])


def test_an_om_scalar_input_names_itself_and_the_flag(tmp_path):
    """Finding: a simulated .om with a scalar input and no --unbatched-inputs failed to load with
    "IndexError: list assignment index out of range". Now generate (and GEModel, for a config
    without the parameter) name the input and the flag; with it, the model serves."""
    onnx_file = corpus.rank0(tmp_path / "rank0.onnx")
    sim_compile(onnx_file, tmp_path / "rank0.om", batch_gears=(1, 2))
    message = r"input 's' is a scalar \(rank 0\), but the model batches its other inputs .* --unbatched-inputs s"
    with pytest.raises(ConfigError, match=message):
        generate(tmp_path / "rank0.om", tmp_path / "repo", GenerateOptions(name="r"))
    folder = generate(
        tmp_path / "rank0.om", tmp_path / "repo", GenerateOptions(name="r", unbatched_inputs=("s",))
    ).model_dir
    x, gain = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5], np.float32)
    with ModelHarness(Model, folder) as model:
        (response,) = model.infer([request(x=x, s=gain)])
    got, expected = outputs(response), corpus.reference(onnx_file, {"x": x, "s": gain})
    for name in ("y", "t"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6)
    config = read_config_file(folder / "config.pbtxt")
    del config.parameters["unbatched_inputs"]
    (folder / "config.pbtxt").write_text(format_config(config))
    with pytest.raises(pb_utils.TritonModelException, match="parameter unbatched_inputs"), ModelHarness(Model, folder):
        pass
