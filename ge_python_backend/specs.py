"""Typed descriptions of tensors and models, shared by engines, readers and the generator.

Data types are named as Triton's inference API names them ("FP32", "BYTES", ...); the
config spelling is ``config_type(name)`` ("TYPE_FP32", "TYPE_STRING").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ge_python_backend.errors import ConfigError

#: Triton API data type name -> numpy dtype (None: no numpy equivalent).
NUMPY_DTYPES: dict[str, np.dtype | None] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": None,
}

_DTYPE_NAMES: dict[np.dtype, str] = {dtype: name for name, dtype in NUMPY_DTYPES.items() if dtype is not None}
_DTYPE_NAMES[np.dtype(np.bytes_)] = "BYTES"


def config_type(dtype: str) -> str:
    """Triton config enum name for an API data type name: FP32 -> TYPE_FP32, BYTES -> TYPE_STRING."""
    return "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"


def api_type(config_name: str) -> str:
    """API data type name for a config enum name: TYPE_STRING -> BYTES."""
    if not config_name.startswith("TYPE_"):
        raise ConfigError(f"data_type {config_name!r} is not a Triton data type (expected TYPE_*)")
    name = config_name[len("TYPE_") :]
    name = "BYTES" if name == "STRING" else name
    if name not in NUMPY_DTYPES:
        raise ConfigError(
            f"data_type {config_name!r} is not supported; accepted: " + ", ".join(config_type(n) for n in NUMPY_DTYPES)
        )
    return name


def numpy_dtype(dtype: str) -> np.dtype:
    """numpy dtype of an API data type name; BF16 has none and is refused."""
    try:
        result = NUMPY_DTYPES[dtype]
    except KeyError:
        raise ConfigError(f"unknown data type {dtype!r}; accepted: {', '.join(NUMPY_DTYPES)}") from None
    if result is None:
        raise ConfigError(f"data type {dtype} has no numpy equivalent and cannot be served")
    return result


def dtype_name(dtype: np.dtype | type) -> str:
    """API data type name of a numpy dtype (object and bytes arrays are BYTES)."""
    try:
        return _DTYPE_NAMES[np.dtype(dtype)]
    except KeyError:
        if np.dtype(dtype).kind in "SU":
            return "BYTES"
        raise ConfigError(f"numpy dtype {np.dtype(dtype)} has no Triton data type") from None


def dtype_text(dtype: np.dtype | type) -> str:
    """``dtype_name`` for messages: numpy's own name for a dtype Triton has no name for."""
    try:
        return dtype_name(dtype)
    except ConfigError:
        return f"numpy {np.dtype(dtype)}"


def format_shape(shape: tuple[int, ...]) -> str:
    """[-1,3,224,224] style text, -1 for a dynamic axis."""
    return "[" + ",".join(str(d) for d in shape) + "]"


#: Upper bound of a shape-range axis that has none ("-1" in ATC's --input_shape: any size >= 0).
UNBOUNDED = -1


def ranges_text(ranges: tuple[tuple[int, int], ...]) -> str:
    """Shape ranges as ATC writes them: ``[1~4,3,8~]`` (a fixed axis as its size)."""
    return "[" + ",".join(f"{lo}" if lo == hi else f"{lo}~{'' if hi == UNBOUNDED else hi}" for lo, hi in ranges) + "]"


def range_problem(name: str, ranges: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> str | None:
    """Why ``shape`` is outside the shape ranges of tensor ``name`` (None when it fits)."""
    if len(shape) != len(ranges):
        return f"{name!r} has rank {len(ranges)}, got shape {format_shape(tuple(shape))}"
    for axis, (size, (low, high)) in enumerate(zip(shape, ranges)):
        if size < low or (high != UNBOUNDED and size > high):
            bound = f"{low}.." + ("" if high == UNBOUNDED else str(high))
            return f"{name!r} axis {axis} is {size}; the model's range is {bound}"
    return None


def shape_fits(actual: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    """True when ``actual`` has the declared rank and matches it, -1 matching any size."""
    return len(actual) == len(declared) and all(d in (-1, a) for a, d in zip(actual, declared))


@dataclass(frozen=True)
class DevicePreprocessing:
    """What the device does to an input before the model sees it (Ascend AIPP).

    The client sends the image as ``pixel_format`` bytes (UINT8, NHWC); ``kind`` is
    "aipp-static" (the transform is compiled in) or "aipp-dynamic" (set per request);
    ``height``/``width`` the source image size (0: the model's own, or per request); ``steps`` the
    transform in the device's order; ``normalizes`` whether mean/variance are applied there (so
    the client must not apply them again).
    """

    kind: Literal["aipp-static", "aipp-dynamic"]
    pixel_format: str
    height: int = 0
    width: int = 0
    steps: tuple[str, ...] = ()
    normalizes: bool = False

    def describe(self) -> str:
        size = f" {self.width}x{self.height}" if self.width else ""
        steps = f": {', '.join(self.steps)}" if self.steps else ""
        return f"{self.kind} {self.pixel_format or 'per request'}{size}{steps}"


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output.

    ``shape`` is the full shape as the model file declares it (batch axis included), with -1
    for a dynamic axis. ``format`` is a layout name such as "NCHW", "NHWC" or "ND" ("" when
    unknown). ``native_type`` is the model file's own type name (e.g. "DT_FLOAT16"), kept for
    reports; ``dtype`` is "" when that type has no Triton equivalent.

    ``dim_names`` are the symbolic names of the axes where the model file has them (an ONNX
    ``dim_param`` such as "batch"; "" for an axis without one), or empty. ``dynamic_rank``
    marks a tensor whose rank the model file leaves open (an ONNX value without a shape); its
    ``shape`` is then empty and means nothing.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    format: str = ""
    optional: bool = False
    native_type: str = ""
    #: shape-range models: (min, max) per axis, max -1 when unbounded
    ranges: tuple[tuple[int, int], ...] = ()
    preprocessing: DevicePreprocessing | None = None
    dim_names: tuple[str, ...] = ()
    dynamic_rank: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in NUMPY_DTYPES and not (self.dtype == "" and self.native_type):
            raise ConfigError(f"tensor {self.name!r}: unknown data type {self.dtype!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dim_names", tuple(self.dim_names))
        if self.dim_names and len(self.dim_names) != len(self.shape):
            raise ValueError(f"tensor {self.name!r}: {len(self.dim_names)} dim names for rank {len(self.shape)}")
        if self.dynamic_rank and self.shape:
            raise ValueError(f"tensor {self.name!r}: a dynamic-rank tensor has no shape")

    @property
    def numpy_dtype(self) -> np.dtype:
        if not self.dtype:
            raise ConfigError(f"tensor {self.name!r} has type {self.native_type}, which has no Triton data type")
        return numpy_dtype(self.dtype)

    @property
    def is_dynamic(self) -> bool:
        return self.dynamic_rank or any(d < 0 for d in self.shape)

    @property
    def dynamic_aipp(self) -> bool:
        """A dynamic-AIPP image: its AIPP values and image size come with each request, never from a gear."""
        return self.preprocessing is not None and self.preprocessing.kind == "aipp-dynamic"

    def dim_name(self, axis: int) -> str:
        """The symbolic name of ``axis`` ("" when it has none)."""
        return self.dim_names[axis] if self.dim_names else ""

    def shape_text(self) -> str:
        """The shape as messages show it: [-1,3,224,224], or [*] for a dynamic rank."""
        return "[*]" if self.dynamic_rank else format_shape(self.shape)

    def byte_size(self, shape: tuple[int, ...] | None = None) -> int:
        """Bytes of a tensor of ``shape`` (default: the declared, fully static shape)."""
        dims = self.shape if shape is None else shape
        if any(d < 0 for d in dims):
            raise ValueError(f"tensor {self.name!r}: shape {format_shape(dims)} is not static")
        return math.prod(dims) * self.numpy_dtype.itemsize

    def describe(self) -> str:
        layout = f" {self.format}" if self.format else ""
        extra = f" ({self.preprocessing.describe()})" if self.preprocessing else ""
        return f"{self.name}: {self.dtype or self.native_type} {self.shape_text()}{layout}{extra}"


@dataclass(frozen=True)
class BatchSupport:
    """How a model accepts the batch axis (axis 0 of every input and output).

    kind:
      - "dynamic": any batch size from 1 (axis 0 is -1 everywhere) up to ``limit`` (None: no
        bound; a shape-range model's range gives one); ``sizes`` is empty;
      - "gears": only the listed sizes (an OM built with --dynamic_batch_size);
      - "static": exactly ``sizes[0]`` (axis 0 is fixed in the model file);
      - "none": the model has no batch axis that can be used (rank 0, or axis 0 is not batch).
    """

    kind: str
    sizes: tuple[int, ...] = ()
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("dynamic", "gears", "static", "none"):
            raise ValueError(f"unknown batch support kind {self.kind!r}")
        object.__setattr__(self, "sizes", tuple(sorted(int(s) for s in self.sizes)))
        if self.kind in ("gears", "static") and not self.sizes:
            raise ValueError(f"batch support {self.kind!r} needs sizes")

    @property
    def largest(self) -> int | None:
        """Largest runnable batch; None when unbounded (dynamic) or not applicable (none)."""
        return self.sizes[-1] if self.sizes else self.limit


@dataclass(frozen=True)
class ShapeGear:
    """One compiled shape alternative of a model with dynamic image size or dynamic dims.

    ``shapes`` maps input names to full shapes; -1 stays only on a batch axis that dynamic
    batch (or the batch planner) decides.
    """

    shapes: Mapping[str, tuple[int, ...]]
    label: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """What a model file takes and returns, independent of where it runs.

    ``inputs`` are the inputs a client provides: runtime-internal inputs (the OM's
    ``ascend_mbatch_shape_data``) are not listed. ``shape_gears`` lists the compiled
    image-size or dims alternatives (kind in ``gear_kind``: "hw" or "dims"). ``facts`` holds
    provenance such as soc_version, atc_version, atc_cmdline, framework or producer.
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: BatchSupport
    shape_gears: tuple[ShapeGear, ...] = ()
    gear_kind: str = ""
    source: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)

    def input(self, name: str) -> TensorSpec:
        return _by_name(self.inputs, name, "input")

    def output(self, name: str) -> TensorSpec:
        return _by_name(self.outputs, name, "output")


def _by_name(specs: tuple[TensorSpec, ...], name: str, kind: str) -> TensorSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise KeyError(f"model has no {kind} named {name!r}; it has {[s.name for s in specs]}")


def batch_support_from_shapes(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> BatchSupport:
    """Infer batch support from declared shapes: axis 0 dynamic everywhere -> dynamic;
    axis 0 equal and fixed everywhere -> static; otherwise none.

    A model without inputs has nothing to batch, and one whose inputs name their axis 0
    differently (ONNX ``a [N,2]``, ``b [M,2]``) has no common batch axis: both are "none"."""
    tensors = inputs + outputs
    if not inputs or any(len(t.shape) == 0 for t in tensors):
        return BatchSupport("none")
    if len({t.dim_name(0) for t in inputs} - {""}) > 1:
        return BatchSupport("none")
    first_axes = {t.shape[0] for t in tensors}
    if first_axes == {-1}:
        return BatchSupport("dynamic")
    if len(first_axes) == 1 and -1 not in first_axes:
        return BatchSupport("static", (first_axes.pop(),))
    return BatchSupport("none")


@dataclass(frozen=True)
class Tensor:
    """A tensor a model's clients send or get, as its config declares it: ``dtype`` a Triton
    data type (``FP32``, ``INT64``, ``BYTES`` for strings; ``TYPE_FP32`` spellings too), ``dims``
    without the batch axis when the model batches (-1 for a variable size)."""

    name: str
    dtype: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        dtype = self.dtype.removeprefix("TYPE_")
        dtype = "BYTES" if dtype == "STRING" else dtype
        if dtype not in NUMPY_DTYPES:
            raise ValueError(f"tensor {self.name!r}: data type {self.dtype!r}; accepted: {', '.join(NUMPY_DTYPES)}")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))

    def config_entry(self) -> dict[str, Any]:
        """Its entry in Triton's JSON form of a model config."""
        return {"name": self.name, "data_type": config_type(self.dtype), "dims": list(self.dims)}
