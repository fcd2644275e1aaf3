"""The GE backend's parameters (hicann triton-inference-server-ge-backend) as this backend takes
them: honoured, mapped to ours or to ATC flags, or refused naming the key and why; the
--backend-config=npu_ge,... keys read from a tritonserver command line; install-backend --name npu_ge."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ge_python_backend.ascend.atc import AtcRequest, apply_atc_flags
from ge_python_backend.cli import main
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.ge_backend import BACKEND_SOURCES, write_ge_backend
from ge_python_backend.triton import npu_ge
from ge_python_backend.triton.npu_ge import translate
from tests.support import npu_ge as support_npu_ge


@pytest.fixture
def version(tmp_path):
    folder = tmp_path / "resnet" / "1"
    folder.mkdir(parents=True)
    (folder / "resnet18-v1-7.onnx").write_bytes(b"")
    return folder


def test_their_example_parameters_become_ours(version):
    done = translate({"device_ids": "4,5", "instance_exec_blocks": "2", "static_model": "1"}, {}, version)
    assert done.parameters == {
        "device_ids": "4,5",
        "streams": "2",
        "engine": "acl",
        "model_file": "resnet18-v1-7.onnx",  # the first .onnx, as their FindModelFile takes it
    }
    assert done.env == {}


def test_ge_options_become_the_atc_flags_atc_maps_them_to(version):
    done = translate(
        {"session.ge.exec.precision_mode_v2": "fp16", "graph.ge.inputShape": "data:-1,3,224,224"},
        {"ge.aicoreNum": "12|10", "ge.graphRunMode": "0", "graph.ge.dynamicNodeType": "1"},
        version,
    )
    assert (
        done.parameters["atc_flags"] == "'--aicore_num=12|10' --precision_mode_v2=fp16 --input_shape=data:-1,3,224,224"
    )
    assert "ge.aicoreNum=12|10 -> ATC --aicore_num=12|10" in done.notes
    request = apply_atc_flags(AtcRequest(version / "m.onnx", "Ascend910B3"), done.parameters["atc_flags"], version, "p")
    assert (request.precision, request.extra_flags) == ("fp16", ("--aicore_num=12|10",))
    assert request.input_shapes == {"data": (-1, 3, 224, 224)}


def test_the_model_config_wins_over_the_backend_config(version):
    done = translate({"ge.exec.precision_mode": "force_fp32"}, {"ge.exec.precision_mode": "force_fp16"}, version)
    assert done.parameters["atc_flags"] == "--precision_mode=force_fp32"


def test_profiling_and_graph_dump_set_what_their_backend_sets(version):
    done = translate({"profiling": "dynamic", "dump_graph": "1"}, {}, version)
    assert done.env["PROFILING_MODE"] == "dynamic"
    assert done.env["DUMP_GE_GRAPH"] == "2" and done.env["DUMP_GRAPH_PATH"] == os.path.join(os.getcwd(), "dump_graph")
    assert translate({"profiling": "true"}, {}, version).env["PROFILING_OPTIONS"].startswith('{"output":')


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("device_exec_blocks", "8", "'device_exec_blocks' (graph sessions per device"),
        ("dump_data", "1", "use parameter acl_dump_config"),
        ("static_model", "yes", "the GE backend takes 1 (on) or 0 (off)"),
        ("profiling", "on", "takes true or dynamic"),
        ("ge.exec.enableDump", "1", "GE option 'ge.exec.enableDump' has no ATC flag"),
        ("ge.graphRunMode", "1", "ge.graphRunMode=0, which is the only value accepted"),
        ("colour", "blue", "unknown parameter 'colour'"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_it(version, key, value, message):
    with pytest.raises(ConfigError) as caught:
        translate({key: value}, {}, version)
    assert message in str(caught.value)


def test_a_folder_with_our_model_file_names_keeps_them(version):
    (version / "model.onnx").write_bytes(b"")
    assert "model_file" not in translate({}, {}, version).parameters


def test_the_python_backends_own_keys_are_left_to_it(version):
    """Its library reads them for every Python-based backend (ours included); they are no GE options."""
    done = translate({}, {"shm-region-prefix-name": "ge_1_npu_ge_", "ge.aicoreNum": "12|10"}, version)
    assert "shm-region-prefix-name" not in done.parameters and "aicore_num" in done.parameters["atc_flags"]


def test_backend_config_is_read_from_a_tritonserver_command_line():
    argv = [
        "/opt/tritonserver/bin/tritonserver",
        "--model-repository=/models",
        "--backend-config=npu_ge,ge.aicoreNum=12|10",
        "--backend-config",
        "npu_ge,static_model=1",
        "--backend-config=python,shm-default-byte-size=1",
    ]
    assert npu_ge._backend_settings(argv, "npu_ge") == {"ge.aicoreNum": "12|10", "static_model": "1"}


def test_backend_config_is_read_from_the_server_that_started_a_grandchild():
    """The stub may sit below a process of its own: the server is looked up through the parents."""
    stub = "from ge_python_backend.triton import npu_ge; print(npu_ge.server_backend_config())"
    between = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]], check=True)"
    server = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], check=True)"
    argv = [sys.executable, "-c", server, between, stub, "--model-repository=/m", "--backend-config=npu_ge,a=1|2"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "{'a': '1|2'}"


def test_install_backend_npu_ge(tmp_path, capsys):
    assert main(["install-backend", "--backend-dir", str(tmp_path), "--name", "npu_ge"]) == 0
    assert (tmp_path / "npu_ge" / "model.py").read_text() == BACKEND_SOURCES["npu_ge"]
    assert "installed backend 'npu_ge'" in capsys.readouterr().out
    compile(BACKEND_SOURCES["npu_ge"], "model.py", "exec")


def test_check_reads_a_ge_backend_folder_as_the_load_translates_it(tmp_path):
    backends = tmp_path / "backends"
    write_ge_backend(backends, "npu_ge")
    model = tmp_path / "repo" / "resnet"
    (model / "1").mkdir(parents=True)
    support_npu_ge.tiny_resnet(model / "1" / "resnet18-tiny.onnx")
    (model / "config.pbtxt").write_text(support_npu_ge.example_config())
    assert check_repository(tmp_path / "repo", backends).problems == ()
    (model / "config.pbtxt").write_text(support_npu_ge.EXAMPLE_FIELDS.replace('"device_ids"', '"device_exec_blocks"'))
    (problem,) = check_repository(tmp_path / "repo", backends).problems
    assert "'device_exec_blocks' (graph sessions per device" in problem.message


def test_the_slots_an_instance_gets_are_what_the_log_says(version):
    """instance_exec_blocks and our streams both set the slots per instance: the model's own wins over
    --backend-config and the note says what is in force; two values in the model config are refused."""
    done = translate({"streams": "3"}, {"instance_exec_blocks": "2"}, version)
    assert done.parameters["streams"] == "3"
    assert "instance_exec_blocks=2 from --backend-config gives way to the model's streams=3: streams 3" in (
        " | ".join(done.notes)
    )
    assert not any("-> streams 2" in note for note in done.notes)
    flipped = translate({"instance_exec_blocks": "2"}, {"streams": "3"}, version)
    assert flipped.parameters["streams"] == "2" and "-> streams 2" in " | ".join(flipped.notes)
    with pytest.raises(ConfigError, match=r"'instance_exec_blocks' \(2\) and 'streams' \(3\) both set"):
        translate({"instance_exec_blocks": "2", "streams": "3"}, {}, version)
    assert translate({"instance_exec_blocks": "3", "streams": "3"}, {}, version).parameters["streams"] == "3"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_instance_exec_blocks_below_one_is_refused_naming_it(version, value):
    with pytest.raises(ConfigError, match=f"parameter 'instance_exec_blocks' has value '{value}'; the GE backend"):
        translate({"instance_exec_blocks": value}, {}, version)


def test_a_refused_backend_config_key_says_it_came_from_the_command_line(version):
    with pytest.raises(ConfigError) as caught:
        translate({}, {"ge.colour": "blue"}, version)
    assert "GE option 'ge.colour' has no ATC flag" in str(caught.value)
    assert str(caught.value).endswith("(from --backend-config=npu_ge,ge.colour=... on tritonserver's command line)")
    with pytest.raises(ConfigError) as unknown:
        translate({}, {"colour": "blue"}, version)
    assert "unknown parameter 'colour'" in str(unknown.value) and "from --backend-config=npu_ge,colour=" in str(
        unknown.value
    )
    with pytest.raises(ConfigError) as own:
        translate({"colour": "blue"}, {}, version)
    assert "--backend-config" not in str(own.value)
