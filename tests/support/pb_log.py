"""The fake pb_utils Logger's lines, for tests that read what a model logged."""

from __future__ import annotations

import pytest

from ge_python_backend.testing import fake_pb_utils as pb


@pytest.fixture(autouse=True)
def fresh_log():
    """Every test starts and ends with an empty log (use: ``from tests.support.pb_log import fresh_log``)."""
    pb.Logger.lines.clear()
    yield
    pb.Logger.lines.clear()


def errors() -> list[str]:
    """The messages logged at ERROR level."""
    return [message for level, message in pb.Logger.lines if level == "ERROR"]
