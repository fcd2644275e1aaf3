"""The endurance soak, CI-sized: tools/endurance.py's three models (onnxruntime, the acl-sim
default folder, the classification template) under serve's supervisor, each through its three
phases: 2,000 requests (10 % bad), an unload/load/reload cycle under load and a stub kill under
load, with every answer checked and every bound of ``ops.endurance`` judged (the RSS slope is
reported, not judged, at this size: Bounds.judged_from). The dead-stub budget is 1 here, so
the kills take both ways back: a reload, and a restart of tritonserver (after which its threads
and descriptors must be back where they started). The long run's figures: docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from ge_python_backend.ops.endurance import Bounds, EndurancePlan

pytestmark = pytest.mark.e2e
TOOL = Path(__file__).resolve().parents[2] / "tools" / "endurance.py"


def _tool():
    spec = importlib.util.spec_from_file_location("endurance_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_three_engines_stay_within_bounds_through_requests_reloads_and_kills():
    tool = _tool()
    plan = EndurancePlan(requests=2000, cycles=1, kills=1, concurrency=32, samples=10)
    policy = replace(tool.POLICY, settle_s=2.0, dead_stub_budget=1)
    reports = tool.endure(plan, policy=policy, bounds=Bounds(warmup_requests=400))
    for report in reports:
        print(report.describe())
    assert [r.model for r in reports] == list(tool.MODELS.values())
    assert all(report.ok for report in reports), "\n".join(r.describe() for r in reports if not r.ok)
    for report in reports:
        assert report.soaks["requests"].refused > 0 and report.soaks["requests"].verified > 0
        # the background load kept being answered right around each cycle and kill
        assert report.soaks["cycles"].verified > 0 and report.soaks["kills"].verified > 0
    restarted = {r.model for r in reports if len({s.server_pid for s in r.samples["kills"]}) > 1}
    assert restarted and restarted != set(tool.MODELS.values())  # both ways back were taken
    (device,) = [r for r in reports if r.model == tool.MODELS["acl-sim"]]
    assert any(f.what.startswith("device memory of each load") for f in device.findings)
    assert any(f.what == "stubs that ended with live resources" for f in device.findings)
