"""``sim_compile``: turn an .onnx file into a simulated .om, the way ATC turns it into a real one.

It fixes the input shapes (``input_shapes``, ATC's ``--input_shape``), compiles the gears
(``batch_gears`` / ``dynamic_image_size`` / ``dynamic_dims``, ATC's ``--dynamic_batch_size`` /
``--dynamic_image_size`` / ``--dynamic_dims``), adds the ``ascend_mbatch_shape_data`` input of a
dynamic model as its last input, and validates every gear by running it once on ONNX Runtime
(which also yields each gear's output shapes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ge_python_backend.ascend.constants import AclDataType, data_type_named
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout, Shape
from ge_python_backend.ascend.simom import SimOm, write_sim_om
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec, format_shape, numpy_dtype
from ge_python_backend.version import __version__

#: ONNX TensorProto element type -> aclDataType name.
_ONNX_TYPES = {
    1: "FLOAT",
    2: "UINT8",
    3: "INT8",
    4: "UINT16",
    5: "INT16",
    6: "INT32",
    7: "INT64",
    9: "BOOL",
    10: "FLOAT16",
    11: "DOUBLE",
    12: "UINT32",
    13: "UINT64",
    14: "COMPLEX64",
    15: "COMPLEX128",
    16: "BF16",
}
INPUT_FORMATS = ("NCHW", "NHWC", "ND")


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4) ("" -> ()); ConfigError naming ``what`` otherwise."""
    if not text.strip():
        return ()
    try:
        values = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a comma-separated list of integers") from None
    return values


def parse_gear_list(text: str, what: str) -> tuple[tuple[int, ...], ...]:
    """``"224,224;448,448"`` -> ((224, 224), (448, 448))."""
    return tuple(parse_int_list(part.strip(), what) for part in text.split(";") if part.strip())


def parse_input_shapes(text: str) -> dict[str, Shape]:
    """``"x:-1,3,224,224;y:-1,4"`` -> {"x": (-1, 3, 224, 224), "y": (-1, 4)} (ATC's --input_shape)."""
    shapes: dict[str, Shape] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise ConfigError(f"input shape {part!r} is not NAME:D0,D1,... (e.g. x:-1,3,224,224)")
        shapes[name] = parse_int_list(dims, f"input shape of {name!r}") if dims else ()
    return shapes


def _onnx_inputs(model) -> list[tuple[str, int, Shape]]:
    initializers = {i.name for i in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tensor_type.shape.dim)
        found.append((value.name, tensor_type.elem_type, dims))
    return found


def _acl_type(name: str, elem_type: int) -> AclDataType:
    try:
        return data_type_named(_ONNX_TYPES[elem_type])
    except KeyError:
        raise ConfigError(f"tensor {name!r}: ONNX element type {elem_type} has no aclDataType") from None


def _check_shapes(given: Mapping[str, Sequence[int]], onnx_inputs: list[tuple[str, int, Shape]]) -> dict[str, Shape]:
    names = [n for n, _, _ in onnx_inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConfigError(f"input shape given for {unknown[0]!r}, which the model does not have; inputs: {names}")
    shapes = {}
    for name, _, dims in onnx_inputs:
        shape = tuple(int(d) for d in given.get(name, dims))
        if len(shape) != len(dims):
            raise ConfigError(
                f"input {name!r}: shape {format_shape(shape)} has rank {len(shape)}, the model's has {len(dims)}"
            )
        for axis, (want, have) in enumerate(zip(shape, dims)):
            if want < -1 or want == 0 or (have > 0 and want > 0 and want != have):
                raise ConfigError(f"input {name!r} axis {axis}: {want} does not fit the model's {format_shape(dims)}")
        shapes[name] = shape
    return shapes


def _gears(kind: str, values: Sequence[Sequence[int]], shapes: Mapping[str, Shape]) -> tuple[Shape, ...]:
    """Validate the requested gears against the -1 axes and return them as the runtime lists them."""
    dynamic = {n: s for n, s in shapes.items() if -1 in s}
    if not kind:
        if dynamic:
            name, shape = next(iter(dynamic.items()))
            raise ConfigError(
                f"input {name!r} {format_shape(shape)} has dynamic axes; fix them with input_shapes or compile gears"
            )
        return ()
    if not dynamic:
        raise ConfigError(f"{kind} gears need an input with -1 axes (set them with input_shapes)")
    if any(v <= 0 for gear in values for v in gear):
        raise ConfigError(f"{kind} gears must be positive, got {[list(g) for g in values]}")
    if len(set(map(tuple, values))) != len(values):
        raise ConfigError(f"{kind} gears repeat a value: {[list(g) for g in values]}")
    if kind == "batch":
        for name, shape in dynamic.items():
            if [a for a, d in enumerate(shape) if d < 0] != [0]:
                raise ConfigError(f"dynamic batch: input {name!r} {format_shape(shape)} may be -1 only on axis 0")
        return tuple(sorted((int(g[0]),) for g in values))
    if kind == "hw":
        for name, shape in dynamic.items():
            if sum(d < 0 for d in shape) != 2:
                raise ConfigError(
                    f"dynamic image size: input {name!r} {format_shape(shape)} needs exactly two -1 axes (H, W)"
                )
        if any(len(g) != 2 for g in values):
            raise ConfigError(f"dynamic image size gears must be height,width pairs, got {[list(g) for g in values]}")
        return tuple(tuple(int(v) for v in g) for g in values)
    free = sum(d < 0 for s in dynamic.values() for d in s)
    gears = []
    for gear in values:
        if len(gear) != free:
            raise ConfigError(f"dynamic dims gear {list(gear)} has {len(gear)} values; the inputs have {free} -1 axes")
        it = iter(gear)
        gears.append(tuple(next(it) if d < 0 else d for s in dynamic.values() for d in s))
    return tuple(gears)


def _run_gears(session, layout: ModelLayout, output_names: list[str]) -> list[list[np.ndarray]]:
    """Run every gear once on zeros; the results give each gear's output shapes."""
    results = []
    for g in range(layout.gear_count):
        feeds = {
            t.name: np.zeros(shape, dtype=_numpy(t)) for t, shape in zip(layout.inputs, layout.input_shapes(g).values())
        }
        try:
            results.append(session.run(output_names, feeds))
        except Exception as exc:  # ONNX Runtime raises several private exception types
            shapes = ", ".join(f"{n} {format_shape(a.shape)}" for n, a in feeds.items())
            raise ConfigError(f"gear {layout.gear_label(g)}: ONNX Runtime cannot run ({shapes}): {exc}") from None
    return results


def _numpy(tensor: LayoutTensor) -> np.dtype:
    if not tensor.data_type.triton:
        raise ConfigError(
            f"tensor {tensor.name!r} has type {tensor.data_type.name}, which the simulator cannot run "
            f"(it {tensor.data_type.unsupported})"
        )
    return numpy_dtype(tensor.data_type.triton)


def _layout_format(shape: Shape, input_format: str) -> str:
    return input_format if len(shape) == 4 else "ND"


def sim_compile(
    onnx_path: str | Path,
    out_path: str | Path,
    *,
    batch_gears: Sequence[int] | str = (),
    input_shapes: Mapping[str, Sequence[int]] | str | None = None,
    dynamic_image_size: Sequence[Sequence[int]] | str = (),
    dynamic_dims: Sequence[Sequence[int]] | str = (),
    input_format: str | None = None,
) -> ModelSpec:
    """Compile ``onnx_path`` into the sim-OM ``out_path`` and return its ModelSpec.

    Strings are accepted in ATC's spelling ("1,2,4,8"; "x:-1,3,224,224;y:-1,4";
    "224,224;448,448"; "1,2;3,4" with one value per -1 axis).
    """
    import onnx
    import onnxruntime as ort

    if isinstance(batch_gears, str):
        batch_gears = parse_int_list(batch_gears, "batch gears")
    if isinstance(input_shapes, str):
        input_shapes = parse_input_shapes(input_shapes)
    if isinstance(dynamic_image_size, str):
        dynamic_image_size = parse_gear_list(dynamic_image_size, "dynamic image size")
    if isinstance(dynamic_dims, str):
        dynamic_dims = parse_gear_list(dynamic_dims, "dynamic dims")
    requested: dict[str, list[Shape]] = {
        "batch": [(b,) for b in batch_gears],
        "hw": [tuple(g) for g in dynamic_image_size],
        "dims": [tuple(g) for g in dynamic_dims],
    }
    kinds = [k for k, v in requested.items() if v]
    if len(kinds) > 1:
        raise ConfigError("batch gears, dynamic image size and dynamic dims are mutually exclusive; give one")
    kind = kinds[0] if kinds else ""
    fmt = input_format or "NCHW"
    if fmt not in INPUT_FORMATS:
        raise ConfigError(f"input format {fmt!r} is not supported; accepted: {', '.join(INPUT_FORMATS)}")

    onnx_bytes = Path(onnx_path).read_bytes()
    try:
        model = onnx.load_from_string(onnx_bytes)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ConfigError(f"{onnx_path} is not an ONNX model: {exc}") from None
    onnx_inputs = _onnx_inputs(model)
    shapes = _check_shapes(input_shapes or {}, onnx_inputs)
    gears = _gears(kind, requested.get(kind, []), shapes)
    types = {name: _acl_type(name, elem) for name, elem, _ in onnx_inputs}
    draft_inputs = tuple(
        LayoutTensor(name, types[name], _layout_format(shape, fmt), shape, 0) for name, shape in shapes.items()
    )
    draft = ModelLayout(draft_inputs, (), kind, gears)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    output_types = {o.name: _acl_type(o.name, o.type.tensor_type.elem_type) for o in model.graph.output}
    output_names = list(output_types)
    results = _run_gears(session, draft, output_names)

    inputs = tuple(
        LayoutTensor(
            t.name,
            t.data_type,
            t.format,
            t.dims,
            max(t.byte_size(draft.input_shapes(g)[t.name]) for g in range(draft.gear_count)),
        )
        for t in draft_inputs
    )
    outputs = []
    for i, name in enumerate(output_names):
        per_gear = [r[i] for r in results]
        if len({a.ndim for a in per_gear}) != 1:
            raise ConfigError(f"output {name!r} changes rank between gears: {[a.shape for a in per_gear]}")
        dims = tuple(int(max(a.shape[axis] for a in per_gear)) for axis in range(per_gear[0].ndim))
        outputs.append(
            LayoutTensor(name, output_types[name], _layout_format(dims, fmt), dims, max(a.nbytes for a in per_gear))
        )
    layout = ModelLayout(
        inputs,
        tuple(outputs),
        kind,
        gears,
        tuple(tuple(tuple(int(d) for d in a.shape) for a in r) for r in results),
    )
    producer = {
        "tool": "ge-triton sim-compile",
        "version": __version__,
        "onnx_file": Path(onnx_path).name,
        "onnx_sha256": hashlib.sha256(onnx_bytes).hexdigest(),
        "options": _describe_options(kind, requested.get(kind, []), shapes, fmt),
    }
    om = SimOm(layout, producer, onnx_bytes)
    write_sim_om(out_path, om)
    return om.spec()


def _describe_options(kind: str, values: Sequence[Shape], shapes: Mapping[str, Shape], fmt: str) -> str:
    """The compile options in ATC's spelling, kept as a provenance fact."""
    parts = [
        "--input_shape=" + ";".join(f"{n}:{','.join(map(str, s))}" for n, s in shapes.items()),
        f"--input_format={fmt}",
    ]
    flag = {
        "batch": ("--dynamic_batch_size", ","),
        "hw": ("--dynamic_image_size", ";"),
        "dims": ("--dynamic_dims", ";"),
    }
    if kind:
        name, separator = flag[kind]
        parts.append(f"{name}=" + separator.join(",".join(map(str, g)) for g in values))
    return " ".join(parts)
