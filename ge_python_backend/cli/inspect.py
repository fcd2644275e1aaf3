"""``ge-triton inspect MODEL.om [--json]``: show what a CANN .om file declares, without CANN.

Prints the header summary, inputs and outputs (name, dtype, format, shape with -1 for dynamic
axes), batch and shape gears, SoC, ATC version and command line, sub-models and partitions.
``--json`` prints the same as one JSON document whose keys are documented in
``ge_python_backend.ascend.om.report`` (top level: file, file_size, header, io_source, dynamic_input,
inputs, outputs, batch, gear_kind, shape_gears, facts, models).
"""

from __future__ import annotations

import argparse
import json

from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.om.report import to_json, to_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL.om", help="a CANN offline model file")
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of tables")


def run(args: argparse.Namespace) -> int:
    om = read_om(args.model)
    print(json.dumps(to_json(om), indent=2) if args.json else to_text(om))
    return 0
