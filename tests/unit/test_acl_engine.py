"""The acl engine on the process-wide pyACL simulator: results against ONNX Runtime, gears,
clean teardown (also after a load that fails part-way), threads, faults and configuration."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import types
from dataclasses import replace

import numpy as np
import pytest

from ge_python_backend import sim
from ge_python_backend.ascend.constants import data_type_named
from ge_python_backend.engines import open_engine
from ge_python_backend.engines.acl.engine import AclEngine
from ge_python_backend.engines.acl.runtime import AclError, import_pyacl
from ge_python_backend.errors import ConfigError, EngineError
from ge_python_backend.params import parse_parameters
from ge_python_backend.sim.plugin import PARAMETERS
from ge_python_backend.sim.simom import load_sim_om, write_sim_om
from tests.support import acl_sim_nets as nets
from tests.support.acl_sim_nets import open_sim

pytestmark = pytest.mark.usefixtures("clean_simulator")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aclengine")
    matmul = nets.matmul_add(folder / "matmul.onnx")
    two = nets.two_inputs(folder / "two.onnx")
    conv = nets.conv(folder / "conv.onnx")
    sim.sim_compile(matmul, folder / "batch.om", batch_gears=[1, 2, 4, 8])
    sim.sim_compile(matmul, folder / "static.om", input_shapes="x:2,4")
    sim.sim_compile(conv, folder / "hw.om", input_shapes="x:1,3,-1,-1", dynamic_image_size="8,8;16,12;5,7")
    sim.sim_compile(two, folder / "dims.om", input_shapes="a:-1,-1;b:-1,-1", dynamic_dims="1,2,1,2;3,5,3,5;2,1,2,1")
    return {
        "batch": (matmul, folder / "batch.om"),
        "static": (matmul, folder / "static.om"),
        "hw": (conv, folder / "hw.om"),
        "dims": (two, folder / "dims.om"),
        "dir": folder,
    }


def gear_shapes(spec):
    """Every runnable input shape set of a spec (each batch gear, each shape gear, or the static shapes)."""
    if spec.batch.kind == "gears":
        return [{t.name: (b,) + t.shape[1:] for t in spec.inputs} for b in spec.batch.sizes]
    if spec.shape_gears:
        return [dict(g.shapes) for g in spec.shape_gears]
    return [{t.name: t.shape for t in spec.inputs}]


def run_and_compare(slot, onnx_path, shapes, rng):
    views = slot.inputs(shapes)
    feeds = {}
    for name, view in views.items():
        feeds[name] = nets.random_like(view.shape, view.dtype, rng)
        view[...] = feeds[name]
    outputs = slot.run()
    expected = nets.reference(onnx_path, feeds)
    assert set(outputs) == set(expected)
    for name, want in expected.items():
        assert outputs[name].shape == want.shape and outputs[name].dtype == want.dtype
        np.testing.assert_allclose(outputs[name], want, rtol=1e-3 if want.dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("absent_gears_ret", [0, 145000], ids=["absent-kinds-empty", "absent-kinds-fail"])
@pytest.mark.parametrize("kind", ["batch", "static", "hw", "dims"])
def test_every_gear_matches_onnxruntime(models, kind, absent_gears_ret):
    """Also when the gear lookups of the kinds the model lacks fail instead of answering 0 gears."""
    onnx_path, om_path = models[kind]
    sim.configure(absent_gears_ret=absent_gears_ret)
    engine = open_sim(om_path)
    try:
        engine.bind_thread()
        rng = np.random.default_rng(7)
        shape_sets = gear_shapes(engine.spec)
        assert len(shape_sets) == {"batch": 4, "static": 1, "hw": 3, "dims": 3}[kind]
        for shapes in shape_sets + shape_sets[::-1]:  # every gear, then again in the other order
            run_and_compare(engine.slots[0], onnx_path, shapes, rng)
    finally:
        engine.close()


def test_padding_rows_do_not_change_the_real_rows(models):
    onnx_path, om_path = models["batch"]
    engine = open_sim(om_path)
    try:
        engine.bind_thread()
        real = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
        views = engine.slots[0].inputs({"x": (4, 4)})
        views["x"][:3] = real
        views["x"][3:] = 0.0
        outputs = engine.slots[0].run()
        expected = nets.reference(onnx_path, {"x": real})
        np.testing.assert_allclose(outputs["y"][:3], expected["y"], rtol=1e-6)
    finally:
        engine.close()


def test_spec_comes_from_the_runtime_desc(models):
    engine = open_sim(models["hw"][1], slots=2)
    try:
        spec = engine.spec
        assert engine.name == "acl-sim"
        assert [t.name for t in spec.inputs] == ["x"]  # no ascend_mbatch_shape_data
        assert spec.inputs[0].shape == (1, 3, -1, -1) and spec.inputs[0].format == "NCHW"
        assert spec.gear_kind == "hw" and [g.label for g in spec.shape_gears] == ["8x8", "16x12", "5x7"]
        assert [o.shape for o in spec.outputs] == [(1, 2, -1, -1), (1, 2, 1, 1)]
        assert "2 slot(s)" in engine.describe() and "device memory" in engine.describe()
    finally:
        engine.close()
    assert engine.describe() == "acl-sim engine (closed)"


@pytest.mark.parametrize(
    "absent_gears_ret, others",
    [
        (0, ["get_dynamic_hw returned 0 with hwCount 0", "get_input_dynamic_gear_count returned 0 with gear count 0"]),
        (
            145000,
            [
                "get_dynamic_hw returned 145000 ACL_ERROR_GE_PARAM_INVALID",
                "get_input_dynamic_gear_count returned 145000 ACL_ERROR_GE_PARAM_INVALID",
            ],
        ),
    ],
)
def test_a_dynamic_model_whose_lookups_find_no_gears_is_refused_listing_each_answer(
    models, monkeypatch, absent_gears_ret, others
):
    sim.configure(absent_gears_ret=absent_gears_ret)
    monkeypatch.setattr(sim.get_acl().mdl, "get_dynamic_batch", lambda desc: ({}, 100000))
    with pytest.raises(ConfigError) as info:
        open_sim(models["batch"][1])
    message = str(info.value)
    assert "'ascend_mbatch_shape_data'" in message
    for answer in ["get_dynamic_batch returned 100000 ACL_ERROR_INVALID_PARAM", *others]:
        assert answer in message


def test_shapes_that_are_not_a_gear_are_refused_listing_the_gears(models):
    engine = open_sim(models["batch"][1])
    try:
        with pytest.raises(EngineError, match=r"batch sizes \[1, 2, 4, 8\]"):
            engine.slots[0].inputs({"x": (3, 4)})
        with pytest.raises(EngineError, match="expected shapes for the inputs"):
            engine.slots[0].inputs({"y": (2, 4)})
    finally:
        engine.close()


def test_inputs_makes_no_acl_call_and_run_allocates_nothing(models):
    onnx_path, om_path = models["batch"]
    engine = open_sim(om_path)
    simulator = sim.get_simulator()
    try:
        before = dict(simulator.calls)
        errors = []
        thread = threading.Thread(target=lambda: errors.append(engine.slots[0].inputs({"x": (2, 4)})))
        thread.start()  # a thread with no context: any pyACL call would fail there
        thread.join()
        assert dict(simulator.calls) == before and errors[0]["x"].shape == (2, 4)
        engine.bind_thread()
        for batch in (1, 8, 2, 8):
            run_and_compare(engine.slots[0], onnx_path, {"x": (batch, 4)}, np.random.default_rng(batch))
        creating = [n for n in simulator.calls if n.startswith(("malloc", "create", "load"))]
        assert {n: simulator.calls[n] for n in creating} == {n: before.get(n, 0) for n in creating}
    finally:
        engine.close()


def test_run_from_an_unbound_thread_is_caught(models):
    engine = open_sim(models["static"][1])
    try:
        engine.slots[0].inputs({"x": (2, 4)})
        failures = []

        def unbound():
            try:
                engine.slots[0].run()
            except AclError as exc:
                failures.append(exc)

        thread = threading.Thread(target=unbound)
        thread.start()
        thread.join()
        assert failures and failures[0].ret == 107002
        assert "ACL_ERROR_RT_CONTEXT_NULL" in str(failures[0]) and "no current context" in str(failures[0])
    finally:
        engine.close()


def test_two_slots_run_concurrently_from_two_threads(models):
    onnx_path, om_path = models["batch"]
    sim.configure(device_ms=1.0, row_ms=0.1)
    engine = open_sim(om_path, slots=2)
    failures = []

    def work(slot):
        try:
            engine.bind_thread()
            rng = np.random.default_rng(slot.index)
            for i in range(25):
                run_and_compare(slot, onnx_path, {"x": ((1, 2, 4, 8)[i % 4], 4)}, rng)
        except Exception as exc:  # collected for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in engine.slots]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        engine.close()
    assert failures == []


def test_close_from_another_thread_releases_everything(models):
    engine = open_sim(models["dims"][1], slots=2)
    thread = threading.Thread(target=engine.close)
    thread.start()
    thread.join()
    engine.close()  # idempotent
    assert sim.live() == []


def count_calls_of_a_successful_open(path, slots):
    simulator = sim.get_simulator()
    before = dict(simulator.calls)
    open_sim(path, slots=slots).close()
    return {name: simulator.calls[name] - before.get(name, 0) for name in simulator.calls}


@pytest.mark.parametrize(
    "function",
    ["malloc", "malloc_host", "create_stream", "create_event", "load_from_file_with_mem", "set_dynamic_batch_size"],
)
def test_a_load_failing_at_any_call_leaves_nothing_behind(models, function):
    path = models["batch"][1]
    calls = count_calls_of_a_successful_open(path, slots=2)[function]
    assert calls >= 2
    for nth in range(1, calls + 1):
        sim.configure(faults=f"{function}:{nth}")
        with pytest.raises(AclError) as info:
            open_sim(path, slots=2)
        assert f".{function} returned" in str(info.value)
        assert sim.live() == [], f"{function} call {nth} failed and left resources"


def test_unservable_type_is_refused_at_load_naming_tensor_and_type(models, tmp_path):
    original = load_sim_om(models["batch"][1])
    bf16_input = replace(original.layout.inputs[0], data_type=data_type_named("BF16"))
    layout = replace(original.layout, inputs=(bf16_input,))
    model_inputs = tuple(
        replace(m, tensor=bf16_input) if m.tensor.name == bf16_input.name else m for m in original.model_inputs
    )
    write_sim_om(tmp_path / "bf16.om", replace(original, layout=layout, model_inputs=model_inputs))
    with pytest.raises(ConfigError, match=r"input 'x' has type ACL_BF16 \(27\).*bfloat16"):
        open_sim(tmp_path / "bf16.om")


def test_a_real_cann_om_is_refused_by_the_simulator(tmp_path):
    fake = tmp_path / "real.om"
    fake.write_bytes(b"IMOD" + bytes(252))
    with pytest.raises(AclError, match="100003 ACL_ERROR_INVALID_FILE.*only a real Ascend NPU"):
        open_sim(fake)


def test_a_failure_that_is_not_an_acl_error_still_drains_the_stream(models, monkeypatch):
    """The copy back raises a plain Python error after the copy-in and the execution were queued:
    run() must wait for them before raising (nothing left in flight)."""
    onnx_path, om_path = models["batch"]
    sim.configure(device_ms=200.0)
    engine = open_sim(om_path)
    models_in_sim = sim.get_simulator().models
    try:
        engine.bind_thread()
        slot = engine.slots[0]
        rt = sim.get_acl().rt
        queue_copy = rt.memcpy_async

        def broken_copy_back(dst, dst_max, src, count, kind, stream):
            if kind == 2:  # ACL_MEMCPY_DEVICE_TO_HOST
                raise RuntimeError("copy back broke")
            return queue_copy(dst, dst_max, src, count, kind, stream)

        monkeypatch.setattr(rt, "memcpy_async", broken_copy_back)
        slot.inputs({"x": (2, 4)})
        with pytest.raises(RuntimeError, match="copy back broke"):
            slot.run()
        in_flight = [dict(m.running) for m in models_in_sim.values() if any(m.running.values())]
        assert in_flight == [], "run() raised while its execution was still queued on the stream"
        monkeypatch.undo()
        run_and_compare(slot, onnx_path, {"x": (2, 4)}, np.random.default_rng(0))
    finally:
        engine.close()


# --- faults ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault, function, code",
    [
        (
            "execute_async:2=507011",
            "acl.mdl.execute_async",
            "507011 ACL_ERROR_RT_MODEL_EXECUTE (model execute failed)",
        ),
        ("memcpy_async:5", "acl.rt.memcpy_async", "507000 ACL_ERROR_RT_INTERNAL_ERROR"),
        ("synchronize_stream:2", "acl.rt.synchronize_stream", "507046 ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
    ],
)
def test_injected_failure_raises_then_the_engine_recovers(models, fault, function, code):
    onnx_path, om_path = models["batch"]
    engine = open_sim(om_path, acl_sim_faults=sim.FaultSchedule.parse(fault))
    rng = np.random.default_rng(0)
    try:
        engine.bind_thread()
        run_and_compare(engine.slots[0], onnx_path, {"x": (2, 4)}, rng)
        with pytest.raises(AclError) as info:
            run_and_compare(engine.slots[0], onnx_path, {"x": (4, 4)}, rng)
        assert str(info.value).startswith(f"{function} returned {code}")
        assert "injected failure" in str(info.value)
        for batch in (4, 1):
            run_and_compare(engine.slots[0], onnx_path, {"x": (batch, 4)}, rng)
    finally:
        engine.close()


def test_lost_device_fails_every_run_and_still_closes_cleanly(models):
    onnx_path, om_path = models["static"]
    engine = open_sim(om_path, acl_sim_faults=sim.FaultSchedule.parse("execute_async:2=lost"))
    rng = np.random.default_rng(0)
    try:
        engine.bind_thread()
        run_and_compare(engine.slots[0], onnx_path, {"x": (2, 4)}, rng)
        for _ in range(2):
            with pytest.raises(AclError, match="507899 ACL_ERROR_RT_DRV_INTERNAL_ERROR"):
                run_and_compare(engine.slots[0], onnx_path, {"x": (2, 4)}, rng)
    finally:
        engine.close()


# --- configuration ---------------------------------------------------------------------------------


def test_parameters_parse_and_refuse_bad_values():
    values = parse_parameters({"acl_sim_faults": "malloc:3", "acl_sim_device_ms": "2.5"}, PARAMETERS)
    assert values == {
        "acl_sim_faults": sim.FaultSchedule.parse("malloc:3"),
        "acl_sim_device_ms": 2.5,
        "acl_sim_row_ms": None,
        "acl_sim_core_busy": None,
        "acl_sim_launch_share": None,
        "acl_sim_copy_gbps": None,
        "acl_sim_shared_device": None,
    }
    with pytest.raises(ConfigError, match="acl_sim_faults.*FUNCTION:N"):
        parse_parameters({"acl_sim_faults": "malloc"}, PARAMETERS)
    for name, bad in (
        ("acl_sim_row_ms", "-1"),
        ("acl_sim_core_busy", "0"),
        ("acl_sim_core_busy", "1.5"),
        ("acl_sim_launch_share", "1"),
        ("acl_sim_copy_gbps", "-2"),
        ("acl_sim_shared_device", "maybe"),
    ):
        with pytest.raises(ConfigError, match=name):
            parse_parameters({name: bad}, PARAMETERS)


def test_options_reach_the_process_simulator(models):
    engine = open_sim(
        models["static"][1],
        acl_sim_device_ms=3.0,
        acl_sim_row_ms=0.5,
        acl_sim_core_busy=0.6,
        acl_sim_launch_share=0.2,
        acl_sim_copy_gbps=12.0,
        acl_sim_shared_device=False,
    )
    engine.close()
    config = sim.get_simulator().config
    assert (config.device_ms, config.row_ms, config.core_busy, config.launch_share, config.copy_gbps) == (
        3.0,
        0.5,
        0.6,
        0.2,
        12.0,
    )
    assert config.shared_device is False


def test_simulator_options_are_refused_for_the_real_engine(models, monkeypatch):
    monkeypatch.delenv("GE_ACL_SIMULATOR", raising=False)
    with pytest.raises(ConfigError, match="acl_sim_device_ms.*only to engine 'acl-sim'.*not to engine 'acl'"):
        open_engine("acl", models["static"][1], device_id=0, slots=1, options={"acl_sim_device_ms": 1.0})


def test_environment_switch_runs_engine_acl_on_the_simulator_loudly_on_every_load(models, monkeypatch, caplog):
    monkeypatch.setenv("GE_ACL_SIMULATOR", "1")
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            engine = open_engine("acl", models["static"][1], device_id=0, slots=1, options={})
            engine.close()
    assert engine.name == "acl-sim"
    banners = [r.getMessage() for r in caplog.records if "NOT on an Ascend NPU" in r.getMessage()]
    assert len(banners) == 2 and all("GE_ACL_SIMULATOR=1" in b for b in banners)
    monkeypatch.setenv("GE_ACL_SIMULATOR", "maybe")
    with pytest.raises(ConfigError, match="GE_ACL_SIMULATOR"):
        open_engine("acl", models["static"][1], device_id=0, slots=1, options={})


def test_environment_switch_never_replaces_a_pyacl_that_imports(models, monkeypatch):
    """On a host where CANN's pyACL imports (here: a module with acl.rt and acl.mdl, which is what
    the engine checks), the switch refuses to act: engine acl is the NPU or nothing."""
    real = types.ModuleType("acl")
    real.rt, real.mdl = types.SimpleNamespace(), types.SimpleNamespace()
    monkeypatch.setitem(sys.modules, "acl", real)
    monkeypatch.setenv("GE_ACL_SIMULATOR", "1")
    with pytest.raises(ConfigError, match="GE_ACL_SIMULATOR=1.*pyACL imports here.*Unset GE_ACL_SIMULATOR.*'acl-sim'"):
        open_engine("acl", models["static"][1], device_id=0, slots=1, options={})


def test_missing_pyacl_is_a_clear_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "acl", None)  # makes `import acl` fail
    with pytest.raises(ConfigError, match="PyPI package named 'pyacl' is unrelated"):
        import_pyacl()


def test_slots_must_be_positive(models):
    with pytest.raises(ConfigError, match=r"streams \(slots\) must be >= 1, got 0"):
        AclEngine(models["static"][1], acl=sim.get_acl(), name="acl-sim", slots=0)


_EXIT_SCRIPT = """
import sys
from ge_python_backend.engines import open_engine
from ge_python_backend.sim import get_acl
engine = open_engine("acl-sim", sys.argv[1], device_id=0, slots=2, options={})
if sys.argv[2] == "leak":  # memory the engine does not know about: finalize must report it
    acl = get_acl()
    engine.bind_thread()
    ptr, ret = acl.rt.malloc(128, 0)
    print(hex(ptr))
"""


@pytest.mark.parametrize("mode", ["clean", "leak"])
def test_process_exit_closes_engines_finalizes_and_appends_to_the_ledger(models, tmp_path, mode):
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "GE_ACL_SIM_LEDGER_FILE": str(ledger)}
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(models["batch"][1]), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["when"] == "finalize" and lines[0]["pid"] > 0
    if mode == "clean":
        assert lines[0]["live"] == []
    else:
        assert lines[0]["live"] == [f"device malloc {done.stdout.strip()} (128 bytes, device 0)"]


def test_engine_opens_again_after_the_simulator_was_reset(models):
    open_sim(models["static"][1]).close()
    sim.get_simulator().reset()  # acl.finalize behind the engine runtime's back
    engine = open_sim(models["static"][1])
    try:
        engine.bind_thread()
        run_and_compare(engine.slots[0], models["static"][0], {"x": (2, 4)}, np.random.default_rng(0))
    finally:
        engine.close()
