"""The host path in front of a fast NPU: host ceiling at device time 0, device-bound efficiency at
realistic device times, and the pyACL simulator's own cost, in one run on one server.

The model is tiny on purpose (FP32 [N,3,32,32] -> Relu, compiled by ``ge-triton sim-compile
--batch-gears 1,2,4,8``), so what is measured is the host path: tritonserver -> Python stub ->
GEModel -> engine -> answers. Served by tritonserver with dynamic batching up to 8 and 500 us
queue delay, batch-1 gRPC requests from perf_analyzer (C++; a Python load generator cannot send
10,000 requests/s on two cores). In one run:

(a) host ceiling, simulated device time 0, concurrency 16: the hand-written identity model.py
    (tools/identity_model.py, no engine: the baseline, measured first and last), GEModel on
    onnxruntime, the folder ``ge-triton generate`` writes for the .om ("default"), and acl-sim in
    every response mode x streams x instances; infer/s, CPU per request, ratio to identity;
(b) device-bound efficiency = infer/s / (streams x instances x 8 rows / device time) at
    ``acl_sim_device_ms`` 1, 2, 4, 8 ms per execution (a batch of 8 takes that long; so does a
    smaller one), at concurrency 16 x streams x instances (enough to keep every slot full);
(c) the simulator's own cost per batch, in this process alone (the acl engine's slot on the
    simulator with device time 0, against ONNX Runtime running the same Relu): real pyACL makes
    C calls instead, so "host path without the simulator" subtracts it per request.

Each point waits for a quiet host, runs perf_analyzer as the load, and measures a window of its
own between two scrapes of Triton's metrics (throughput from Triton's counts, CPU of the server's
process tree, of perf_analyzer and of everything else on the host: "others").

    .venv/bin/python tools/bench_host.py [--perf-analyzer /tmp/perf_analyzer/perf_analyzer]
        [--window 3] [--warmup 1] [--device-ms 1,2,4,8] [--modes return,sender] [--streams 1,2,4]
        [--instances 1,2] [--rounds 3]

``--rounds N`` repeats (a) and (b) N times, interleaved, and reports each point's median round
with the range over rounds (this host's single runs of one configuration differ by up to 25 %).

perf_analyzer is fetched with tools/get_perf_analyzer.sh when the given path does not exist.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_common import perf_analyzer_run, save_json, time_calls  # noqa: E402

from ge_python_backend.cli.arguments import int_list
from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.bench.host import busy_cpu_seconds, process_cpu, process_tree_cpu, wait_quiet
from ge_python_backend.ops.bench.report import format_rows
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile

TOOLS = Path(__file__).resolve().parent
ROWS = 8  # the largest gear: rows per full batch
GEARS = (1, 2, 4, ROWS)
QUEUE_DELAY_US = 500
HOST_CONCURRENCY = 16
#: for (b): every configuration at the same load, enough to fill 8 slots of 8 rows and queue as many
DEVICE_CONCURRENCY = 128
SHAPE = (3, 32, 32)

IDENTITY_CONFIG = f"""name: "identity"
backend: "python"
max_batch_size: {ROWS}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {", ".join(map(str, SHAPE))} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {", ".join(map(str, SHAPE))} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


@dataclass(frozen=True)
class Config:
    """One acl-sim configuration; ``None`` fields: what ``ge-triton generate`` writes."""

    label: str
    mode: str | None = None
    streams: int | None = None
    instances: int | None = None

    def folder(self, device_ms: float) -> str:
        return f"{self.label}_d{device_ms:g}".replace(".", "p")


def relu_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *SHAPE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *SHAPE])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench_host")
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def config_text(folder: Path) -> dict[str, str]:
    """instance count, streams and response mode as written in ``folder``'s config.pbtxt."""
    from ge_python_backend.repository.config import read_config_file

    config = read_config_file(folder / "config.pbtxt")
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    return {
        "instances": str(sum(g.count for g in config.instance_group) or 1),
        "streams": parameters.get("streams", "1"),
        "response_mode": parameters.get("response_mode", "auto"),
    }


def build_repository(
    workdir: Path, configs: Sequence[Config], device_times: Sequence[float], code: Path | None = None
) -> tuple[Path, Path]:
    """The model repository and the .om file; ``code``: a checkout whose ge_python_backend the
    GEModel folders import instead of the installed one (to measure a "before")."""
    onnx_file = relu_model(workdir / "relu.onnx")
    om_file = workdir / "relu.om"
    sim_compile(onnx_file, om_file, batch_gears=GEARS)
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    identity = repo / "identity"
    (identity / "1").mkdir(parents=True)
    (identity / "config.pbtxt").write_text(IDENTITY_CONFIG)
    shutil.copyfile(TOOLS / "identity_model.py", identity / "1" / "model.py")
    folders = [
        generate(
            onnx_file, repo, GenerateOptions(name="ort", max_batch_size=ROWS, max_queue_delay_us=QUEUE_DELAY_US)
        ).model_dir
    ]
    for config in configs:
        for device_ms in (0.0, *device_times):
            options = GenerateOptions(
                name=config.folder(device_ms),
                max_queue_delay_us=QUEUE_DELAY_US,
                **({"streams": config.streams} if config.streams is not None else {}),
                **({"instance_count": config.instances} if config.instances is not None else {}),
            )
            folder = generate(om_file, repo, options).model_dir
            folders.append(folder)
            parameters = {"acl_sim_device_ms": f"{device_ms:g}"}
            if config.mode is not None:
                parameters["response_mode"] = config.mode
            set_parameters(folder / "config.pbtxt", **parameters)
    if code is not None:  # the stub ignores PYTHONPATH: the model file itself puts the checkout first
        for folder in folders:
            model_py = folder / "1" / "model.py"
            model_py.write_text(f"import sys\nsys.path.insert(0, {str(code.resolve())!r})\n" + model_py.read_text())
    return repo, om_file


# --- the server and the load -----------------------------------------------------------------------


def _post(server: TritonServer, path: str, timeout: float = 300.0) -> None:
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


def load_models(server: TritonServer, names: Sequence[str]) -> None:
    """Load ``names`` side by side (explicit model control)."""
    failures: list[str] = []

    def one(name: str) -> None:
        try:
            _post(server, f"/v2/repository/models/{name}/load")
        except OSError as exc:
            failures.append(f"{name}: {exc}")

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError("could not load " + "; ".join(failures) + f"\n{server.log_tail()}")


def unload_models(server: TritonServer, names: Sequence[str]) -> None:
    for name in names:
        _post(server, f"/v2/repository/models/{name}/unload")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {m.name: m for m in server.model_states() or []}
        if not any(states.get(n) is not None and states[n].state not in ("UNAVAILABLE", "") for n in names):
            return
        time.sleep(0.2)


def perf_analyzer_binary(given: str) -> str:
    if Path(given).is_file():
        return given
    folder = Path(given).parent
    print(f"perf_analyzer not at {given}: fetching it into {folder} (tools/get_perf_analyzer.sh) ...", flush=True)
    subprocess.run(["bash", str(TOOLS / "get_perf_analyzer.sh"), str(folder)], check=True)
    return str(folder / "perf_analyzer")


def measure(
    server: TritonServer,
    analyzer: str,
    model: str,
    concurrency: int,
    warmup: float,
    window: float,
    quiet: float,
    pids: Sequence[int] = (),
) -> dict:
    """perf_analyzer loads ``model`` at ``concurrency``; after ``warmup`` s a window of ``window`` s
    is measured between two scrapes of the server's metrics. ``pids``: processes whose own CPU
    per request over the same window is reported too (``pid_cpu_ms``)."""
    busy = wait_quiet(timeout=quiet)
    command, env = perf_analyzer_run(
        analyzer,
        model,
        server.grpc_address,
        concurrency,
        "--max-threads",
        str(max(concurrency, 16)),
        "--measurement-interval",
        "600000",  # one long window: the load runs until it is stopped
        "--max-trials",
        "1",
    )
    log = server.workspace / f"perf_analyzer_{model}_c{concurrency}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(warmup)
        if process.poll() is not None:
            raise RuntimeError(f"perf_analyzer exited ({process.returncode}); see {log}")

        def reading():
            return (
                time.perf_counter(),
                metrics.fetch(server.metrics_url),
                process_tree_cpu(server.process.pid) or 0.0,
                process_cpu(process.pid) or 0.0,
                busy_cpu_seconds() or 0.0,
                time.process_time(),
                [process_cpu(pid) or 0.0 for pid in pids],
            )

        first = reading()
        time.sleep(window)
        last = reading()
        if process.poll() is not None:
            raise RuntimeError(f"perf_analyzer exited during the window ({process.returncode}); see {log}")
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    seconds = last[0] - first[0]
    split = metrics.breakdown(first[1], last[1], model)
    requests = split["requests"]
    server_s, client_s, host_s, own_s = (last[i] - first[i] for i in (2, 3, 4, 5))
    per = 1000.0 / requests if requests else math.nan
    phases = {
        key.split("phase=")[1].rstrip("}"): value["increase"] / split["executions"] / 1000.0
        for key, value in split["model_metrics"].items()
        if key.startswith("ge_phase_duration_us") and split["executions"]
    }
    return {
        "model": model,
        "concurrency": concurrency,
        "seconds": seconds,
        "requests": requests,
        "failures": split["failures"],
        "infer_per_s": split["inferences"] / seconds,
        "avg_batch": split["avg_batch"],
        "server_cpu_ms": server_s * per,
        "client_cpu_ms": client_s * per,
        "cores_busy": (server_s + client_s) / seconds,
        "others_cores": max(0.0, host_s - server_s - client_s - own_s) / seconds,
        "busy_before": busy,
        "request_ms": split["per_request_us"]["request"] / 1000.0,
        "queue_ms": split["per_request_us"]["queue"] / 1000.0,
        "phase_ms_per_execution": phases,
        "pid_cpu_ms": {pid: (b - a) * per for pid, a, b in zip(pids, first[6], last[6])},
    }


# --- (c) the simulator alone ---------------------------------------------------------------------------


def simulator_cost(om_file: Path, onnx_file: Path, seconds: float) -> dict[int, dict[str, float]]:
    """Per batch size: the acl engine's slot on the simulator (device time 0, timing events on, as
    GEModel runs it with metrics) — stage + run — and ONNX Runtime alone on the same Relu (the
    "device" work the simulator does on the CPU). Milliseconds of wall and process CPU time."""
    import onnxruntime as ort

    from ge_python_backend.engines import open_engine

    engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={"acl_timing_events": True})
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    result: dict[int, dict[str, float]] = {}
    try:
        engine.bind_thread()
        slot = engine.slots[0]
        for batch in GEARS:
            data = np.random.default_rng(batch).standard_normal((batch, *SHAPE)).astype(np.float32)

            def staged_run(d=data, b=batch) -> None:
                views = slot.inputs({"x": (b, *SHAPE)})
                np.copyto(views["x"], d)
                slot.run()

            def onnx_run(d=data) -> None:
                session.run(["y"], {"x": d})

            entry: dict[str, float] = {}
            for label, call in (("sim", staged_run), ("ort", onnx_run)):
                cpu = time.process_time()
                timing = time_calls(call, seconds, warmup_calls=20)
                cpu = time.process_time() - cpu
                entry[f"{label}_wall_ms"] = timing.median_s * 1000
                entry[f"{label}_cpu_ms"] = cpu * 1000 / timing.all_calls
            result[batch] = entry
    finally:
        engine.close()
    return result


def sim_cpu_per_request(cost: dict[int, dict[str, float]], avg_batch: float) -> float:
    """The simulator's CPU per request at an average batch (interpolated between gears; the batch
    runs on the smallest gear that holds it, so this is an estimate)."""
    if not avg_batch or not math.isfinite(avg_batch):
        return math.nan
    per_batch = float(np.interp(avg_batch, GEARS, [cost[g]["sim_cpu_ms"] for g in GEARS]))
    return per_batch / avg_batch


# --- the run -----------------------------------------------------------------------------------------


def grid(modes: Sequence[str], streams: Sequence[int], instances: Sequence[int]) -> list[Config]:
    return [Config(f"{m}_s{s}_i{i}", m, s, i) for m in modes for s in streams for i in instances]


def config_named(label: str) -> Config:
    """The Config behind a label: ``default`` or one of ``grid``'s ``MODE_sS_iI``."""
    if label == "default":
        return Config("default")
    try:
        mode, streams, instances = label.split("_")
        return Config(label, mode, int(streams.removeprefix("s")), int(instances.removeprefix("i")))
    except ValueError:
        raise ValueError(f"unknown configuration {label!r} (default or MODE_sS_iI, e.g. return_s1_i2)") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", default="/tmp/perf_analyzer/perf_analyzer")
    parser.add_argument("--window", type=float, default=2.5, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument("--quiet-timeout", type=float, default=15.0, help="wait at most this long for a quiet host")
    parser.add_argument("--device-ms", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["return", "sender"])
    parser.add_argument("--streams", type=int_list, default=(1, 2, 4))
    parser.add_argument("--instances", type=int_list, default=(1, 2))
    parser.add_argument(
        "--return-instances",
        type=int_list,
        default=(4,),
        help="more return-mode configurations with 1 stream and this many instances",
    )
    parser.add_argument("--sim-seconds", type=float, default=1.5, help="seconds per batch size for (c)")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="measure (a) and (b) this many times, interleaved, and report the median round of each point",
    )
    parser.add_argument("--workdir", type=Path, default=Path("out/bench/host"))
    parser.add_argument(
        "--code",
        type=Path,
        help="a checkout whose ge_python_backend the GEModel folders run (e.g. the code before a change; "
        "run the tool with PYTHONPATH=CHECKOUT too, so that generate writes that checkout's defaults)",
    )
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    started = time.monotonic()
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    default = Config("default")
    configs = [default, *grid(args.modes, args.streams, args.instances)]
    configs += [Config(f"return_s1_i{i}", "return", 1, i) for i in args.return_instances if i not in args.instances]
    repo, om_file = build_repository(workdir, configs, args.device_ms, args.code)
    written = config_text(repo / default.folder(0.0))
    print(
        f"{os.cpu_count()} CPUs shared by tritonserver and perf_analyzer; ge-triton generate writes for the .om: "
        + describe(written)
    )

    print("(c) the simulator alone, in this process ...", flush=True)
    wait_quiet(timeout=args.quiet_timeout)
    cost = simulator_cost(om_file, workdir / "relu.onnx", args.sim_seconds)

    host_rounds: dict[str, list[dict]] = collections.defaultdict(list)
    efficiency_rounds: dict[str, dict[float, list[dict]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    identity_runs: list[dict] = []

    def point(model: str, concurrency: int) -> dict:
        result = measure(server, analyzer, model, concurrency, args.warmup, args.window, args.quiet_timeout)
        print(
            f"  {model:>22} c={concurrency:<3} {result['infer_per_s']:8.0f} infer/s  batch {result['avg_batch']:.2f}  "
            f"server {result['server_cpu_ms']:.3f} ms/req  others {result['others_cores']:.2f}",
            flush=True,
        )
        if result["failures"]:
            print(f"  warning: {result['failures']:.0f} request(s) failed")
        return result

    def host_point(label: str, model: str) -> None:
        """The configuration's host ceiling right after an identity run: ratios of neighbours."""
        identity_runs.append(point("identity", HOST_CONCURRENCY))
        result = point(model, HOST_CONCURRENCY)
        result["identity"] = identity_runs[-1]["infer_per_s"]
        host_rounds[label].append(result)

    print("(a, b) tritonserver, perf_analyzer gRPC batch-1 requests ...", flush=True)
    with TritonServer(repo, model_control_mode="explicit", load_models=("identity",)) as server:
        for round_number in range(args.rounds):
            if args.rounds > 1:
                print(f" round {round_number + 1} of {args.rounds}", flush=True)
            load_models(server, ["ort"])
            host_point("onnxruntime", "ort")
            unload_models(server, ["ort"])
            for config in configs:
                names = [config.folder(d) for d in (0.0, *args.device_ms)]
                load_models(server, names)
                slots = (config.streams or int(written["streams"])) * (config.instances or int(written["instances"]))
                host_point(config.label, names[0])
                for device_ms, name in zip(args.device_ms, names[1:]):
                    result = point(name, DEVICE_CONCURRENCY)
                    ceiling = slots * ROWS / (device_ms / 1000.0)
                    result["ceiling"] = ceiling
                    result["efficiency"] = result["infer_per_s"] / ceiling
                    efficiency_rounds[config.label][device_ms].append(result)
                unload_models(server, names)
    host = {label: median_round(points, _ratio) for label, points in host_rounds.items()}
    efficiency = {
        label: {d: median_round(points, lambda p: p["efficiency"]) for d, points in by_time.items()}
        for label, by_time in efficiency_rounds.items()
    }
    identity = float(np.median([r["infer_per_s"] for r in identity_runs]))
    report(args, written, cost, identity_runs, identity, host, efficiency, configs)
    document = {
        "cpus": os.cpu_count(),
        "window_s": args.window,
        "rounds": args.rounds,
        "warmup_s": args.warmup,
        "default_config": written,
        "simulator_cost_ms": {str(b): v for b, v in cost.items()},
        "identity": identity_runs,
        "host": host,
        "efficiency": {k: {f"{d:g}": v for d, v in e.items()} for k, e in efficiency.items()},
        "configs": {c.label: {"mode": c.mode, "streams": c.streams, "instances": c.instances} for c in configs},
        "elapsed_s": time.monotonic() - started,
    }
    print(f"\nwrote {save_json(workdir / 'host.json', document)}")
    print(f"wrote {plot(workdir / 'host.png', identity, host, efficiency)}")
    print(f"elapsed {time.monotonic() - started:.0f} s")
    return 0


def report(args, written, cost, identity_runs, identity, host, efficiency, configs) -> None:
    print("\n(c) the simulator's own cost per batch (this process; ms):")
    rows = [["batch", "sim stage+run wall", "sim CPU", "ORT Relu alone CPU", "sim CPU - ORT"]]
    for b, c in cost.items():
        rows.append(
            [
                str(b),
                f"{c['sim_wall_ms']:.3f}",
                f"{c['sim_cpu_ms']:.3f}",
                f"{c['ort_cpu_ms']:.3f}",
                f"{c['sim_cpu_ms'] - c['ort_cpu_ms']:.3f}",
            ]
        )
    print(format_rows(rows))

    runs = ", ".join(f"{r['infer_per_s']:.0f}" for r in identity_runs)
    print(
        f"\n(a) host ceiling at device time 0, concurrency {HOST_CONCURRENCY}; x identity: against the identity "
        f"model measured right before (identity, in order: {runs} infer/s; median {identity:.0f}):"
    )
    rows = [
        [
            "served by",
            "infer/s",
            "x identity",
            "avg batch",
            "server CPU ms/req",
            "client CPU ms/req",
            "cores busy",
            "others",
            "sim CPU ms/req",
            "est. infer/s w/o sim",
            "est. x identity",
        ]
    ]
    median_identity = min(identity_runs, key=lambda r: abs(r["infer_per_s"] - identity))
    for label, r in [("identity (median run)", dict(median_identity, identity=identity))] + list(host.items()):
        sim = sim_cpu_per_request(cost, r["avg_batch"]) if label in efficiency else 0.0
        total = r["server_cpu_ms"] + r["client_cpu_ms"]
        estimate = r["infer_per_s"] * total / (total - sim) if total > sim else math.nan
        r["sim_cpu_ms_per_request"], r["estimate_without_sim"] = sim, estimate
        baseline = r.get("identity", identity)
        rows.append(
            [
                label,
                f"{r['infer_per_s']:.0f}",
                f"{r['infer_per_s'] / baseline:.2f}{_spread(r)}",
                f"{r['avg_batch']:.2f}",
                f"{r['server_cpu_ms']:.3f}",
                f"{r['client_cpu_ms']:.3f}",
                f"{r['cores_busy']:.2f}",
                f"{r['others_cores']:.2f}",
                f"{sim:.3f}",
                f"{estimate:.0f}",
                f"{estimate / baseline:.2f}",
            ]
        )
    print(format_rows(rows))

    print(
        "\n(b) device-bound efficiency = infer/s / (streams x instances x 8 / device time), "
        f"concurrency {DEVICE_CONCURRENCY}:"
    )
    times = args.device_ms
    rows = [["config (efficiency, infer/s)"] + [f"{d:g} ms" for d in times]]
    for label, by_time in efficiency.items():
        rows.append(
            [label]
            + [f"{by_time[d]['efficiency']:.2f} ({by_time[d]['infer_per_s']:.0f}){_spread(by_time[d])}" for d in times]
        )
    print(format_rows(rows))
    rows = [["device ms"] + ["fastest config (infer/s)", "default infer/s", "default efficiency"]]
    for d in times:
        best = max(efficiency, key=lambda k: efficiency[k][d]["infer_per_s"])
        rows.append(
            [
                f"{d:g}",
                f"{best} ({efficiency[best][d]['infer_per_s']:.0f})",
                f"{efficiency['default'][d]['infer_per_s']:.0f}",
                f"{efficiency['default'][d]['efficiency']:.2f}",
            ]
        )
    best0 = max(host, key=lambda k: host[k]["infer_per_s"] if k != "onnxruntime" else -1)
    rows.append(["0", f"{best0} ({host[best0]['infer_per_s']:.0f})", f"{host['default']['infer_per_s']:.0f}", ""])
    print(format_rows(rows))

    target_ms = 2.0 if 2.0 in times else times[0]
    print(
        f"\ntargets (one run{f', median of {args.rounds} interleaved rounds' if args.rounds > 1 else ''}):\n"
        + format_rows(
            [
                ["ratio", "value", "target", "met"],
                _target("default host ceiling / identity", host["default"], _ratio(host["default"]), 0.75),
                _target("GEModel onnxruntime / identity", host["onnxruntime"], _ratio(host["onnxruntime"]), 0.85),
                _target(
                    f"default device-bound efficiency at {target_ms:g} ms",
                    efficiency["default"][target_ms],
                    efficiency["default"][target_ms]["efficiency"],
                    0.9,
                ),
            ]
            + [
                [
                    f"{label}: infer/s at {target_ms:g} ms / a two-slot ceiling ({2 * ROWS / target_ms * 1000:.0f})",
                    f"{efficiency[label][target_ms]['infer_per_s'] / (2 * ROWS / target_ms * 1000):.2f}",
                    "",
                    "",
                ]
                for label in ("default", "return_s1_i4")
                if label in efficiency
            ]
        )
    )
    print(f"(default: {describe(written)})")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def median_round(points: list[dict], key: Callable[[dict], float]) -> dict:
    """The round whose ``key`` is the median (the lower one of an even count), with every
    round's value under "rounds"."""
    ordered = sorted(points, key=key)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds"] = [key(p) for p in points]
    return chosen


def _spread(point: dict) -> str:
    """ " (min-max over N rounds)" when there were several."""
    values = point.get("rounds", [])
    return f" ({min(values):.2f}-{max(values):.2f} over {len(values)})" if len(values) > 1 else ""


def _ratio(point: dict) -> float:
    return point["infer_per_s"] / point["identity"]


def describe(written: dict[str, str]) -> str:
    return f"instances {written['instances']}, streams {written['streams']}, response_mode {written['response_mode']}"


def _target(name: str, point: dict, value: float, target: float) -> list[str]:
    return [name, f"{value:.2f}{_spread(point)}", f">= {target:g}", "yes" if value >= target else "NO"]


def plot(path: Path, identity: float, host: dict, efficiency: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    labels = list(host)
    left.barh(labels, [host[k]["infer_per_s"] / host[k]["identity"] for k in labels], color="tab:blue")
    left.axvline(1.0, color="black", linewidth=0.8)
    left.axvline(0.75, color="tab:red", linewidth=0.8, linestyle="--")
    left.set_xlabel("host ceiling (device time 0) / identity model.py")
    left.invert_yaxis()
    left.tick_params(axis="y", labelsize=7)
    for label, by_time in efficiency.items():
        times = sorted(by_time)
        style = {"linewidth": 2.5, "color": "black"} if label == "default" else {"linewidth": 1}
        right.plot(times, [by_time[d]["efficiency"] for d in times], marker="o", label=label, **style)
    right.axhline(0.9, color="tab:red", linewidth=0.8, linestyle="--")
    right.set_xscale("log", base=2)
    right.set_xlabel("modelled device time per batch of 8 (ms)")
    right.set_ylabel("infer/s / (S x instances x 8 / device time)")
    right.set_ylim(0, 1.05)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=6, ncol=2)
    figure.suptitle("GEModel host path, FP32 3x32x32 Relu on acl-sim, perf_analyzer gRPC batch-1")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


if __name__ == "__main__":
    sys.exit(main())
