"""``ge-triton check REPO``: validate a model repository offline; print every problem with its file.

Exit code 0 when no errors are found (one "ok" line), 1 when any error is found (or any
warning with ``--strict``), 2 when the repository cannot be read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ge_python_backend.ops.server import ServerError, find_tritonserver
from ge_python_backend.repository.check import check_repository

EPILOG = """checks: config.pbtxt parses with Triton's schema (no unknown fields, none that tritonserver 2.51
does not know); name equals the folder; numeric version folders; backend python has <version>/model.py,
backend ge has the ge backend installed (warning); parameters are known and well formed; the engine's
model file is present and of the right kind; config I/O matches the model file (names, data types,
dims without the batch axis when max_batch_size > 0) unless model.py overrides preprocess/postprocess;
max_batch_size and preferred_batch_size agree with the model's batch gears; no dynamic_batching with
max_batch_size 0; no KIND_GPU instance groups on an NPU engine."""


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


def _backends(given: Path | None) -> Path | None:
    """The backends folder to look for backend ge in: the flag's, else the found tritonserver's."""
    if given is not None:
        return given
    try:
        return find_tritonserver().backends
    except ServerError:
        return None


def run(args: argparse.Namespace) -> int:
    report = check_repository(args.repository, _backends(args.backend_dir))
    for problem in report.problems:
        print(problem)
    errors, warnings = len(report.errors), len(report.warnings)
    models = f"{len(report.models)} model{'s' if len(report.models) != 1 else ''}"
    failed = errors > 0 or (args.strict and warnings > 0)
    if not failed:
        extra = f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ", no problems"
        print(f"ok: {models} checked in {args.repository}{extra}")
        return 0
    print(
        f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''} "
        f"in {models} ({args.repository})"
    )
    return 1
