"""``sim_compile``: turn an .onnx file into a simulated .om, the way ATC turns it into a real one.

It takes ATC's own options (hicann/ge docs/zh/user_guides/atc_tools/CLI_options/):

- ``input_shape`` (``--input_shape="x:-1,3,224,224;y:1,-1"``): the inputs it names, in that order,
  with -1 on dynamic axes or ``a~b`` ranges. With gears, -1 marks the gear axes; without gears,
  -1 (= ``0~``, any size, option_utils.cc 230-272) and ranges make a shape-range model;
- ``dynamic_batch_size`` / ``dynamic_image_size`` / ``dynamic_dims`` (mutually exclusive): the
  gears; a dims gear lists one value per -1 axis of ``input_shape``, in its order
  (``--dynamic_dims.md``: "each gear's values map in order to the -1 entries of --input_shape");
- ``input_format`` (``--input_format``): NCHW, NHWC or ND;
- ``insert_op_conf`` (``--insert_op_conf``): an AIPP config in ATC's ``aipp_op { ... }`` syntax.

Like ATC it adds ``ascend_mbatch_shape_data`` (INT32 [k]) as the last input of a model with
gears, rewrites an AIPP input to UINT8 NHWC image dims (V2 dims for the buffer, V1 for the image),
adds ``ascend_dynamic_aipp_data`` (UINT8, 64 + 96 x N bytes) behind a dynamic-AIPP image, and
refuses what ATC refuses (fewer than 2 gears, gears of the wrong length, repeated gears, dims with
AIPP). Every gear is run once on ONNX Runtime, which yields each gear's output shapes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.ascend.aipp import (
    DYNAMIC_AIPP_BATCH_BYTES,
    DYNAMIC_AIPP_HEAD_BYTES,
    DYNAMIC_AIPP_INPUT,
    AippConfig,
    AippInputFormat,
    AippMode,
    parse_aipp_config,
)
from ge_python_backend.ascend.atcflags import (
    Dim,
    axis_range,
    format_dims,
    parse_aicore_num,
    parse_gear_list,
    parse_input_shape,
    parse_int_list,
)
from ge_python_backend.ascend.constants import AclDataType, data_type_named
from ge_python_backend.ascend.layout import GearKind, LayoutTensor, ModelLayout, Shape
from ge_python_backend.errors import ConfigError
from ge_python_backend.sim.simom import (
    InputRole,
    ModelInput,
    NetworkInput,
    SimOm,
    dynamic_shape_input,
    write_sim_om,
)
from ge_python_backend.specs import UNBOUNDED, ModelSpec, format_shape, numpy_dtype
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
#: ATC's gear count limits (--dynamic_batch_size.md / --dynamic_dims.md: 2..100).
MIN_GEARS, MAX_GEARS = 2, 100


@dataclass(frozen=True)
class AtcOptions:
    """What ATC is told about the inputs (the sim-compile subset of its flags)."""

    input_shape: Mapping[str, tuple[Dim, ...]] = field(default_factory=dict)
    input_format: str = "NCHW"
    dynamic_batch_size: tuple[int, ...] = ()
    dynamic_image_size: tuple[tuple[int, ...], ...] = ()
    dynamic_dims: tuple[tuple[int, ...], ...] = ()
    insert_op_conf: tuple[AippConfig, ...] = ()
    #: --soc_version: recorded in the file; a load on a device of another NpuArch is refused, as CANN
    #: refuses it (ascend/limits.py:arch_compatible)
    soc_version: str = ""
    #: --aicore_num ("4|", "12|10"): the cores each operator runs on; recorded in the file, the simulated
    #: device gives an execution that many of its cores (sim/device.py:execution_demand)
    aicore_num: str = ""

    @property
    def kind(self) -> GearKind:
        options: tuple[tuple[GearKind, tuple], ...] = (
            ("batch", self.dynamic_batch_size),
            ("hw", self.dynamic_image_size),
            ("dims", self.dynamic_dims),
        )
        given = [k for k, v in options if v]
        if len(given) > 1:
            raise ConfigError(
                "--dynamic_batch_size, --dynamic_image_size and --dynamic_dims are mutually exclusive; give one"
            )
        if given:
            return given[0]
        ranged = any(d == -1 or isinstance(d, tuple) for dims in self.input_shape.values() for d in dims)
        return "range" if ranged else ""

    def command_line(self) -> str:
        """These options in ATC's spelling (kept in the file as a provenance fact)."""
        parts = []
        if self.input_shape:
            parts.append("--input_shape=" + ";".join(f"{n}:{format_dims(d)}" for n, d in self.input_shape.items()))
        parts.append(f"--input_format={self.input_format}")
        if self.dynamic_batch_size:
            parts.append("--dynamic_batch_size=" + ",".join(map(str, self.dynamic_batch_size)))
        if self.dynamic_image_size:
            parts.append("--dynamic_image_size=" + ";".join(",".join(map(str, g)) for g in self.dynamic_image_size))
        if self.dynamic_dims:
            parts.append("--dynamic_dims=" + ";".join(",".join(map(str, g)) for g in self.dynamic_dims))
        if self.insert_op_conf:
            parts.append("--insert_op_conf=<aipp config>")
        if self.soc_version:
            parts.append(f"--soc_version={self.soc_version}")
        if self.aicore_num:
            parts.append(f"--aicore_num={self.aicore_num}")
        return " ".join(parts)


# -- ATC's option strings -------------------------------------------------------------------


def atc_options(
    *,
    input_shape: Mapping[str, Sequence[Dim]] | str | None = None,
    input_format: str | None = None,
    dynamic_batch_size: Sequence[int] | str = (),
    dynamic_image_size: Sequence[Sequence[int]] | str = (),
    dynamic_dims: Sequence[Sequence[int]] | str = (),
    insert_op_conf: str | Path | Sequence[AippConfig] | None = None,
    soc_version: str = "",
    aicore_num: str = "",
) -> AtcOptions:
    """ATC options from its flag strings (or already parsed values)."""
    if aicore_num:
        parse_aicore_num(aicore_num)
    if isinstance(input_shape, str):
        input_shape = parse_input_shape(input_shape)
    if isinstance(dynamic_batch_size, str):
        dynamic_batch_size = parse_int_list(dynamic_batch_size, "--dynamic_batch_size")
    if isinstance(dynamic_image_size, str):
        dynamic_image_size = parse_gear_list(dynamic_image_size, "--dynamic_image_size")
    if isinstance(dynamic_dims, str):
        dynamic_dims = parse_gear_list(dynamic_dims, "--dynamic_dims")
    if isinstance(insert_op_conf, (str, Path)):
        path = Path(insert_op_conf)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--insert_op_conf {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"--insert_op_conf {path} is not a text file in ATC's aipp_op syntax ({exc.reason} at byte {exc.start})"
            ) from None
        insert_op_conf = parse_aipp_config(text, str(path))
    fmt = input_format or "NCHW"
    if fmt not in INPUT_FORMATS:
        raise ConfigError(f"--input_format {fmt!r} is not supported; accepted: {', '.join(INPUT_FORMATS)}")
    return AtcOptions(
        input_shape={
            n: tuple(d if isinstance(d, tuple) else int(d) for d in s) for n, s in (input_shape or {}).items()
        },
        input_format=fmt,
        dynamic_batch_size=tuple(int(b) for b in dynamic_batch_size),
        dynamic_image_size=tuple(tuple(int(v) for v in g) for g in dynamic_image_size),
        dynamic_dims=tuple(tuple(int(v) for v in g) for g in dynamic_dims),
        insert_op_conf=tuple(insert_op_conf or ()),
        soc_version=soc_version,
        aicore_num=aicore_num,
    )


# -- the model's inputs -----------------------------------------------------------------------


@dataclass(frozen=True)
class _OnnxInput:
    name: str
    data_type: AclDataType
    dims: Shape  # -1 where the ONNX file leaves the axis open


def _onnx_inputs(model: Any) -> list[_OnnxInput]:
    initializers = {i.name for i in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tensor_type.shape.dim)
        found.append(_OnnxInput(value.name, _acl_type(value.name, tensor_type.elem_type), dims))
    return found


def _acl_type(name: str, elem_type: int) -> AclDataType:
    try:
        return data_type_named(_ONNX_TYPES[elem_type])
    except KeyError:
        raise ConfigError(f"tensor {name!r}: ONNX element type {elem_type} has no aclDataType") from None


def _shapes(options: AtcOptions, onnx_inputs: list[_OnnxInput]) -> dict[str, tuple[Dim, ...]]:
    """Each input's dims: --input_shape's, else the ONNX file's. Unlike ATC, which wants every dynamic
    input named in --input_shape, a model compiled with gears may leave it out: its -1 axes are then the
    gear axes, in the model's input order."""
    names = [i.name for i in onnx_inputs]
    unknown = [n for n in options.input_shape if n not in names]
    if unknown:
        raise ConfigError(f"--input_shape names {unknown[0]!r}, which the model does not have; inputs: {names}")
    shapes: dict[str, tuple[Dim, ...]] = {}
    for onnx_input in onnx_inputs:
        given = options.input_shape.get(onnx_input.name)
        dims: tuple[Dim, ...] = tuple(given) if given is not None else onnx_input.dims
        if len(dims) != len(onnx_input.dims):
            raise ConfigError(
                f"input {onnx_input.name!r}: --input_shape gives rank {len(dims)}, the model has "
                f"{format_shape(onnx_input.dims)}"
            )
        for axis, (want, have) in enumerate(zip(dims, onnx_input.dims)):
            if isinstance(want, int) and want > 0 and have > 0 and want != have:
                raise ConfigError(
                    f"input {onnx_input.name!r} axis {axis}: {want} does not fit the model's "
                    f"{format_shape(onnx_input.dims)}"
                )
            if want == 0:
                raise ConfigError(f"input {onnx_input.name!r} axis {axis}: 0 is not a size ATC compiles")
        if given is None and any(d < 0 for d in onnx_input.dims) and not options.kind:
            raise ConfigError(
                f"input {onnx_input.name!r} {format_shape(onnx_input.dims)} has dynamic axes; name it in "
                "--input_shape with fixed sizes, ranges (1~8) or -1 on the axes of gears"
            )
        shapes[onnx_input.name] = dims
    return shapes


def _gears(options: AtcOptions, shapes: Mapping[str, tuple[Dim, ...]]) -> tuple[Shape, ...]:
    """Validate the requested gears against the -1 axes (ATC's checks, multi_batch_options.cc 32, 477-500, 613-655)."""
    kind = options.kind
    if kind in ("", "range"):
        return ()
    values: tuple[tuple[int, ...], ...] = {
        "batch": tuple((b,) for b in options.dynamic_batch_size),
        "hw": options.dynamic_image_size,
        "dims": options.dynamic_dims,
    }[kind]
    dynamic = {n: [a for a, d in enumerate(s) if d == -1] for n, s in shapes.items() if -1 in s}
    if any(isinstance(d, tuple) for s in shapes.values() for d in s):
        raise ConfigError("shape ranges (a~b) cannot be combined with gears")
    if not dynamic:
        raise ConfigError(f"{kind} gears need an input with -1 axes in --input_shape")
    if not MIN_GEARS <= len(values) <= MAX_GEARS:
        raise ConfigError(f"{len(values)} gear(s) given; ATC compiles {MIN_GEARS} to {MAX_GEARS}")
    if any(v <= 0 for gear in values for v in gear):
        raise ConfigError(f"gears must be positive, got {[list(g) for g in values]}")
    if len(set(values)) != len(values):
        raise ConfigError(f"gears repeat a value: {[list(g) for g in values]}")
    if kind == "batch":
        # ATC's --dynamic_batch_size check: an --input_shape entry without dims is refused (E10012), one
        # without -1 is left as it is in every gear (option_utils.cc:312-337; multi_batch_clone_pass.cc:1124-1127)
        empty = [n for n, dims in options.input_shape.items() if not dims]
        if empty:
            raise ConfigError(f"--input_shape gives {empty[0]!r} no dims; ATC refuses it with --dynamic_batch_size")
    _check_gear_axes(kind, values, dynamic)
    return tuple(sorted(values)) if kind == "batch" else values


def _check_gear_axes(kind: GearKind, values: tuple[tuple[int, ...], ...], dynamic: Mapping[str, list[int]]) -> None:
    if kind == "batch":
        for name, axes in dynamic.items():
            if axes != [0]:
                raise ConfigError(f"--dynamic_batch_size: input {name!r} may be -1 only on axis 0")
    elif kind == "hw":
        for name, axes in dynamic.items():
            if len(axes) != 2:
                raise ConfigError(f"--dynamic_image_size: input {name!r} needs exactly two -1 axes (H, W)")
        if any(len(g) != 2 for g in values):
            raise ConfigError(f"--dynamic_image_size gears are height,width pairs, got {[list(g) for g in values]}")
    else:
        free = sum(len(axes) for axes in dynamic.values())
        for gear in values:
            if len(gear) != free:
                raise ConfigError(
                    f"--dynamic_dims gear {list(gear)} has {len(gear)} values; --input_shape has {free} -1 axes"
                )


# -- AIPP ---------------------------------------------------------------------------------------


def _aipp_by_input(options: AtcOptions, names: list[str], kind: GearKind) -> dict[str, AippConfig]:
    if not options.insert_op_conf:
        return {}
    if kind not in ("", "batch", "range"):
        raise ConfigError(
            f"--insert_op_conf with {'--dynamic_dims' if kind == 'dims' else kind + ' gears'}: ATC refuses AIPP "
            "with dynamic dims; sim-compile models AIPP on static, dynamic-batch and shape-range models only"
        )
    found = {}
    for config in options.insert_op_conf:
        if config.related_input_rank >= len(names):
            raise ConfigError(
                f"aipp_op related_input_rank {config.related_input_rank}: the model has {len(names)} input(s)"
            )
        found[names[config.related_input_rank]] = config
    return found


def _aipp_input(
    name: str, network: _OnnxInput, dims: Shape, fmt: str, config: AippConfig, batches: tuple[int, int], ranged: bool
) -> tuple[LayoutTensor, NetworkInput]:
    """The UINT8 NHWC image input ATC puts in front of ``network`` (Aipp InferShape, insert_aipp_op_util.cc
    672-709) for ``batches`` (the smallest and largest batch: the gears, the range of axis 0, or the fixed
    N). In a shape-range model (``ranged``) the image keeps the network's shape range on axis 0
    (insert_aipp_op_util.cc:470-497 copies it onto the Data); sim-compile takes a range on that axis
    only, and for dynamic AIPP a bounded one (the parameter input is sized by it)."""
    if len(dims) != 4 or fmt == "ND":
        raise ConfigError(
            f"AIPP on input {name!r}: the network input must be 4-D NCHW or NHWC, got {format_shape(dims)}"
        )
    n, c, h, w = dims if fmt == "NCHW" else (dims[0], dims[3], dims[1], dims[2])
    if min(c, h, w) < 0:
        raise ConfigError(
            f"AIPP on input {name!r}: its channels, height and width must be fixed, got {format_shape(dims)}"
        )
    if network.data_type.name not in ("FLOAT", "FLOAT16", "UINT8", "INT8"):
        raise ConfigError(
            f"AIPP on input {name!r}: the network input is {network.data_type.name}; AIPP feeds "
            "FLOAT16 (or UINT8/INT8) pixels"
        )
    problems = config.problems((n, c, h, w))
    if problems:
        raise ConfigError(f"AIPP on input {name!r}: " + "; ".join(problems))
    smallest, largest = batches
    dynamic = config.aipp_mode is AippMode.DYNAMIC
    if ranged and dynamic and largest == UNBOUNDED:
        raise ConfigError(
            f"dynamic AIPP on input {name!r}: its batch axis has no upper bound ({format_shape(dims)}); give it one "
            "(e.g. 1~8), which sizes the AIPP parameter input"
        )
    net = NetworkInput(network.data_type, fmt, dims)
    u8 = data_type_named("UINT8")
    ranges: tuple[tuple[int, int], ...] = ()
    if dynamic:
        ranges = ((smallest, largest),) + ((0, UNBOUNDED),) * 3 if ranged else ()
        tensor = LayoutTensor(name, u8, "NHWC", (n, -1, -1, -1), config.max_src_image_size, ranges=ranges, aipp=config)
        return tensor, net
    image_format = config.input_format or AippInputFormat.RGB888_U8
    src_h, src_w = config.source_size(h, w)
    v2 = image_format.v2_shape(n, src_h, src_w)
    v1 = image_format.v1_shape(n, src_h, src_w)
    size = image_format.byte_size(largest, src_h, src_w) if largest != UNBOUNDED else 0
    ranges = ((smallest, largest),) + tuple((d, d) for d in v2[1:]) if ranged else ()
    image = LayoutTensor(name, u8, "NHWC", v2, size, image_dims=v1 if v1 != v2 else (), ranges=ranges, aipp=config)
    return image, net


def _aipp_data_input(image: str, batch: int, first: bool) -> LayoutTensor:
    """The dynamic-AIPP parameter input: UINT8 [64 + 96 x N] (aipp_op.cc 114-169; acl_aipp_om2.cpp 372-382)."""
    size = DYNAMIC_AIPP_HEAD_BYTES + DYNAMIC_AIPP_BATCH_BYTES * batch
    name = DYNAMIC_AIPP_INPUT if first else f"{DYNAMIC_AIPP_INPUT}_{image}"
    return LayoutTensor(name, data_type_named("UINT8"), "ND", (size,), size)


# -- compile ----------------------------------------------------------------------------------


def sim_compile(
    onnx_path: str | Path,
    out_path: str | Path,
    *,
    batch_gears: Sequence[int] | str = (),
    input_shapes: Mapping[str, Sequence[Dim]] | str | None = None,
    dynamic_image_size: Sequence[Sequence[int]] | str = (),
    dynamic_dims: Sequence[Sequence[int]] | str = (),
    input_format: str | None = None,
    insert_op_conf: str | Path | Sequence[AippConfig] | None = None,
    soc_version: str = "",
    stream_num: int | None = None,
    event_num: int | None = None,
    aicore_num: str = "",
) -> ModelSpec:
    """Compile ``onnx_path`` into the sim-OM ``out_path`` and return its ModelSpec.

    Strings are accepted in ATC's spelling: ``batch_gears`` is --dynamic_batch_size ("1,2,4,8"),
    ``input_shapes`` --input_shape ("x:-1,3,224,224;y:1~8,4"), ``dynamic_image_size``
    ("224,224;448,448"), ``dynamic_dims`` ("1,2;3,4": the -1 values in --input_shape order),
    ``insert_op_conf`` an AIPP config file (or parsed configs). ``stream_num`` and ``event_num``
    record the streams and events the model creates at load, as ATC records them in a real .om
    (graph_builder.cc 189-190); unset, the simulator counts one stream and no events. ``aicore_num``
    is --aicore_num ("4|"): each execution runs on that many of the device's AI Cores.
    """
    options = atc_options(
        input_shape=input_shapes,
        input_format=input_format,
        dynamic_batch_size=batch_gears,
        dynamic_image_size=dynamic_image_size,
        dynamic_dims=dynamic_dims,
        insert_op_conf=insert_op_conf,
        soc_version=soc_version,
        aicore_num=aicore_num,
    )
    return compile_model(Path(onnx_path), Path(out_path), options, resources=(stream_num, event_num))


def compile_model(
    onnx_path: Path, out_path: Path, options: AtcOptions, resources: tuple[int | None, int | None] = (None, None)
) -> ModelSpec:
    """``sim_compile`` on parsed ATC options."""
    import onnx

    try:
        model = onnx.load_from_string(onnx_path.read_bytes())
    except Exception as exc:  # protobuf DecodeError and friends
        raise ConfigError(f"{onnx_path} is not an ONNX model: {exc}") from None
    _embed_external_data(model, onnx_path)
    onnx_bytes = model.SerializeToString()
    onnx_inputs = _onnx_inputs(model)
    kind = options.kind
    shapes = _shapes(options, onnx_inputs)
    gears = _gears(options, shapes)
    aipps = _aipp_by_input(options, [i.name for i in onnx_inputs], kind)
    model_inputs, clients = _inputs(options, onnx_inputs, shapes, gears, aipps)
    order = tuple(options.input_shape or [n for n, d in shapes.items() if -1 in d]) if kind == "dims" else ()
    draft = ModelLayout(clients, (), kind, gears, shape_order=order)
    session = _session(onnx_bytes)
    output_types = {o.name: _acl_type(o.name, o.type.tensor_type.elem_type) for o in model.graph.output}
    output_dims = {
        o.name: tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in o.type.tensor_type.shape.dim
        )
        for o in model.graph.output
    }
    results = _run_gears(session, draft, list(output_types), model_inputs)
    bounded = all(_largest(t) is not None for t in clients)
    clients = tuple(_sized(t, draft) for t in clients)
    model_inputs = [ModelInput(_sized(m.tensor, draft), m.role, m.image, m.network) for m in model_inputs]
    outputs = tuple(
        _output(name, output_types[name], output_dims[name], [r[i] for r in results], options, kind, bounded)
        for i, name in enumerate(output_types)
    )
    gear_outputs = () if kind == "range" else tuple(tuple(tuple(int(d) for d in a.shape) for a in r) for r in results)
    layout = ModelLayout(clients, outputs, kind, gears, gear_outputs, shape_order=order)
    if kind in ("batch", "hw", "dims"):
        model_inputs.append(ModelInput(dynamic_shape_input(layout), InputRole.DYNAMIC_SHAPE))
    producer = {
        "tool": "ge-triton sim-compile",
        "version": __version__,
        "onnx_file": onnx_path.name,
        "onnx_sha256": hashlib.sha256(onnx_bytes).hexdigest(),
        "options": options.command_line(),
    }
    if options.soc_version:  # what the load checks against the device (om_file_helper.cc 259-287)
        producer["soc_version"] = options.soc_version
    if options.aicore_num:  # the cores each execution takes on the simulated device
        producer["aicore_num"] = options.aicore_num
    om = SimOm(layout, tuple(model_inputs), producer, onnx_bytes, True, *resources)
    write_sim_om(out_path, om)
    return om.spec()


def _embed_external_data(model: Any, onnx_path: Path) -> None:
    """Read the weights the graph keeps in external-data files into the model (the sim-OM carries
    the whole model, as an .om carries its weights). Each ``location`` is taken relative to the
    folder of the model file's real path, as ATC's ONNX parser takes it (hicann/ge
    parser/parser/onnx/onnx_parser.cc:791-860), with its ``offset`` and ``length``."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    folder = Path(os.path.realpath(onnx_path)).parent
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        path = folder / entries.get("location", "")
        offset, length = int(entries.get("offset", 0) or 0), int(entries.get("length", -1) or -1)
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read(length if length >= 0 else -1)
        except OSError as exc:
            raise ConfigError(
                f"tensor {tensor.name!r} keeps its data in {path} (external data), which cannot be read: "
                f"{exc.strerror or exc}"
            ) from None
        if length >= 0 and len(data) != length:
            raise ConfigError(
                f"tensor {tensor.name!r}: external data {path} holds {len(data)} bytes at offset {offset}, not {length}"
            )
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = tensor.DEFAULT


def _inputs(
    options: AtcOptions,
    onnx_inputs: list[_OnnxInput],
    shapes: Mapping[str, tuple[Dim, ...]],
    gears: tuple[Shape, ...],
    aipps: Mapping[str, AippConfig],
) -> tuple[list[ModelInput], tuple[LayoutTensor, ...]]:
    """Every runtime input in index order (a dynamic-AIPP image followed by its parameter input),
    and the client inputs."""
    model_inputs: list[ModelInput] = []
    batch_gears = gears if options.kind == "batch" else ()
    for onnx_input in onnx_inputs:
        name, dims = onnx_input.name, shapes[onnx_input.name]
        fmt = options.input_format if len(dims) == 4 else "ND"
        ranges = tuple(axis_range(d) for d in dims) if options.kind == "range" else ()
        plain = tuple(-1 if isinstance(d, tuple) else d for d in dims)
        config = aipps.get(name)
        if config is None:
            tensor = LayoutTensor(name, onnx_input.data_type, fmt, plain, 0, ranges=ranges)
            model_inputs.append(ModelInput(tensor))
            continue
        if batch_gears:
            batches = (batch_gears[0][0], batch_gears[-1][0])
        else:
            batches = ranges[0] if ranges else (plain[0], plain[0])
        image, network = _aipp_input(name, onnx_input, plain, fmt, config, batches, bool(ranges))
        model_inputs.append(ModelInput(image, network=network))
        if config.aipp_mode is AippMode.DYNAMIC:
            first = all(m.role is not InputRole.AIPP_DATA for m in model_inputs)
            data = _aipp_data_input(name, max(batches[1], 1), first)
            model_inputs.append(ModelInput(data, InputRole.AIPP_DATA, image=name))
    clients = tuple(m.tensor for m in model_inputs if m.role is InputRole.CLIENT)
    return model_inputs, clients


def _sized(tensor: LayoutTensor, layout: ModelLayout) -> LayoutTensor:
    """``tensor`` with ``get_input_size_by_index``'s size: the largest gear's bytes (each input its
    own largest, multi_batch_clone_pass.cc 1169-1191), a range's largest (0 when unbounded,
    model_om2.cpp 426-458), an AIPP image's as ATC computes it (kept)."""
    if tensor.size:
        return tensor
    if tensor.ranges:
        largest = tensor.largest_shape()
        size = tensor.byte_size(largest) if largest is not None else 0
    else:
        size = max(tensor.byte_size(layout.input_shapes(g)[tensor.name]) for g in range(layout.gear_count))
    return LayoutTensor(
        tensor.name, tensor.data_type, tensor.format, tensor.dims, size, tensor.image_dims, tensor.ranges, tensor.aipp
    )


def _session(onnx_bytes: bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])


def _run_gears(
    session: Any, layout: ModelLayout, output_names: list[str], model_inputs: list[ModelInput]
) -> list[list[np.ndarray]]:
    """Run every gear once on zeros (a range model: at its smallest and, when bounded, largest
    shapes); the results give each gear's output shapes."""
    networks = {m.tensor.name: m.network for m in model_inputs if m.network is not None}
    runs = []
    for g in range(layout.gear_count):
        for feeds in _feeds(layout, g, networks):
            try:
                runs.append((feeds, session.run(output_names, feeds)))
            except Exception as exc:  # ONNX Runtime raises several private exception types
                shapes = ", ".join(f"{n} {format_shape(a.shape)}" for n, a in feeds.items())
                raise ConfigError(f"{layout.gear_label(g)}: ONNX Runtime cannot run ({shapes}): {exc}") from None
    if layout.kind == "range":
        return [runs[-1][1]]  # the largest run sizes the outputs
    return [results for _, results in runs]


def _feeds(layout: ModelLayout, g: int, networks: Mapping[str, NetworkInput | None]) -> list[dict[str, np.ndarray]]:
    shapes = layout.input_shapes(g)
    if layout.kind == "range":
        smallest = {t.name: tuple(max(lo, 1) for lo, _ in t.ranges) if t.ranges else t.dims for t in layout.inputs}
        largest = {t.name: _largest(t) for t in layout.inputs}
        variants = [smallest] + ([{n: s for n, s in largest.items() if s}] if all(largest.values()) else [])
    else:
        variants = [shapes]
    feeds = []
    for variant in variants:
        feed = {}
        for tensor in layout.inputs:
            network = networks.get(tensor.name)
            if network is not None:
                dims = tuple(max(d, 1) for d in network.dims)
                if tensor.dims and tensor.dims[0] < 0:  # follow the batch gear
                    dims = (max(variant[tensor.name][0], 1),) + dims[1:]
                feed[tensor.name] = np.zeros(dims, dtype=_numpy(network.data_type, tensor.name))
            else:
                feed[tensor.name] = np.zeros(variant[tensor.name], dtype=_numpy(tensor.data_type, tensor.name))
        feeds.append(feed)
    return feeds


def _largest(tensor: LayoutTensor) -> Shape | None:
    """The largest shape a range run gives ``tensor`` (None: unbounded); a dynamic-AIPP image's is its
    largest batch, its pixels take the network's shape (``_feeds``)."""
    if tensor.dynamic_aipp and tensor.ranges:
        return (tensor.ranges[0][1],) + tensor.dims[1:]
    return tensor.largest_shape()


def _numpy(data_type: AclDataType, name: str) -> np.dtype:
    if not data_type.triton:
        raise ConfigError(
            f"tensor {name!r} has type {data_type.name}, which the simulator cannot run (it {data_type.unsupported})"
        )
    return numpy_dtype(data_type.triton)


def _output(
    name: str,
    data_type: AclDataType,
    declared: Shape,
    per_gear: list[np.ndarray],
    options: AtcOptions,
    kind: GearKind,
    bounded: bool,
) -> LayoutTensor:
    if len({a.ndim for a in per_gear}) != 1:
        raise ConfigError(f"output {name!r} changes rank between gears: {[a.shape for a in per_gear]}")
    fmt = options.input_format if per_gear[0].ndim == 4 else "ND"
    if kind == "range":
        # the output keeps the axes the ONNX file leaves open; its size is the largest run's, or 0
        # when an input range is unbounded (get_output_size_by_index answers 0, model_om2.cpp 877-894)
        dims = declared if len(declared) == per_gear[0].ndim else tuple(-1 for _ in range(per_gear[0].ndim))
        return LayoutTensor(name, data_type, fmt, dims, per_gear[0].nbytes if bounded else 0)
    dims = tuple(int(max(a.shape[axis] for a in per_gear)) for axis in range(per_gear[0].ndim))
    return LayoutTensor(name, data_type, fmt, dims, max(a.nbytes for a in per_gear))
