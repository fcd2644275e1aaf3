"""The bench library without a server: percentiles, metrics parsing, report, progress bar."""

from __future__ import annotations

import io
import json
import math
import os
import re
import struct

import numpy as np
import pytest

from ge_python_backend.ops.bench import BenchError, Sweep, Target, metrics, percentile, report
from ge_python_backend.ops.bench.progress import Progress
from ge_python_backend.ops.bench.stats import Latency, measured_point


@pytest.mark.parametrize("size", [1, 2, 7, 100, 1001])
def test_percentile_matches_numpy_linear_interpolation(size):
    values = np.random.default_rng(size).exponential(5.0, size).tolist()
    for q in (0, 1, 50, 90, 99, 99.9, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_edges():
    assert math.isnan(percentile([], 50))
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    with pytest.raises(ValueError, match="101"):
        percentile([1.0], 101)


def test_measured_point_converts_to_ms_and_rates():
    point = measured_point("concurrency", 4, 2.0, [0.010, 0.020, 0.030, 0.040], ["E: x", "E: x", "F"], 8)
    assert point.requests == 4 and point.errors == 3
    assert point.throughput == 2.0 and point.inferences == 16.0
    assert point.latency_ms.p50 == pytest.approx(25.0) and point.latency_ms.max == pytest.approx(40.0)
    assert point.error_samples == ("E: x", "F")
    assert math.isnan(Latency.of([]).p99)
    assert point.latencies_s == ()


def test_measured_point_keeps_the_raw_latencies_when_asked():
    point = measured_point("concurrency", 1, 1.0, [0.030, 0.010], [], 1, keep_latencies=True)
    assert point.latencies_s == (0.030, 0.010)
    assert json.loads(json.dumps(point.to_dict()))["latencies_s"] == [0.030, 0.010]


METRICS_BEFORE = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="1"} 10
nv_inference_request_success{model="other",version="1"} 99
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 10
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 10
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="m",version="1"} 1000
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 1
nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 0
# TYPE ge_phase_duration_us counter
ge_phase_duration_us{instance="m_0_0",model="m",phase="execute",version="1"} 500
ge_phase_duration_us{instance="m_0_1",model="m",phase="execute",version="1"} 500
# TYPE ge_wait_seconds histogram
ge_wait_seconds_bucket{model="m",le="0.1"} 1
ge_wait_seconds_bucket{model="m",le="+Inf"} 2
ge_wait_seconds_sum{model="m"} 0.5
ge_wait_seconds_count{model="m"} 2
# TYPE ge_in_flight gauge
ge_in_flight{model="m"} 3
ge_in_flight{model="other"} 7
"""

METRICS_AFTER = """# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="1"} 30
nv_inference_request_success{model="other",version="1"} 100
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 50
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 15
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="m",version="1"} 5000
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 3
nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 1
# TYPE ge_phase_duration_us counter
ge_phase_duration_us{instance="m_0_0",model="m",phase="execute",version="1"} 2500
ge_phase_duration_us{instance="m_0_1",model="m",phase="execute",version="1"} 1500
# TYPE ge_wait_seconds histogram
ge_wait_seconds_bucket{model="m",le="0.1"} 1
ge_wait_seconds_bucket{model="m",le="+Inf"} 6
ge_wait_seconds_sum{model="m"} 2.5
ge_wait_seconds_count{model="m"} 6
# TYPE ge_in_flight gauge
ge_in_flight{model="m"} 1
ge_in_flight{model="other"} 7
"""

ROUTER_BEFORE = """# TYPE ge_router_requests_total counter
ge_router_requests_total{instance="r_0_0",member="npu",pid="7",router="r",version="1"} 10
ge_router_requests_total{instance="r_0_0",member="cpu",pid="7",router="r",version="1"} 0
ge_router_requests_total{instance="s_0_0",member="npu",pid="8",router="s",version="1"} 5
"""
ROUTER_AFTER = """# TYPE ge_router_requests_total counter
ge_router_requests_total{instance="r_0_0",member="npu",pid="7",router="r",version="1"} 70
ge_router_requests_total{instance="r_0_0",member="cpu",pid="7",router="r",version="1"} 30
ge_router_requests_total{instance="s_0_0",member="npu",pid="8",router="s",version="1"} 9
# TYPE ge_router_in_flight gauge
ge_router_in_flight{instance="r_0_0",member="npu",pid="7",router="r",version="1"} 16
"""


def test_a_routers_series_are_its_own_when_bench_targets_it():
    families = metrics.model_families(metrics.parse(ROUTER_BEFORE), metrics.parse(ROUTER_AFTER), "r", "ge_")
    assert families == {
        "ge_router_in_flight{member=npu,pid=7}": {"value": 16.0},
        "ge_router_requests_total{member=cpu,pid=7}": {"increase": 30.0},
        "ge_router_requests_total{member=npu,pid=7}": {"increase": 60.0},
    }


def test_parse_reads_labels_with_escapes_and_types():
    scrape = metrics.parse('# TYPE x counter\nx{a="q\\"uote",b="back\\\\slash"} 2.5 1700000000\ny 1e3\n')
    assert scrape.samples[("x", (("a", 'q"uote'), ("b", "back\\slash")))] == 2.5
    assert scrape.samples[("y", ())] == 1000.0
    assert scrape.types == {"x": "counter"}
    with pytest.raises(ValueError, match="malformed"):
        metrics.parse("x{a=unquoted} 1\n")


def test_breakdown_is_the_window_delta_for_one_model():
    result = metrics.breakdown(metrics.parse(METRICS_BEFORE), metrics.parse(METRICS_AFTER), "m")
    assert result["requests"] == 20
    assert result["failures"] == 3
    assert result["executions"] == 5
    assert result["avg_batch"] == 8.0
    assert result["per_request_us"]["queue"] == 200.0  # 4000 us over 20 requests
    families = result["model_metrics"]
    assert families["ge_phase_duration_us{phase=execute}"] == {"increase": 3000.0}  # summed over instances
    assert families["ge_wait_seconds"] == {"count": 4.0, "sum": 2.0, "mean": 0.5}
    assert families["ge_in_flight"] == {"value": 1.0}


def _target() -> Target:
    return Target("127.0.0.1:1", "m", {"x": np.zeros((4, 3), np.float32)}, "grpc", metrics_url="http://h/metrics")


def test_json_document_round_trips_with_every_point():
    sweep = Sweep(levels=(1, 2), duration_s=1.0, warmup_s=0.0)
    points = [measured_point("concurrency", level, 1.0, [0.001 * level] * 3, [], 4) for level in (1, 2)]
    doc = json.loads(json.dumps(report.document(_target(), sweep, points)))
    assert doc["schema"] == report.SCHEMA
    assert doc["target"]["rows_per_request"] == 4
    assert doc["target"]["inputs"] == {"x": {"shape": [4, 3], "dtype": "float32"}}
    assert [p["level"] for p in doc["points"]] == [1, 2]
    assert doc["points"][1]["latency_ms"]["p99"] == pytest.approx(2.0)
    assert doc["points"][0]["inferences"] == 12.0


def test_table_shows_server_split_when_present():
    server = {"avg_batch": 2.5, "per_request_us": {"queue": 1500.0, "compute_infer": 250.0}}
    text = report.table([measured_point("rate", 50, 1.0, [0.004], [], 1, server)])
    header, rule, row = text.splitlines()
    assert header.split()[-5:] == ["batch", "queue", "c.input", "c.infer", "c.output"]
    assert row.split()[-5:] == ["2.50", "1.50", "0.00", "0.25", "0.00"]


def test_plot_writes_a_png(tmp_path):
    points = [measured_point("concurrency", c, 1.0, [0.001 * c] * 10, [], 1) for c in (1, 2, 4)]
    path = report.plot({"a": points, "b": points}, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_refuses_bad_levels():
    with pytest.raises(BenchError, match="levels"):
        Sweep(levels=(0,))
    with pytest.raises(BenchError, match="mode"):
        Sweep(levels=(1,), mode="burst")


def test_progress_bar_renders_and_ends_its_line():
    stream = io.StringIO()
    progress = Progress(10.0, width=10, stream=stream)
    assert progress.render(4.0, "c=1") == "[####......]  40%  c=1"
    progress.update(20.0, "done", force=True)
    progress.close()
    assert stream.getvalue().startswith("\r[##########] 100%  done") and stream.getvalue().endswith("\n")


def test_process_tree_cpu_counts_a_busy_child():
    import resource
    import subprocess
    import sys

    from ge_python_backend.ops.bench import host

    own = resource.getrusage(resource.RUSAGE_SELF)
    assert host.process_tree_cpu(os.getpid()) >= own.ru_utime + own.ru_stime - 0.05
    # A child that burns CPU for a moment, then waits for us: its time is in our tree.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\n"
            "print('done', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "done"
        assert host.parent_pid(child.pid) == os.getpid()
        assert host.process_cpu(child.pid) >= 0.25
        assert host.process_tree_cpu(child.pid) >= 0.25
        assert host.process_tree_cpu(os.getpid()) >= host.process_tree_cpu(child.pid)
    finally:
        child.stdin.close()
        child.wait()
    assert host.process_tree_cpu(child.pid) is None
    assert host.process_cpu(child.pid) is None and host.parent_pid(child.pid) is None


def test_cpu_busy_is_the_busy_share_of_the_jiffies_between_two_reads(tmp_path, monkeypatch):
    from ge_python_backend.ops.bench import host

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq: busy = all - idle - iowait
    reads = iter(["cpu  100 0 100 700 100 0 0\ncpu0 ...\n", "cpu  400 0 100 800 100 0 0\ncpu0 ...\n"])
    stat.write_text(next(reads))
    monkeypatch.setattr(host, "_STAT", stat)
    monkeypatch.setattr(host.time, "sleep", lambda seconds: stat.write_text(next(reads)))
    assert host.cpu_busy(1.0) == pytest.approx(300 / 400)  # busy 200 -> 500 of total 1000 -> 1400
    stat.unlink()
    monkeypatch.setattr(host.time, "sleep", lambda seconds: None)
    assert host.cpu_busy(1.0) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat on this host")
def test_cpu_busy_reads_this_host():
    from ge_python_backend.ops.bench import host

    busy = host.cpu_busy(0.05)
    assert busy is not None and 0.0 <= busy <= 1.0


def test_random_tensors_follow_the_config_types_and_dims():
    from ge_python_backend.ops.bench.load import random_tensors

    inputs = [
        {"name": "image", "data_type": "TYPE_FP16", "dims": [3, 2]},
        {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "mask", "data_type": "TYPE_BOOL", "dims": [4]},
    ]
    tensors = random_tensors(8, inputs, batch_size=5, shapes={"ids": [7]})
    assert {name: (t.dtype, t.shape) for name, t in tensors.items()} == {
        "image": (np.dtype(np.float16), (5, 3, 2)),
        "ids": (np.dtype(np.int64), (5, 7)),
        "mask": (np.dtype(np.bool_), (5, 4)),
    }
    assert random_tensors(0, inputs[:1])["image"].shape == (3, 2)  # no batch axis


@pytest.mark.parametrize("data_type", ["TYPE_STRING", "TYPE_BF16", "TYPE_COMPLEX"])
def test_random_tensors_refuse_types_without_random_numbers(data_type):
    from ge_python_backend.ops.bench.load import random_tensors

    with pytest.raises(BenchError, match=f"input 'x' is {data_type}: random data covers numeric types only"):
        random_tensors(8, [{"name": "x", "data_type": data_type, "dims": [2]}])


def test_infer_request_carries_raw_little_endian_tensors():
    from ge_python_backend.ops.bench.grpc_infer import infer_request

    x = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]  # not contiguous
    ids = np.array([[7], [-1]], np.int64)
    request = infer_request("m", {"x": x, "ids": ids}, request_id="r1", outputs=("y",))
    assert (request.model_name, request.id, [o.name for o in request.outputs]) == ("m", "r1", ["y"])
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("x", "FP32", [2, 2]),
        ("ids", "INT64", [2, 1]),
    ]
    assert list(request.raw_input_contents) == [struct.pack("<4f", 0, 2, 3, 5), struct.pack("<2q", 7, -1)]


def test_infer_request_lays_out_strings_with_their_length_prefixes():
    """Finding: a TYPE_STRING input went out as the object array's pointers, so every gRPC request failed."""
    import tritonclient.grpc as grpcclient

    from ge_python_backend.ops.bench.grpc_infer import infer_request

    blobs = np.array([[b"\x89PNG..."], [b""]], dtype=object)
    (content,) = infer_request("m", {"IMAGE": blobs}).raw_input_contents
    assert content == struct.pack("<I", 7) + b"\x89PNG..." + struct.pack("<I", 0)
    reference = grpcclient.InferInput("IMAGE", [2, 1], "BYTES")
    reference.set_data_from_numpy(blobs)
    assert content == reference._raw_content  # tritonclient's own request carries the same bytes


PER_INSTANCE_BEFORE = """
# TYPE ge_batches counter
ge_batches{instance="m_0_0",model="m",pid="11",version="1"} 10
ge_batches{instance="m_0_1",model="m",pid="12",version="1"} 0
# TYPE ge_phase_duration_us counter
ge_phase_duration_us{instance="m_0_0",model="m",phase="execute",pid="11",version="1"} 1000
ge_phase_duration_us{instance="m_0_1",model="m",phase="execute",pid="12",version="1"} 0
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 10
"""
PER_INSTANCE_AFTER = """
# TYPE ge_batches counter
ge_batches{instance="m_0_0",model="m",pid="11",version="1"} 30
ge_batches{instance="m_0_1",model="m",pid="12",version="1"} 20
# TYPE ge_phase_duration_us counter
ge_phase_duration_us{instance="m_0_0",model="m",phase="execute",pid="11",version="1"} 41000
ge_phase_duration_us{instance="m_0_1",model="m",phase="execute",pid="12",version="1"} 42000
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 50
"""


def test_durations_are_per_batch_of_each_instance():
    """Finding: each instance's phase total was divided by the whole model's executions, so with 2
    instances 'ms per execution' showed half the truth."""
    server = metrics.breakdown(metrics.parse(PER_INSTANCE_BEFORE), metrics.parse(PER_INSTANCE_AFTER), "m")
    assert server["per_batch_us"] == {
        "ge_phase_duration_us{phase=execute,pid=11}": 2000.0,  # 40000 us over its 20 batches
        "ge_phase_duration_us{phase=execute,pid=12}": 2100.0,  # 42000 us over its 20 batches
    }
    point = measured_point("concurrency", 1, 1.0, [0.001] * 3, [], 1, server)
    table = report.model_metrics_table([point])
    assert "ge_phase_duration_us{phase=execute,pid=11}: 40.0 ms, 2.000 ms per batch of this instance" in table
    assert "ge_phase_duration_us{phase=execute,pid=12}: 42.0 ms, 2.100 ms per batch of this instance" in table


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_npz_requests_may_hold_string_tensors(tmp_path):
    from ge_python_backend.ops.bench.npz import read_npz

    blobs = np.array([[b"\x89PNG\x00\x00"], [b"raw\x00"]], dtype=object)
    words = np.array(["été", "b"])
    got = read_npz(_npz(tmp_path / "r.npz", IMAGE=blobs, WORDS=words, X=np.arange(6, dtype=np.float32).reshape(2, 3)))
    assert got["IMAGE"].dtype == object and got["IMAGE"].tolist() == blobs.tolist()  # trailing zero bytes kept
    assert got["WORDS"].tolist() == ["été".encode(), b"b"]
    np.testing.assert_array_equal(got["X"], np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"X": np.array([b"ab\x00"])}, "numpy fixed-width bytes (|S3), whose trailing zero bytes numpy drops"),
        ({"X": np.array([1, "a"], dtype=object)}, "array 'X' element 0 is int; string tensors hold bytes or str"),
    ],
)
def test_npz_string_tensors_that_would_not_be_sent_as_saved_are_refused(tmp_path, arrays, message):
    from ge_python_backend.ops.bench.npz import read_npz

    with pytest.raises(BenchError, match=re.escape(message)):
        read_npz(_npz(tmp_path / "r.npz", **arrays))


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_an_npz_whose_pickle_would_run_code_is_refused_without_running_it(tmp_path, monkeypatch):
    from ge_python_backend.ops.bench.npz import read_npz

    monkeypatch.chdir(tmp_path)
    path = _npz(tmp_path / "evil.npz", X=np.array([_Payload()], dtype=object))
    with pytest.raises(BenchError, match="it names posix.system, which is not part of a numpy array"):
        read_npz(path)
    assert not (tmp_path / "PWNED").exists()


def test_bench_checks_its_arguments_before_it_starts_a_server(tmp_path, monkeypatch, capsys):
    from ge_python_backend.cli import main as ge_triton
    from ge_python_backend.ops import server

    monkeypatch.setattr(server.TritonServer, "__init__", lambda *a, **k: pytest.fail("a server was created"))
    (tmp_path / "repo").mkdir()
    for extra, message in (
        (["--data", str(tmp_path / "missing.npz")], "cannot read it as an .npz"),
        (["--url", "127.0.0.1:1"], "--url and --repository"),
        (["--duration", "0"], "expected a duration > 0"),
    ):
        assert ge_triton(["bench", "m", "--repository", str(tmp_path / "repo"), *extra]) == 2
        assert message in capsys.readouterr().err
    assert ge_triton(["bench", "m", "--repository", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
