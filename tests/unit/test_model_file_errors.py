"""A model file that is missing, or a folder where the file should be, fails the load saying which."""

from __future__ import annotations

import pytest

from ge_python_backend.testing import ModelHarness
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel
from tests.support import repos


class TritonPythonModel(GEModel):
    pass


@pytest.mark.parametrize(
    "make, problem", [(lambda path: None, "does not exist"), (lambda path: path.mkdir(), "is a directory, not a file")]
)
def test_the_load_error_says_what_is_wrong_with_the_model_file(tmp_path, onnx_dir, make, problem):
    folder = repos.generated(tmp_path, onnx_dir / "linear.onnx", "linear")
    model_file = folder / "1" / "model.onnx"
    model_file.unlink()
    make(model_file)
    with pytest.raises(pb.TritonModelException) as failure:
        ModelHarness(TritonPythonModel, folder).__enter__()
    assert f"model file {model_file} {problem} (parameter model_file, engine onnxruntime)" in str(failure.value)
