"""Where a served request's CPU goes: per process (tritonserver, the model's Python stub, the
load generator) and, with py-spy, inside the stub.

Serves the bench_serving repository (``ge`` and ``handwritten`` folders, image_classifier),
loads one model at one concurrency and prints CPU milliseconds per request by process. With
``--host`` it serves tools/bench_host.py's repository instead (the tiny Relu model: ``identity``,
``ort``, or an acl-sim folder such as ``default_d0`` or ``return_s1_i1_d2``) and loads it with
perf_analyzer (``--perf-analyzer``), since a Python load generator cannot keep up there. With
``--py-spy PATH`` it also samples the stub for the same window (wall clock, or only while a
thread holds the GIL with ``--gil``) and prints the hottest frames; the raw profile is saved.
py-spy is not a project dependency: install it anywhere, e.g. ``pip install py-spy`` in a
scratch venv, and pass its path.

    .venv/bin/python tools/bench_profile.py ge --concurrency 16 [--py-spy /tmp/prof/bin/py-spy --gil]
    .venv/bin/python tools/bench_profile.py default_d0 --host --concurrency 16 --py-spy PATH [--gil]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from bench_common import common_arguments  # noqa: E402
from bench_serving import build_repository  # noqa: E402

from ge_python_backend.ops.bench import (
    Sweep,
    Target,
    run_sweep,  # noqa: E402
)
from ge_python_backend.ops.bench.host import parent_pid, process_cpu, process_tree_cpu, wait_quiet  # noqa: E402
from ge_python_backend.ops.server import TritonServer  # noqa: E402
from ge_python_backend.testing import models  # noqa: E402


def stub_pid(server_pid: int, instance: str) -> int:
    """The Python stub process serving ``instance`` (e.g. ge_0_0) under ``server_pid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or parent_pid(int(entry.name)) != server_pid:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"triton_python_backend_stub") and instance.encode() in argv:
            return int(entry.name)
    raise RuntimeError(f"no Python stub for instance {instance} under tritonserver pid {server_pid}")


def hottest(raw: Path, count: int) -> list[str]:
    """Top frames by own samples (the frame a sample ended in) from a py-spy raw profile."""
    own: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        own[stack.split(";")[-1] or "(native code, no Python frame)"] += int(samples)
    return [f"{samples / total * 100:5.1f}%  {frame}" for frame, samples in own.most_common(count)] + [
        f"({total} samples)"
    ]


def spy(args, pid: int, raw: Path):
    """py-spy recording ``pid`` for ``args.duration`` s into ``raw`` (None without --py-spy)."""
    if not args.py_spy:
        return None
    command = [args.py_spy, "record", "--pid", str(pid), "--duration", str(int(args.duration))]
    command += ["--rate", "250", "--format", "raw", "--output", str(raw)] + (["--gil"] if args.gil else [])
    command += ["--native"] if args.native else []
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_host(args) -> int:
    """bench_host's repository, one folder, perf_analyzer as the load; CPU per request and py-spy."""
    import bench_host

    workdir = args.workdir.resolve()
    analyzer = bench_host.perf_analyzer_binary(args.perf_analyzer)
    name = args.model
    label, _, device_text = name.rpartition("_d")
    wanted = [bench_host.config_named(label)] if label and name not in ("identity", "ort") else []
    device = float(device_text.replace("p", ".")) if wanted else 0.0
    repo, _ = bench_host.build_repository(workdir, wanted, [device] if device else [])
    with TritonServer(repo, model_control_mode="explicit", load_models=(name,)) as server:
        stub = stub_pid(server.process.pid, f"{name}_0_0")
        bench_host.measure(server, analyzer, name, args.concurrency, 0.5, args.warmup, 15)
        raw = workdir / f"{name}_c{args.concurrency}{'_gil' if args.gil else ''}.pyspy.txt"
        started: list = []
        # the window opens after the quiet-host check (1 s) and 0.5 s of warm-up: py-spy starts then
        timer = threading.Timer(1.6, lambda: started.append(spy(args, stub, raw)))
        timer.start()
        pids = (server.process.pid, stub)
        point = bench_host.measure(server, analyzer, name, args.concurrency, 0.5, args.duration, 0, pids)
        timer.join()
        recorder = started[0] if started else None
        if recorder is not None:
            recorder.wait(timeout=args.duration + 60)
    print(
        f"{name}, concurrency {args.concurrency}: {point['infer_per_s']:.0f} infer/s, "
        f"avg batch {point['avg_batch']:.2f}"
    )
    per = [point["pid_cpu_ms"][pid] for pid in pids] + [point["server_cpu_ms"], point["client_cpu_ms"]]
    report(args, f"{name}_0_0", per, "perf_analyzer", recorder, raw)
    return 0


def report(args, stub: str, per_request: list[float], load: str, recorder, raw: Path) -> None:
    """CPU ms per request (tritonserver, the stub, the server's tree, the load) and py-spy's
    hottest frames when it recorded."""
    print("CPU ms per request:")
    for label, value in zip(
        ("tritonserver process", f"Python stub {stub}", "server total (all children)", load), per_request
    ):
        print(f"  {label:<34} {value:6.3f}")
    if recorder is not None and raw.is_file():
        print(f"py-spy, stub {'while holding the GIL' if args.gil else 'wall clock'} (own samples):")
        print("\n".join("  " + line for line in hottest(raw, args.top)))
        print(f"wrote {raw}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="ge or handwritten; with --host a folder of bench_host's repository")
    parser.add_argument("--host", action="store_true", help="tools/bench_host.py's tiny model, perf_analyzer load")
    parser.add_argument("--perf-analyzer", default="/tmp/perf_analyzer/perf_analyzer")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--py-spy", help="py-spy binary: also sample the model's stub")
    parser.add_argument("--gil", action="store_true", help="py-spy: only samples where a thread holds the GIL")
    parser.add_argument("--native", action="store_true", help="py-spy: native (C/C++) frames too")
    parser.add_argument("--top", type=int, default=20)
    common_arguments(parser, duration=8.0, warmup=2.0, workdir="out/bench/profile")
    args = parser.parse_args()
    if args.host:
        return profile_host(args)
    if args.model not in ("ge", "handwritten"):
        parser.error("model: ge or handwritten (or a bench_host folder with --host)")
    workdir = args.workdir.resolve()
    onnx_file = models.image_classifier(workdir / "classifier.onnx")
    build_repository(onnx_file, workdir / "repo")
    inputs = {"image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    with TritonServer(workdir / "repo") as server:
        address = server.grpc_address if args.protocol == "grpc" else server.http_address
        target = Target(address, args.model, inputs, args.protocol, metrics_url=server.metrics_url)
        stub = stub_pid(server.process.pid, f"{args.model}_0_0")
        run_sweep(target, Sweep((args.concurrency,), duration_s=args.warmup, warmup_s=0))
        busy = wait_quiet()
        raw = workdir / f"{args.model}_c{args.concurrency}{'_gil' if args.gil else ''}.pyspy.txt"
        recorder = spy(args, stub, raw)
        before = (
            process_cpu(server.process.pid),
            process_cpu(stub),
            process_tree_cpu(server.process.pid),
            time.process_time(),
        )
        (point,) = run_sweep(target, Sweep((args.concurrency,), duration_s=args.duration, warmup_s=0))
        after = (
            process_cpu(server.process.pid),
            process_cpu(stub),
            process_tree_cpu(server.process.pid),
            time.process_time(),
        )
        if recorder is not None:
            recorder.wait(timeout=args.duration + 60)
    n = point.requests
    per = [(b - a) * 1000 / n for a, b in zip(before, after)]
    host = f"; host {busy:.0%} busy before" if busy is not None else ""
    print(
        f"{args.model}, concurrency {args.concurrency}: {point.inferences:.1f} infer/s, "
        f"p50 {point.latency_ms.p50:.2f} ms, "
        f"avg batch {point.server.get('avg_batch', 0):.2f}{host}"
    )
    report(args, f"{args.model}_0_0", per, "load generator", recorder, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
