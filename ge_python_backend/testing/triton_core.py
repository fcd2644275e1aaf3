"""What tritonserver does around a model's ``execute``, for ``ModelHarness``: the same requests
are refused, the model gets the same tensors and the client the same answers.

- Before a request reaches the model, Triton's core checks it against the config and refuses it
  with INVALID_ARG (core r24.10 ``src/infer_request.cc`` ``Normalize``, :991-1160, and
  ``ValidateRequestInputs``, :1234-1296; ``src/model.cc`` ``GetInput``/``GetOutput``): requested
  outputs the config lacks, too many or too few inputs, inputs it does not declare, inputs
  without the batch axis or disagreeing on it, a batch above ``max_batch_size``, another data
  type, another shape. The checks run in that order, with Triton's messages.
- Tensors the sequence batcher adds (its ``control_input``) are passed as they are; what the
  sequence batcher itself refuses or adds (a request without a correlation ID, padding slots) is
  the test's to model.
- An input with a config ``reshape`` reaches the model in the reshape's shape (:1160-1180); an
  output with one reaches the client in the config's dims (``src/infer_response.cc:153-156``,
  ``:298-328``).
- The model is asked for every config output when the client names none; the names come as a
  set, in no particular order (the stub returns its ``std::set`` through pybind11,
  python_backend r24.10 ``pb_stub.cc:1844``).
- The response carries only the requested outputs (all when none are named: python_backend
  r24.10 ``src/infer_response.cc:120-130``), and a string output's elements arrive as bytes: a
  ``str`` as its UTF-8, any other object as the UTF-8 of ``str(obj)`` (``serialize_byte_tensor``
  in ``triton_python_backend_utils.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ge_python_backend.serving.outputs import DeclaredTensor
from ge_python_backend.specs import dtype_text, format_shape, numpy_dtype

#: appended to a shape refusal of a batching model (infer_request.cc:1134-1141)
BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to "
    "each input shape. If you want to specify the full shape including the batch dim in your input dims config, "
    "try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
)


def moved_dims(shape: Sequence[int], source: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """``shape`` (laid out as ``source``, -1 variable) in the layout ``target``: each -1 of
    ``target`` takes the next variable size of ``shape``, as Triton's reshapes do."""
    variable = [size for size, dim in zip(shape, source) if dim == -1]
    return tuple(variable.pop(0) if dim == -1 else dim for dim in target)


class TritonCore:
    """The config's view of requests and responses (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.model = config.get("name", "")
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.inputs = {e["name"]: DeclaredTensor.from_config(e) for e in config.get("input", [])}
        self.outputs = {e["name"]: DeclaredTensor.from_config(e) for e in config.get("output", [])}
        self._required = [t.name for t in self.inputs.values() if not t.optional]
        #: tensors the sequence batcher adds to a request (READY, START, ...): never the client's
        self._controls = {c.get("name", "") for c in config.get("sequence_batching", {}).get("control_input", [])}

    def refusal(self, inputs: Sequence[Any], requested: Sequence[str], request_id: str) -> str | None:
        """Triton's refusal of a request (its pb_utils input tensors, requested outputs and id), or
        None when it passes."""
        prefix = f"[request id: {request_id or '<id_unknown>'}] "
        for name in requested:
            if name not in self.outputs:
                return f"unexpected inference output '{name}' for model '{self.model}'"
        arrays = {t.name(): t.as_numpy() for t in inputs if t.name() not in self._controls}
        if not len(self._required) <= len(arrays) <= len(self.inputs):
            return prefix + self._count_refusal(arrays)
        for name in arrays:
            if name not in self.inputs:
                return f"unexpected inference input '{name}' for model '{self.model}'"
        batch, refused = self._batch(arrays)
        for name, array in arrays.items():
            refused = refused or self._tensor_refusal(self.inputs[name], array, batch)
        return prefix + refused if refused else None

    def _batch(self, arrays: Mapping[str, np.ndarray]) -> tuple[int, str]:
        """The request's batch size (0 without batching) and why Triton refuses it ("" when it does not)."""
        batch = 0
        if self.max_batch_size <= 0:
            return batch, ""
        for name, array in arrays.items():
            if array.ndim == 0:
                return batch, f"input '{name}' has no shape but model requires batch dimension for '{self.model}'"
            if batch == 0:
                batch = array.shape[0]
            elif array.shape[0] != batch:
                return batch, f"input '{name}' batch size does not match other inputs for '{self.model}'"
        if batch > self.max_batch_size:
            return batch, f"inference request batch-size must be <= {self.max_batch_size} for '{self.model}'"
        return batch, ""

    def _tensor_refusal(self, declared: DeclaredTensor, array: np.ndarray, batch: int) -> str:
        """Why Triton refuses one input: its data type, its shape, or an empty batch ("" when none)."""
        name, model, batching = declared.name, self.model, self.max_batch_size > 0
        sent = dtype_text(array.dtype)
        if sent != declared.dtype:
            return f"inference input '{name}' data-type is '{sent}', but model '{model}' expects '{declared.dtype}'"
        dims = array.shape[1:] if batching else array.shape
        if len(dims) != len(declared.dims) or any(d not in (-1, s) for s, d in zip(dims, declared.dims)):
            full = ((-1,) if batching else ()) + declared.dims
            return (
                f"unexpected shape for input '{name}' for model '{model}'. Expected {format_shape(full)}, got "
                f"{format_shape(array.shape)}. {BATCH_NOTE if batching else ''}"
            )
        if batching and batch == 0:  # sized as if unbatched (:1184-1226)
            shape = dims if declared.reshape is None else moved_dims(dims, declared.dims, declared.reshape)
            count = int(np.prod(shape))
            if declared.dtype == "BYTES":
                return f"expected {count} string elements for inference input '{name}' for model '{model}', got 0"
            size = count * numpy_dtype(declared.dtype).itemsize
            return f"input byte size mismatch for input '{name}' for model '{model}'. Expected {size}, got 0"
        return ""

    def _count_refusal(self, arrays: Mapping[str, np.ndarray]) -> str:
        missing = "[" + ",".join(f"'{n}'" for n in self._required if n not in arrays) + "]"
        given = "[" + ",".join(f"'{n}'" for n in arrays) + "]"
        count = (
            f"expected {len(self.inputs)} inputs"
            if len(self._required) == len(self.inputs)
            else f"expected number of inputs between {len(self._required)} and {len(self.inputs)}"
        )
        return (
            f"{count} but got {len(arrays)} inputs for model '{self.model}'. Got input(s) {given}, but missing "
            f"required input(s) {missing}. Please provide all required input(s)."
        )

    def requested_outputs(self, requested: Sequence[str]) -> set[str]:
        """The output names the model is given: the requested ones, every config output when none
        is named (core ``infer_request.cc:991-1005``)."""
        return set(requested) or set(self.outputs)

    def reshapes(self, name: str) -> bool:
        """Whether the model gets input ``name`` in another shape than the client sent."""
        declared = self.inputs.get(name)
        return declared is not None and declared.reshape is not None

    def model_input(self, name: str, array: np.ndarray) -> np.ndarray:
        """An admitted input as the model gets it (in its ``reshape``'s shape when it has one)."""
        declared = self.inputs.get(name)
        if declared is None or declared.reshape is None:
            return array
        lead = array.shape[:1] if self.max_batch_size > 0 else ()
        dims = array.shape[len(lead) :]
        return array.reshape(lead + moved_dims(dims, declared.dims, declared.reshape))

    def client_outputs(self, tensors: Mapping[str, np.ndarray], requested: Sequence[str]) -> dict[str, np.ndarray]:
        """A response's tensors as the client receives them."""
        wanted = set(requested or self.outputs)
        received = {}
        for name, array in tensors.items():
            if name not in wanted:
                continue
            declared = self.outputs.get(name)
            if declared is not None and declared.reshape is not None:
                lead = array.shape[:1] if self.max_batch_size > 0 else ()
                array = array.reshape(lead + moved_dims(array.shape[len(lead) :], declared.reshape, declared.dims))
            if array.dtype == np.dtype(object):
                array = _serialized_strings(array)
            elif declared is not None and declared.dtype == "BYTES" and array.dtype.kind == "S":
                array = array.astype(object)
            received[name] = array
        return received


def _serialized_strings(array: np.ndarray) -> np.ndarray:
    """Each element as the bytes the client receives (``serialize_byte_tensor``)."""
    received = np.empty(array.shape, dtype=object)
    flat = received.reshape(-1)
    for index, value in enumerate(array.reshape(-1)):
        flat[index] = value if type(value) is bytes else str(value).encode("utf-8")
    return received


def request_parameters(request: Any) -> dict[str, Any]:
    """A pb_utils request's parameters as a dict."""
    text = request.parameters()
    return json.loads(text) if text else {}
