"""Human and machine reports of an ``OmFile`` (used by ``ge-triton inspect``).

``to_json(om)`` returns a JSON-ready dict with these keys (stable; new keys may be added):

- ``file`` (str), ``file_size`` (int bytes);
- ``header``: ``version`` ("1.0"/"2.0"), ``model_type`` (int), ``model_type_name``, ``name``,
  ``platform_version``, ``platform_type``, ``om_ir_version``, ``genmode``, ``is_encrypt``,
  ``is_checksum``, ``model_num``, ``is_unknow_model``, ``length``, ``model_length``, ``body_length``;
- ``io_source``: "MODEL_INOUT_INFO" or "MODEL_DEF" (where inputs/outputs were read);
- ``dynamic_input``: "ascend_mbatch_shape_data" or null;
- ``runtime_inputs``: list of {``name``, ``index`` (the runtime's input index), ``role``
  ("dynamic_shape" | "aipp_data"), ``image`` (aipp_data: the image input it configures)};
- ``inputs`` / ``outputs``: lists of {``name``, ``dtype`` (Triton name, "" when none),
  ``native_type`` (e.g. "DT_FLOAT"), ``format``, ``shape`` (list, -1 = dynamic)}; an AIPP input
  also has ``preprocessing``: {``kind``, ``pixel_format``, ``height``, ``width``, ``steps``, ``normalizes``};
  an input of a shape-range model ``ranges``: [[min, max], ...] per axis (max -1: no upper bound);
- ``batch``: {``kind``: dynamic|gears|static|none, ``sizes``: [int], ``limit``: the largest batch of a
  shape range's axis 0, or null};
- ``gear_kind``: "hw", "dims" or ""; ``shape_order``: the --input_shape order of a dims model
  (static inputs included), [] otherwise; ``shape_gears``: list of {``label`` (the gear's values),
  ``shapes``: {input: [int]}} (a dims gear: every input of ``shape_order``);
- ``aipp``: {input: the ``AippConfig`` fields (``AippConfig.to_json``) plus ``image_size``
  ([h, w] of the image the client sends, [0, 0] when set per request), ``network`` (the tensor
  behind the AIPP, text, or null) and ``notes`` ([str])};
- ``facts``: {str: str} (soc_version, atc_version, atc_cmdline, framework_type, framework,
  opp_version, om_name, om_header_version, om_model_type, platform_version, om_ir_version,
  memory_size, weight_size, stream_num; each only when recorded);
- ``models``: list of {``index``, ``name``, ``table_offset``, ``table_bits`` (32/64),
  ``partitions``: list of {``type`` (int), ``type_name``, ``offset`` (absolute), ``size``}}.

``to_text(om)`` renders the same content as aligned tables. ``describe_io`` and ``describe_io_json``
render the model-level part (inputs, outputs, gears, AIPP) for any ``ModelSpec``, so that
``inspect`` reports a simulated .om the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ge_python_backend.ascend.aipp import AippConfig, AippMode
from ge_python_backend.ascend.om.aippinfo import image_size
from ge_python_backend.ascend.om.iospec import AIPP_DATA_ROLE, DYNAMIC_SHAPE_ROLE, RuntimeInput
from ge_python_backend.ascend.om.reader import OmFile
from ge_python_backend.specs import NUMPY_DTYPES, ModelSpec, TensorSpec, format_shape, ranges_text


@dataclass(frozen=True)
class IoReport:
    """The model-level facts a report shows, whatever file they came from."""

    spec: ModelSpec
    shape_order: tuple[str, ...] = ()
    aipp: Mapping[str, AippConfig] = field(default_factory=dict)
    runtime_inputs: tuple[RuntimeInput, ...] = ()
    aipp_notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: input -> the network tensor behind its AIPP, as text ("DT_FLOAT [1,3,224,224] NCHW")
    aipp_network: Mapping[str, str] = field(default_factory=dict)


def io_report(om: OmFile) -> IoReport:
    return IoReport(
        om.spec,
        om.shape_order,
        om.aipp,
        om.runtime_inputs,
        om.aipp_notes,
        {name: tensor.describe() for name, tensor in om.aipp_network.items()},
    )


# ----- JSON


def _tensor_json(tensor: TensorSpec) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": tensor.name,
        "dtype": tensor.dtype,
        "native_type": tensor.native_type,
        "format": tensor.format,
        "shape": list(tensor.shape),
    }
    if tensor.preprocessing is not None:
        data["preprocessing"] = {**asdict(tensor.preprocessing), "steps": list(tensor.preprocessing.steps)}
    if tensor.ranges:
        data["ranges"] = [list(r) for r in tensor.ranges]
    return data


def _buffer(report: IoReport, name: str) -> tuple[int, ...]:
    return next((t.shape for t in report.spec.inputs if t.name == name), ())


def describe_io_json(report: IoReport) -> dict[str, Any]:
    """The JSON keys inputs, outputs, runtime_inputs, batch, gear_kind, shape_order, shape_gears, aipp."""
    spec = report.spec
    return {
        "runtime_inputs": [
            {"name": r.name, "index": r.index, "role": r.role, "image": r.image} for r in report.runtime_inputs
        ],
        "inputs": [_tensor_json(t) for t in spec.inputs],
        "outputs": [_tensor_json(t) for t in spec.outputs],
        "batch": {"kind": spec.batch.kind, "sizes": list(spec.batch.sizes), "limit": spec.batch.limit},
        "gear_kind": spec.gear_kind,
        "shape_order": list(report.shape_order),
        "shape_gears": [
            {"label": g.label, "shapes": {name: list(shape) for name, shape in g.shapes.items()}}
            for g in spec.shape_gears
        ],
        "aipp": {
            name: {
                **config.to_json(),
                "image_size": list(_image_size(config, _buffer(report, name))),
                "network": report.aipp_network.get(name),
                "notes": list(report.aipp_notes.get(name, ())),
            }
            for name, config in report.aipp.items()
        },
    }


def to_json(om: OmFile) -> dict[str, Any]:
    header, spec = om.header, om.spec
    io = describe_io_json(io_report(om))
    return {
        "file": om.path,
        "file_size": om.file_size,
        "header": {
            "version": header.version_name,
            "model_type": header.model_type,
            "model_type_name": header.model_type_name,
            "name": header.name,
            "platform_version": header.platform_version,
            "platform_type": header.platform_type,
            "om_ir_version": header.om_ir_version,
            "genmode": header.genmode,
            "is_encrypt": header.is_encrypt,
            "is_checksum": header.is_checksum,
            "model_num": header.model_num,
            "is_unknow_model": header.is_unknow_model,
            "length": header.length,
            "model_length": header.model_length,
            "body_length": header.body_length,
        },
        "io_source": om.io_source,
        "dynamic_input": om.dynamic_input,
        **io,
        "facts": dict(spec.facts),
        "models": [
            {
                "index": m.index,
                "name": m.name,
                "table_offset": m.table_offset,
                "table_bits": m.table_bits,
                "partitions": [
                    {"type": p.type, "type_name": p.type_name, "offset": p.offset, "size": p.size} for p in m.partitions
                ],
            }
            for m in om.models
        ],
    }


# ----- text


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = []
    for row in (headers, *rows):
        lines.append(indent + "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    return lines


def _fields(rows: Sequence[tuple[str, str]], indent: str) -> list[str]:
    width = max(len(label) for label, _ in rows)
    return [f"{indent}{label.ljust(width)}  {value}" for label, value in rows]


def dtype_text(tensor: TensorSpec) -> str:
    """ "FP32"; the native type in brackets when Triton has no plain equivalent ("BYTES [DT_STRING]")."""
    plain = tensor.dtype and NUMPY_DTYPES[tensor.dtype] is not None and tensor.dtype != "BYTES"
    return tensor.dtype if plain else f"{tensor.dtype or '-'} [{tensor.native_type}]"


def _tensor_table(tensors: tuple[TensorSpec, ...]) -> list[str]:
    """The tensors as a table; a shape-range model's with its ranges (ATC's ``1~8`` syntax)."""
    headers: tuple[str, ...] = ("#", "name", "dtype", "format", "shape")
    rows: list[tuple[str, ...]] = [
        (str(i), t.name, dtype_text(t), t.format or "-", format_shape(t.shape)) for i, t in enumerate(tensors)
    ]
    if any(t.ranges for t in tensors):
        headers += ("ranges",)
        rows = [row + (ranges_text(t.ranges) if t.ranges else "-",) for row, t in zip(rows, tensors)]
    return _table(headers, rows)


def batch_text(spec: ModelSpec) -> str:
    batch = spec.batch
    sizes = ",".join(str(s) for s in batch.sizes)
    return {
        "dynamic": "dynamic (any size on axis 0)"
        if batch.limit is None
        else f"dynamic (up to {batch.limit} on axis 0: the upper bound of its shape range)",
        "gears": f"gears {sizes} (dynamic batch; axis 0 is -1)",
        "static": f"static {sizes}",
        "none": "none (no usable batch axis)",
    }[batch.kind]


_ROLES = {DYNAMIC_SHAPE_ROLE: "the gear selector", AIPP_DATA_ROLE: "dynamic-AIPP parameters"}


def runtime_inputs_text(report: IoReport) -> str:
    """One line naming the inputs no client sends ("" when there are none)."""
    parts = []
    for r in report.runtime_inputs:
        what = _ROLES.get(r.role, r.role)
        if r.image:
            what += f" of {r.image}"
        parts.append(f"{r.name} (input {r.index}: {what}; runtime-internal, not a client input)")
    return "; ".join(parts)


def describe_io(report: IoReport) -> list[str]:
    """Inputs, outputs, shape gears and AIPP as text lines."""
    spec = report.spec
    lines: list[str] = []
    for title, tensors in (("Inputs", spec.inputs), ("Outputs", spec.outputs)):
        lines += ["", f"{title} ({len(tensors)})"]
        lines += _tensor_table(tensors) if tensors else ["  (none)"]
    if spec.shape_gears:
        lines += ["", f"Shape gears ({spec.gear_kind}, {len(spec.shape_gears)})"]
        if spec.gear_kind == "dims":
            lines.append(
                f"  --input_shape order: {', '.join(report.shape_order)} (each gear's values fill the -1 axes "
                "of these inputs, in this order)"
            )
        for i, gear in enumerate(spec.shape_gears, start=1):
            names = [n for n in report.shape_order if n in gear.shapes]
            names += [n for n in gear.shapes if n not in names]
            shapes = ", ".join(f"{n} {format_shape(gear.shapes[n])}" for n in names)
            lines.append(f"  gear {i}: {shapes}  ({gear.label})" if gear.label else f"  gear {i}: {shapes}")
    if report.aipp or report.aipp_notes:
        names = list(dict.fromkeys([*report.aipp, *report.aipp_notes]))
        lines += ["", f"AIPP ({len(names)} input{'s' if len(names) != 1 else ''})"]
        for name in names:
            lines += _aipp_lines(report, name)
    return lines


def _image_size(config: AippConfig, buffer: tuple[int, ...]) -> tuple[int, int]:
    if config.aipp_mode is AippMode.DYNAMIC:
        return (0, 0)
    return image_size(config, buffer)


def _aipp_lines(report: IoReport, name: str) -> list[str]:
    config = report.aipp.get(name)
    notes = report.aipp_notes.get(name, ())
    if config is None:
        return [f"  {name}: AIPP config not recorded"] + [f"    note: {n}" for n in notes]
    buffer = _buffer(report, name)
    rows: list[tuple[str, str]] = []
    if config.aipp_mode is AippMode.DYNAMIC:
        param = next((r for r in report.runtime_inputs if r.role == AIPP_DATA_ROLE and r.image == name), None)
        rows.append(("max_src_image_size", f"{config.max_src_image_size:,} bytes (the largest image buffer)"))
        rows.append(("parameters", "set per request" + (f", in {param.name} (input {param.index})" if param else "")))
    else:
        fmt = config.input_format.name if config.input_format is not None else "-"
        h, w = _image_size(config, buffer)
        rows.append(("input format", f"{fmt}: the client sends UINT8 {format_shape(buffer)} NHWC"))
        given = "" if config.src_image_size_w and config.src_image_size_h else "; src_image_size 0: the model's own"
        rows.append(("source size", f"{w}x{h} (w x h{given})"))
        if config.crop:
            crop = f"{config.crop_size_w}x{config.crop_size_h} at ({config.load_start_pos_w},{config.load_start_pos_h})"
            rows.append(("crop", crop))
        else:
            rows.append(("crop", "off"))
        rows.append(("CSC", _csc_text(config)))
        rows.append(
            (
                "channel swap",
                f"R/B or U/V swap {_on(config.rbuv_swap_switch)}, A/X swap {_on(config.ax_swap_switch)}",
            )
        )
        values = f"mean {list(config.mean_chn)}, min {list(config.min_chn)}, var_reci {list(config.var_reci_chn)}"
        rows.append(
            (
                "mean/min/var",
                values + (": normalised on the device (clients must not normalise again)" if config.normalizes else ""),
            )
        )
        if config.padding:
            rows.append(
                (
                    "padding",
                    f"top {config.top_padding_size}, bottom {config.bottom_padding_size}, "
                    f"left {config.left_padding_size}, right {config.right_padding_size}",
                )
            )
        else:
            rows.append(("padding", "off"))
    network = report.aipp_network.get(name)
    if network:
        rows.append(("network input", f"{network} (what the AIPP feeds)"))
    rows += [("note", n) for n in notes]
    kind = "dynamic" if config.aipp_mode is AippMode.DYNAMIC else "static"
    return [f"  {name}: {kind} AIPP (related_input_rank {config.related_input_rank})"] + _fields(rows, "    ")


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _csc_text(config: AippConfig) -> str:
    if not config.csc_switch:
        return "off"
    matrix = "[" + ", ".join("[" + ",".join(str(v) for v in row) + "]" for row in config.matrix) + "]"
    return f"on: matrix {matrix}, input bias {list(config.input_bias)}, output bias {list(config.output_bias)}"


def to_text(om: OmFile) -> str:
    header, spec, facts = om.header, om.spec, om.spec.facts
    report = io_report(om)
    summary = [
        ("File", f"{om.path} ({om.file_size:,} bytes)"),
        (
            "OM header",
            f"version {header.version_name}, model type {header.model_type_name} ({header.model_type}), "
            f"name {header.name!r}, om_ir_version {header.om_ir_version}, model_num {header.model_num}, "
            f"is_unknow_model {header.is_unknow_model}",
        ),
        ("Platform", header.platform_version or "-"),
        ("SoC", facts.get("soc_version", "-")),
        ("ATC version", facts.get("atc_version", "-")),
        ("Framework", facts.get("framework", "-")),
        ("ATC command", facts.get("atc_cmdline", "-")),
        ("I/O read from", om.io_source),
        ("Batch", batch_text(spec)),
    ]
    if om.shape_order:
        summary.append(("Input order", f"{', '.join(om.shape_order)} (ATC --input_shape order of the dims gears)"))
    shown = {
        "soc_version",
        "atc_version",
        "framework",
        "framework_type",
        "atc_cmdline",
        "om_name",
        "om_header_version",
        "om_model_type",
        "om_ir_version",
        "platform_version",
    }
    others = ", ".join(f"{k}={v}" for k, v in facts.items() if k not in shown)
    if others:
        summary.append(("Other facts", others))
    if om.runtime_inputs:
        summary.append(("Runtime inputs", runtime_inputs_text(report)))
    lines = _fields(summary, "")
    lines += describe_io(report)
    if len(om.models) > 1:
        lines += ["", f"Sub-models (model_num {header.model_num})"]
        lines += _table(
            ("#", "name", "partitions"), [(str(m.index), m.name or "-", str(len(m.partitions))) for m in om.models]
        )
    lines += ["", "Partitions"]
    rows = [
        (str(m.index), f"{m.table_bits}-bit", p.type_name, str(p.offset), f"{p.size:,}")
        for m in om.models
        for p in m.partitions
    ]
    lines += _table(("model", "table", "type", "offset", "size"), rows)
    return "\n".join(lines)
