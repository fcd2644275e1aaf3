"""ge-triton install-backend: writes backends/ge/model.py, which serves a backend "ge" folder."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.cli import main
from ge_python_backend.ops import server
from ge_python_backend.repository.ge_backend import BACKEND_SOURCES
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

pb_utils = install_fake_pb_utils()


def test_installs_into_the_given_folder_and_serves_a_ge_folder(tmp_path, onnx_dir, capsys):
    backends = tmp_path / "backends"
    (backends / "python").mkdir(parents=True)
    (backends / "python" / "libtriton_python.so").write_bytes(b"")
    (backends / "python" / "triton_python_backend_stub").write_bytes(b"")
    assert main(["install-backend", "--backend-dir", str(backends)]) == 0
    assert capsys.readouterr().out == f"installed backend 'ge': {backends / 'ge' / 'model.py'}\n"

    folder = generate(
        onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="plain", backend="ge")
    ).model_dir
    assert not (folder / "1" / "model.py").exists()
    spec = importlib.util.spec_from_file_location("ge_backend_model", backends / "ge" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with ModelHarness(module.TritonPythonModel, folder) as model:
        (response,) = model.infer([pb_utils.InferenceRequest([pb_utils.Tensor("x", x)])])
    outputs = {t.name(): t.as_numpy() for t in response.output_tensors()}
    logits, probs = ort.InferenceSession(str(onnx_dir / "linear.onnx")).run(None, {"x": x})
    np.testing.assert_allclose(outputs["logits"], logits, atol=1e-6)
    np.testing.assert_allclose(outputs["probs"], probs, atol=1e-6)


def test_default_folder_is_the_found_tritonserver_s(tmp_path, monkeypatch, capsys):
    backends = tmp_path / "tree" / "backends"
    backends.mkdir(parents=True)
    install = server.TritonInstall(tmp_path / "tree" / "bin" / "tritonserver", backends, None)
    monkeypatch.setattr("ge_python_backend.cli.install_backend.find_tritonserver", lambda: install)
    assert main(["install-backend"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"installed backend 'ge': {backends / 'ge' / 'model.py'}"
    assert lines[1].startswith(f"note: {backends / 'python'}/libtriton_python.so is missing")
    assert (backends / "ge" / "model.py").read_text() == BACKEND_SOURCES["ge"]


@pytest.mark.parametrize("make", ["missing", "file"])
def test_a_backends_folder_that_is_not_one_is_a_one_line_error(tmp_path, capsys, make):
    target = tmp_path / "backends"
    if make == "file":
        target.write_text("")
    assert main(["install-backend", "--backend-dir", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"ge-triton install-backend: error: backends folder {target} is not a folder "
        "(give the --backend-directory of a tritonserver)\n"
    )


def test_help_says_serve_installs_it_itself(capsys):
    with pytest.raises(SystemExit):
        main(["install-backend", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "`ge-triton serve` needs none of this: it prepares its own backend folder" in text
    assert "inside the nvidia-pytriton wheel (in site-packages)" in text
