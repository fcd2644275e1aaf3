"""Batches in flight on the pyACL simulator's shared device: S = 1, 2, 4.

A small CNN (image_classifier, FP32 3x32x32) is compiled into a simulated .om with batch gears
1,2,4,8 (``ge-triton sim-compile``) and served by the acl-sim engine with S = 1, 2 and 4
instances of one stream each, all on device 0, answers returned from execute (S instances keep
S batches in flight; GEModel has no sender mode: docs/reliability.md). An execution
takes ``acl_sim_device_ms`` plus ``acl_sim_row_ms`` per batch row alone on the device; the
device's AI Cores are shared by every stream of every instance (sim/device.py). Two models: one that keeps every
core busy for its whole time (``acl_sim_core_busy`` 1: streams take turns, the ceiling is one
device's 8 rows / device time whatever S) and one whose kernels leave the cores idle three
quarters of the time (``--gappy-busy`` 0.25: up to 4 streams run side by side, the ceiling is
min(S, 1 / 0.25) x 8 rows / device time). Reports throughput per S and model, each against its
ceiling, and the ratios to S = 1. ``--rounds N`` measures every model and S N times, interleaved,
and reports each ratio's median over the rounds (each round's ratio is paired: its S = 1 was
measured minutes before, on the same host load) with its range.
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import numpy as np

from tools.bench.measure import POINT_HEADER, point_row, positive_int, sweep, sweep_arguments
from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table

SUMMARY = "batches in flight: S = 1, 2, 4 instances on the simulator's shared device, a full-core and a gappy model"
STREAMS = (1, 2, 4)
LARGEST_GEAR = 8
#: model -> acl_sim_core_busy ("gappy" from --gappy-busy)
MODELS = ("full", "gappy")


def add_arguments(parser) -> None:
    sweep_arguments(parser, duration=6.0, warmup=2.0, levels=(16, 64), note="the ratios use the highest")
    parser.add_argument("--device-ms", type=float, default=50.0, help="modelled device time per execution")
    parser.add_argument("--row-ms", type=float, default=5.0, help="modelled device time per batch row")
    parser.add_argument(
        "--gappy-busy", type=float, default=0.25, help="acl_sim_core_busy of the gappy model (the full one: 1)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=1, help="measure every model and S this many times, interleaved"
    )


def build_repository(workdir: Path, device_ms: float, row_ms: float, gappy_busy: float) -> Path:
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
    for model, busy in zip(MODELS, (1.0, gappy_busy)):
        for streams in STREAMS:
            options = GenerateOptions(name=f"{model}_s{streams}", engine="acl-sim", streams=1, instance_count=streams)
            folder = generate(om_file, repo, options).model_dir
            set_parameters(
                folder / "config.pbtxt",
                acl_sim_device_ms=f"{device_ms:g}",
                acl_sim_row_ms=f"{row_ms:g}",
                acl_sim_core_busy=f"{busy:g}",
                device_ids="0",
            )
    return repo


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.bench.report import model_metrics_table, plot
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    repo = build_repository(bench.workdir, args.device_ms, args.row_ms, args.gappy_busy)
    batch_s = (args.device_ms + LARGEST_GEAR * args.row_ms) / 1000
    inputs = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    print(
        f"simulated device time: {args.device_ms:g} ms + {args.row_ms:g} ms/row "
        f"({batch_s * 1000:.0f} ms per batch of {LARGEST_GEAR}, every core busy; the gappy model "
        f"{args.gappy_busy:g} of the time)"
    )
    rounds: dict[str, list[list]] = collections.defaultdict(list)  # series name -> its points, per round
    with TritonServer(repo) as server:
        for round_number in range(args.rounds):
            if args.rounds > 1:
                print(f" round {round_number + 1} of {args.rounds}", flush=True)
            for model in MODELS:
                for streams in STREAMS:
                    points = sweep(bench, server, f"{model}_s{streams}", inputs, args.levels)
                    rounds[f"{model} S={streams}"].append(points)

    def ceiling(name: str) -> float:
        model, streams = name.split(" S=")
        overlap = 1.0 if model == "full" else min(int(streams), 1.0 / args.gappy_busy)
        return overlap * LARGEST_GEAR / batch_s

    def top(name: str) -> list[float]:
        """Throughput at the highest level, per round."""
        return [points[-1].inferences for points in rounds[name]]

    # the round whose throughput at the highest level is the median, per series (plot and metrics)
    series = {
        name: sorted(runs, key=lambda ps: ps[-1].inferences)[(len(runs) - 1) // 2] for name, runs in rounds.items()
    }
    rows = [
        point_row(name if args.rounds == 1 else f"{name} (round {number})", p) + [f"{ceiling(name):.0f}"]
        for name, runs in rounds.items()
        for number, points in enumerate(runs, 1)
        for p in points
    ]
    tables = [Table("every point:", (*POINT_HEADER, "device-bound ceiling"), rows)]
    notes = [
        f"{name}, GEModel metrics (median round):\n{model_metrics_table(points[-1:])}"
        for name, points in series.items()
    ]
    ratios = []
    for model in MODELS:
        one = top(f"{model} S=1")
        for streams in STREAMS[1:]:
            name = f"{model} S={streams}"
            target = (1.15, False) if model == "full" else (0.8 * min(streams, 1.0 / args.gappy_busy), True)
            ratios.append(
                Ratio(
                    f"{model} model: S={streams} / S=1 throughput, c={args.levels[-1]:g}",
                    [s / o for s, o in zip(top(name), one)],
                    target[0],
                    at_least=target[1],
                )
            )
        ratios += [
            Ratio(
                f"{model} S={s} throughput / its ceiling",
                [t / ceiling(f"{model} S={s}") for t in top(f"{model} S={s}")],
            )
            for s in STREAMS
        ]
    data = {
        "device_ms": args.device_ms,
        "row_ms": args.row_ms,
        "gappy_busy": args.gappy_busy,
        "levels": list(args.levels),
        "rounds": args.rounds,
        "series": {n: [[p.to_dict() for p in ps] for ps in runs] for n, runs in rounds.items()},
        "ratios": [r.to_dict() for r in ratios],
    }
    return Report(
        summary=ratio_table(ratios, f"ratios at the highest level (median over {args.rounds} round(s))"),
        tables=tables,
        data=data,
        plot=lambda path: plot(series, path, "acl-sim, one shared device, S execution slots"),
        notes=notes,
    )
