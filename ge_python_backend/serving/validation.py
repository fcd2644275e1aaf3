"""One request's tensors checked against the model and made ready to gather.

What a request's engine inputs' names, data types and shapes decide is checked once per distinct
*key* (each model input's data type and shape, or its absence) and remembered as a ``Signature``
(or as the message of the ``TensorMismatch`` that refuses it): present, data type, shape honouring -1 and the
model's shape ranges, not empty, rows agreeing between inputs and within ``max_batch_size``. A
request whose key was seen before costs one dictionary lookup, and where its arrays go to the
engine as they are it shares its signature's ``Prepared`` (built once). What depends on values is
done per request, and only where the model needs it (``Signature.per_request``): finite values
when asked, UTF-8 text where the engine's strings are text, one value per request for an
unbatched input, a rank-0 input unwrapped, a batch axis moved to the front.

``Validator.prepare`` takes what the ``preprocess`` hook made of a request (when the model has one;
the runner calls the hook) and injects sequence state first, so a hook's output is checked as a
client's tensors are (a mismatch there is the hook's bug: ``ContractError``).

A rank-0 model input travels as ``[1]`` (Triton has no scalar tensors in a model without
batching: ``dims: [1]``, and an empty ``reshape`` is refused there) and is handed to the engine
as the scalar it is.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from operator import attrgetter
from typing import Any

import numpy as np

from ge_python_backend.errors import ContractError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.requests import RequestInfo
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

#: One request's key: per model input, (data type, shape) of its array, or None when it is absent.
Key = tuple[tuple[np.dtype, tuple[int, ...]] | None, ...]
#: distinct keys remembered (beyond it the table starts over: a client cycling through shapes
#: costs checks, never memory)
_KEYS_REMEMBERED = 4096


class TensorMismatch(InputError):
    """An engine input is missing or has the wrong data type, shape or size: the client's fault
    when its tensors go to the engine as they are; preprocess's (a ``ContractError``) when it made them."""


class Signature:
    """What a key decides: the rows (0 without a batch axis), the non-batch shapes of the batched
    inputs in model order, batch axis first (requests of equal ``shapes`` may share a batch), and
    whether the arrays need work per request before they are gathered. ``group`` is the runner's,
    attached on first use; ``prepared`` what every request of it shares when its arrays go to the
    engine as they are (no hook, no sequence state, no work per request)."""

    __slots__ = ("rows", "shapes", "per_request", "group", "prepared")

    def __init__(self, rows: int, shapes: tuple[tuple[str, tuple[int, ...]], ...], per_request: bool) -> None:
        self.rows = rows
        self.shapes = shapes
        self.per_request = per_request
        self.group: Any = None
        self.prepared: Prepared | None = None


class Prepared:
    """What a request's check decided, besides its batched arrays (``Validator.prepare`` returns
    both): the values of its unbatched inputs, its signature, its rows (the signature's: 0 without
    a batch axis), the rows its answer must have (None without batching) and the engine settings
    its parameters ask for (``Engine.batch_settings``). Shared by the requests of a signature
    whose arrays go to the engine as they are: never changed once made (``with_settings`` makes
    another)."""

    __slots__ = ("shared", "signature", "rows", "settings", "request_rows")

    def __init__(
        self,
        shared: dict[str, np.ndarray],
        signature: Signature,
        request_rows: int | None,
        settings: Hashable = None,
    ) -> None:
        self.shared = shared
        self.signature = signature
        self.rows = signature.rows
        self.settings = settings
        self.request_rows = request_rows

    def with_settings(self, settings: Hashable) -> Prepared:
        return Prepared(self.shared, self.signature, self.request_rows, settings)


#: A request's batched engine inputs by name, batch axis first: the client's own mapping when its
#: arrays go to the engine as they are (it may hold names the model lacks).
Batched = Mapping[str, np.ndarray]


class Validator:
    """Checks requests against an engine's inputs (see the module docstring)."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        *,
        batching: bool,
        max_batch_size: int,
        hooked: bool,
        sequences: SequenceStates | None,
        reject_nonfinite: bool,
        utf8_strings: bool = False,
    ) -> None:
        self._inputs = spec.inputs
        self._names = tuple(t.name for t in spec.inputs)
        self._layout = layout
        self._batching = batching
        batched = [t for t in spec.inputs if layout.axis(t.name) is not None]
        self.has_batch_axis = bool(batched) and layout.batch_first_spec(spec).batch.kind != "none"
        self._max_batch_size = max_batch_size
        #: a preprocess hook makes the engine's inputs (what it returns is checked, as its bug)
        self._hooked = hooked
        self._sequences = sequences
        #: the client's arrays are the engine's inputs (no hook makes them, no state joins them)
        self._plain = not hooked and sequences is None
        self._reject_nonfinite = reject_nonfinite
        self._utf8_strings = utf8_strings
        self._axes = {tensor.name: layout.axis(tensor.name) for tensor in self._inputs}
        self._client_shapes = {tensor.name: self._client_shape(tensor) for tensor in self._inputs}
        #: a refused key keeps its message, never the exception: a raised exception's traceback holds the
        #: frames up to its handler, and each frame its caller's, so a remembered one would keep the whole
        #: call that raised it (every request of that execute, their tensors) alive until the key comes again
        self._signatures: dict[Key, Signature | str] = {}

    def prepare(
        self, inputs: Mapping[str, np.ndarray], info: RequestInfo, made: Any = None
    ) -> tuple[Batched, Prepared]:
        """The request's engine inputs, made from the client's ``inputs``, or from what the
        preprocess hook ``made`` of them in a hooked model; InputError naming the tensor when the
        client's is wrong, ContractError when preprocess returned what the engine cannot take."""
        if self._plain:
            values: list[Any] = list(map(inputs.get, self._names))
            try:  # every input present (as a numpy array): the key without a Python frame
                key: Key = tuple(map(_dtype_and_shape, values))
            except AttributeError:  # absent, or not all numpy arrays
                values = [_as_array(v) for v in values]
                inputs, key = dict(zip(self._names, values)), _key(values)
            signature = self._signatures.get(key)
            if type(signature) is not Signature:
                signature = self._signature(values, key)
            shared = signature.prepared
            if shared is not None:  # a known signature whose arrays go as they are: the hot path
                return inputs, shared
            request_rows = signature.rows if self._batching and self.has_batch_axis else None
            if not signature.per_request:
                signature.prepared = Prepared({}, signature, request_rows)
                return inputs, signature.prepared
            if self._batching and not self.has_batch_axis:
                request_rows = _request_rows(inputs)
            return self._finished(values, signature, request_rows)
        request_rows = _request_rows(inputs) if self._batching else None
        arrays: Any = inputs
        if self._hooked:
            arrays = made
            if not isinstance(arrays, Mapping):
                raise ContractError(
                    f"preprocess returned {type(arrays).__name__}; it must return a dict of the engine's inputs "
                    f"({self._expected()})"
                )
        if self._sequences is not None:
            arrays = self._sequences.inject(info.correlation_id, info.flags, dict(arrays))
        values = [_as_array(arrays.get(name)) for name in self._names]
        try:
            signature = self._signature(values, _key(values))
        except TensorMismatch as exc:
            if not self._hooked:
                raise
            raise ContractError(
                f"preprocess returned {_summary(arrays)}, which the engine cannot take: {exc} (the engine's "
                f"inputs: {self._expected()})"
            ) from None
        return self._finished(values, signature, request_rows)

    def _signature(self, values: list[Any], key: Key) -> Signature:
        """The signature of ``key``, checked on first sight; its TensorMismatch when it is refused."""
        found = self._signatures.get(key)
        if found is None:
            try:
                found = self._checked(values)
            except TensorMismatch as exc:
                found = str(exc)
            if len(self._signatures) >= _KEYS_REMEMBERED:
                self._signatures.clear()
            self._signatures[key] = found
        if type(found) is Signature:
            return found
        raise TensorMismatch(found)

    def _checked(self, values: list[Any]) -> Signature:
        """The signature of ``values`` (one per model input, None when absent): every check that
        depends only on data types and shapes."""
        shapes: list[tuple[str, tuple[int, ...]]] = []
        rows: list[tuple[str, int]] = []
        per_request = self._reject_nonfinite and any(v is not None and v.dtype.kind == "f" for v in values)
        for tensor, value in zip(self._inputs, values):
            client_shape = self._client_shapes[tensor.name]
            if value is None:
                raise TensorMismatch(f"missing input {tensor.name!r} ({tensor.dtype} {format_shape(client_shape)})")
            shape = self._check(tensor, value.dtype, value.shape, client_shape)
            per_request |= shape != value.shape or (self._utf8_strings and tensor.dtype == "BYTES")
            axis = self._axes[tensor.name]
            if axis is None:
                per_request = True  # one value per request, checked per request
                continue
            if axis:
                per_request = True
                shape = (shape[axis],) + shape[:axis] + shape[axis + 1 :]
            if self.has_batch_axis:
                rows.append((tensor.name, shape[0]))
                shapes.append((tensor.name, shape[1:]))
            else:
                shapes.append((tensor.name, shape))
        count = 0
        if self.has_batch_axis:
            if len({r for _, r in rows}) > 1:
                listed = ", ".join(f"{n} {r}" for n, r in rows)
                raise TensorMismatch(f"inputs disagree on the batch size: {listed}")
            count = rows[0][1]
            if self._batching and count > self._max_batch_size:
                raise TensorMismatch(f"batch size {count} is above max_batch_size {self._max_batch_size}")
        return Signature(count, tuple(shapes), per_request)

    def _check(
        self, tensor: TensorSpec, dtype: np.dtype, shape: tuple[int, ...], client_shape: tuple[int, ...]
    ) -> tuple[int, ...]:
        """Data type, shape and size; the shape the engine gets (a rank-0 input unwrapped)."""
        expected = tensor.numpy_dtype
        if dtype != expected and not (tensor.dtype == "BYTES" and dtype.kind in "OSU"):
            raise TensorMismatch(
                f"input {tensor.name!r} has data type {dtype_text(dtype)}; the model expects {tensor.dtype}"
            )
        shape = _unwrapped_shape(tensor, shape, client_shape)
        if not shape_fits(shape, client_shape):
            raise TensorMismatch(
                f"input {tensor.name!r} has shape {format_shape(shape)}; the model expects {format_shape(client_shape)}"
            )
        if 0 in shape:
            raise TensorMismatch(f"input {tensor.name!r} is empty (shape {format_shape(shape)})")
        if tensor.ranges:
            # a shape-range model runs only shapes within its ranges: outside, the engine would refuse
            # the batch (and with it every other request in it), so the client hears it here
            model_shape = shape[1:] if self._axes[tensor.name] is None and self._batching else shape
            problem = range_problem(tensor.name, tensor.ranges, model_shape)
            if problem:
                raise TensorMismatch(
                    f"input {problem}: the model runs {tensor.name} {ranges_text(tensor.ranges)} (its shape ranges)"
                )
        return shape

    def _finished(self, values: list[Any], signature: Signature, request_rows: int | None) -> tuple[Batched, Prepared]:
        """The per-request work a signature asks for: scalars unwrapped, values checked, text
        decoded, unbatched values taken, batch axes moved to the front."""
        if not signature.per_request:
            return dict(zip(self._names, values)), Prepared({}, signature, request_rows)
        batched: dict[str, np.ndarray] = {}
        shared: dict[str, np.ndarray] = {}
        for tensor, array in zip(self._inputs, values):
            name = tensor.name
            array = _unwrapped_scalar(tensor, array, self._client_shapes[name])
            if self._reject_nonfinite and array.dtype.kind == "f" and not np.isfinite(array).all():
                raise InputError(f"input {name!r} contains NaN or Inf, which parameter reject_nonfinite forbids")
            if self._utf8_strings and tensor.dtype == "BYTES":
                array = _as_text(name, array)
            axis = self._axes[name]
            if axis is None:
                shared[name] = self._shared_value(name, array)
            else:
                batched[name] = np.moveaxis(array, axis, 0) if axis else array
        return batched, Prepared(shared, signature, request_rows)

    def _expected(self) -> str:
        return ", ".join(f"{t.name} {t.dtype} {format_shape(self._client_shapes[t.name])}" for t in self._inputs)

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

    def _shared_value(self, name: str, array: np.ndarray) -> np.ndarray:
        if not self._batching:
            return array
        if not (array == array[:1]).all():
            raise InputError(f"unbatched input {name!r} must be the same for every row of the request")
        return array[0]


_dtype_and_shape = attrgetter("dtype", "shape")


def _key(values: list[Any]) -> Key:
    return tuple([None if v is None else (v.dtype, v.shape) for v in values])


def _as_array(value: Any) -> np.ndarray | None:
    return value if value is None or type(value) is np.ndarray else np.asarray(value)


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


def _unwrapped_shape(tensor: TensorSpec, shape: tuple[int, ...], client_shape: tuple[int, ...]) -> tuple[int, ...]:
    """A rank-0 input arrives as [1] (or one [1] per row): the engine gets the scalar."""
    if not tensor.shape and len(shape) == len(client_shape) + 1 and shape[-1] == 1:
        return shape[:-1]
    return shape


def _unwrapped_scalar(tensor: TensorSpec, array: np.ndarray, client_shape: tuple[int, ...]) -> np.ndarray:
    shape = _unwrapped_shape(tensor, array.shape, client_shape)
    return array if shape == array.shape else array.reshape(shape)


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
