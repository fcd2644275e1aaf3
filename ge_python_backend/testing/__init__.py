"""Test a TritonPythonModel (a GEModel subclass) in-process, without tritonserver.

    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
    pb_utils = install_fake_pb_utils()          # before importing your model.py
    with ModelHarness(TritonPythonModel, "repo/my_model") as model:
        responses = model.infer([pb_utils.InferenceRequest([pb_utils.Tensor("x", x)])])

The harness reads ``<model dir>/config.pbtxt`` through Triton's ModelConfig schema and passes
``initialize`` the same arguments tritonserver would. Requests go in as a client sends them:
what Triton's core refuses (an input of another data type or shape, an output the config lacks,
...) is refused here with Triton's message, inputs with a config ``reshape`` reach the model
reshaped, and answers come back as a client receives them (requested outputs only, strings as
bytes, reshaped outputs in the config's dims): ``triton_core``. Combine it with
``engine: acl-sim`` to test NPU models on any machine. Use a real tritonserver
(``ge_python_backend.ops.server``) for end-to-end proof.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ge_python_backend.testing import fake_pb_utils
from ge_python_backend.testing.triton_core import TritonCore, request_parameters

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
        self.core = TritonCore(json.loads(self.args["model_config"]))

    def __enter__(self) -> ModelHarness:
        self.model.initialize(self.args)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.model.finalize()

    def infer(self, requests: Sequence[Any], timeout: float = 60.0) -> list[Any]:
        """Execute the requests Triton's core admits as one Triton batch; return each request's
        final response as the client receives it (Triton's error for a refused one)."""
        pb_utils = fake_pb_utils
        responses: list[Any] = [None] * len(requests)
        admitted = []
        for index, request in enumerate(requests):
            inputs, requested, request_id = request.sent()
            refusal = self.core.refusal(inputs, requested, request_id)
            if refusal is None:
                admitted.append((index, self._as_model_sees(request), requested))
            else:
                responses[index] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(refusal, pb_utils.TritonError.INVALID_ARG)
                )
        returned = self.model.execute([request for _, request, _ in admitted]) if admitted else []
        if len(returned) != len(admitted):
            raise AssertionError(f"execute returned {len(returned)} entries for {len(admitted)} requests")
        for (index, request, requested), entry in zip(admitted, returned):
            if entry is None:
                if not request.sender.done.wait(timeout):
                    raise AssertionError(f"request {index} got no response within {timeout} s")
                entry = request.sender.response
            responses[index] = self._as_client_receives(entry, requested)
        return responses

    def _as_model_sees(self, request: Any) -> Any:
        """The request as Triton hands it to the model: its inputs in their config ``reshape``,
        and every config output requested when the client named none (itself when nothing changes)."""
        inputs, requested, request_id = request.sent()
        names = self.core.requested_outputs(requested)
        if set(requested) == names and not any(self.core.reshapes(t.name()) for t in inputs):
            return request
        seen = fake_pb_utils.InferenceRequest(
            [fake_pb_utils.Tensor(t.name(), self.core.model_input(t.name(), t.as_numpy())) for t in inputs],
            sorted(names),
            request_id,
            request.correlation_id(),
            request.flags(),
            request_parameters(request),
            timeout=request.timeout(),
        )
        seen.sender = request.sender  # answers through the caller's request object
        return seen

    def _as_client_receives(self, response: Any, requested: Sequence[str]) -> Any:
        if response.has_error():
            return response
        tensors = {t.name(): t.as_numpy() for t in response.output_tensors()}
        received = self.core.client_outputs(tensors, requested)
        return fake_pb_utils.InferenceResponse([fake_pb_utils.Tensor(n, a) for n, a in received.items()])
