"""``ge-triton install-backend [--backend-dir DIR] [--name ge|npu_ge]``: install a Python-based backend
into a Triton backends folder: "ge", so config.pbtxt files that say ``backend: "ge"`` need no model.py,
or "npu_ge", which serves the model folders of CANN's C++ GE backend unchanged."""

from __future__ import annotations

import argparse
from pathlib import Path

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.server import find_tritonserver
from ge_python_backend.repository.ge_backend import BACKEND_SOURCES, GE_BACKEND_NAME, write_ge_backend

EPILOG = """What it writes: DIR/NAME/model.py, a TritonPythonModel that is GEModel with no hooks.
Triton runs it for every model whose config.pbtxt says backend: "NAME", through the Python
backend in DIR/python (which must be there too). With --name npu_ge it takes the parameters of
CANN's C++ GE backend (device_ids, static_model, ge.* options, ...; docs/npu-ge.md) and compiles the
version folder's .onnx or .pb with ATC at load.

The default DIR is the backends folder of the tritonserver found on PATH, else the one inside the
nvidia-pytriton wheel (in site-packages). `ge-triton serve` needs none of this: it prepares its own
backend folder for each run and installs the ge backend there itself. Use install-backend for a
tritonserver you start yourself (pass its --backend-directory here)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--backend-dir", type=Path, metavar="DIR", help="Triton backends folder (default: the found tritonserver's)"
    )
    parser.add_argument(
        "--name",
        choices=tuple(BACKEND_SOURCES),
        default=GE_BACKEND_NAME,
        help=f"the backend name configs use (default {GE_BACKEND_NAME})",
    )


def _notes(backends: Path, name: str) -> list[str]:
    python = backends / "python"
    if not (python / "libtriton_python.so").is_file():
        return [
            f"{python}/libtriton_python.so is missing: backend {name} runs through the Python "
            "backend, which must be in the same backends folder"
        ]
    if not (python / "triton_python_backend_stub").is_file():
        return [
            f"{python} has no triton_python_backend_stub (the nvidia-pytriton wheel ships the stubs apart, "
            "per Python version): copy the one for your Python there, or use `ge-triton serve`, which does"
        ]
    return []


def run(args: argparse.Namespace) -> int:
    backends = args.backend_dir if args.backend_dir is not None else find_tritonserver().backends
    if not backends.is_dir():
        raise ConfigError(
            f"backends folder {backends} is not a folder (give the --backend-directory of a tritonserver)"
        )
    target = write_ge_backend(backends, args.name)
    print(f"installed backend {args.name!r}: {target}")
    for note in _notes(backends, args.name):
        print(f"note: {note}")
    return 0
