"""The router (``ge-triton generate --template router``) over an NPU copy and a CPU copy of one model.

The model is ``image_classifier`` (FP32 3x112x112 -> 1000 logits, a CNN of 64-512 channels). Its
CPU copy runs it on onnxruntime with one instance and one intra-op thread (about 30 ms per batch of
8 here): what a host spares for it, slower than the NPU copy. The NPU copy is a simulated .om on
acl-sim (batch gears 1, 2, 4, 8; generate's 4 instances on one shared simulated NPU) with
``acl_sim_row_ms`` 2.5: 20 ms of device time per batch of 8, at most 400 rows/s whatever the
instance count. On a real host the NPU
computes on its own cores; the simulator computes its answers on the host's, which would charge
the CPU copy for the NPU's work, so by default the .om is compiled from a stand-in of the same
inputs and outputs that does next to nothing (global average pool, one small MatMul): the host
work of the NPU copy (requests, gathers, copies, answers) is real, its device work is modelled.
``--same-model`` compiles the .om from the classifier itself instead (the simulator then burns the
host's cores for it). ``router`` routes to the two copies with the default limits (each member's
instances x max_batch_size: 32 and 8 rows), ``router_npu16`` with the NPU copy's limit at 16 rows.

Measured, with perf_analyzer (batch-1 requests, gRPC), in paired rounds (every target at every
concurrency in each round, the order rotating between rounds), each figure the median over the
rounds:

- throughput and p99 of each router against each member alone at concurrency 16, 64 and 128;
- the NPU copy unloaded under load at concurrency 64 and loaded again: the router's throughput and
  failed requests in each phase (Triton's own counts of the router);
- the router's own CPU per request against a direct call: routers over one member only (a tiny
  onnxruntime model, ``tiny``), so that both paths do the same member work; CPU of the server's
  process tree (stubs included) per request, and of the router's stub alone, for a router answering
  through response senders and one returning its answers from execute (Triton 24.02's way).

tritonserver runs with ``--backend-config=python,thread-pool-size=64`` (the router's limits add up
to 40 BLS requests in flight, more than the default 32).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from pathlib import Path
from statistics import median
from typing import Any

from ge_python_backend.ops.bench.host import busy_cpu_seconds, process_tree_cpu
from tools.bench.measure import (
    perf_analyzer_arguments,
    perf_analyzer_binary,
    perf_analyzer_figures,
    perf_analyzer_run,
    perf_window,
    stub_pids,
)
from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table

SUMMARY = "the router over an acl-sim copy (20 ms per batch of 8) and an onnxruntime copy of one model"
QUIET_TIMEOUT = 5.0
IMAGE = 112
#: the classifier's channels: a CNN the CPU copy runs at about 30 ms per batch of 8 on one core
CHANNELS = (64, 128, 256, 512)
LARGEST_GEAR = 8
MEMBERS = ("npu", "cpu")
ROUTERS = ("router", "router_npu16")
TARGETS = (*ROUTERS, *MEMBERS)
THREAD_POOL = 64
#: the routers over ``tiny`` alone, by how they answer
CPU_ROUTERS = {"tiny_router": "sender", "tiny_router_return": "return"}
#: a minimal BLS forwarder over ``tiny`` (baselines/bls_forward_model.py): what BLS itself costs
BLS_BASELINE = "tiny_bls"


def add_arguments(parser) -> None:
    perf_analyzer_arguments(parser)
    parser.add_argument("--levels", default="16,64,128", help="concurrency levels")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds")
    parser.add_argument("--seconds", type=float, default=5.0, help="perf_analyzer's measurement window")
    parser.add_argument("--row-ms", type=float, default=2.5, help="modelled device time per batch row")
    parser.add_argument("--same-model", action="store_true", help="compile the NPU copy from the classifier itself")
    parser.add_argument("--phase-seconds", type=float, default=8.0, help="each phase of the unload run")
    parser.add_argument("--cpu-window", type=float, default=8.0, help="window of the CPU-per-request run")
    parser.add_argument(
        "--router-instances",
        type=int,
        default=1,
        help="instances of router and router_npu16 (on Triton 24.02, where answers are returned from execute, "
        "5: the members' 40 rows over max_batch_size 8)",
    )
    parser.add_argument("--skip-unload", action="store_true")
    parser.add_argument("--skip-cpu", action="store_true")


def stand_in(path: Path) -> Path:
    """image FP32 [N, 3, IMAGE, IMAGE] -> logits [N, 1000], next to no work: a global average pool and a
    3 x 1000 MatMul (the classifier's inputs and outputs)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["image"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        ],
        "stand_in",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, IMAGE, IMAGE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tools.bench")
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def build_repository(
    workdir: Path, row_ms: float, same_model: bool, router_instances: int = 1, cpu_part: bool = True
) -> Path:
    """The members, the routers and (``cpu_part``) the tiny model with its forwarders."""
    from ge_python_backend.repository.config import format_config, read_config_file, set_parameters
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import models
    from tools.bench.repos import BASELINES, relu_model

    workdir.mkdir(parents=True, exist_ok=True)
    onnx_file = models.image_classifier(workdir / "classifier.onnx", size=IMAGE, channels=CHANNELS)
    om_file = workdir / "classifier.om"
    sim_compile(onnx_file if same_model else stand_in(workdir / "stand_in.onnx"), om_file, batch_gears=(1, 2, 4, 8))
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    npu = generate(om_file, repo, GenerateOptions(name="npu", engine="acl-sim", instance_count=4)).model_dir
    set_parameters(npu / "config.pbtxt", acl_sim_row_ms=f"{row_ms:g}")
    cpu = generate(onnx_file, repo, GenerateOptions(name="cpu", max_batch_size=LARGEST_GEAR)).model_dir
    set_parameters(cpu / "config.pbtxt", onnxruntime_intra_op_threads="1")
    routers = {"router": {"members": "npu,cpu"}, "router_npu16": {"members": "npu,cpu", "limits": "npu=16"}}
    for name, options in routers.items():
        chosen = GenerateOptions(name, template="router", template_options=options, instance_count=router_instances)
        generate(None, repo, chosen)
    if not cpu_part:
        return repo
    tiny = relu_model(workdir / "tiny.onnx")
    generate(tiny, repo, GenerateOptions(name="tiny"))
    for name, mode in CPU_ROUTERS.items():
        options = GenerateOptions(name=name, template="router", template_options={"members": "tiny"})
        set_parameters(generate(None, repo, options).model_dir / "config.pbtxt", response_mode=mode)
    # the baseline: a minimal BLS forwarder with the same config as a router over tiny
    forwarder = repo / BLS_BASELINE
    shutil.copytree(repo / "tiny_router_return", forwarder)
    config = forwarder / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "tiny_router_return"', f'name: "{BLS_BASELINE}"'))
    config.write_text(format_config(_only_member_parameter(read_config_file(config))))
    shutil.copyfile(BASELINES / "bls_forward_model.py", forwarder / "1" / "model.py")
    return repo


def _only_member_parameter(config):
    config.ClearField("parameters")
    config.parameters["member"].string_value = "tiny"
    return config


def measure(
    binary: str, address: str, model: str, concurrency: int, seconds: float, server_pid: int
) -> dict[str, float]:
    """perf_analyzer's own measurement (over its 3 windows): infer/s, p50 and p99 (ms), and
    whether it failed."""
    command, env = perf_analyzer_run(
        binary,
        model,
        address,
        concurrency,
        "--max-threads",
        str(max(concurrency, 16)),
        "--measurement-interval",
        str(int(seconds * 1000)),
        "--max-trials",
        "3",
        # every window counts: a loaded 2-core host is never "stable" within perf_analyzer's 10 %, and
        # the rounds, not its trials, give the spread
        "--stability-percentage",
        "1000",
    )
    started, server_cpu, host_cpu = time.monotonic(), process_tree_cpu(server_pid) or 0.0, busy_cpu_seconds() or 0.0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, capture_output=True, text=True, timeout=300 + 10 * seconds, env=env)
    wall = time.monotonic() - started
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cores = ((process_tree_cpu(server_pid) or 0.0) - server_cpu) / wall
    host_cores = ((busy_cpu_seconds() or 0.0) - host_cpu) / wall
    client_cores = (done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime) / wall
    output = result.stdout + result.stderr
    if result.returncode != 0 or "Throughput:" not in output:
        print(f"  perf_analyzer on {model} c={concurrency} failed ({result.returncode}): {output[-600:]}", flush=True)
    return {
        **perf_analyzer_figures(output),
        "failed": float(result.returncode != 0),
        "server_cores": server_cores,
        "client_cores": client_cores,
        "others_cores": max(0.0, host_cores - server_cores - client_cores),
    }


def routed(server: Any, router: str) -> dict[str, float]:
    """Requests each member answered for ``router`` so far, and Triton's success/failure counts of it."""
    from ge_python_backend.ops.bench import metrics

    scrape = metrics.fetch(server.metrics_url)
    counts = {m: scrape.value("ge_router_requests_total", router=router, member=m) for m in MEMBERS}
    counts["success"] = scrape.value("nv_inference_request_success", model=router)
    counts["failure"] = scrape.value("nv_inference_request_failure", model=router)
    return counts


def paired_rounds(bench: Bench, server: Any, binary: str, levels: list[int]) -> dict[str, dict[int, list[dict]]]:
    args = bench.args
    results: dict[str, dict[int, list[dict]]] = {t: {c: [] for c in levels} for t in TARGETS}
    for round_index in range(args.rounds):
        order = TARGETS[round_index % len(TARGETS) :] + TARGETS[: round_index % len(TARGETS)]
        for concurrency in levels:
            for target in order:
                bench.quiet(f"{target} c={concurrency}")
                before = routed(server, target) if target in ROUTERS else None
                point = measure(binary, server.grpc_address, target, concurrency, args.seconds, server.process.pid)
                if before is not None:
                    after = routed(server, target)
                    total = sum(after[m] - before[m] for m in MEMBERS) or 1.0
                    point["cpu_share"] = (after["cpu"] - before["cpu"]) / total
                results[target][concurrency].append(point)
                print(
                    f"  round {round_index + 1} c={concurrency} {target}: {point['infer_per_s']:.0f} infer/s, "
                    f"p99 {point['p99_ms']:.1f} ms" + (f", cpu share {point['cpu_share']:.0%}" if before else ""),
                    flush=True,
                )
    return results


def unload_run(bench: Bench, server: Any, binary: str, seconds: float) -> list[dict[str, Any]]:
    """perf_analyzer keeps the router at concurrency 64 while the NPU copy is unloaded, then loaded again."""
    from tools.bench.measure import load_models, unload_models

    command, env = perf_analyzer_run(
        binary, "router", server.grpc_address, 64, "--max-threads", "64", "--measurement-interval", "600000"
    )
    log = server.workspace / "perf_analyzer_unload.log"
    bench.quiet("unload run")
    phases: list[dict[str, Any]] = []
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(3)
        steps = (
            ("both members", lambda: None),
            ("npu unloaded", lambda: unload_models(server, ["npu"])),
            ("npu loaded again", lambda: load_models(server, ["npu"])),
        )
        for name, action in steps:
            started = time.monotonic()
            action()
            acted = time.monotonic() - started
            first, t0 = routed(server, "router"), time.monotonic()
            time.sleep(seconds)
            last, t1 = routed(server, "router"), time.monotonic()
            phases.append(
                {
                    "phase": name,
                    "action_s": acted,
                    "infer_per_s": (last["success"] - first["success"]) / (t1 - t0),
                    "failures": last["failure"] - first["failure"],
                    "npu": last["npu"] - first["npu"],
                    "cpu": last["cpu"] - first["cpu"],
                }
            )
            print(f"  {name}: {phases[-1]}", flush=True)
        phases.append({"phase": "perf_analyzer still running", "ok": process.poll() is None})
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(20)
    return phases


def cpu_per_request(bench: Bench, server: Any, binary: str, window: float) -> list[dict[str, Any]]:
    """Direct calls to ``tiny`` against calls through ``tiny_router`` (all of them to ``tiny``),
    paired rounds at concurrency 16."""
    rows = []
    models = ("tiny", BLS_BASELINE, *CPU_ROUTERS)
    for round_index in range(bench.args.rounds):
        for model in models[round_index % len(models) :] + models[: round_index % len(models)]:
            pids = stub_pids(server.process.pid, model) if model != "tiny" else []
            result = perf_window(bench, server, binary, model, 16, 2.0, window, pids=pids)
            rows.append(
                {
                    "round": round_index + 1,
                    "model": model,
                    "infer_per_s": result["infer_per_s"],
                    "server_cpu_ms": result["server_cpu_ms"],
                    "router_stub_cpu_ms": sum(result["pid_cpu_ms"].values()),
                    "failures": result["failures"],
                }
            )
            print(f"  cpu round {round_index + 1} {model}: {rows[-1]}", flush=True)
    return rows


def _med(points: list[dict], key: str) -> float:
    return median(p[key] for p in points)


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    levels = [int(v) for v in args.levels.split(",")]
    binary = perf_analyzer_binary(args.perf_analyzer)
    repo = build_repository(bench.workdir, args.row_ms, args.same_model, args.router_instances, not args.skip_cpu)
    ceiling = 1000 / args.row_ms
    data: dict[str, Any] = {"levels": levels, "row_ms": args.row_ms, "same_model": args.same_model}
    data["npu_ceiling"] = ceiling
    loads = [os.getloadavg()]
    with TritonServer(
        repo,
        model_control_mode="explicit",
        load_models=["*"],
        extra_args=[f"--backend-config=python,thread-pool-size={THREAD_POOL}"],
    ) as server:
        results = paired_rounds(bench, server, binary, levels)
        loads.append(os.getloadavg())
        if not args.skip_unload:
            data["unload"] = unload_run(bench, server, binary, args.phase_seconds)
            loads.append(os.getloadavg())
        if not args.skip_cpu:
            data["cpu"] = cpu_per_request(bench, server, binary, args.cpu_window)
            loads.append(os.getloadavg())
    data["points"] = results
    data["load_average"] = loads
    rows = []
    for concurrency in levels:
        for target in TARGETS:
            points = results[target][concurrency]
            share = f"{_med(points, 'cpu_share'):.0%}" if target in ROUTERS else ""
            throughput = [p["infer_per_s"] for p in points]
            rows.append(
                [
                    target,
                    str(concurrency),
                    f"{median(throughput):.0f}",
                    f"{min(throughput):.0f}..{max(throughput):.0f}",
                    f"{_med(points, 'p50_ms'):.1f}",
                    f"{_med(points, 'p99_ms'):.1f}",
                    share,
                    f"{_med(points, 'server_cores'):.2f}",
                    f"{_med(points, 'client_cores'):.2f}",
                    f"{_med(points, 'others_cores'):.2f}",
                ]
            )
    tables = [
        Table(
            f"throughput and latency (median of {args.rounds} paired rounds; NPU ceiling {ceiling:.0f} rows/s):",
            (
                "served by",
                "concurrency",
                "infer/s",
                "range",
                "p50 ms",
                "p99 ms",
                "CPU copy's share",
                "server cores",
                "perf_analyzer cores",
                "others' cores",
            ),
            rows,
        )
    ]
    ratios = []
    for concurrency in levels:
        for router in ROUTERS:
            values = [
                r["infer_per_s"] / n["infer_per_s"]
                for r, n in zip(results[router][concurrency], results["npu"][concurrency])
            ]
            target = 1.3 if router == "router" and concurrency == 64 else None
            ratios.append(Ratio(f"{router} / npu alone, c={concurrency}", values, target))
    if "unload" in data:
        tables.append(
            Table(
                "the NPU copy unloaded under load (router at concurrency 64):",
                ("phase", "router infer/s", "failed requests", "answered by npu", "answered by cpu", "action s"),
                [
                    [
                        p["phase"],
                        f"{p['infer_per_s']:.0f}",
                        f"{p['failures']:.0f}",
                        f"{p['npu']:.0f}",
                        f"{p['cpu']:.0f}",
                        f"{p['action_s']:.1f}",
                    ]
                    for p in data["unload"]
                    if "infer_per_s" in p
                ],
            )
        )
    if "cpu" in data:
        direct = [r for r in data["cpu"] if r["model"] == "tiny"]
        cpu_rows = [["direct", f"{_med(direct, 'infer_per_s'):.0f}", f"{_med(direct, 'server_cpu_ms'):.3f}", "", ""]]
        paths = {BLS_BASELINE: "a minimal BLS forwarder", **{n: f"a router ({m} mode)" for n, m in CPU_ROUTERS.items()}}
        for name, mode in paths.items():
            through = [r for r in data["cpu"] if r["model"] == name]
            extra = [r["server_cpu_ms"] - d["server_cpu_ms"] for r, d in zip(through, direct)]
            cpu_rows.append(
                [
                    f"through {mode}",
                    f"{_med(through, 'infer_per_s'):.0f}",
                    f"{_med(through, 'server_cpu_ms'):.3f}",
                    f"{median(extra):.3f}",
                    f"{_med(through, 'router_stub_cpu_ms'):.3f}",
                ]
            )
            ratios.append(
                Ratio(
                    f"server CPU per request: through {mode} / direct",
                    [r["server_cpu_ms"] / d["server_cpu_ms"] for r, d in zip(through, direct)],
                )
            )
        tables.append(
            Table(
                "CPU per request at concurrency 16, a tiny onnxruntime model called directly and through a router "
                "(server process tree, stubs included; the cost is the paired difference to the direct call):",
                ("path", "infer/s", "server CPU ms/request", "cost ms/request", "forwarding stub ms/request"),
                cpu_rows,
            )
        )
    notes = [f"load average (1, 5, 15 min) before, after the rounds, after each part: {loads}"]
    return Report(summary=ratio_table(ratios), tables=tables, data=data, notes=notes)
