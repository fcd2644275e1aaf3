"""Execution slots (streams) on the pyACL simulator: S = 1, 2, 4 with a modelled device time.

A small CNN (image_classifier, FP32 3x32x32) is compiled into a simulated .om with batch gears
1,2,4,8 (``ge-triton sim-compile``) and served by the acl-sim engine with ``streams`` S = 1, 2
and 4. Each execution keeps its simulated stream busy for ``acl_sim_device_ms`` plus
``acl_sim_row_ms`` per batch row, so the model is device-bound and S streams can run S batches
at once while the host gathers, copies and answers the others. Prints throughput per S, the
device-bound ceiling S * 8 rows / (device_ms + 8 * row_ms), GEModel's phase split and the ratios.

    .venv/bin/python tools/bench_streams.py [--device-ms 50] [--row-ms 5] [--levels 16,64]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
from bench_common import (  # noqa: E402
    POINT_HEADER,
    Ratio,
    common_arguments,
    levels_argument,
    point_row,
    ratio_table,
    save_json,
    sweep_model,
)

from ge_python_backend.ops.bench.host import wait_quiet  # noqa: E402
from ge_python_backend.ops.bench.report import format_rows, model_metrics_table, plot  # noqa: E402
from ge_python_backend.ops.server import TritonServer  # noqa: E402
from ge_python_backend.repository.config import set_parameters  # noqa: E402
from ge_python_backend.repository.generate import GenerateOptions, generate  # noqa: E402
from ge_python_backend.sim import sim_compile  # noqa: E402
from ge_python_backend.testing import models  # noqa: E402

STREAMS = (1, 2, 4)
LARGEST_GEAR = 8


def build_repository(workdir: Path, device_ms: float, row_ms: float) -> Path:
    onnx_file = models.image_classifier(workdir / "small.onnx", size=32)
    om_file = workdir / "small.om"
    sim_compile(onnx_file, om_file, batch_gears=(1, 2, 4, LARGEST_GEAR))
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    for streams in STREAMS:
        name = f"sim_s{streams}"
        options = GenerateOptions(name=name, engine="acl-sim", streams=streams, instance_count=1)
        folder = generate(om_file, repo, options).model_dir
        # Slots overlap across executes only with answers through response senders, an opt-in since
        # answers are returned from execute by default (README, Reliability: the stub-death risk).
        set_parameters(
            folder / "config.pbtxt",
            acl_sim_device_ms=f"{device_ms:g}",
            acl_sim_row_ms=f"{row_ms:g}",
            response_mode="sender",
        )
    return repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(parser, duration=6.0, warmup=2.0, workdir="out/bench/streams")
    parser.add_argument("--device-ms", type=float, default=50.0, help="modelled device time per execution")
    parser.add_argument("--row-ms", type=float, default=5.0, help="modelled device time per batch row")
    levels_argument(parser, (16, 64), "the ratios use the highest")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    repo = build_repository(workdir, args.device_ms, args.row_ms)
    batch_s = (args.device_ms + LARGEST_GEAR * args.row_ms) / 1000
    inputs = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    print(
        f"simulated device time: {args.device_ms:g} ms + {args.row_ms:g} ms/row "
        f"({batch_s * 1000:.0f} ms per batch of {LARGEST_GEAR})"
    )
    series = {}
    with TritonServer(repo) as server:
        for streams in STREAMS:
            busy = wait_quiet()
            if busy is not None and busy >= 0.15:
                print(f"  warning: {busy:.0%} of the CPUs busy before this run")
            series[f"S={streams}"] = sweep_model(server, f"sim_s{streams}", inputs, args.levels, args)

    rows = [POINT_HEADER + ["device-bound ceiling"]]
    for name, points in series.items():
        ceiling = int(name[2:]) * LARGEST_GEAR / batch_s
        rows += [point_row(name, p) + [f"{ceiling:.0f}"] for p in points]
    print("\n" + format_rows(rows))
    for name, points in series.items():
        print(f"\n{name}, GEModel metrics:\n{model_metrics_table(points[-1:])}")
    top = {name: points[-1] for name, points in series.items()}
    ratios = [
        Ratio(f"S=2 / S=1 throughput, c={top['S=2'].level:g}", [top["S=2"].inferences / top["S=1"].inferences], 1.8),
        Ratio(f"S=4 / S=1 throughput, c={top['S=4'].level:g}", [top["S=4"].inferences / top["S=1"].inferences]),
        Ratio("S=1 throughput / device-bound ceiling", [top["S=1"].inferences / (LARGEST_GEAR / batch_s)]),
    ]
    print("\n" + ratio_table(ratios))
    document = {
        "device_ms": args.device_ms,
        "row_ms": args.row_ms,
        "levels": list(args.levels),
        "series": {n: [p.to_dict() for p in ps] for n, ps in series.items()},
        "ratios": [r.to_dict() for r in ratios],
    }
    print(f"\nwrote {save_json(workdir / 'streams.json', document)}")
    print(f"wrote {plot(series, workdir / 'streams.png', 'acl-sim, device-bound, S execution slots')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
