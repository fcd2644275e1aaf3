"""Generate and check against tritonserver 2.51's load rules, offline: what generate
refuses and what check reports, each with the server's own reason.

That the server refuses (or takes) the same configs is proven by loading them in a real
tritonserver: tests/e2e/test_config_rules.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.cli import main
from ge_python_backend.ops.server import ServerError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.repository.versions import MAX_VERSION, FolderKind, read_version_folder
from ge_python_backend.testing import models
from tests.unit.test_generate_cli import one_line_error

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    "name, kind, version",
    [
        ("1", FolderKind.VERSION, 1),
        ("0", FolderKind.VERSION, 0),
        (str(MAX_VERSION), FolderKind.VERSION, MAX_VERSION),
        ("01", FolderKind.IGNORED, None),
        ("v1", FolderKind.IGNORED, None),
        ("warmup", FolderKind.IGNORED, None),
        ("7abc", FolderKind.MISREAD, 7),
        ("1.5", FolderKind.MISREAD, 1),
        (HUGE, FolderKind.FATAL, None),
        (str(MAX_VERSION + 1), FolderKind.FATAL, None),
    ],
)
def test_version_folders_are_read_like_stoll(name, kind, version):
    found = read_version_folder(name)
    assert (found.kind, found.version) == (kind, version)


def test_a_version_beyond_int64_is_refused_by_generate(tmp_path, capsys, onnx_dir):
    """Finding: --version 99999999999999999999 passed generate and check; tritonserver aborted."""
    assert main(["generate", str(onnx_dir / "linear.onnx"), "-o", str(tmp_path / "repo"), "--version", HUGE]) == 2
    assert f"--version {HUGE} is beyond int64" in one_line_error(capsys, "generate")
    assert not (tmp_path / "repo").exists()


def test_check_reports_version_folders_the_server_aborts_on_or_misreads(tmp_path, onnx_dir):
    folder = generate(onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="m")).model_dir
    (folder / "1").rename(folder / HUGE)
    (folder / "7abc").mkdir()
    (folder / "01").mkdir()
    report = check_repository(tmp_path / "repo", backends=tmp_path)
    messages = {p.path.name: (p.severity, p.fatal, p.message) for p in report.problems}
    assert messages[HUGE][:2] == ("error", True) and "tritonserver 2.51 aborts on it" in messages[HUGE][2]
    assert messages["7abc"][:2] == ("error", True) and "Triton reads it as version 7" in messages["7abc"][2]
    assert messages["01"][0] == "warning" and "leading zero" in messages["01"][2]
    assert report.fatal_models() == ("m",)


@pytest.mark.parametrize(
    "policy, message",
    [
        ("latest:0", "expected latest:N (N >= 1)"),
        (f"specific:{HUGE}", "versions 1..9223372036854775807"),
        ("specific:1,3", "--version-policy names version 3, which has no folder"),
    ],
)
def test_version_policies_the_server_cannot_serve_are_refused(tmp_path, capsys, onnx_dir, policy, message):
    assert main(["generate", str(onnx_dir / "linear.onnx"), "-o", str(tmp_path / "r"), "--version-policy", policy]) == 2
    assert message in one_line_error(capsys, "generate")


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.fixture
def linear_folder(tmp_path, onnx_dir):
    return generate(onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="m", warmup=True)).model_dir


SERVER_RULES = [
    ("dims: 4", "dims: 0", "model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size"),
    ("  dims: 4\n", "", "model input 'x' must specify 'dims'"),
    ("data_type: TYPE_FP32", "", "model input 'x' must specify 'data_type'"),
    ('name: "x"', 'name: ""', "model input must specify 'name'"),
    ("max_queue_delay_microseconds", "preferred_batch_size: 16\n  max_queue_delay_microseconds", "outside 1..max"),
    ("dims: 4\n      zero_data", "dims: -1\n      zero_data", "warmup setting expects all variable-size dimensions"),
]


@pytest.mark.parametrize("old, new, message", SERVER_RULES)
def test_check_reports_what_the_server_refuses(linear_folder, tmp_path, old, new, message):
    _edit(linear_folder / "config.pbtxt", old, new)
    errors = check_repository(linear_folder.parent, backends=tmp_path).errors
    assert any(message in e.message for e in errors), "\n".join(map(str, errors))


def test_check_reports_an_empty_reshape_without_batching(tmp_path, onnx_dir):
    folder = generate(
        onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="m", max_batch_size=0)
    ).model_dir
    _edit(folder / "config.pbtxt", "  dims: -1\n  dims: 4\n", "  dims: 1\n  reshape {\n  }\n")
    errors = check_repository(folder.parent, backends=tmp_path).errors
    assert any("cannot have empty reshape for non-batching model as scalar tensors" in e.message for e in errors)


def test_check_on_a_model_py_with_a_syntax_error_only_reports_it(linear_folder, tmp_path):
    """Finding: check on a model.py with a syntax error also warned it "does not use ge_python_backend"."""
    (linear_folder / "1" / "model.py").write_text(
        "from ge_python_backend import GEModel\nclass TritonPythonModel(GEModel)\n"
    )
    report = check_repository(linear_folder.parent, backends=tmp_path)
    assert [p.message for p in report.problems] == ["line 2: SyntaxError: expected ':'"]


def test_generate_prints_no_onnxruntime_warnings(tmp_path, capfd):
    """Finding: ORT's initializer warnings were printed raw on generate's stderr."""
    unused = numpy_helper.from_array(np.ones((4, 4), np.float32), "unused")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [unused],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    import onnxruntime as ort

    ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert "unused" in capfd.readouterr().err  # ONNX Runtime itself warns about this file
    assert main(["generate", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "repo")]) == 0
    assert capfd.readouterr().err == ""


def test_check_load_without_a_tritonserver_is_one_line(tmp_path, capsys, monkeypatch, onnx_dir):
    generate(onnx_dir / "linear.onnx", tmp_path / "repo", GenerateOptions(name="m"))

    def missing():
        raise ServerError("no tritonserver on PATH and nvidia-pytriton is not installed: pip install x")

    monkeypatch.setattr("ge_python_backend.cli.check.find_tritonserver", missing)
    assert main(["check", str(tmp_path / "repo"), "--load"]) == 2
    assert "no tritonserver on PATH" in one_line_error(capsys, "check")
    assert capsys.readouterr().out == ""


def test_a_generated_model_checks_clean_before_it_is_written(tmp_path, onnx_dir):
    """generate stages the folder and checks it; what it writes checks clean."""
    generate(models.linear(tmp_path / "a.onnx"), tmp_path / "repo", GenerateOptions(name="a"))
    assert check_repository(tmp_path / "repo", backends=tmp_path).problems == ()


def test_warmup_of_a_stateful_model_is_refused(tmp_path, capsys, onnx_dir):
    """Found by loading it: Triton's warm-up sample has no correlation ID, so the load fails."""
    argv = ["generate", str(onnx_dir / "linear.onnx"), "-o", str(tmp_path / "r"), "--sequence", "--warmup"]
    assert main(argv) == 2
    assert "--warmup with --sequence: Triton's warm-up requests carry no sequence correlation ID" in one_line_error(
        capsys, "generate"
    )
