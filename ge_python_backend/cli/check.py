"""``ge-triton check REPO [--load]``: validate a model repository offline, and with ``--load`` in a
real tritonserver too; print every problem with its file.

Exit code 0 when no errors are found (one "ok" line), 1 when any error is found (or any
warning with ``--strict``), 2 when the repository cannot be read or, with ``--load``, no
tritonserver can be found or started.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ge_python_backend.ops.loadcheck import DEFAULT_LOAD_TIMEOUT, load_models
from ge_python_backend.ops.server import ServerError, find_tritonserver
from ge_python_backend.repository.check import CheckReport, check_repository

EPILOG = """checks: config.pbtxt parses with Triton's schema (no unknown fields, none that tritonserver 2.51
does not know) and follows the server's own load rules (dims, reshape, data types, names, control
tensors, preferred sizes, version policy, warm-up); name equals the folder; version folders as the server
reads them; backend python has <version>/model.py, backend ge has the ge backend installed (warning);
parameters are known and well formed; the engine's model file is present and of the right kind; config
I/O matches the model file (names, data types, dims without the batch axis when max_batch_size > 0) unless
model.py overrides preprocess/postprocess; max_batch_size and preferred_batch_size agree with the model's
batch gears and where it keeps each output's batch; the classification template's labels and image size;
no KIND_GPU instance groups on an NPU engine.

--load: then start tritonserver (PATH or the bundled one) in explicit model-control mode on free loopback
ports, load each model, report Triton's own message for every model it refuses and what it completed or
changed in each config it accepts (+ filled in, ~ changed, - dropped), unload, stop."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("repository", type=Path, help="model repository folder (or one model folder)")
    parser.add_argument(
        "--backend-dir",
        type=Path,
        help="Triton backends folder where backend ge should be installed "
        "(default: the one of the tritonserver found on PATH or in nvidia-pytriton)",
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail the check too")
    parser.add_argument("--load", action="store_true", help="also load every model in a real tritonserver")
    parser.add_argument(
        "--load-timeout",
        type=float,
        default=DEFAULT_LOAD_TIMEOUT,
        help=f"seconds one model's load may take (default {DEFAULT_LOAD_TIMEOUT:.0f})",
    )


def _backends(given: Path | None) -> Path | None:
    """The backends folder to look for backend ge in: the flag's, else the found tritonserver's."""
    if given is not None:
        return given
    try:
        return find_tritonserver().backends
    except ServerError:
        return None


def _load(args: argparse.Namespace, report: CheckReport) -> int:
    """Load every model the offline check did not find fatal; print what the server says; the
    number of models it refused."""
    fatal = set(report.fatal_models())
    for model in sorted(fatal):
        print(f"{report.root / model}: not loaded: loading it would abort or hang tritonserver (see above)")
    wanted = [m for m in report.models if m not in fatal]
    refused = 0
    for result in load_models(report.root, wanted, load_timeout=args.load_timeout):
        where = report.root / result.model
        if not result.loaded:
            refused += 1
            print(f"{where}: error: tritonserver refused to load it: {result.message}")
            continue
        print(f"{where}: loaded by tritonserver" + ("; it completed the config:" if result.changes else ""))
        for change in result.changes:
            print(f"    {change}")
    return refused


def run(args: argparse.Namespace) -> int:
    if args.load:
        find_tritonserver()  # no server: one line, before anything else is printed
    report = check_repository(args.repository, _backends(args.backend_dir), ge_backend_ready=args.load)
    for problem in report.problems:
        print(problem)
    errors, warnings = len(report.errors), len(report.warnings)
    refused = _load(args, report) if args.load and report.models else 0
    models = f"{len(report.models)} model{'s' if len(report.models) != 1 else ''}"
    loaded = (
        f", {len(report.models) - refused - len(report.fatal_models())} loaded by tritonserver" if args.load else ""
    )
    failed = errors > 0 or refused > 0 or (args.strict and warnings > 0)
    if not failed:
        extra = f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ", no problems"
        print(f"ok: {models} checked in {args.repository}{extra}{loaded}")
        return 0
    refusals = f", {refused} refused by tritonserver" if args.load else ""
    print(
        f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}{refusals} "
        f"in {models} ({args.repository})"
    )
    return 1
