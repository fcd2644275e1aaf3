"""``ge-triton inspect MODEL.om [--json]``: show what a CANN .om file declares, without CANN.

Prints the header summary, inputs and outputs (name, dtype, format, shape with -1 for dynamic
axes), batch and shape gears (a dims gear per input, with ATC's --input_shape order), each
input's AIPP, SoC, ATC version and command line, sub-models and partitions. ``--json`` prints the
same as one JSON document whose keys are documented in ``ge_python_backend.ascend.om.report``
(top level: file, file_size, header, io_source, dynamic_input, runtime_inputs, inputs, outputs,
batch, gear_kind, shape_order, shape_gears, aipp, facts, models).

A simulated .om written by ``ge-triton sim-compile`` is reported too, from its own description
(``ge_python_backend.sim.simom``), and said to be one: its JSON has ``"simulated": true`` and
``sim_om_version`` and ``producer`` in place of header, io_source and models.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.om.iospec import RuntimeInput
from ge_python_backend.ascend.om.report import (
    IoReport,
    batch_text,
    describe_io,
    describe_io_json,
    runtime_inputs_text,
    to_json,
    to_text,
)
from ge_python_backend.engines.registry import detect_format
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import format_shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL.om", help="a CANN offline model file (or a simulated .om)")
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of tables")


def run(args: argparse.Namespace) -> int:
    if _is_sim_om(Path(args.model)):
        text, doc = _sim_report(Path(args.model))
        print(json.dumps(doc, indent=2) if args.json else text)
        return 0
    om = read_om(args.model)
    print(json.dumps(to_json(om), indent=2) if args.json else to_text(om))
    return 0


def _is_sim_om(path: Path) -> bool:
    """A simulated .om (the simulator's format, when its plug-in is installed)."""
    found = detect_format(path)
    return found is not None and found.name == "sim-om"


def _sim_report(path: Path) -> tuple[str, dict[str, Any]]:
    """Text and JSON of a simulated .om, through simom's public API."""
    from ge_python_backend.sim.simom import InputRole, load_sim_om

    try:
        sim = load_sim_om(path)
    except OmFormatError as exc:
        raise OmFormatError(f"{exc} (a simulated .om from ge-triton sim-compile, run by the acl-sim engine)") from None
    spec = sim.spec()
    layout = sim.layout
    runtime = tuple(
        RuntimeInput(m.tensor.name, index, m.role.value, m.image)
        for index, m in enumerate(sim.model_inputs)
        if m.role is not InputRole.CLIENT
    )
    network = {
        m.tensor.name: f"{m.network.data_type.name} {format_shape(m.network.dims)} {m.network.format}"
        for m in sim.model_inputs
        if m.network is not None
    }
    report = IoReport(
        spec=spec,
        shape_order=tuple(layout.shape_order) if spec.gear_kind == "dims" else (),
        aipp={t.name: t.aipp for t in layout.inputs if t.aipp is not None},
        runtime_inputs=runtime,
        aipp_network=network,
    )
    producer = {str(k): str(v) for k, v in sim.producer.items()}
    version = spec.facts.get("sim_om_version", "")
    summary = [
        ("File", f"{path} ({path.stat().st_size:,} bytes)"),
        ("Kind", f"simulated .om (sim-OM version {version}): runs only on the acl-sim engine, not on an NPU"),
        ("Made by", f"{producer.get('tool', '-')} {producer.get('version', '')}".rstrip()),
        ("ONNX model", producer.get("onnx_file", "-")),
        ("ATC options", producer.get("options", "-") or "-"),
        ("Batch", batch_text(spec)),
    ]
    if report.shape_order:
        summary.append(("Input order", f"{', '.join(report.shape_order)} (ATC --input_shape order of the dims gears)"))
    if runtime:
        summary.append(("Runtime inputs", runtime_inputs_text(report)))
    width = max(len(label) for label, _ in summary)
    lines = [f"{label.ljust(width)}  {value}" for label, value in summary] + describe_io(report)
    doc = {
        "file": str(path),
        "file_size": path.stat().st_size,
        "simulated": True,
        "sim_om_version": version,
        "producer": producer,
        **describe_io_json(report),
        "facts": dict(spec.facts),
    }
    return "\n".join(lines), doc
