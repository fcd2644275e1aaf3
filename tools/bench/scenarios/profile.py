"""Where a served request's CPU goes: per process (tritonserver, the model's Python stub, the
load generator) and, with py-spy, inside the stub.

Serves the serving repository (``ge`` and ``handwritten`` folders, image_classifier), loads one
model at one concurrency with ``ge-triton bench``'s client and reports CPU milliseconds per
request by process. With ``--host`` it serves host-path's repository instead (the tiny Relu model:
``identity``, ``ort``, or an acl-sim folder such as ``default_d0`` or ``return_s1_i1_d2``) and
loads it with perf_analyzer, since a Python load generator cannot keep up there; ``--repository``
serves a repository of that kind built before, e.g. an ``ab`` run's, whose folders ``NAME_a`` and
``NAME_b`` run two checkouts (``profile null_d0_b --host --repository out/bench/ab/repo``). With
``--py-spy PATH`` it also samples the stub for the same window (wall clock, or only while a
thread holds the GIL with ``--gil``) and reports the hottest frames; the raw profile is saved.
py-spy is not a project dependency: install it anywhere (``pip install py-spy`` in a scratch
venv) and pass its path.
"""

from __future__ import annotations

import collections
import subprocess
import threading
import time
from pathlib import Path

from tools.bench.measure import perf_analyzer_arguments, perf_analyzer_binary, perf_window, sweep, sweep_arguments
from tools.bench.repos import build_host_repository, build_serving_repository, classifier_inputs, config_named
from tools.bench.runner import Bench, Report, Table

SUMMARY = "where a served request's CPU goes: per process and, with py-spy, inside the stub"
QUIET_TIMEOUT = 60.0


def add_arguments(parser) -> None:
    parser.add_argument("model", help="ge or handwritten; with --host a folder of host-path's repository")
    parser.add_argument("--host", action="store_true", help="host-path's tiny model, perf_analyzer load")
    parser.add_argument(
        "--repository",
        type=Path,
        help="with --host: serve this repository (e.g. an ab run's: folders NAME_a, NAME_b) instead of building one",
    )
    perf_analyzer_arguments(parser)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--py-spy", help="py-spy binary: also sample the model's stub")
    parser.add_argument("--gil", action="store_true", help="py-spy: only samples where a thread holds the GIL")
    parser.add_argument("--native", action="store_true", help="py-spy: native (C/C++) frames too")
    parser.add_argument("--top", type=int, default=20)
    sweep_arguments(parser, duration=8.0, warmup=2.0)


def stub_pid(server_pid: int, instance: str) -> int:
    """The Python stub process serving ``instance`` (e.g. ge_0_0) under ``server_pid``."""
    from ge_python_backend.ops.bench.host import parent_pid

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


def hottest(raw: Path, count: int) -> list[list[str]]:
    """Top frames by own samples (the frame a sample ended in) from a py-spy raw profile."""
    own: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        own[stack.split(";")[-1] or "(native code, no Python frame)"] += int(samples)
    return [[f"{samples / total * 100:.1f}%", frame] for frame, samples in own.most_common(count)]


def spy(args, pid: int, raw: Path):
    """py-spy recording ``pid`` for ``args.duration`` s into ``raw`` (None without --py-spy)."""
    if not args.py_spy:
        return None
    command = [args.py_spy, "record", "--pid", str(pid), "--duration", str(int(args.duration))]
    command += ["--rate", "250", "--format", "raw", "--output", str(raw)] + (["--gil"] if args.gil else [])
    command += ["--native"] if args.native else []
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(bench: Bench) -> Report:
    args = bench.args
    if args.host:
        return profile_host(bench)
    if args.model not in ("ge", "handwritten"):
        raise SystemExit("profile: model: ge or handwritten (or a host-path folder with --host)")
    from ge_python_backend.ops.bench import Sweep, Target, run_sweep
    from ge_python_backend.ops.bench.host import process_cpu, process_tree_cpu
    from ge_python_backend.ops.server import TritonServer

    repo, _ = build_serving_repository(bench.workdir)
    with TritonServer(repo) as server:
        stub = stub_pid(server.process.pid, f"{args.model}_0_0")
        sweep(bench, server, args.model, classifier_inputs(), (args.concurrency,), duration_s=args.warmup, warmup_s=0)
        raw = bench.workdir / f"{args.model}_c{args.concurrency}{'_gil' if args.gil else ''}.pyspy.txt"
        bench.quiet("the profiled window")
        recorder = spy(args, stub, raw)

        def reading():
            pid = server.process.pid
            return (process_cpu(pid), process_cpu(stub), process_tree_cpu(pid), time.process_time())

        before = reading()
        address = server.grpc_address if args.protocol == "grpc" else server.http_address
        target = Target(address, args.model, classifier_inputs(), args.protocol, metrics_url=server.metrics_url)
        (point,) = run_sweep(target, Sweep((args.concurrency,), duration_s=args.duration, warmup_s=0))
        after = reading()
        if recorder is not None:
            recorder.wait(timeout=args.duration + 60)
    per = [(b - a) * 1000 / point.requests for a, b in zip(before, after)]
    headline = (
        f"{args.model}, concurrency {args.concurrency}: {point.inferences:.1f} infer/s, "
        f"p50 {point.latency_ms.p50:.2f} ms, avg batch {point.server.get('avg_batch', 0):.2f}"
    )
    return report(args, f"{args.model}_0_0", per, "load generator", recorder, raw, headline)


def profile_host(bench: Bench) -> Report:
    """host-path's repository, one folder, perf_analyzer as the load; CPU per request and py-spy."""
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    name = args.model
    if args.repository is not None:
        if not (args.repository / name / "config.pbtxt").is_file():
            raise SystemExit(f"profile: {args.repository} has no model folder {name!r}")
        repo = args.repository
        bench.workdir.mkdir(parents=True, exist_ok=True)  # py-spy writes its profile there
    else:
        label, _, device_text = name.rpartition("_d")
        wanted = [config_named(label)] if label and name not in ("identity", "ort") else []
        device = float(device_text.replace("p", ".")) if wanted else 0.0
        repo, _ = build_host_repository(bench.workdir, wanted, [device] if device else [])
    with TritonServer(repo, model_control_mode="explicit", load_models=(name,)) as server:
        stub = stub_pid(server.process.pid, f"{name}_0_0")
        perf_window(bench, server, analyzer, name, args.concurrency, 0.5, args.warmup)
        raw = bench.workdir / f"{name}_c{args.concurrency}{'_gil' if args.gil else ''}.pyspy.txt"
        bench.quiet("the profiled window")
        started: list = []
        # the window opens after 0.5 s of warm-up: py-spy starts then
        timer = threading.Timer(0.6, lambda: started.append(spy(args, stub, raw)))
        timer.start()
        pids = (server.process.pid, stub)
        point = perf_window(bench, server, analyzer, name, args.concurrency, 0.5, args.duration, pids, quiet=False)
        timer.join()
        recorder = started[0] if started else None
        if recorder is not None:
            recorder.wait(timeout=args.duration + 60)
    per = [point["pid_cpu_ms"][pid] for pid in pids] + [point["server_cpu_ms"], point["client_cpu_ms"]]
    headline = (
        f"{name}, concurrency {args.concurrency}: {point['infer_per_s']:.0f} infer/s, "
        f"avg batch {point['avg_batch']:.2f}"
    )
    return report(args, f"{name}_0_0", per, "perf_analyzer", recorder, raw, headline)


def report(args, stub: str, per_request: list[float], load: str, recorder, raw: Path, headline: str) -> Report:
    """CPU ms per request (tritonserver, the stub, the server's tree, the load) and py-spy's
    hottest frames when it recorded."""
    labels = ("tritonserver process", f"Python stub {stub}", "server total (all children)", load)
    summary = Table(
        f"{headline}; CPU ms per request:",
        ("process", "CPU ms per request"),
        [[label, f"{value:.3f}"] for label, value in zip(labels, per_request)],
        chart=(1, "CPU ms per request"),
    )
    tables, data = [], {"cpu_ms_per_request": dict(zip(labels, per_request))}
    if recorder is not None and raw.is_file():
        frames = hottest(raw, args.top)
        while_holding = "while holding the GIL" if args.gil else "wall clock"
        tables.append(Table(f"py-spy, stub {while_holding} (own samples; {raw}):", ("share", "frame"), frames))
        data["py_spy"] = {"raw": str(raw), "hottest": frames}
    return Report(summary=summary, tables=tables, data=data)
