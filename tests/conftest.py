"""Shared test set-up: the fake pb_utils for in-process model tests, and model builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from ge_python_backend.testing import install_fake_pb_utils
from tests.support import versions

install_fake_pb_utils()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tritonserver",
        choices=sorted(versions.RELEASES),
        default=versions.BUNDLED.name,
        help="the Triton release every tritonserver of the session is (24.02: tritonserver 2.43.0, unpacked by "
        "tools/bootstrap.sh; default: the bundled 2.51.0)",
    )


def pytest_configure(config: pytest.Config) -> None:
    versions.select(config.getoption("--tritonserver"))


def pytest_report_header(config: pytest.Config) -> str:
    release = versions.under_test()
    return f"tritonserver {release.server} (Triton {release.name})"


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory) -> Path:
    """A folder of small ONNX models shared by the whole session."""
    from ge_python_backend.testing import models

    folder = tmp_path_factory.mktemp("onnx")
    models.linear(folder / "linear.onnx")
    models.linear(folder / "linear_static.onnx", batch=1)
    models.two_inputs(folder / "two_inputs.onnx")
    return folder
