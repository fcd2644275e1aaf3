"""The host path in front of a fast NPU: host ceiling at device time 0, device-bound efficiency at
realistic device times, and the pyACL simulator's own cost, in one run on one server.

The model is tiny on purpose (FP32 [N,3,32,32] -> Relu, compiled by ``ge-triton sim-compile
--batch-gears 1,2,4,8``), so what is measured is the host path: tritonserver -> Python stub ->
GEModel -> engine -> answers. Served by tritonserver with dynamic batching up to 8 and 500 us
queue delay, batch-1 gRPC requests from perf_analyzer (C++; a Python load generator cannot send
10,000 requests/s on two cores). In one run:

(a) host ceiling, simulated device time 0, concurrency 16: the hand-written identity model.py
    (tools/bench/baselines/identity_model.py, no engine: the baseline, measured right before
    every configuration), GEModel on onnxruntime, the folder ``ge-triton generate`` writes for
    the .om ("default"), acl-sim in every response mode x streams x instances, and ``--configs``
    (default: ``null``, generate's folder on engine acl over the null pyACL, tools/bench/nullacl.py:
    the host path without the simulator's cost); infer/s, CPU per request, ratio to identity;
(b) device-bound efficiency = infer/s / (8 rows / device time) at ``acl_sim_device_ms`` 1, 2,
    4, 8 ms per execution (a batch of 8 takes that long; so does a smaller one; over the null
    pyACL the same modelled time), every execution keeping all cores of the one device the
    instances share busy (sim/device.py), at concurrency 128 (enough to keep every slot full); the
    target is the default folder's at ``--target-ms`` (8 ms per batch of 8). With
    ``--stream-devices`` every stream is a device of its own instead (``acl_sim_shared_device:
    false``: the host measured alone, as this scenario did before the shared device) and the
    ceiling is streams x instances x 8 rows / device time;
(c) the simulator's own cost per batch, in this process alone (the acl engine's slot on the
    simulator with device time 0, against ONNX Runtime running the same Relu): real pyACL makes
    C calls instead, so "host path without the simulator" subtracts it per request.

Each point waits for a quiet host, runs perf_analyzer as the load, and measures a window of its
own between two scrapes of Triton's metrics. ``--rounds N`` repeats (a) and (b) N times,
interleaved, and reports each point's median round with the range over rounds (this host's single
runs of one configuration differ by up to 25 %). ``--code CHECKOUT`` runs another checkout's
ge_python_backend, in this process (generate's defaults) and in the GEModel folders (their
model.py puts it first on sys.path), to measure a "before".
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import numpy as np

from tools.bench.measure import (
    load_models,
    median_round,
    perf_analyzer_arguments,
    perf_analyzer_binary,
    perf_window,
    positive_int,
    time_calls,
    unload_models,
)
from tools.bench.repos import (
    GEARS,
    LABELS_HELP,
    ROWS,
    SHAPE,
    Config,
    build_host_repository,
    config_named,
    describe,
    grid,
    written_config,
)
from tools.bench.runner import Bench, Report, Table

SUMMARY = "the host path in front of a fast NPU: host ceiling, device-bound efficiency, the simulator's cost"
HOST_CONCURRENCY = 16
#: for (b): every configuration at the same load, enough to fill 8 slots of 8 rows and queue as many
DEVICE_CONCURRENCY = 128


def add_arguments(parser) -> None:
    from ge_python_backend.cli.arguments import int_list

    perf_analyzer_arguments(parser)
    parser.add_argument("--window", type=float, default=2.5, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument("--device-ms", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["return"])
    parser.add_argument("--streams", type=int_list, default=(1, 2, 4))
    parser.add_argument("--instances", type=int_list, default=(1, 2))
    parser.add_argument(
        "--return-instances",
        type=int_list,
        default=(4,),
        help="more return-mode configurations with 1 stream and this many instances",
    )
    parser.add_argument(
        "--configs",
        type=lambda text: [config_named(label) for label in text.split(",") if label],
        default=[config_named("null")],
        help="more configurations measured like the grid's (comma-separated; '' for none): " + LABELS_HELP,
    )
    parser.add_argument(
        "--target-ms",
        type=float,
        default=8.0,
        help="device time of the device-bound efficiency target (one of --device-ms; the issue: 8 ms per batch of 8)",
    )
    parser.add_argument("--sim-seconds", type=float, default=1.5, help="seconds per batch size for (c)")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="measure (a) and (b) this many times, interleaved, and report the median round of each point",
    )
    parser.add_argument(
        "--code", type=Path, help="a checkout whose ge_python_backend runs instead of this one (e.g. the code before)"
    )
    parser.add_argument(
        "--stream-devices",
        action="store_true",
        help="every stream a device of its own (the host alone; ceiling streams x instances x 8 / device time)",
    )


def simulator_cost(om_file: Path, onnx_file: Path, seconds: float) -> dict[int, dict[str, float]]:
    """Per batch size: the acl engine's slot on the simulator (device time 0, timing events on, as
    GEModel runs it with metrics) — stage + run — and ONNX Runtime alone on the same Relu (the
    "device" work the simulator does on the CPU). Milliseconds of wall and process CPU time."""
    import time

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


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    default = Config("default")
    configs = [default, *grid(args.modes, args.streams, args.instances)]
    configs += [Config(f"return_s1_i{i}", "return", 1, i) for i in args.return_instances if i not in args.instances]
    configs += [c for c in args.configs if c.engine != "onnxruntime" and c.label not in {k.label for k in configs}]
    repo, om_file = build_host_repository(
        bench.workdir, configs, args.device_ms, args.code, shared_device=not args.stream_devices
    )
    written = written_config(repo / default.folder(0.0))
    print("tritonserver and perf_analyzer share the CPUs; ge-triton generate writes for the .om: " + describe(written))

    print("(c) the simulator alone, in this process ...", flush=True)
    bench.quiet("(c) the simulator alone")
    cost = simulator_cost(om_file, bench.workdir / "relu.onnx", args.sim_seconds)

    host_rounds: dict[str, list[dict]] = collections.defaultdict(list)
    efficiency_rounds: dict[str, dict[float, list[dict]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    identity_runs: list[dict] = []

    def point(model: str, concurrency: int) -> dict:
        result = perf_window(bench, server, analyzer, model, concurrency, args.warmup, args.window)
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
                devices = slots if args.stream_devices else 1  # every instance shares device 0
                host_point(config.label, names[0])
                for device_ms, name in zip(args.device_ms, names[1:]):
                    result = point(name, DEVICE_CONCURRENCY)
                    ceiling = devices * ROWS / (device_ms / 1000.0)
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
    tables = [
        cost_table(cost),
        host_table(cost, identity_runs, identity, host, efficiency),
        *efficiency_tables(args.device_ms, efficiency, host),
    ]
    data = {
        "window_s": args.window,
        "rounds": args.rounds,
        "warmup_s": args.warmup,
        "code": str(args.code) if args.code else None,
        "default_config": written,
        "simulator_cost_ms": {str(b): v for b, v in cost.items()},
        "identity": identity_runs,
        "host": host,
        "efficiency": {k: {f"{d:g}": v for d, v in e.items()} for k, e in efficiency.items()},
        "configs": {c.label: {"mode": c.mode, "streams": c.streams, "instances": c.instances} for c in configs},
    }
    return Report(
        summary=targets_table(args, host, efficiency, cost),
        tables=tables,
        data=data,
        plot=lambda path: plot(path, host, efficiency),
        notes=[f"(default: {describe(written)})"],
    )


def cost_table(cost: dict[int, dict[str, float]]) -> Table:
    rows = [
        [
            str(b),
            f"{c['sim_wall_ms']:.3f}",
            f"{c['sim_cpu_ms']:.3f}",
            f"{c['ort_cpu_ms']:.3f}",
            f"{c['sim_cpu_ms'] - c['ort_cpu_ms']:.3f}",
        ]
        for b, c in cost.items()
    ]
    header = ("batch", "sim stage+run wall", "sim CPU", "ORT Relu alone CPU", "sim CPU - ORT")
    return Table("(c) the simulator's own cost per batch (this process; ms):", header, rows)


def host_table(cost, identity_runs, identity, host, efficiency) -> Table:
    runs = ", ".join(f"{r['infer_per_s']:.0f}" for r in identity_runs)
    header = (
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
    )
    rows = []
    median_identity = min(identity_runs, key=lambda r: abs(r["infer_per_s"] - identity))
    for label, r in [("identity (median run)", dict(median_identity, identity=identity))] + list(host.items()):
        on_sim = label in efficiency and not label.startswith("null")  # the null pyACL has no simulator cost
        sim = sim_cpu_per_request(cost, r["avg_batch"]) if on_sim else 0.0
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
    title = (
        f"(a) host ceiling at device time 0, concurrency {HOST_CONCURRENCY}; x identity: against the identity "
        f"model measured right before (identity, in order: {runs} infer/s; median {identity:.0f}):"
    )
    return Table(title, header, rows)


def efficiency_tables(times, efficiency, host) -> list[Table]:
    rows = [
        [label]
        + [f"{by_time[d]['efficiency']:.2f} ({by_time[d]['infer_per_s']:.0f}){_spread(by_time[d])}" for d in times]
        for label, by_time in efficiency.items()
    ]
    per_config = Table(
        "(b) device-bound efficiency = infer/s / (devices x 8 / device time; devices: 1, or streams x instances with "
        f"--stream-devices), concurrency {DEVICE_CONCURRENCY}:",
        ("config (efficiency, infer/s)", *(f"{d:g} ms" for d in times)),
        rows,
    )
    fastest = []
    for d in times:
        best = max(efficiency, key=lambda k: efficiency[k][d]["infer_per_s"])
        fastest.append(
            [
                f"{d:g}",
                f"{best} ({efficiency[best][d]['infer_per_s']:.0f})",
                f"{efficiency['default'][d]['infer_per_s']:.0f}",
                f"{efficiency['default'][d]['efficiency']:.2f}",
            ]
        )
    best0 = max(host, key=lambda k: host[k]["infer_per_s"] if k != "onnxruntime" else -1)
    fastest.append(["0", f"{best0} ({host[best0]['infer_per_s']:.0f})", f"{host['default']['infer_per_s']:.0f}", ""])
    header = ("device ms", "fastest config (infer/s)", "default infer/s", "default efficiency")
    return [per_config, Table("fastest configuration per device time:", header, fastest)]


def targets_table(args, host, efficiency, cost) -> Table:
    """The issue-25 targets this scenario measures: host ceilings at device time 0 against the
    identity model measured right before, and the default folder's device-bound efficiency at
    ``--target-ms`` (8 ms per batch of 8: one device's ceiling of 1,000 infer/s), on the simulator
    and, when measured, over the null pyACL."""
    target_ms = args.target_ms if args.target_ms in args.device_ms else max(args.device_ms)
    rows = [
        _target("default NPU folder (acl-sim) host ceiling / identity", host["default"], _ratio(host["default"]), 0.85),
        _target("GEModel onnxruntime / identity", host["onnxruntime"], _ratio(host["onnxruntime"]), 0.90),
    ]
    if "null" in host:
        rows.append(
            _target("default NPU folder over the null pyACL / identity", host["null"], _ratio(host["null"]), 0.85)
        )
    for label, what in (("default", "acl-sim"), ("null", "null pyACL")):
        if label in efficiency and target_ms in efficiency[label]:
            point = efficiency[label][target_ms]
            rows.append(
                _target(
                    f"default NPU folder ({what}) device-bound efficiency at {target_ms:g} ms per batch of {ROWS} "
                    f"(ceiling {point['ceiling']:.0f} infer/s)",
                    point,
                    point["efficiency"],
                    0.9,
                )
            )
    rows.append(["the simulator's own cost per batch of 8, ms wall (c)", f"{cost[ROWS]['sim_wall_ms']:.3f}", "", ""])
    rounds = f", median of {args.rounds} interleaved rounds" if args.rounds > 1 else ""
    return Table(f"targets (one run{rounds}):", ("ratio", "value", "target", "met"), rows, chart=(1, "value"))


def _spread(point: dict) -> str:
    """ " (min-max over N rounds)" when there were several."""
    values = point.get("rounds", [])
    return f" ({min(values):.2f}-{max(values):.2f} over {len(values)})" if len(values) > 1 else ""


def _ratio(point: dict) -> float:
    return point["infer_per_s"] / point["identity"]


def _target(name: str, point: dict, value: float, target: float) -> list[str]:
    return [name, f"{value:.2f}{_spread(point)}", f">= {target:g}", "yes" if value >= target else "NO"]


def plot(path: Path, host: dict, efficiency: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    labels = list(host)
    left.barh(labels, [host[k]["infer_per_s"] / host[k]["identity"] for k in labels], color="tab:blue")
    left.axvline(1.0, color="black", linewidth=0.8)
    left.axvline(0.85, color="tab:red", linewidth=0.8, linestyle="--")
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
    right.set_ylabel("infer/s / device-bound ceiling")
    right.set_ylim(0, 1.05)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=6, ncol=2)
    figure.suptitle("GEModel host path, FP32 3x32x32 Relu on acl-sim, perf_analyzer gRPC batch-1")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
