"""Test a TritonPythonModel (a GEModel subclass) in-process, without tritonserver.

    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
    pb_utils = install_fake_pb_utils()          # before importing your model.py
    with ModelHarness(TritonPythonModel, "repo/my_model") as model:
        responses = model.infer([pb_utils.InferenceRequest([pb_utils.Tensor("x", x)])])

The harness reads ``<model dir>/config.pbtxt`` through Triton's ModelConfig schema and passes
``initialize`` the same arguments tritonserver would. Combine it with ``engine: acl-sim`` to
test NPU models on any machine. Use a real tritonserver (``ge_python_backend.ops.server``) for
end-to-end proof.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ge_python_backend.testing import fake_pb_utils

__all__ = ["ModelHarness", "install_fake_pb_utils", "triton_args"]


def install_fake_pb_utils() -> ModuleType:
    """Make ``import triton_python_backend_utils`` give the fake (unless a real one is loaded)."""
    return sys.modules.setdefault("triton_python_backend_utils", fake_pb_utils)


def triton_args(model_dir: Path, version: str = "1", instance_name: str | None = None) -> dict[str, str]:
    """The ``initialize`` arguments Triton passes for ``model_dir`` (config.pbtxt read with the schema)."""
    from ge_python_backend.repository.config import config_json, read_config_file

    model_dir = Path(model_dir)
    config = read_config_file(model_dir / "config.pbtxt")
    name = config.name or model_dir.name
    return {
        "model_config": config_json(config, name),
        "model_instance_kind": "CPU",
        "model_instance_name": instance_name or f"{name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": version,
        "model_name": name,
    }


class ModelHarness:
    """Runs ``initialize``/``execute``/``finalize`` of a model class and collects responses."""

    def __init__(self, model_class: type, model_dir: Path, version: str = "1", instance_name: str | None = None):
        install_fake_pb_utils()
        self.model = model_class()
        self.args = triton_args(model_dir, version, instance_name)

    def __enter__(self) -> ModelHarness:
        self.model.initialize(self.args)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.model.finalize()

    def infer(self, requests: Sequence[Any], timeout: float = 60.0) -> list[Any]:
        """Execute ``requests`` as one Triton batch; return each request's final response."""
        returned = self.model.execute(list(requests))
        if len(returned) != len(requests):
            raise AssertionError(f"execute returned {len(returned)} entries for {len(requests)} requests")
        responses = []
        for request, entry in zip(requests, returned):
            if entry is not None:
                responses.append(entry)
                continue
            if not request.sender.done.wait(timeout):
                raise AssertionError(f"request {request.request_id()!r} got no response within {timeout} s")
            responses.append(request.sender.response)
        return responses
