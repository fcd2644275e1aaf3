"""The device: one NPU shared by every stream and instance, served (acl-sim's shared device).

The host-path model (FP32 [N,3,32,32] -> Relu, gears 1,2,4,8) served by tritonserver with
dynamic batching up to 8 (500 us queue delay), batch-1 gRPC requests from perf_analyzer. Every
execution keeps every AI Core of its device busy for ``acl_sim_device_ms`` (a batch of 8 takes
that long, so does a smaller one): one device runs at most 8 rows / device time. In one run:

(a) instances and devices, at ``--scaling-ms`` (50): one instance on device 0, two on device 0,
    two on devices 0 and 1 (``device_ids``), at concurrency 64: infer/s against one device's
    bound and against one instance; the targets: two on one device at most 1.15x one device's
    bound, two on two devices about 2x;
(b) configurations x device times (``--device-ms``, 1,2,8,20): ``generate``'s folder for a small
    .om and for one over 1 MiB (``default``, ``default_large``), and ``MODE_sS_iI`` grid points
    (``--grid``): at concurrency 1 the p50 (against device time + 1 ms) and at ``--saturation``
    (64) infer/s, p50, p99, the stubs' CPU per request and the device's busy fraction over the
    window (its modelled busy seconds, read from the server's shared device: the reference), and
    ``ge_device_busy_seconds_total`` summed over the instances (what a user sees) over the whole
    run against the modelled busy seconds;
(c) core limits, at ``--cores-ms`` (20): two instances (two streams of one device) of a small model
    and of a large one (``acl_sim_core_busy`` 0.7; ``acl_sim_launch_share`` 0.7 and 0.05), compiled
    for all 8 cores of the 310P3 or for half of them (``--aicore_num=4|``): infer/s of the half-core
    pair against the full-core pair.

``--rounds N`` repeats (a)-(c) N times, interleaved, and reports medians with their range. The
folders of one device time are loaded together; one is measured at a time, so the device is
its alone. Writes out/bench/device/device.{json,md,png}.
"""

from __future__ import annotations

import collections
import math
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.bench.measure import (
    load_models,
    perf_analyzer_arguments,
    perf_analyzer_binary,
    perf_window,
    positive_int,
    unload_models,
)
from tools.bench.repos import (
    GEARS,
    LABELS_HELP,
    ROWS,
    Config,
    config_folder,
    config_named,
    describe,
    identity_folder,
    relu_model,
    written_config,
)
from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table

SUMMARY = "one NPU shared by every stream and instance: scaling, defaults' busy fraction and p50, core limits"
LEVEL_ONE = 1
#: the small and large models of (c): (label, acl_sim_launch_share); both acl_sim_core_busy CORE_BUSY
CORE_MODELS = (("small", 0.7), ("large", 0.05))
CORE_BUSY = 0.7
#: an .om at least this big gets generate's large-model instance count (repository/generate.py)
LARGE_OM_BYTES = 2 << 20


def add_arguments(parser) -> None:
    perf_analyzer_arguments(parser)
    floats = lambda s: [float(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--device-ms", type=floats, default=[1.0, 2.0, 8.0, 20.0], help="(b) device times per batch")
    parser.add_argument(
        "--grid",
        type=lambda s: [x for x in s.split(",") if x],
        default=["return_s1_i1", "return_s1_i2", "return_s1_i3", "return_s1_i4", "return_s2_i2"],
        help="(b) configurations besides generate's: " + LABELS_HELP,
    )
    parser.add_argument("--scaling-ms", type=float, default=50.0, help="(a) device time per batch")
    parser.add_argument("--cores-ms", type=float, default=20.0, help="(c) device time per batch on all cores")
    parser.add_argument("--parts", default="a,b,c", help="which parts to run (a, b, c)")
    parser.add_argument("--saturation", type=positive_int, default=64, help="concurrency of the saturated points")
    parser.add_argument("--rounds", type=positive_int, default=2)
    parser.add_argument("--window", type=float, default=3.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")


@dataclass(frozen=True)
class Case:
    """One served folder: its name, its row label, device time, the devices its instances use,
    the parameters set on it and the concurrency levels it is measured at ("one", "top")."""

    name: str
    label: str
    device_ms: float
    devices: int = 1
    parameters: dict[str, str] = field(default_factory=dict)
    levels: tuple[str, ...] = ("top",)


def large_relu(path: Path) -> Path:
    """The host-path Relu with an unused 2 MiB initializer: the same work, an .om over 1 MiB."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(relu_model(path)))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(LARGE_OM_BYTES // 4, np.float32), "weights"))
    onnx.save(model, str(path))
    return path


def build(workdir: Path, args) -> tuple[Path, list[Case]]:
    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.sim import sim_compile

    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    small, large = workdir / "relu.om", workdir / "relu_large.om"
    sim_compile(relu_model(workdir / "relu.onnx"), small, batch_gears=GEARS)
    sim_compile(large_relu(workdir / "relu_large.onnx"), large, batch_gears=GEARS)
    half = workdir / "relu_half.om"
    sim_compile(workdir / "relu.onnx", half, batch_gears=GEARS, aicore_num="4|")
    cases: list[Case] = []

    def add(om: Path, config: Config, device_ms: float, devices: int = 1, levels=("top",), **parameters: str) -> None:
        folder = config_folder(om, repo, config, device_ms)
        if devices > 1:
            parameters["device_ids"] = ",".join(str(i) for i in range(devices))
        if parameters:
            set_parameters(folder / "config.pbtxt", **parameters)
        cases.append(Case(folder.name, config.label, device_ms, devices, parameters, levels))

    parts = set(args.parts.split(","))
    if "a" in parts:
        for label, instances, devices in (("a_i1", 1, 1), ("a_i2_one", 2, 1), ("a_i2_two", 2, 2)):
            add(small, Config(label, "return", 1, instances), args.scaling_ms, devices)
    if "b" in parts:
        identity_folder(repo)  # the host's floor: the Python backend answering without an engine
        cases.append(Case("identity", "identity", 0.0, levels=("one",)))
        for d in args.device_ms:
            add(small, Config("default"), d, levels=("one", "top"))
            add(large, Config("default_large"), d, levels=("one", "top"))
            for label in args.grid:
                add(small, config_named(label), d, levels=("one", "top"))
    if "c" in parts:
        for model, launch in CORE_MODELS:
            for cores, om in (("all", small), ("half", half)):
                config = Config(f"c_{model}_{cores}", "return", 1, 2)
                add(om, config, args.cores_ms, acl_sim_core_busy=f"{CORE_BUSY:g}", acl_sim_launch_share=f"{launch:g}")
    return repo, cases


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer
    from ge_python_backend.sim.device import SharedDevice

    args = bench.args
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    repo, cases = build(bench.workdir, args)
    written = {c.label: written_config(repo / c.name) for c in cases if c.label != "identity"}
    points: dict[tuple[str, int], list[dict]] = collections.defaultdict(list)
    groups: dict[float, list[Case]] = collections.defaultdict(list)
    for case in cases:
        groups[case.device_ms].append(case)
    with TritonServer(repo, model_control_mode="explicit") as server:
        scope = f"pg{server.process.pid}"
        devices = [SharedDevice(d, scope=scope) for d in (0, 1)]
        try:
            for round_number in range(args.rounds):
                print(f" round {round_number + 1} of {args.rounds}", flush=True)
                for group in groups.values():
                    load_models(server, [c.name for c in group])
                    for case in group:
                        for level in case.levels:
                            points[(case.name, level)].append(measure(bench, server, analyzer, case, level, devices))
                    unload_models(server, [c.name for c in group])
        finally:
            for device in devices:
                device.close()
    tables = []
    ratios: list[Ratio] = []
    if "a" in args.parts:
        ratios += scaling(cases, points, args)
    if "b" in args.parts:
        tables += grid_tables(cases, points, args, written)
        ratios += default_ratios(cases, points, args)
    if "c" in args.parts:
        ratios += core_ratios(cases, points, args)
    data = {
        "cases": [c.__dict__ for c in cases],
        "written": written,
        "points": {f"{name} {level}": found for (name, level), found in points.items()},
    }
    return Report(summary=ratio_table(ratios, "medians over the rounds"), tables=tables, data=data)


def measure(bench: Bench, server, analyzer: str, case: Case, level: str, devices: list) -> dict:
    """One perf_analyzer point of ``case`` at concurrency 1 ("one") or saturation ("top")."""
    args = bench.args
    counters: dict[str, Callable[[], float]] = {
        f"device{i}_busy_s": (lambda device=device: device.usage().busy_seconds) for i, device in enumerate(devices)
    }
    concurrency = LEVEL_ONE if level == "one" else args.saturation
    # the metric against the modelled devices over the whole run, each read while the model is idle
    # and its counters flushed (a window of seconds would see the 1 s flush interval)
    settled = (metric_busy(server, case.name), sum(d.usage().busy_seconds for d in devices))
    point = perf_window(
        bench,
        server,
        analyzer,
        case.name,
        concurrency,
        args.warmup,
        args.window,
        (server.process.pid,),
        latencies=True,
        counters=counters,
    )
    point["stubs_cpu_ms"] = point["server_cpu_ms"] - point["pid_cpu_ms"][server.process.pid]
    from ge_python_backend.triton.metrics import FLUSH_INTERVAL

    time.sleep(2 * FLUSH_INTERVAL)
    counted = metric_busy(server, case.name) - settled[0]
    modelled = sum(d.usage().busy_seconds for d in devices) - settled[1]
    point["metric_over_modelled"] = counted / modelled if modelled > 0 else math.nan
    busy = _busy(point, case.devices)
    print(
        f"  {case.name:>26} c={concurrency:<3} {point['infer_per_s']:7.0f} infer/s  "
        f"p50 {point['p50_ms']:6.2f}  p99 {point['p99_ms']:6.2f} ms  busy {busy:.2f}  "
        f"metric/modelled {point['metric_over_modelled']:.2f}  stubs {point['stubs_cpu_ms'] * 1000:.0f} us/req  "
        f"others {point['others_cores']:.2f}",
        flush=True,
    )
    return point


def metric_busy(server, model: str) -> float:
    """``ge_device_busy_seconds_total`` of ``model``, summed over its instances (0 without it)."""
    from ge_python_backend.ops.bench import metrics

    return metrics.fetch(server.metrics_url).value("ge_device_busy_seconds_total", model=model)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{_median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _busy(point: dict, devices: int = 1) -> float:
    return sum(point["rates"][f"device{i}_busy_s"] for i in range(devices))


def scaling(cases: list[Case], points, args) -> list[Ratio]:
    d = args.scaling_ms
    bound = ROWS / (d / 1000.0)
    top = {c.label: points[(c.name, "top")] for c in cases if c.label.startswith("a_")}
    one, two_one, two_two = top["a_i1"], top["a_i2_one"], top["a_i2_two"]
    return [
        Ratio(
            f"(a) {d:g} ms: one instance / one device's bound ({bound:.0f}/s)", [p["infer_per_s"] / bound for p in one]
        ),
        Ratio(
            f"(a) {d:g} ms: two instances on one device / one device's bound",
            [p["infer_per_s"] / bound for p in two_one],
            1.15,
            at_least=False,
        ),
        Ratio(
            f"(a) {d:g} ms: two instances on one device / one instance",
            [b["infer_per_s"] / a["infer_per_s"] for a, b in zip(one, two_one)],
        ),
        Ratio(
            f"(a) {d:g} ms: two instances on two devices / one device's bound",
            [p["infer_per_s"] / bound for p in two_two],
        ),
        Ratio(
            f"(a) {d:g} ms: two instances on two devices / one instance",
            [b["infer_per_s"] / a["infer_per_s"] for a, b in zip(one, two_two)],
            1.8,
        ),
        Ratio(
            f"(a) {d:g} ms: two instances on two devices / two on one device",
            [b["infer_per_s"] / a["infer_per_s"] for a, b in zip(two_one, two_two)],
        ),
    ]


def grid_tables(cases: list[Case], points, args, written) -> list[Table]:
    rows = []
    for case in cases:
        if "top" not in case.levels or "one" not in case.levels:
            continue
        one, top = points[(case.name, "one")], points[(case.name, "top")]
        rows.append(
            [
                case.label,
                describe(written[case.label]),
                f"{case.device_ms:g}",
                _spread([p["p50_ms"] for p in one]),
                _spread([p["infer_per_s"] / (ROWS / (case.device_ms / 1000.0)) for p in top]),
                _spread([_busy(p) for p in top]),
                _spread([p["metric_over_modelled"] for p in top]),
                _spread([p["p50_ms"] for p in top], 1),
                _spread([p["p99_ms"] for p in top], 1),
                _spread([p["stubs_cpu_ms"] * 1000 for p in top], 0),
                _spread([p["avg_batch"] for p in top]),
            ]
        )
    header = (
        "configuration",
        "written",
        "device ms",
        "p50 ms at c=1",
        f"infer/s / device bound, c={args.saturation}",
        "device busy (modelled)",
        "metric / modelled busy s",
        "p50 ms",
        "p99 ms",
        "stubs CPU us/req",
        "avg batch",
    )
    floor = [p["p50_ms"] for p in points[("identity", "one")]]
    title = (
        "(b) configurations on one device: medians (range) over the rounds; the identity model.py (no engine: the "
        f"host path's floor) answered c=1 with p50 {_spread(floor)} ms"
    )
    return [Table(title, header, rows)]


def default_ratios(cases: list[Case], points, args) -> list[Ratio]:
    ratios = [
        Ratio(
            "(b) identity model.py p50 at c=1 (ms): the host path's floor",
            [p["p50_ms"] for p in points[("identity", "one")]],
        )
    ]
    for case in cases:
        if case.label not in ("default", "default_large"):
            continue
        d = case.device_ms
        top, one = points[(case.name, "top")], points[(case.name, "one")]
        ratios.append(Ratio(f"(b) {case.label} {d:g} ms: device busy at saturation", [_busy(p) for p in top], 0.95))
        ratios.append(
            Ratio(
                f"(b) {case.label} {d:g} ms: p50 at c=1 - device time (ms)",
                [p["p50_ms"] - d for p in one],
                1.0,
                at_least=False,
            )
        )
    return ratios


def core_ratios(cases: list[Case], points, args) -> list[Ratio]:
    top = {c.label: points[(c.name, "top")] for c in cases if c.label.startswith("c_")}
    ratios = []
    for model, launch in CORE_MODELS:
        full, half = top[f"c_{model}_all"], top[f"c_{model}_half"]
        ratios.append(
            Ratio(
                f"(c) {model} model (launch share {launch:g}): two instances on half the cores / on all",
                [b["infer_per_s"] / a["infer_per_s"] for a, b in zip(full, half)],
                1.0,
                at_least=model == "small",
            )
        )
    return ratios
