"""What a request is answered with, checked against the model config: the one place where outputs
are picked, typed and shaped, and where what contradicts the config is refused.

``OutputContract`` is built once per model from the config's outputs (``DeclaredTensor``). Per
answer it picks the requested outputs (all when none are named) and checks each one:

- data type: an array in the config's type passes as it is. Another numeric type is converted
  only when every value survives: integers within the target's range (INT64 300 is refused for an
  INT8 output, never wrapped to 44), floats within its finite range (70000.0 is refused for FP16,
  never sent as inf; rounding to the coarser precision is accepted, as any float computation
  rounds), integers into a float type only as far as it holds every integer exactly (2**24 for
  FP32). Floats into integers or bool, and anything not numeric, are refused. TYPE_STRING takes
  bytes and str elements (str becomes its UTF-8 bytes: what the client receives either way).
- shape: the config's dims, behind the request's own rows when the model batches (4 rows for a
  2-row request are refused). An output with a ``reshape`` leaves in the reshape's shape, which
  tritonserver turns into the dims for the client (core r24.10 ``infer_response.cc:153-156``,
  ``:298-328``); a value already in the dims is accepted when the reshape has no -1 (the same
  elements either way). A rank-0 value of a model without batching is [1] (Triton has no scalar
  tensors: ``dims: [1]``).

A refusal is a ``ContractError`` naming the output, what the config declares and what came. The
checks are whole-array numpy operations computed from tables built here once (no Python loop
per element, but over the elements of a string output).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ge_python_backend.errors import ContractError
from ge_python_backend.serving.requests import RequestInfo
from ge_python_backend.specs import api_type, config_type, dtype_text, format_shape, numpy_dtype, shape_fits

_OBJECT = np.dtype(object)
#: distinct sets of requested outputs whose order is remembered
_ORDERS_REMEMBERED = 256


@dataclass(frozen=True)
class DeclaredTensor:
    """A config input or output: data type (API name), dims without the batch axis, the dims the
    model has when the config has a ``reshape`` for it, and whether the input is optional."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False

    @classmethod
    def from_config(cls, entry: Mapping[str, Any]) -> DeclaredTensor:
        """From an ``input`` or ``output`` entry of the model config as JSON."""
        reshape = entry.get("reshape")
        return cls(
            entry["name"],
            api_type(entry.get("data_type", "")),
            tuple(int(d) for d in entry.get("dims", ())),
            None if reshape is None else tuple(int(d) for d in reshape.get("shape", ())),
            bool(entry.get("optional", False)),
        )

    @property
    def produced(self) -> tuple[int, ...]:
        """The dims the answer leaves with (the reshape's when the config has one)."""
        return self.dims if self.reshape is None else self.reshape


class _OpenDims:
    """A precomputed test of a shape against dims with -1 (any size), behind the request's rows
    when batched: an itemgetter over the fixed positions, no Python loop."""

    __slots__ = ("_rank", "_pick", "_fixed")

    def __init__(self, dims: tuple[int, ...], batched: bool) -> None:
        offset = 1 if batched else 0
        positions = [i + offset for i, d in enumerate(dims) if d != -1]
        self._rank = len(dims) + offset
        self._pick = operator.itemgetter(*positions) if positions else None
        fixed = tuple(d for d in dims if d != -1)
        self._fixed = fixed[0] if len(fixed) == 1 else fixed

    def fits(self, shape: tuple[int, ...], rows: int | None) -> bool:
        if len(shape) != self._rank or (rows is not None and shape[0] != rows):
            return False
        return self._pick is None or self._pick(shape) == self._fixed


class OutputContract:
    """Picks, types and shapes a request's outputs (see the module docstring). ``source`` names
    who produced them in messages: "postprocess", or the model itself."""

    def __init__(self, declared: Sequence[DeclaredTensor], *, batching: bool, source: str) -> None:
        self._declared = {d.name: d for d in declared}
        self._types = {d.name: numpy_dtype(d.dtype) for d in declared}
        self._all = tuple(self._declared)
        #: per output: its dims when fixed (one tuple comparison per answer), else their test
        self._shapes: dict[str, tuple[int, ...] | _OpenDims] = {
            d.name: _OpenDims(d.produced, batching) if -1 in d.produced else d.produced for d in declared
        }
        self._batching = batching
        self._source = source
        #: per output: (its numpy type, its fixed dims), or (…, None) when a full check is needed
        #: (open dims or a string type, whose elements are checked)
        self._fast: dict[str, tuple[np.dtype, tuple[int, ...] | None]] = {
            d.name: (self._types[d.name], None if -1 in d.produced or d.dtype == "BYTES" else d.produced)
            for d in declared
        }
        #: requested output names -> those names in the config's order
        self._order: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __call__(self, outputs: Any, info: RequestInfo, rows: int | None) -> dict[str, np.ndarray]:
        """The outputs to send for a request of ``rows`` rows (None without batching)."""
        if type(outputs) is not dict and not isinstance(outputs, Mapping):
            raise ContractError(
                f"{self._source} returned {type(outputs).__name__}; it must return a dict of output arrays "
                f"(the config's outputs: {', '.join(self._all)})"
            )
        selected = {}
        lead = (rows,) if self._batching else ()
        names = self._order.get(info.requested_outputs) or self.names(info.requested_outputs)
        for name in names:
            value = outputs.get(name)
            if value is None:
                raise ContractError(
                    f"{self._source} returned no output {name!r} (it returned {sorted(map(str, outputs))}); "
                    "the request asks for it"
                )
            # the common case first: a numeric array already in the config's type and fixed dims
            dtype, dims = self._fast[name]
            if (
                dims is not None
                and type(value) is np.ndarray
                and (value.dtype is dtype or value.dtype == dtype)
                and value.shape == lead + dims
            ):
                selected[name] = value
                continue
            declared = self._declared[name]
            selected[name] = self._shaped(declared, self._typed(declared, value), rows)
        return selected

    def names(self, requested: tuple[str, ...]) -> tuple[str, ...]:
        """The requested outputs in the config's order (Triton names them in an order of its own),
        all of them when none is named."""
        names = self._order.get(requested)
        if names is None:
            unknown = sorted(set(requested) - set(self._all))
            if unknown:  # Triton refuses such a request before the model sees it
                raise ContractError(f"output(s) {unknown} were requested; the config declares {list(self._all)}")
            names = tuple(n for n in self._all if n in requested) if requested else self._all
            if len(self._order) < _ORDERS_REMEMBERED:
                self._order[requested] = names
        return names

    def _shaped(self, declared: DeclaredTensor, array: np.ndarray, rows: int | None) -> np.ndarray:
        shape = self._shapes[declared.name]
        if type(shape) is tuple:
            if array.shape == ((rows,) + shape if self._batching else shape):
                return array
        elif shape.fits(array.shape, rows if self._batching else None):  # type: ignore[union-attr]
            return array
        lead = (rows,) if self._batching and rows is not None else ()
        produced = declared.produced
        expected = lead + produced
        if (
            declared.reshape is not None
            and -1 not in declared.reshape
            and shape_fits(array.shape, lead + declared.dims)
        ):
            return array.reshape(expected)  # Triton turns the reshape's shape back into the dims
        if array.ndim == 0 and expected == (1,):
            return array.reshape(1)
        declares = format_shape(declared.dims) + (
            "" if declared.reshape is None else f" (reshape {format_shape(produced)})"
        )
        if lead and array.ndim == len(expected) and shape_fits(array.shape[1:], produced):
            raise ContractError(
                f"{self._source} returned output {declared.name!r} with {array.shape[0]} rows for a request of {rows} "
                f"(shape {format_shape(array.shape)}; the config declares {declares})"
            )
        wanted = format_shape(expected) + (f", the request's {rows} rows first" if lead else "")
        raise ContractError(
            f"{self._source} returned output {declared.name!r} of shape {format_shape(array.shape)}; the config "
            f"declares {declares}, so the answer must be {wanted}"
        )

    def _typed(self, declared: DeclaredTensor, value: Any) -> np.ndarray:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        target = self._types[declared.name]
        if target == _OBJECT:
            return self._strings(declared, array)
        if array.dtype == target:
            return array
        problem = _unrepresentable(array, target)
        if problem is not None:
            raise ContractError(
                f"{self._source} returned output {declared.name!r} as {dtype_text(array.dtype)} with {problem}, "
                f"which the config's {config_type(declared.dtype)} cannot hold"
            )
        return array.astype(target)

    def _strings(self, declared: DeclaredTensor, array: np.ndarray) -> np.ndarray:
        """A TYPE_STRING output as an object array of bytes (str elements as UTF-8)."""
        if array.dtype.kind == "S":  # numpy fixed-width bytes (trailing NULs already dropped by numpy)
            return array.astype(object)
        if array.dtype.kind == "U":
            array = array.astype(object)
        elif array.dtype != _OBJECT:
            raise ContractError(
                f"{self._source} returned output {declared.name!r} as {dtype_text(array.dtype)}; the config "
                "declares TYPE_STRING (bytes or str elements)"
            )
        flat = array.reshape(-1)
        kinds = {type(v) for v in flat}
        if kinds <= {bytes}:
            return array
        if not kinds <= {bytes, str}:
            index, bad = next((i, v) for i, v in enumerate(flat) if type(v) not in (bytes, str))
            raise ContractError(
                f"{self._source} returned output {declared.name!r} with element {index} of type "
                f"{type(bad).__name__}; a TYPE_STRING output holds bytes or str"
            )
        encoded = np.empty(flat.shape, dtype=object)
        encoded[:] = [v.encode("utf-8") if type(v) is str else v for v in flat]
        return encoded.reshape(array.shape)


def _unrepresentable(array: np.ndarray, target: np.dtype) -> str | None:
    """Why ``array`` cannot become ``target`` without changing a value; None when it can."""
    source = array.dtype
    if source.kind not in "biuf" or target.kind == "b":
        return "values of another kind"
    if target.kind in "iu":
        if source.kind == "f":
            return "floating-point values"
        if np.can_cast(source, target, casting="safe"):
            return None
        return _outside(array, int(np.iinfo(target).min), int(np.iinfo(target).max))
    if source.kind in "iu":  # into a float type, even where numpy calls it safe (int64 -> FP64)
        exact = 2 ** (np.finfo(target).nmant + 1)  # every integer up to it is exact
        return _outside(array, -exact, exact, f"beyond ±{exact}, the integers it holds exactly")
    if np.can_cast(source, target, casting="safe") or not array.size:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        overflow = np.isinf(array.astype(target)) & np.isfinite(array)
    if overflow.any():
        bad = array.reshape(-1)[np.argmax(overflow.reshape(-1))]
        return f"value {bad.item()!r} (beyond ±{float(np.finfo(target).max):g})"
    return None


def _outside(array: np.ndarray, low: int, high: int, why: str = "") -> str | None:
    """The first bound ``array`` crosses, as text; None when every value is within [low, high]."""
    if not array.size:
        return None
    smallest, largest = array.min().item(), array.max().item()
    bad = smallest if smallest < low else largest if largest > high else None
    if bad is None:
        return None
    return f"value {bad!r} ({why or f'range {low}..{high}'})"
