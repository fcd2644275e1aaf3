"""The null pyACL (tools/bench/nullacl.py): engine ``acl`` runs over it through ``import acl``
unchanged, it does no device work (no ONNX Runtime, no copies), and it costs fewer Python calls
per batch than the simulator. Counted, not timed: the counts do not move with the host's load."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ge_python_backend import sim
from ge_python_backend.engines import open_engine
from ge_python_backend.sim.api_mdl import MdlApi
from ge_python_backend.sim.api_rt import RtApi
from tools.bench import nullacl
from tools.bench.repos import relu_model

SHAPE = (3, 8, 8)


@pytest.fixture(scope="module")
def om_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nullacl")
    onnx_file = relu_model(folder / "relu.onnx", SHAPE)
    sim.sim_compile(onnx_file, folder / "relu.om", batch_gears=[1, 2, 4, 8])
    return folder / "relu.om"


@pytest.fixture
def null_acl(monkeypatch):
    """``import acl`` is the null pyACL for the test (and only for it)."""
    monkeypatch.delitem(sys.modules, "acl", raising=False)
    module = nullacl.install()
    yield module
    sys.modules.pop("acl", None)


def spy(monkeypatch, cls, name, calls):
    original = getattr(cls, name)

    def counting(self, *args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counting)


def run_batches(engine, batches: int) -> np.ndarray:
    engine.bind_thread()
    slot = engine.slots[0]
    data = -np.ones((8, *SHAPE), np.float32)  # Relu makes it 0: a real run would write zeros
    out = None
    for _ in range(batches):
        np.copyto(slot.inputs({"x": (8, *SHAPE)})["x"], data)
        out = slot.run()["y"]
    assert out is not None
    return out


def test_engine_acl_runs_over_the_null_pyacl_without_the_simulators_execute(om_file, null_acl, monkeypatch):
    calls: dict[str, int] = {}
    spy(monkeypatch, MdlApi, "_run", calls)  # the simulator's execute (ONNX Runtime)
    spy(monkeypatch, RtApi, "_copy", calls)  # the simulator's memcpy
    engine = open_engine("acl", om_file, device_id=0, slots=1, options={"acl_timing_events": True})
    try:
        assert engine.name == "acl"
        assert engine.slots[0]._acl is null_acl  # engine acl took `import acl`, the null one
        run_batches(engine, 3)
    finally:
        engine.close()
    simulator = null_acl.rt._sim
    assert isinstance(simulator, nullacl.NullSimulator) and simulator.executions == 3
    assert calls == {}  # neither the simulator's execute nor its copies ran
    assert simulator.live() == []  # and the engine released what it took, as on the simulator


def test_the_spies_see_the_simulator_do_its_work(om_file, monkeypatch):
    """The same run on acl-sim calls what the null pyACL must not (so the test above can fail)."""
    calls: dict[str, int] = {}
    spy(monkeypatch, MdlApi, "_run", calls)
    spy(monkeypatch, RtApi, "_copy", calls)
    engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={})
    try:
        out = run_batches(engine, 3)
    finally:
        engine.close()
    assert calls["_run"] == 3 and calls["_copy"] >= 6
    assert not out.any()  # the simulator really ran Relu


def python_calls_per_batch(engine, batches: int = 5) -> float:
    run_batches(engine, 2)  # warm: gear selected, views cached
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        run_batches(engine, batches)
    finally:
        sys.setprofile(None)
    return count / batches


def test_the_null_pyacl_costs_a_fraction_of_the_simulator(om_file, null_acl):
    null_engine = open_engine("acl", om_file, device_id=0, slots=1, options={})
    try:
        null_calls = python_calls_per_batch(null_engine)
    finally:
        null_engine.close()
    sim_engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={})
    try:
        sim_calls = python_calls_per_batch(sim_engine)
    finally:
        sim_engine.close()
    print(f"Python calls per batch: null {null_calls:.0f}, simulator {sim_calls:.0f}")
    assert null_calls < sim_calls / 3, (null_calls, sim_calls)


def test_modelled_device_time_shows_in_the_timing_events(om_file, monkeypatch):
    monkeypatch.delitem(sys.modules, "acl", raising=False)
    module = nullacl.install(device_ms=5.0)
    try:
        rt = module.rt
        stream = 7
        rt.record_event(1, stream)
        assert module.mdl.execute_async(0, 0, 0, stream) == 0
        rt.record_event(2, stream)
        elapsed, ret = rt.event_elapsed_time(1, 2)
        assert ret == 0 and elapsed == pytest.approx(5.0, abs=1.0)
    finally:
        sys.modules.pop("acl", None)
