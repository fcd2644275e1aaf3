"""The ``ge-triton`` command. It only parses arguments and composes the library's modules.

Each verb lives in its own module under ``ge_python_backend.cli`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ge_python_backend.errors import GEError

#: verb -> (module under ge_python_backend.cli, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect", "show the inputs, outputs, gears and build facts of a CANN .om file (no CANN needed)"),
    "generate": ("generate", "write a Triton model folder (config.pbtxt, model file, model.py) for a model file"),
    "check": ("check", "validate a model repository offline: every problem with its file, exit 1 if any error"),
    "atc-cmd": ("atc_cmd", "print the ATC command that compiles an .onnx into an .om matching a Triton config"),
    "install-backend": ("install_backend", 'install the Python-based backend "ge" into a Triton backends folder'),
    "serve": ("serve", "run tritonserver on a model repository until Ctrl-C (or SIGTERM, SIGHUP)"),
    "bench": ("bench", "measure throughput and latency of a served model: concurrency sweep or fixed rates"),
    "deploy": ("deploy", "write Kubernetes manifests and an image build context to serve a repository on Ascend nodes"),
    "sim-compile": ("sim_compile", "compile an .onnx file into a simulated .om for engine acl-sim (no CANN needed)"),
    "doctor": ("doctor", "preflight this host (and a repository on it): every finding ok, warn or error with the fix"),
    "conformance": (
        "conformance",
        "check docs/fidelity.md against this host's pyACL: probes and model kinds, pass/fail/skip",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ge-triton",
        description="Inspect CANN .om files and build, check, serve and benchmark Triton model repositories.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, (module_name, help_text) in VERBS.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        sub = verbs.add_parser(verb, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except GEError as exc:
        print(f"ge-triton {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"ge-triton {args.verb}: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
