"""One request's tensors checked against the model and put in batch-first order.

``Validator.prepare`` runs the ``preprocess`` hook, injects sequence state, checks every model
input (present, data type, shape honouring -1 and the model's shape ranges, not empty, finite
when asked, UTF-8 text where the engine's strings are text) and splits the tensors into batched
ones (batch axis first) and unbatched ones (one value per request).

A rank-0 model input travels as ``[1]`` (Triton has no scalar tensors in a model without
batching: ``dims: [1]``, and an empty ``reshape`` is refused there) and is handed to the engine
as the scalar it is.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ge_python_backend.errors import ContractError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.requests import Hook, RequestInfo
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.specs import (
    ModelSpec,
    TensorSpec,
    dtype_text,
    format_shape,
    range_problem,
    ranges_text,
    shape_fits,
)


@dataclass
class Prepared:
    """A validated request: batch-first arrays of batched inputs, values of unbatched ones, the
    engine settings its parameters ask for (``Engine.batch_settings``), and the rows the client
    sent (what its answer must have; None when the model does not batch)."""

    rows: int
    batched: dict[str, np.ndarray]
    shared: dict[str, np.ndarray]
    settings: Hashable = None
    request_rows: int | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.batched[name]


class TensorMismatch(InputError):
    """An engine input is missing or has the wrong data type, shape or size: the client's fault
    when its tensors go to the engine as they are; preprocess's (a ``ContractError``) when it made them."""


#: distinct (input, dtype, shape) keys remembered as accepted (beyond it they are checked each time)
_ACCEPTED_LIMIT = 4096


class Validator:
    """Checks requests against an engine's inputs (see the module docstring)."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        *,
        batching: bool,
        max_batch_size: int,
        preprocess: Hook | None,
        sequences: SequenceStates | None,
        reject_nonfinite: bool,
        utf8_strings: bool = False,
    ) -> None:
        self._inputs = spec.inputs
        self._layout = layout
        self._batching = batching
        batched = [t for t in spec.inputs if layout.axis(t.name) is not None]
        self.has_batch_axis = bool(batched) and layout.batch_first_spec(spec).batch.kind != "none"
        self._utf8_strings = utf8_strings
        self._max_batch_size = max_batch_size
        self._preprocess = preprocess
        self._sequences = sequences
        self._reject_nonfinite = reject_nonfinite
        # Per input, computed once: its batch axis and the shape a request must have.
        self._axes = {tensor.name: layout.axis(tensor.name) for tensor in self._inputs}
        self._client_shapes = {tensor.name: self._client_shape(tensor) for tensor in self._inputs}
        #: (input, dtype, shape) already found acceptable: the checks depend on nothing else
        self._accepted: set[tuple[str, np.dtype, tuple[int, ...]]] = set()

    def prepare(self, inputs: Mapping[str, np.ndarray], info: RequestInfo) -> Prepared:
        """The request's engine inputs; InputError naming the tensor when the client's is wrong,
        ContractError when preprocess returned what the engine cannot take.

        ``preprocess`` None: the inputs as they are (GEModel's default hook, skipped)."""
        request_rows = _request_rows(inputs) if self._batching else None
        if self._preprocess is None:
            return self._prepared(inputs, info, request_rows)
        arrays = self._preprocess(dict(inputs), info)
        if not isinstance(arrays, Mapping):
            raise ContractError(
                f"preprocess returned {type(arrays).__name__}; it must return a dict of the engine's inputs "
                f"({self._expected()})"
            )
        try:
            return self._prepared(arrays, info, request_rows)
        except TensorMismatch as exc:
            raise ContractError(
                f"preprocess returned {_summary(arrays)}, which the engine cannot take: {exc} (the engine's "
                f"inputs: {self._expected()})"
            ) from None

    def _prepared(self, arrays: Mapping[str, Any], info: RequestInfo, request_rows: int | None) -> Prepared:
        if self._sequences is not None:
            arrays = self._sequences.inject(info.correlation_id, info.flags, dict(arrays))
        prepared = Prepared(0, {}, {}, request_rows=request_rows)
        batched = prepared.batched
        for tensor in self._inputs:
            array = self._validated(tensor, arrays)
            if self._axes[tensor.name] is None:
                prepared.shared[tensor.name] = self._shared_value(tensor, array)
            elif self._layout.all_first:
                batched[tensor.name] = array
            else:
                batched[tensor.name] = self._layout.to_batch_first(tensor.name, array)
        if self.has_batch_axis:
            rows = [array.shape[0] for array in batched.values()]
            if rows.count(rows[0]) != len(rows):
                listed = ", ".join(f"{n} {a.shape[0]}" for n, a in batched.items())
                raise TensorMismatch(f"inputs disagree on the batch size: {listed}")
            prepared.rows = rows[0]
            if self._batching and prepared.rows > self._max_batch_size:
                raise TensorMismatch(f"batch size {prepared.rows} is above max_batch_size {self._max_batch_size}")
        return prepared

    def _expected(self) -> str:
        return ", ".join(f"{t.name} {t.dtype} {format_shape(self._client_shapes[t.name])}" for t in self._inputs)

    def _validated(self, tensor: TensorSpec, arrays: Mapping[str, Any]) -> np.ndarray:
        client_shape = self._client_shapes[tensor.name]
        if tensor.name not in arrays or arrays[tensor.name] is None:
            raise TensorMismatch(f"missing input {tensor.name!r} ({tensor.dtype} {format_shape(client_shape)})")
        value = arrays[tensor.name]
        array = value if type(value) is np.ndarray else np.asarray(value)
        key = (tensor.name, array.dtype, array.shape)
        if key not in self._accepted:
            self._check(tensor, array, client_shape)
            if len(self._accepted) < _ACCEPTED_LIMIT:
                self._accepted.add(key)
        array = _unwrapped_scalar(tensor, array, client_shape)
        if self._reject_nonfinite and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise InputError(f"input {tensor.name!r} contains NaN or Inf, which parameter reject_nonfinite forbids")
        if self._utf8_strings and tensor.dtype == "BYTES":
            return _as_text(tensor.name, array)
        return array

    def _check(self, tensor: TensorSpec, array: np.ndarray, client_shape: tuple[int, ...]) -> None:
        """Data type, shape and size (what depends only on those)."""
        expected = tensor.numpy_dtype
        if array.dtype != expected and not (tensor.dtype == "BYTES" and array.dtype.kind in "OSU"):
            raise TensorMismatch(
                f"input {tensor.name!r} has data type {dtype_text(array.dtype)}; the model expects {tensor.dtype}"
            )
        array = _unwrapped_scalar(tensor, array, client_shape)
        if not shape_fits(array.shape, client_shape):
            raise TensorMismatch(
                f"input {tensor.name!r} has shape {format_shape(array.shape)}; "
                f"the model expects {format_shape(client_shape)}"
            )
        if array.size == 0:
            raise TensorMismatch(f"input {tensor.name!r} is empty (shape {format_shape(array.shape)})")
        if tensor.ranges:
            # a shape-range model runs only shapes within its ranges: outside, the engine would refuse
            # the batch (and with it every other request in it), so the client hears it here
            model_shape = array.shape[1:] if self._axes[tensor.name] is None and self._batching else array.shape
            problem = range_problem(tensor.name, tensor.ranges, model_shape)
            if problem:
                raise TensorMismatch(
                    f"input {problem}: the model runs {tensor.name} {ranges_text(tensor.ranges)} (its shape ranges)"
                )

    def _client_shape(self, tensor: TensorSpec) -> tuple[int, ...]:
        """The shape a request must have: the batch axis any size (-1) when the model has one;
        an unbatched input of a batching model comes with a leading batch axis of its own."""
        axis = self._layout.axis(tensor.name)
        if axis is None:
            return ((-1,) + tensor.shape) if self._batching else tensor.shape
        if not self.has_batch_axis:
            return tensor.shape
        shape = list(tensor.shape)
        shape[axis] = -1
        return tuple(shape)

    def _shared_value(self, tensor: TensorSpec, array: np.ndarray) -> np.ndarray:
        if not self._batching:
            return array
        if not (array == array[:1]).all():
            raise InputError(f"unbatched input {tensor.name!r} must be the same for every row of the request")
        return array[0]


def _as_text(name: str, array: np.ndarray) -> np.ndarray:
    """BYTES elements as ``str`` (the engine's strings are UTF-8 text); InputError naming the
    first element that is not UTF-8."""
    text = np.empty(array.shape, dtype=np.object_)
    flat = text.reshape(-1)
    for index, value in enumerate(array.reshape(-1)):
        if isinstance(value, str):
            flat[index] = value
            continue
        try:
            flat[index] = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"input {name!r} element {index} is not UTF-8 text (byte 0x{bytes(value)[exc.start]:02x} at offset "
                f"{exc.start}); this engine's string tensors hold UTF-8 text"
            ) from None
    return text


def _unwrapped_scalar(tensor: TensorSpec, array: np.ndarray, client_shape: tuple[int, ...]) -> np.ndarray:
    """A rank-0 input arrives as [1] (or one [1] per row): the engine gets the scalar."""
    if not tensor.shape and array.ndim == len(client_shape) + 1 and array.shape[-1] == 1:
        return array.reshape(array.shape[:-1])
    return array


def _request_rows(inputs: Mapping[str, np.ndarray]) -> int | None:
    """The rows of a request to a batching model (Triton gives every input the same batch axis 0)."""
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else None


def _summary(arrays: Mapping[str, Any]) -> str:
    """{'x': FP64 [2,4]} style text of what a hook returned."""
    parts = [
        f"{name!r}: {dtype_text(v.dtype)} {format_shape(v.shape)}"
        if isinstance(v, np.ndarray)
        else f"{name!r}: {type(v).__name__}"
        for name, v in arrays.items()
    ]
    return "{" + ", ".join(parts) + "}"
