"""An ONNX Runtime instance runs on the GPU Triton places it on: ``model_instance_kind`` "GPU" and
``model_instance_device_id`` (initialize's args) decide the device of the CUDA provider (it ran on
device 0 whatever instance_group gpus said); ``generate --providers`` writes such a folder and
``check`` says what the stub's environment needs. No GPU here: the session ONNX Runtime would create
is captured with the providers and options it is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ge_python_backend.cli import main
from ge_python_backend.engines import onnxruntime as ort_engine
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import mc, read_config_file
from ge_python_backend.testing import models
from ge_python_backend.triton.settings import read_settings

CUDA = ("CUDAExecutionProvider", "CPUExecutionProvider")


def gpu_args(config: dict, device: str, kind: str = "GPU") -> dict[str, str]:
    """initialize's args for instance 0 of a model Triton placed on GPU ``device``."""
    return {
        "model_config": json.dumps(config),
        "model_instance_name": f"{config['name']}_0_0",
        "model_instance_kind": kind,
        "model_instance_device_id": device,
    }


def config_on_gpus(gpus: list[int], **parameters: str) -> dict:
    return {
        "name": "m",
        "max_batch_size": 8,
        "instance_group": [{"kind": "KIND_GPU", "gpus": gpus, "count": 1}],
        "parameters": {k: {"string_value": v} for k, v in {"engine": "onnxruntime", **parameters}.items()},
    }


def test_a_gpu_instance_runs_on_the_gpu_triton_placed_it_on(monkeypatch, tmp_path):
    settings = read_settings(gpu_args(config_on_gpus([1], onnxruntime_providers=",".join(CUDA)), "1"))
    assert settings.device_id == 1
    created = {}

    class Session:  # what ONNX Runtime is asked for; a CUDA device does not exist here
        def __init__(self, path, options, providers):
            created["providers"] = providers

    monkeypatch.setattr(ort_engine._import_onnxruntime(), "get_available_providers", lambda: list(CUDA))
    monkeypatch.setattr(ort_engine._import_onnxruntime(), "InferenceSession", Session)
    source = models.linear(tmp_path / "model.onnx")
    ort_engine.load_session(source, device_id=settings.device_id, options=settings.engine_options)
    assert created["providers"] == [("CUDAExecutionProvider", {"device_id": "1"}), ("CPUExecutionProvider", {})]
    cpu = read_settings(gpu_args(config_on_gpus([1]) | {"instance_group": [{"kind": "KIND_CPU"}]}, "0", "CPU"))
    assert cpu.device_id == 0  # a CPU instance keeps device_ids (the CANN provider's NPU)


def test_provider_options_give_each_device_provider_the_instances_device():
    assert ort_engine.provider_options(("CANNExecutionProvider", "CPUExecutionProvider"), 3) == [
        ("CANNExecutionProvider", {"device_id": "3"}),
        ("CPUExecutionProvider", {}),
    ]
    assert ort_engine.provider_options(("TensorrtExecutionProvider",), 2) == [
        ("TensorrtExecutionProvider", {"device_id": "2"})
    ]


def test_device_ids_beside_a_gpu_placement_are_refused():
    with pytest.raises(ConfigError, match="instance_group KIND_GPU: Triton places each instance on a GPU"):
        read_settings(gpu_args(config_on_gpus([1], device_ids="0"), "1"))


def test_generate_writes_a_gpu_folder_from_providers_and_check_says_what_the_stub_needs(tmp_path, capsys):
    source = models.linear(tmp_path / "linear.onnx")
    argv = ["generate", str(source), "-o", str(tmp_path / "repo"), "--engine", "onnxruntime"]
    assert main([*argv, "--providers", ",".join(CUDA)]) == 0
    config = read_config_file(tmp_path / "repo" / "linear" / "config.pbtxt")
    assert [g.kind for g in config.instance_group] == [mc.ModelInstanceGroup.KIND_GPU]
    assert config.parameters["onnxruntime_providers"].string_value == ",".join(CUDA)
    assert "device_ids" not in config.parameters
    warnings = [p.message for p in check_repository(tmp_path / "repo", backends=tmp_path).warnings]
    assert any(
        "names CUDAExecutionProvider, which the onnxruntime" in w and "pip install onnxruntime-gpu" in w
        for w in warnings
    ), warnings
    capsys.readouterr()
    assert main([*argv, "-n", "typo", "--providers", "CUDAExecutionProvder"]) == 2
    assert "did you mean CUDAExecutionProvider?" in capsys.readouterr().err
    assert main([*argv, "-n", "npus", "--providers", "CUDAExecutionProvider", "--device-ids", "1"]) == 2
    assert "--device-ids places NPU instances" in capsys.readouterr().err
    assert main(["generate", str(source), "-o", str(tmp_path / "r2"), "--engine", "acl", "--providers", CUDA[0]]) == 2
    assert "--providers applies to engine onnxruntime; engine acl does not take it" in capsys.readouterr().err
    assert not Path(tmp_path / "r2").exists()
