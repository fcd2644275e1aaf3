"""PipelineStep: a Python model of a pipeline that has no engine of its own.

An ensemble's pre- or post-processing step (``IMAGE`` bytes in, the detector's input tensor out),
or a BLS model that calls other models (``self.infer``). A subclass declares its config
parameters and overrides ``setup`` and ``process`` (one request) or ``process_batch`` (all the
requests of one ``execute``, for numpy work done once over the batch)::

    class TritonPythonModel(PipelineStep):
        parameters = (Parameter("scale", parse_float(0.0), 1.0, "a number >= 0", "factor"),)

        def process(self, inputs):
            return {"Y": inputs["X"] * self.values["scale"]}

Errors are answered as GEModel answers them: ``InputError`` refuses one request (HTTP 400 /
gRPC INVALID_ARGUMENT), any other exception fails it (500) with one line, its traceback logged
once; the other requests of the batch are answered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from ge_python_backend.errors import EngineError, GEError, InputError
from ge_python_backend.params import Parameter, parse_parameters
from ge_python_backend.triton import logbridge
from ge_python_backend.triton.loading import load_or_refuse
from ge_python_backend.triton.model import _response

LOG = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]


class PipelineStep:
    """Base class of a Python model without an engine; see the module's docstring."""

    #: Config parameters the step accepts (any other is refused at load, naming the accepted ones).
    parameters: tuple[Parameter, ...] = ()

    model_name: str
    instance_name: str
    #: the model's folder (``<repository>/<name>``), its version folder and the repository
    model_dir: Path
    version_dir: Path
    repository: Path
    #: the parsed ``parameters``
    values: dict[str, Any]

    def initialize(self, args: dict[str, str]) -> None:
        self.model_name = args.get("model_name", "?")
        self.instance_name = args.get("model_instance_name", self.model_name)
        logbridge.install(pb_utils, self.instance_name, verbose=False)
        with load_or_refuse(self.model_name):
            config = json.loads(args["model_config"])
            raw = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
            self.values = parse_parameters(raw, self.parameters)
            self.model_dir = Path(args["model_repository"])
            self.version_dir = self.model_dir / args.get("model_version", "1")
            self.repository = self.model_dir.parent
            self.setup()

    def setup(self) -> None:
        """Build what ``process`` needs, once per instance (ConfigError fails the load)."""

    def process(self, inputs: Arrays) -> Mapping[str, np.ndarray]:
        """One request's input tensors -> its output tensors."""
        raise NotImplementedError(f"{type(self).__name__} defines neither process nor process_batch")

    def process_batch(self, batch: Sequence[Arrays]) -> list[Mapping[str, np.ndarray] | GEError]:
        """The requests of one execute -> each one's outputs, or the error that refuses it.
        Default: ``process`` per request."""
        return [self._guarded(self.process, inputs) for inputs in batch]

    def execute(self, requests: list) -> list:
        readable: list[int] = []
        batch: list[Arrays] = []
        answers: list[Any] = [None] * len(requests)
        for index, request in enumerate(requests):
            try:
                batch.append({t.name(): t.as_numpy() for t in request.inputs()})
                readable.append(index)
            except Exception as exc:  # e.g. a data type without a numpy view
                answers[index] = _response(None, InputError(f"could not read the request's inputs: {exc}"), request)
        results = self._guarded(self.process_batch, batch) if batch else []
        for position, index in enumerate(readable):
            result = results[position] if isinstance(results, list) else results
            if isinstance(result, GEError):
                answers[index] = _response(None, result, requests[index])
            else:
                answers[index] = _response({k: np.asarray(v) for k, v in result.items()}, None, requests[index])
        return answers

    def _guarded(self, function, *args):
        """``function(*args)``, or the GEError a client gets for what it raised (logged when unexpected)."""
        try:
            return function(*args)
        except GEError as exc:
            return exc
        except Exception as exc:
            LOG.exception("%s: %s failed", self.instance_name, getattr(function, "__name__", "a step"))
            return EngineError(f"{type(exc).__name__}: {exc}")

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> Arrays:
        """Call ``model`` (BLS) with ``inputs``; its ``outputs`` as numpy. Its error is raised as
        InputError when it refused the input (400), else EngineError, naming the model."""
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor(name, np.ascontiguousarray(array)) for name, array in inputs.items()],
            requested_output_names=list(outputs),
        )
        response = request.exec()
        if response.has_error():
            error = response.error()
            message = f"model {model!r}: {error.message()}"
            invalid = getattr(pb_utils.TritonError, "INVALID_ARG", None)
            if invalid is not None and hasattr(error, "code") and error.code() == invalid:
                raise InputError(message)
            raise EngineError(message)
        return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs}

    def finalize(self) -> None:
        """Nothing to release by default."""
