"""GEModel's Prometheus metrics (through the fake MetricFamily): names, labels, sums."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from ge_python_backend.repository.config import set_parameters
from ge_python_backend.testing import ModelHarness
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton import metrics
from ge_python_backend.triton.model import GEModel
from tests.support import repos


class TritonPythonModel(GEModel):
    pass


def values(name: str, model: str) -> dict[tuple, float]:
    family = pb.MetricFamily.registry[name]
    return {
        tuple(
            sorted((k, v) for k, v in m.labels.items() if k not in ("model", "version", "instance", "pid"))
        ): m.value()
        for m in family.metrics
        if m.labels["model"] == model
    }


def test_batches_rows_padding_phases_and_failures_are_counted(tmp_path, onnx_dir):
    from ge_python_backend.sim import sim_compile

    sim_om = sim_compile(onnx_dir / "linear.onnx", tmp_path / "linear.om", batch_gears=(1, 2, 4, 8))
    assert sim_om.batch.sizes == (1, 2, 4, 8)
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "metered")
    set_parameters(folder / "config.pbtxt", reject_nonfinite="true")
    with ModelHarness(TritonPythonModel, folder) as model:
        good = [pb.InferenceRequest([pb.Tensor("x", np.ones((n, 4), np.float32))]) for n in (3, 2)]  # 5 -> gear 8
        bad = pb.InferenceRequest([pb.Tensor("x", np.full((1, 4), np.inf, np.float32))])  # refused by GEModel
        responses = model.infer(good + [bad])
        assert [r.has_error() for r in responses] == [False, False, True]
        model.model.runner.drain()
        model.model.metrics.flush()
        labels = {m.labels["instance"] for m in pb.MetricFamily.registry["ge_batches"].metrics}
        assert labels == {"metered_0_0"}
        assert values("ge_batches", "metered") == {(): 1}
        assert values("ge_batch_rows", "metered") == {(): 5}
        assert values("ge_padding_rows", "metered") == {(): 3}
        phases = values("ge_phase_duration_us", "metered")
        assert set(phases) == {
            (("phase", p),)
            for p in ("preprocess", "gather", "host_to_device", "execute", "device_to_host", "scatter", "postprocess")
        }
        for phase in ("gather", "execute", "scatter"):
            assert phases[(("phase", phase),)] > 0, phase
        assert phases[(("phase", "preprocess"),)] == phases[(("phase", "postprocess"),)] == 0, "no hooks, no time"
        failures = values("ge_request_failures", "metered")
        assert failures[(("kind", "input"),)] == 1 and failures[(("kind", "engine"),)] == 0
        assert values("ge_engine_healthy", "metered") == {(): 1}


def test_every_series_carries_the_stub_pid_and_a_heartbeat_that_advances(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path / "repo", onnx_dir / "linear.onnx", "beating")
    with ModelHarness(TritonPythonModel, folder):
        families = [pb.MetricFamily.registry[name] for name in metrics.METRICS]
        mine = [m for family in families for m in family.metrics if m.labels["model"] == "beating"]
        assert {m.labels["pid"] for m in mine} == {str(os.getpid())}
        (heartbeat,) = [m for m in pb.MetricFamily.registry[metrics.HEARTBEAT].metrics if m in mine]
        first = heartbeat.value()
        assert abs(first - time.time()) < 5
        deadline = time.monotonic() + 5 * metrics.HEARTBEAT_INTERVAL
        while heartbeat.value() == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heartbeat.value() > first


def test_npu_models_report_device_memory_and_readiness_follows_engine_health(tmp_path, onnx_dir):
    """ge_device_memory_bytes{kind=free|total} from acl.rt.get_mem_info, read off the request path;
    is_ready (Triton r26.03+) turns False once a fatal failure takes the model out of service."""
    import re

    from ge_python_backend import sim
    from ge_python_backend.sim import sim_compile

    sim_compile(onnx_dir / "linear.onnx", tmp_path / "linear.om", batch_gears=(1, 2, 4, 8))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "npu_memory")
    set_parameters(folder / "config.pbtxt", acl_sim_faults="execute_async:2=507010")
    with ModelHarness(TritonPythonModel, folder) as model:
        deadline = time.monotonic() + 5 * metrics.FLUSH_INTERVAL
        while not any(values(metrics.DEVICE_MEMORY, "npu_memory").values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        memory = values(metrics.DEVICE_MEMORY, "npu_memory")
        allocated = sum(
            int(m.group(1)) for line in sim.live() if (m := re.match(r"device malloc \S+ \((\d+) bytes", line))
        )
        total = sim.get_simulator().config.device_memory
        assert memory == {
            (("device", "0"), ("kind", "free")): total - allocated,
            (("device", "0"), ("kind", "total")): total,
        }
        assert model.model.is_ready()
        request = [pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32))])]
        assert not model.infer(request)[0].has_error()
        assert model.infer(request)[0].has_error()  # 507010: the device lost its heartbeat
        assert not model.model.is_ready()


def test_cpu_engines_report_no_device_series(tmp_path, onnx_dir):
    folder = repos.generated(tmp_path / "repo", onnx_dir / "linear.onnx", "cpu_memory")
    with ModelHarness(TritonPythonModel, folder) as model:
        model.model.metrics.flush()
        for name in metrics.DEVICE_SERIES:
            family = pb.MetricFamily.registry.get(name)
            assert family is None or not [m for m in family.metrics if m.labels["model"] == "cpu_memory"]
        assert model.model.is_ready()


def test_npu_models_count_the_seconds_their_device_ran_them(tmp_path, onnx_dir):
    """ge_device_busy_seconds_total{device} against the simulated device's own busy seconds."""
    from ge_python_backend import sim
    from ge_python_backend.sim import sim_compile

    sim_compile(onnx_dir / "linear.onnx", tmp_path / "linear.om", batch_gears=(1, 2, 4, 8))
    folder = repos.generated(tmp_path / "repo", tmp_path / "linear.om", "npu_busy", instance_count=1)
    set_parameters(folder / "config.pbtxt", acl_sim_device_ms="10", acl_timing_every="1")
    device = sim.get_simulator().device_model(0)
    try:
        with ModelHarness(TritonPythonModel, folder) as model:
            before = device.usage().busy_seconds
            for _ in range(6):
                request = [pb.InferenceRequest([pb.Tensor("x", np.ones((8, 4), np.float32))])]
                assert not model.infer(request)[0].has_error()
            model.model.runner.drain()
            modelled = device.usage().busy_seconds - before
            model.model.metrics.flush()
            (busy,) = values(metrics.DEVICE_BUSY, "npu_busy").items()
    finally:
        sim.configure(device_ms=0.0)
    assert modelled == pytest.approx(0.06, rel=0.01)
    assert busy[0] == (("device", "0"),) and busy[1] == pytest.approx(modelled, rel=0.1)
