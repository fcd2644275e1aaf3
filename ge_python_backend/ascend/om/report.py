"""Human and machine reports of an ``OmFile`` (used by ``ge-triton inspect``).

``to_json(om)`` returns a JSON-ready dict with these keys (stable; new keys may be added):

- ``file`` (str), ``file_size`` (int bytes);
- ``header``: ``version`` ("1.0"/"2.0"), ``model_type`` (int), ``model_type_name``, ``name``,
  ``platform_version``, ``platform_type``, ``om_ir_version``, ``genmode``, ``is_encrypt``,
  ``is_checksum``, ``model_num``, ``is_unknow_model``, ``length``, ``model_length``, ``body_length``;
- ``io_source``: "MODEL_INOUT_INFO" or "MODEL_DEF" (where inputs/outputs were read);
- ``dynamic_input``: "ascend_mbatch_shape_data" or null;
- ``inputs`` / ``outputs``: lists of {``name``, ``dtype`` (Triton name, "" when none),
  ``native_type`` (e.g. "DT_FLOAT"), ``format``, ``shape`` (list, -1 = dynamic)};
- ``batch``: {``kind``: dynamic|gears|static|none, ``sizes``: [int]};
- ``gear_kind``: "hw", "dims" or ""; ``shape_gears``: list of {``label``, ``shapes``: {input: [int]}};
- ``facts``: {str: str} (soc_version, atc_version, atc_cmdline, framework_type, framework,
  opp_version, om_name, om_header_version, om_model_type, platform_version, om_ir_version,
  memory_size, weight_size, stream_num; each only when recorded);
- ``models``: list of {``index``, ``name``, ``table_offset``, ``table_bits`` (32/64),
  ``partitions``: list of {``type`` (int), ``type_name``, ``offset`` (absolute), ``size``}}.

``to_text(om)`` renders the same content as aligned tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ge_python_backend.ascend.om.reader import OmFile
from ge_python_backend.specs import NUMPY_DTYPES, TensorSpec, format_shape


def _tensor_json(tensor: TensorSpec) -> dict[str, Any]:
    return {
        "name": tensor.name,
        "dtype": tensor.dtype,
        "native_type": tensor.native_type,
        "format": tensor.format,
        "shape": list(tensor.shape),
    }


def to_json(om: OmFile) -> dict[str, Any]:
    header, spec = om.header, om.spec
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
        "inputs": [_tensor_json(t) for t in spec.inputs],
        "outputs": [_tensor_json(t) for t in spec.outputs],
        "batch": {"kind": spec.batch.kind, "sizes": list(spec.batch.sizes)},
        "gear_kind": spec.gear_kind,
        "shape_gears": [
            {"label": g.label, "shapes": {name: list(shape) for name, shape in g.shapes.items()}}
            for g in spec.shape_gears
        ],
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


def dtype_text(tensor: TensorSpec) -> str:
    """ "FP32"; the native type in brackets when Triton has no plain equivalent ("BYTES [DT_STRING]")."""
    plain = tensor.dtype and NUMPY_DTYPES[tensor.dtype] is not None and tensor.dtype != "BYTES"
    return tensor.dtype if plain else f"{tensor.dtype or '-'} [{tensor.native_type}]"


def _tensor_rows(tensors: tuple[TensorSpec, ...]) -> list[tuple[str, ...]]:
    return [(str(i), t.name, dtype_text(t), t.format or "-", format_shape(t.shape)) for i, t in enumerate(tensors)]


def _batch_text(om: OmFile) -> str:
    batch = om.spec.batch
    sizes = ",".join(str(s) for s in batch.sizes)
    return {
        "dynamic": "dynamic (any size on axis 0)",
        "gears": f"gears {sizes} (dynamic batch; axis 0 is -1)",
        "static": f"static {sizes}",
        "none": "none (no usable batch axis)",
    }[batch.kind]


def to_text(om: OmFile) -> str:
    header, spec, facts = om.header, om.spec, om.spec.facts
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
        ("Batch", _batch_text(om)),
    ]
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
    if om.dynamic_input:
        summary.append(("Gear input", f"{om.dynamic_input} (runtime-internal, not a client input)"))
    width = max(len(label) for label, _ in summary)
    lines = [f"{label.ljust(width)}  {value}" for label, value in summary]
    for title, tensors in (("Inputs", spec.inputs), ("Outputs", spec.outputs)):
        lines += ["", f"{title} ({len(tensors)})"]
        lines += _table(("#", "name", "dtype", "format", "shape"), _tensor_rows(tensors)) if tensors else ["  (none)"]
    if spec.shape_gears:
        lines += ["", f"Shape gears ({spec.gear_kind}, {len(spec.shape_gears)})"]
        gear_rows = [
            (g.label, "; ".join(f"{n} {format_shape(s)}" for n, s in g.shapes.items())) for g in spec.shape_gears
        ]
        lines += _table(("gear", "shapes"), gear_rows)
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
