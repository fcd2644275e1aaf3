"""``ge-triton conformance [--device N] [--engine acl|acl-sim] [--atc PATH] [--json FILE]``: check
what docs/fidelity.md claims against the pyACL of this host.

Runs every probe (pyACL called directly) and the model kinds end to end (compiled with the host's
ATC for the device's SoC, or sim-compile on acl-sim, through the acl engine, against ONNX
Runtime). Run it in a fresh process on an idle device. Exit code 0 when nothing fails, 1 when a
probe fails (observed against claimed: attach the JSON to the bug report), 2 for a usage error
(a device the host does not have, an --atc that is no program, a --json that cannot be
written), said before the probes run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO

from ge_python_backend.engines.registry import engine_info, stand_in
from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.conformance import run_conformance
from ge_python_backend.ops.conformance.probes import EngineName


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=int, default=0, metavar="N", help="the device to run on (default 0)")
    parser.add_argument(
        "--engine", choices=("acl", "acl-sim"), default="acl", help="CANN's pyACL (default) or the simulator's"
    )
    parser.add_argument(
        "--atc",
        type=Path,
        metavar="PATH",
        help="the ATC to compile the models with (default: atc on PATH) and to hold to fidelity.md's ATC rows; "
        "with --engine acl-sim the models are compiled by the simulator's ATC, which also plays ATC without it",
    )
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="write the report (environment, every observed value)"
    )
    parser.add_argument(
        "--exhaust",
        action="store_true",
        help="also run the probes that use up the device's streams or events for a moment (an idle device only)",
    )
    parser.add_argument(
        "--workdir", type=Path, metavar="DIR", help="keep the models and files here (default: a temp folder)"
    )


def run(args: argparse.Namespace) -> int:
    if args.device < 0:
        raise ConfigError(f"--device {args.device}: expected a device id >= 0")
    if args.atc is not None and not (args.atc.is_file() and os.access(args.atc, os.X_OK)):
        raise ConfigError(f"--atc {args.atc}: not an executable file (give CANN's, e.g. $ASCEND_HOME_PATH/bin/atc)")
    info = stand_in(engine_info(args.engine))
    acl = info.load_pyacl()
    name: EngineName = "acl-sim" if info.name == "acl-sim" else "acl"
    with contextlib.ExitStack() as stack:
        report_file = stack.enter_context(_opened(args.json)) if args.json is not None else None  # before the run
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="ge-conformance-"))
        workdir = args.workdir or Path(scratch)
        report = run_conformance(acl, name, workdir, device=args.device, atc=args.atc, exhaust=args.exhaust)
        print(report.table())
        if report_file is not None:
            report_file.write(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    return 1 if report.counts()["fail"] else 0


def _opened(path: Path) -> IO[str]:
    """``path`` open for the report; ConfigError naming --json when it cannot be written."""
    try:
        return path.open("w", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write it ({exc.strerror or exc})") from None
