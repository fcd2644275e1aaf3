"""tritonserver 2.51's load-time rules, each proven in the real server, and ``generate``'s answer to it.

For every rule: a hand-written config that breaks it, on a plain Python model (no ge_python_backend
code, so the refusal is the server's own), is refused with the server's message; the folder
``generate`` writes for a model that would trip it loads. Rules and messages: CORE r24.10
``src/model_config_utils.cc`` (ValidateIOShape :296-420, ValidateModelConfig :1366-1625,
ValidateInstanceGroup :1627-1742), ``src/model_repository_manager/model_lifecycle.cc`` (versions
:94-126, 451-457) and ``src/backend_model_instance.cc`` (warm-up :353-510).

Everything goes through ``ge-triton check REPO --load``, run once for the module (one server): it
must report each refusal with the model's name and Triton's message, the offline check must
report it too, and the exit code must be 1. One more server proves that a version folder beyond
int64 kills tritonserver itself.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
import socket
import tempfile
import urllib.error
import urllib.request

import pytest

from ge_python_backend.cli import main
from ge_python_backend.ops.loadcheck import check_server, load_models
from ge_python_backend.repository.check import check_repository
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support import corpus

pytestmark = pytest.mark.e2e

PLAIN_MODEL = """import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.outputs = [o["name"] for o in json.loads(args["model_config"])["output"]]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(n, np.zeros([1], np.float32)) for n in self.outputs])]
"""
IO = 'input [{name: "x" data_type: TYPE_FP32 dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]'

#: rule -> (config body breaking it, Triton's message for it)
REFUSED = {
    "dims_empty": (
        'input [{name: "x" data_type: TYPE_FP32 dims: []}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
        "model input 'x' must specify 'dims' for dims_empty",
    ),
    "empty_reshape_without_batching": (
        'input [{name: "x" data_type: TYPE_FP32 dims: [1] reshape {shape: []}}] '
        'output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
        "model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not supported",
    ),
    "dim_zero": (
        'input [{name: "x" data_type: TYPE_FP32 dims: [-1, 0]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
        "model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension",
    ),
    "no_data_type": (
        'input [{name: "x" dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
        "model input 'x' must specify 'data_type' for no_data_type",
    ),
    "empty_name": (
        'input [{name: "" data_type: TYPE_FP32 dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
        "model input must specify 'name' for empty_name",
    ),
    "preferred_above_max": (
        f"max_batch_size: 2 dynamic_batching {{preferred_batch_size: [4]}} {IO}",
        "dynamic batching preferred size must be <= max batch size for preferred_above_max",
    ),
    "preferred_without_batching": (
        f"dynamic_batching {{preferred_batch_size: [4]}} {IO}",
        "dynamic batching preferred size must be <= max batch size for preferred_without_batching",
    ),
    "kind_gpu": (
        f"instance_group [{{kind: KIND_GPU}}] {IO}",
        "instance group kind_gpu_0 of model kind_gpu has kind KIND_GPU but no GPUs are available",
    ),
    "latest_zero": (
        f"version_policy {{latest {{num_versions: 0}}}} {IO}",
        "at least one version must be available under the version policy of model 'latest_zero'",
    ),
    "specific_missing": (
        f"version_policy {{specific {{versions: [3]}}}} {IO}",
        "at least one version must be available under the version policy of model 'specific_missing'",
    ),
    "warmup_variable_dims": (
        'input [{name: "x" data_type: TYPE_FP32 dims: [-1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}] '
        'model_warmup [{name: "w" batch_size: 1 inputs {key: "x" value {data_type: TYPE_FP32 dims: [-1] '
        "zero_data: true}}}]",
        "warmup setting expects all variable-size dimensions are specified for input 'x'",
    ),
    "corrid_type": (
        'max_batch_size: 2 sequence_batching { control_input [{name: "C" control [{kind: CONTROL_SEQUENCE_CORRID '
        f"data_type: TYPE_FP32}}]}}]}} {IO}",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for corrid_type",
    ),
    "misnamed": (
        IO,
        "unexpected directory name 'misnamed' for model 'other', directory name must equal model name",
    ),
    "oldest_preferred_above_max": (
        "max_batch_size: 2 sequence_batching { oldest {preferred_batch_size: [4] max_candidate_sequences: 4} } " + IO,
        "sequence batching preferred batch size must be <= max batch size for oldest_preferred_above_max",
    ),
}

#: configs the server takes although they look odd: any data type but TYPE_INVALID (BF16 too; generate
#: still refuses BF16 because the Python backend cannot hand it over as numpy), any tensor name,
#: dynamic_batching without batching (it has no effect), an empty reshape when batching
ACCEPTED = {
    "bf16": 'input [{name: "x" data_type: TYPE_BF16 dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]',
    "odd_tensor_names": (
        'input [{name: "a.b/c d" data_type: TYPE_FP32 dims: [1]}] output [{name: "y" data_type: TYPE_FP32 dims: [1]}]'
    ),
    "dynamic_batching_without_batching": f"dynamic_batching {{}} {IO}",
    "empty_reshape_with_batching": (
        'max_batch_size: 4 input [{name: "x" data_type: TYPE_FP32 dims: [1] reshape {shape: []}}] '
        'output [{name: "y" data_type: TYPE_FP32 dims: [1]}]'
    ),
}

#: rule -> generate arguments (model file key, flags) whose folder must load
GENERATED = {
    "dims_empty": ("rank0", ()),
    "empty_reshape_without_batching": ("silero_vad", ()),
    "dim_zero": ("zero_axis", ()),
    "empty_name": ("odd_names", ()),
    "preferred_above_max": ("gears", ("--max-batch-size", "2")),
    "preferred_without_batching": ("transposed_om", ()),
    "kind_gpu": ("linear", ("--instances", "2")),
    "specific_missing": ("linear", ("--version-policy", "specific:1")),
    "warmup_variable_dims": ("strings", ("--warmup",)),
    "corrid_type": ("gears", ("--sequence", "--sequence-strategy", "oldest", "--max-batch-size", "2")),
    "oldest_preferred_above_max": ("gears", ("--sequence", "--sequence-strategy", "oldest")),
    "silero_as_sequence": (
        "silero_vad",
        ("--sequence", "--state", "state=stateN", "--state-batch-axis", "1", "--unbatched-inputs", "sr"),
    ),
    "rank0_warmup": ("rank0", ("--warmup",)),
    "scalar_output_warmup": ("scalar_om", ("--warmup",)),
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """(repository, stdout and exit code of `ge-triton check REPO --load`)."""
    root = tmp_path_factory.mktemp("rules")
    repo = root / "repo"
    for name, body in [(n, b) for n, (b, _) in REFUSED.items()] + list(ACCEPTED.items()):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(PLAIN_MODEL)
        model_name = "other" if name == "misnamed" else name
        (repo / name / "config.pbtxt").write_text(f'name: "{model_name}"\nbackend: "python"\n{body}\n')
    sources = {
        "linear": models.linear(root / "linear.onnx"),
        **{c: corpus.case(c).build(root / f"{c}.onnx") for c in ("rank0", "silero_vad", "zero_axis", "odd_names")},
        "strings": corpus.strings(root / "strings.onnx"),
    }
    sim_compile(sources["linear"], root / "gears.om", batch_gears=(1, 2, 4))
    sim_compile(corpus.transposed(root / "t.onnx"), root / "transposed_om.om", batch_gears=(1, 2, 4))
    sim_compile(corpus.scalar_sum(root / "s.onnx"), root / "scalar_om.om", batch_gears=(2, 4))
    sources.update(gears=root / "gears.om", transposed_om=root / "transposed_om.om", scalar_om=root / "scalar_om.om")
    for rule, (source, flags) in GENERATED.items():
        assert main(["generate", str(sources[source]), "-o", str(repo), "--name", f"gen_{rule}", *flags]) == 0
    return repo, root


@pytest.fixture(scope="module")
def report(checked):
    """(exit code, stdout) of `ge-triton check REPO --load` on the module's repository."""
    repo, _ = checked
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", str(repo), "--load"])
    return code, out.getvalue()


def test_check_load_exits_1_when_the_server_refuses_a_model(report):
    code, out = report
    assert code == 1
    assert re.search(rf"\d+ errors?, \d+ warnings?, {len(REFUSED)} refused by tritonserver in", out), out[-2000:]


@pytest.mark.parametrize("rule", sorted(REFUSED))
def test_the_server_refuses_the_rule_with_its_own_message(checked, report, rule):
    repo, _ = checked
    _, out = report
    _, message = REFUSED[rule]
    lines = [line for line in out.splitlines() if line.startswith(f"{repo / rule}: error: tritonserver refused")]
    assert len(lines) == 1 and message in lines[0], "\n".join(lines) or out[-3000:]


@pytest.mark.parametrize("rule", sorted(REFUSED))
def test_the_offline_check_finds_it_too(checked, rule):
    repo, root = checked
    report = check_repository(repo / rule, backends=root)
    expected = {
        "kind_gpu": [],  # only the server can know there is no GPU (the offline check warns on NPU engines)
    }.get(rule)
    errors = [p.message for p in report.errors]
    if expected is not None:
        assert errors == expected
    else:
        assert errors, f"check found nothing wrong with {rule}"


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_server_takes_these(checked, report, name):
    repo, _ = checked
    assert f"{repo / name}: loaded by tritonserver" in report[1]


@pytest.mark.parametrize("rule", sorted(GENERATED))
def test_what_generate_writes_loads(checked, report, rule):
    repo, _ = checked
    _, out = report
    assert f"{repo / f'gen_{rule}'}: loaded by tritonserver" in out, out[-3000:]


def test_generated_configs_are_completed_not_changed_by_the_server(checked, report):
    """The server only fills defaults into what generate writes: no ~ (changed) or - (dropped) lines."""
    repo, _ = checked
    _, out = report
    blocks = out.split(f"{repo}/gen_")[1:]
    assert blocks
    for block in blocks:
        changed = [line for line in block.splitlines()[1:] if line.strip().startswith(("~", "-"))]
        assert changed == [], block


def test_a_version_beyond_int64_kills_tritonserver(tmp_path):
    """Why generate and check refuse it: the load of such a folder aborts the whole server."""
    folder = tmp_path / "repo" / "huge"
    (folder / "99999999999999999999").mkdir(parents=True)
    (folder / "99999999999999999999" / "model.py").write_text(PLAIN_MODEL)
    (folder / "config.pbtxt").write_text(f'name: "huge"\nbackend: "python"\n{IO}\n')
    shutil.copytree(folder, tmp_path / "repo" / "after")
    shutil.move(str(tmp_path / "repo" / "after" / "99999999999999999999"), str(tmp_path / "repo" / "after" / "1"))
    (tmp_path / "repo" / "after" / "config.pbtxt").write_text(f'name: "after"\nbackend: "python"\n{IO}\n')
    huge, after = load_models(tmp_path / "repo", ["huge", "after"], load_timeout=60)
    assert not huge.loaded
    assert "tritonserver itself died while loading it" in huge.message
    assert "std::out_of_range" in huge.message and "stoll" in huge.message
    assert after.loaded  # a fresh server loads the rest
    assert check_repository(tmp_path / "repo", backends=tmp_path).fatal_models() == ("huge",)


def test_check_load_keeps_the_load_api_behind_its_key_and_leaves_no_folder(tmp_path, monkeypatch):
    """Finding: check --load's explicit-mode server took Triton's load API, which
    uploads files (code), from any local user; its folder outlived a failed start."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where its workspace goes
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "repo" / "plain"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(PLAIN_MODEL)
    (folder / "config.pbtxt").write_text(f'name: "plain"\nbackend: "python"\n{IO}\n')
    server = check_server(tmp_path / "repo")
    server.start()
    try:
        upload = {"parameters": {"config": "{}", "file:1/model.py": base64.b64encode(b"import os").decode()}}
        request = urllib.request.Request(
            f"http://{server.http_address}/v2/repository/models/intruder/load",
            data=json.dumps(upload).encode(),
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403 and "ge-triton-key" in refused.value.read().decode()
        with pytest.raises(ConnectionRefusedError):  # no gRPC endpoint at all
            socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5)
        (result,) = load_models(tmp_path / "repo", ["plain"], server=server)  # its own calls carry the key
        assert result.loaded, result.message
    finally:
        server.close()
    assert list((tmp_path / "tmp").iterdir()) == []
