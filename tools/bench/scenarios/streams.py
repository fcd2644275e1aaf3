"""Batches in flight on the pyACL simulator: S = 1, 2, 4 instances with a modelled device time.

A small CNN (image_classifier, FP32 3x32x32) is compiled into a simulated .om with batch gears
1,2,4,8 (``ge-triton sim-compile``) and served by the acl-sim engine with S = 1, 2 and 4 instances
of one stream each (answers returned from execute: batches of several executes overlap across
instances). Each execution keeps its simulated device busy for ``acl_sim_device_ms`` plus
``acl_sim_row_ms`` per batch row, each instance on a device of its own
(``acl_sim_shared_device: false``), so the model is device-bound and S instances can run S batches
at once while the host gathers, copies and answers the others: what the host keeps in flight.
Reports throughput per S, the device-bound ceiling S * 8 rows / (device_ms + 8 * row_ms),
GEModel's phase split and the ratios.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tools.bench.measure import POINT_HEADER, point_row, sweep, sweep_arguments
from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table

SUMMARY = "batches in flight: S = 1, 2, 4 instances on the simulator, device-bound"
INSTANCES = (1, 2, 4)
LARGEST_GEAR = 8


def add_arguments(parser) -> None:
    sweep_arguments(parser, duration=6.0, warmup=2.0, levels=(16, 64), note="the ratios use the highest")
    parser.add_argument("--device-ms", type=float, default=50.0, help="modelled device time per execution")
    parser.add_argument("--row-ms", type=float, default=5.0, help="modelled device time per batch row")


def build_repository(workdir: Path, device_ms: float, row_ms: float) -> Path:
    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import models

    onnx_file = models.image_classifier(workdir / "small.onnx", size=32)
    om_file = workdir / "small.om"
    sim_compile(onnx_file, om_file, batch_gears=(1, 2, 4, LARGEST_GEAR))
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    for instances in INSTANCES:
        options = GenerateOptions(name=f"sim_s{instances}", engine="acl-sim", streams=1, instance_count=instances)
        folder = generate(om_file, repo, options).model_dir
        set_parameters(
            folder / "config.pbtxt",
            acl_sim_device_ms=f"{device_ms:g}",
            acl_sim_row_ms=f"{row_ms:g}",
            acl_sim_shared_device="false",
        )
    return repo


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.bench.report import model_metrics_table, plot
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    repo = build_repository(bench.workdir, args.device_ms, args.row_ms)
    batch_s = (args.device_ms + LARGEST_GEAR * args.row_ms) / 1000
    inputs = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    print(
        f"simulated device time: {args.device_ms:g} ms + {args.row_ms:g} ms/row "
        f"({batch_s * 1000:.0f} ms per batch of {LARGEST_GEAR})"
    )
    series = {}
    with TritonServer(repo) as server:
        for instances in INSTANCES:
            series[f"S={instances}"] = sweep(bench, server, f"sim_s{instances}", inputs, args.levels)

    def ceiling(name: str) -> float:
        return int(name[2:]) * LARGEST_GEAR / batch_s

    rows = [point_row(name, p) + [f"{ceiling(name):.0f}"] for name, points in series.items() for p in points]
    tables = [Table("every point:", (*POINT_HEADER, "device-bound ceiling"), rows)]
    notes = [f"{name}, GEModel metrics:\n{model_metrics_table(points[-1:])}" for name, points in series.items()]
    top = {name: points[-1] for name, points in series.items()}
    ratios = [
        Ratio(f"S=2 / S=1 throughput, c={top['S=2'].level:g}", [top["S=2"].inferences / top["S=1"].inferences], 1.8),
        Ratio(f"S=4 / S=1 throughput, c={top['S=4'].level:g}", [top["S=4"].inferences / top["S=1"].inferences]),
        Ratio("S=1 throughput / device-bound ceiling", [top["S=1"].inferences / (LARGEST_GEAR / batch_s)]),
    ]
    data = {
        "device_ms": args.device_ms,
        "row_ms": args.row_ms,
        "levels": list(args.levels),
        "series": {n: [p.to_dict() for p in ps] for n, ps in series.items()},
        "ratios": [r.to_dict() for r in ratios],
    }
    return Report(
        summary=ratio_table(ratios, "ratios at the highest level"),
        tables=tables,
        data=data,
        plot=lambda path: plot(series, path, "acl-sim, device-bound, S instances"),
        notes=notes,
    )
