"""ge-triton check: a good repository passes; each seeded mistake is found with one clear message."""

from __future__ import annotations

import shutil
import sys
import tempfile

import pytest

from ge_python_backend.cli import main
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim.compile import sim_compile
from tests.support.samples import OM_SAMPLES, OM_SAMPLES_DIR


@pytest.fixture(scope="module")
def good_repo(tmp_path_factory, onnx_dir):
    """linear (ONNX, dynamic batch), pair (max_batch_size 0), gears (simulated OM 1,2,4,8),
    clf (classification template)."""
    from ge_python_backend.testing import models

    root = tmp_path_factory.mktemp("check")
    repo = root / "repo"
    generate(onnx_dir / "linear.onnx", repo, GenerateOptions(name="linear"))
    generate(onnx_dir / "two_inputs.onnx", repo, GenerateOptions(name="pair", max_batch_size=0))
    sim_compile(onnx_dir / "linear.onnx", root / "gears.om", batch_gears="1,2,4,8")
    generate(root / "gears.om", repo, GenerateOptions(name="gears"))
    labels = root / "labels.txt"
    labels.write_text("".join(f"c{i}\n" for i in range(10)))
    clf = models.image_classifier(root / "clf.onnx", size=8, channels=(4,), classes=10)
    generate(
        clf, repo, GenerateOptions(name="clf", template="classification", template_options={"labels": str(labels)})
    )
    return repo


@pytest.fixture
def repo(good_repo, tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(good_repo, copy)
    return copy


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def only_error(repo, backends=None):
    report = check_repository(repo, backends)
    assert len(report.errors) == 1, "\n".join(map(str, report.problems))
    return report.errors[0]


def test_the_good_repository_has_no_problems(repo, tmp_path):
    report = check_repository(repo, tmp_path)
    assert report.models == ("clf", "gears", "linear", "pair")
    assert report.problems == ()


SEEDED = [
    (
        "linear/config.pbtxt",
        'name: "linear"',
        'name: "linear"\nbogus_field: 1',
        "linear/config.pbtxt",
        'has no field named "bogus_field"',
    ),
    (
        "linear/config.pbtxt",
        'name: "linear"',
        'name: "linear"\nmodel_metrics { }',
        "linear/config.pbtxt",
        "field 'model_metrics' is not known to tritonserver 2.51",
    ),
    (
        "linear/config.pbtxt",
        'name: "linear"',
        'name: "linear2"',
        "linear/config.pbtxt",
        "name 'linear2' differs from the folder name 'linear'",
    ),
    (
        "linear/config.pbtxt",
        "dims: 4",
        "dims: 5",
        "linear/config.pbtxt",
        "input 'x': config dims [5] do not match the model's [4] (batch axis removed) (model file 1/model.onnx)",
    ),
    (
        "linear/config.pbtxt",
        "data_type: TYPE_FP32\n  dims: 3",
        "data_type: TYPE_FP16\n  dims: 3",
        "linear/config.pbtxt",
        "output 'logits': the config says FP16, the model has FP32",
    ),
    (
        "gears/config.pbtxt",
        "max_batch_size: 8",
        "max_batch_size: 16",
        "gears/config.pbtxt",
        "max_batch_size 16 is above the largest batch gear 8 of 1/model.om (gears 1, 2, 4, 8)",
    ),
    (
        "gears/config.pbtxt",
        "preferred_batch_size: 4",
        "preferred_batch_size: 3",
        "gears/config.pbtxt",
        "preferred_batch_size 3 is not a batch gear of 1/model.om (gears 1, 2, 4, 8)",
    ),
    (
        "gears/config.pbtxt",
        "kind: KIND_CPU",
        "kind: KIND_GPU",
        "gears/config.pbtxt",
        "asks for GPUs (KIND_GPU/gpus), but engine acl-sim runs on an NPU",
    ),
    (
        "linear/config.pbtxt",
        'key: "streams"',
        'key: "colour"',
        "linear/config.pbtxt",
        "unknown parameter 'colour' (value '1'); GEModel refuses it. Accepted: ",
    ),
    (
        "linear/config.pbtxt",
        'string_value: "1"',
        'string_value: "many"',
        "linear/config.pbtxt",
        "parameter 'streams' has value 'many' (invalid literal for int() with base 10: 'many'); accepted: an integer",
    ),
    (
        "linear/config.pbtxt",
        'string_value: "onnxruntime"',
        'string_value: "acl-sim" } } parameters { key: "model_file" value { string_value: "model.om"',
        "linear/1/model.om",
        "missing: engine acl-sim loads it",
    ),
    (
        "gears/config.pbtxt",
        'string_value: "acl-sim"',
        'string_value: "acl"',
        "gears/1/model.om",
        "is a simulated .om (engine acl-sim), but parameter engine is 'acl', which runs a CANN .om",
    ),
    (
        "linear/config.pbtxt",
        'name: "linear"',
        'name: "linear"\nversion_policy { specific { versions: [1, 2] } }',
        "linear/config.pbtxt",
        "version_policy asks for version 2, which has no folder",
    ),
    (
        "linear/config.pbtxt",
        'key: "device_ids"',
        'key: "device_id"\n  value { string_value: "1" }\n}\nparameters {\n  key: "device_ids"',
        "linear/config.pbtxt",
        "parameters 'device_id' and 'device_ids' are both set",
    ),
    (
        "clf/config.pbtxt",
        'string_value: "5"',
        'string_value: "five"',
        "clf/config.pbtxt",
        "parameter 'top_k' has value 'five'",
    ),
]


@pytest.mark.parametrize("file, old, new, where, message", SEEDED)
def test_seeded_config_mistakes(repo, tmp_path, file, old, new, where, message):
    edit(repo / file, old, new)
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / where
    assert message in problem.message


def test_dynamic_batching_without_batching_is_a_warning(repo, tmp_path):
    """tritonserver 2.51 loads it (tests/e2e/test_config_rules.py), so it is no error."""
    edit(repo / "pair" / "config.pbtxt", "instance_group", "dynamic_batching { }\ninstance_group")
    report = check_repository(repo, tmp_path)
    assert report.errors == ()
    assert [p.message for p in report.warnings] == [
        "dynamic_batching has no effect with max_batch_size 0 (tritonserver loads it, requests run alone): "
        "remove dynamic_batching or set max_batch_size"
    ]


def test_missing_model_py(repo, tmp_path):
    (repo / "linear" / "1" / "model.py").unlink()
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / "linear" / "1" / "model.py"
    assert 'missing: backend "python" loads it' in problem.message


def test_missing_model_file(repo, tmp_path):
    (repo / "linear" / "1" / "model.onnx").unlink()
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / "linear" / "1" / "model.onnx"
    assert "missing: engine onnxruntime loads it" in problem.message


def test_missing_model_file_with_engine_auto(repo, tmp_path):
    edit(repo / "linear" / "config.pbtxt", 'string_value: "onnxruntime"', 'string_value: "auto"')
    assert check_repository(repo, tmp_path).problems == ()
    (repo / "linear" / "1" / "model.onnx").unlink()
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / "linear" / "1"
    assert "engine auto finds no model file here (looked for model.om or model.onnx)" in problem.message


def test_corrupt_model_file(repo, tmp_path):
    (repo / "gears" / "1" / "model.om").write_bytes(b"IMOD" + b"\x00" * 60)
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / "gears" / "1" / "model.om"
    assert problem.message == "starts with b'IMOD' but is only 64 bytes, shorter than the 256-byte OM header"


def test_non_numeric_version_folder(repo, tmp_path):
    (repo / "linear" / "1").rename(repo / "linear" / "v1")
    report = check_repository(repo, tmp_path)
    assert [str(p.path.relative_to(repo)) for p in report.errors] == ["linear"]
    assert "no version folder: put the model in a numeric folder such as 1/" in report.errors[0].message
    assert [p.message for p in report.warnings] == [
        "not a version folder (version folders are numeric); Triton ignores it"
    ]


def test_model_py_syntax_error(repo, tmp_path):
    (repo / "linear" / "1" / "model.py").write_text("class TritonPythonModel(GEModel)\n    pass\n")
    problem = only_error(repo, tmp_path)
    assert problem.path == repo / "linear" / "1" / "model.py"
    assert problem.message.startswith("line 1: SyntaxError")


def test_hooks_turn_the_io_check_off(repo, tmp_path):
    edit(repo / "linear" / "config.pbtxt", "dims: 4", "dims: 5")
    (repo / "linear" / "1" / "model.py").write_text(
        "from ge_python_backend import GEModel\n\n"
        "class TritonPythonModel(GEModel):\n"
        "    def preprocess(self, inputs, request):\n"
        "        return {'x': inputs['x'][:, :4]}\n"
    )
    assert check_repository(repo, tmp_path).problems == ()


def test_extra_parameters_declared_literally_are_known(repo, tmp_path):
    edit(repo / "linear" / "config.pbtxt", 'key: "streams"', 'key: "colour"')
    (repo / "linear" / "1" / "model.py").write_text(
        "from ge_python_backend import GEModel\nfrom ge_python_backend.params import Parameter\n\n"
        "class TritonPythonModel(GEModel):\n"
        "    extra_parameters = (Parameter('colour', str, 'red', 'a colour', ''),)\n"
    )
    assert check_repository(repo, tmp_path).problems == ()


def test_unreadable_extra_parameters_make_unknown_ones_warnings(repo, tmp_path):
    edit(repo / "linear" / "config.pbtxt", 'key: "streams"', 'key: "colour"')
    (repo / "linear" / "1" / "model.py").write_text(
        "from ge_python_backend import GEModel\nfrom mine import PARAMS\n\n"
        "class TritonPythonModel(GEModel):\n    extra_parameters = PARAMS\n"
    )
    report = check_repository(repo, tmp_path)
    assert report.errors == ()
    assert [p.message.split(":")[0] for p in report.warnings] == ["unknown parameter 'colour'"]


def test_backend_ge_without_the_backend_installed(tmp_path, onnx_dir):
    repo = tmp_path / "repo"
    generate(onnx_dir / "linear.onnx", repo, GenerateOptions(name="plain", backend="ge"))
    report = check_repository(repo, tmp_path / "backends")
    assert report.errors == ()
    assert len(report.warnings) == 1
    assert "backend ge is not installed in" in report.warnings[0].message
    assert "ge-triton install-backend" in report.warnings[0].message
    (tmp_path / "backends" / "ge").mkdir(parents=True)
    (tmp_path / "backends" / "ge" / "model.py").write_text("")
    assert check_repository(repo, tmp_path / "backends").problems == ()


@pytest.mark.skipif(not OM_SAMPLES, reason=f"no public .om samples in {OM_SAMPLES_DIR}")
def test_real_om_samples_generate_clean_folders(tmp_path):
    repo = tmp_path / "repo"
    for sample in OM_SAMPLES:
        generate(sample, repo, GenerateOptions(name=sample.stem))
    assert check_repository(repo, tmp_path).problems == ()


# -- the command line -----------------------------------------------------------------------


def test_cli_ok_line_and_exit_codes(repo, tmp_path, capsys):
    assert main(["check", str(repo), "--backend-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ok: 4 models checked in {repo}, no problems"]
    edit(repo / "linear" / "config.pbtxt", "dims: 4", "dims: 5")
    edit(repo / "gears" / "config.pbtxt", "max_batch_size: 8", "max_batch_size: 16")
    assert main(["check", str(repo), "--backend-dir", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{repo}/gears/config.pbtxt: error: max_batch_size 16")
    assert lines[1].startswith(f"{repo}/linear/config.pbtxt: error: input 'x'")
    assert lines[2] == f"2 errors, 0 warnings in 4 models ({repo})"


def test_cli_strict_fails_on_warnings(repo, tmp_path, capsys):
    (repo / "linear" / "notes").mkdir()
    assert main(["check", str(repo), "--backend-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(", 1 warning")
    assert main(["check", str(repo), "--backend-dir", str(tmp_path), "--strict"]) == 1


def test_cli_missing_repository_is_one_line(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"ge-triton check: error: model repository {tmp_path / 'nope'} is not a folder\n"


def test_check_load_removes_its_folder_when_tritonserver_fails_to_start(repo, tmp_path, monkeypatch):
    """Finding: a failed start left /tmp/ge-triton-* behind (stop, not close)."""
    from ge_python_backend.ops import server as server_module
    from ge_python_backend.ops.loadcheck import load_models
    from ge_python_backend.ops.server import ServerError, TritonInstall

    fake = tmp_path / "fake"
    (fake / "backends" / "python").mkdir(parents=True)
    stub = fake / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
    stub.mkdir(parents=True)
    (stub / "triton_python_backend_stub").write_text("")
    (fake / "bin").mkdir()
    (fake / "bin" / "tritonserver").write_text("#!/bin/sh\necho 'error: creating server: nope' >&2\nexit 1\n")
    (fake / "bin" / "tritonserver").chmod(0o755)
    install = TritonInstall(fake / "bin" / "tritonserver", fake / "backends", None)
    monkeypatch.setattr(server_module, "find_tritonserver", lambda: install)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(ServerError, match="tritonserver exited with code 1 while starting"):
        load_models(repo, ["linear"])
    assert list((tmp_path / "tmp").iterdir()) == []
