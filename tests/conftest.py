"""Shared test set-up: the fake pb_utils for in-process model tests, and model builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from ge_python_backend.testing import install_fake_pb_utils

install_fake_pb_utils()


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory) -> Path:
    """A folder of small ONNX models shared by the whole session."""
    from ge_python_backend.testing import models

    folder = tmp_path_factory.mktemp("onnx")
    models.linear(folder / "linear.onnx")
    models.linear(folder / "linear_static.onnx", batch=1)
    models.two_inputs(folder / "two_inputs.onnx")
    return folder
