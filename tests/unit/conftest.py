"""Unit-test fixtures shared by the modules that drive the process-wide simulator."""

from __future__ import annotations

import pytest

from ge_python_backend import sim
from ge_python_backend.sim.device import DEFAULT_COPY_GBPS


@pytest.fixture
def clean_simulator():
    """The process-wide simulator holds nothing before the test and nothing after it; its settings
    are back to the defaults afterwards."""
    assert sim.live() == []
    yield
    sim.configure(
        faults="",
        device_ms=0.0,
        row_ms=0.0,
        absent_gears_ret=0,
        run_mode="host",
        core_busy=1.0,
        launch_share=0.0,
        copy_gbps=DEFAULT_COPY_GBPS,
        shared_device=True,
    )
    assert sim.live() == []
