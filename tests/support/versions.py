"""A second tritonserver to test on: 2.43.0 (Triton 24.02, what CANN's own GE backend image runs),
from an unpacked nvidia-pytriton 0.5.3 wheel named by GE_TRITONSERVER_2402
(``pip download nvidia-pytriton==0.5.3 --no-deps`` and unzip it); tests skip without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ge_python_backend.ops.server import TritonInstall, pytriton_install

TRITON_2402_ENV = "GE_TRITONSERVER_2402"


def install_2402() -> TritonInstall:
    root = os.environ.get(TRITON_2402_ENV)
    if not root:
        pytest.skip(f"{TRITON_2402_ENV} is not set (an unpacked nvidia-pytriton 0.5.3 wheel: tritonserver 2.43.0)")
    return pytriton_install(Path(root))
