"""A deliberately simple reference executor for the request path's property test.

``reference_model(...)`` makes a ``TritonPythonModel`` that answers each request alone and runs
each of its rows alone on ONNX Runtime, called directly on the model's ONNX source. It shares with
GEModel only the per-request rules the two are compared on: ``serving.validation``'s checks and
messages, ``serving.outputs``' contract, the hooks and Triton's error codes. Nothing of the path
itself: no signatures remembered, no groups, plans, padding, gathering, slots, worker threads or
claim table, no engine. Served through the same ``ModelHarness``, so Triton's own refusals are
the same on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ge_python_backend.engines.onnxruntime import read_onnx_spec
from ge_python_backend.errors import EngineError, GEError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.outputs import DeclaredTensor, OutputContract
from ge_python_backend.serving.requests import RequestInfo
from ge_python_backend.serving.validation import Validator
from ge_python_backend.testing import fake_pb_utils as pb

Hook = Callable[[dict[str, np.ndarray], RequestInfo], Any]


def reference_model(onnx_file: Path, *, preprocess: Hook | None = None, postprocess: Hook | None = None) -> type:
    """A model class answering as the request path should, for a folder of ``onnx_file``'s model
    (the same model as an .onnx or a simulated .om; its config says whether it batches)."""

    class ReferenceModel:
        def initialize(self, args: dict[str, str]) -> None:
            config = json.loads(args["model_config"])
            max_batch_size = int(config.get("max_batch_size", 0))
            spec = read_onnx_spec(onnx_file)
            self.session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
            self.input_names = [i.name for i in self.session.get_inputs()]
            self.output_names = [o.name for o in self.session.get_outputs()]
            self.validator = Validator(
                spec,
                Layout(),
                batching=max_batch_size > 0,
                max_batch_size=max_batch_size,
                hooked=preprocess is not None,
                sequences=None,
                reject_nonfinite=False,
                utf8_strings=True,
            )
            self.outputs = OutputContract(
                [DeclaredTensor.from_config(entry) for entry in config["output"]],
                batching=max_batch_size > 0,
                source="postprocess" if postprocess else "the model",
            )

        def execute(self, requests: list) -> list:
            return [self._answer(request) for request in requests]

        def finalize(self) -> None:
            pass

        def _answer(self, request: Any) -> Any:
            info = RequestInfo(request.request_id(), 0, 0, {}, tuple(request.requested_output_names()))
            inputs = {t.name(): t.as_numpy() for t in request.inputs()}
            try:
                made = None if preprocess is None else _hook("preprocess", preprocess, dict(inputs), info)
                batched, prepared = _hook("preprocess", self.validator.prepare, inputs, info, made)
                rows = [
                    self._run({n: batched[n][row : row + 1] for n in self.input_names}) for row in range(prepared.rows)
                ]
                outputs = {name: np.concatenate([r[i] for r in rows]) for i, name in enumerate(self.output_names)}
                result = outputs if postprocess is None else _hook("postprocess", postprocess, dict(outputs), info)
                answer = self.outputs(result, info, prepared.request_rows)
            except GEError as exc:
                code = pb.TritonError.INVALID_ARG if isinstance(exc, InputError) else pb.TritonError.INTERNAL
                return pb.InferenceResponse(error=pb.TritonError(str(exc), code))
            return pb.InferenceResponse([pb.Tensor(name, array) for name, array in answer.items()])

        def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            """One row; a failure is the engine's (as the onnxruntime engine words it)."""
            try:
                return self.session.run(None, feeds)
            except Exception as exc:
                raise EngineError(f"ONNX Runtime failed: {exc}") from None

    return ReferenceModel


def _hook(name: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``; a crash (not a GEError) is the server's fault, said in one line."""
    try:
        return call(*args)
    except GEError:
        raise
    except Exception as exc:
        raise GEError(f"{name} failed: {type(exc).__name__}: {exc}") from None
