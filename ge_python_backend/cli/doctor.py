"""``ge-triton doctor [REPO] [--device N] [--engine acl|acl-sim] [--json FILE]``: a preflight of this
host (and of a repository's models on it) that loads nothing and finishes in seconds.

Exit code 0 when nothing is an error (warnings allowed), 1 when any check is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ge_python_backend.ops.doctor import run_doctor

EPILOG = """checks: Python, this package and its dependencies; what the Python backend stub's interpreter (the
python3 on PATH, which ignores PYTHONPATH) imports: ge_python_backend and CANN's acl, and how (site-packages,
a .pth file, only PYTHONPATH); the CANN install's versions (ASCEND_HOME_PATH/share/info, the driver and
firmware from /etc/ascend_install.info); npu-smi info when present; /dev/davinci* readable and writable
(group HwHiAiUser); tritonserver, its version and what its Python backend offers (response senders,
is_ready); /dev/shm against what the repository's instances need; pyACL: version, run mode, device count,
and per device the SoC, free/total memory and the SoC's stream and event limits. With REPO, per model: the
.om's SoC against each device it is configured for (a mismatch fails the load), its ATC version, kinds
(gears, AIPP, ranges), and per device the predicted device memory and streams/events of every acl model.

Nothing is required: what is missing is reported. --engine acl-sim checks the simulator's device."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("repository", nargs="?", type=Path, help="a model repository to check on this host")
    parser.add_argument("--device", type=int, metavar="N", help="check device N only (default: every device)")
    parser.add_argument(
        "--engine",
        choices=("acl", "acl-sim"),
        default="acl",
        help="whose pyACL to ask about the devices (default acl; GE_ACL_SIMULATOR=1 makes it acl-sim)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every finding and its facts as JSON")


def run(args: argparse.Namespace) -> int:
    report = run_doctor(args.repository, device=args.device, engine_name=args.engine)
    print(report.text())
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
    return 1 if report.errors else 0
