"""Interleaved A/B of GEModel configurations against the hand-written model.py, with CPU
accounting: which setting moves served throughput, latency and CPU per request.

Same model and server as tools/bench_serving.py. Every variant is measured ``--repeats`` times,
in alternating order, each time after waiting for a quiet host; the medians are printed. On a
shared 2-core machine single runs vary by +-15 %: compare medians, and CPU ms per request,
which moves far less with other tenants' load than throughput does.

    .venv/bin/python tools/bench_variants.py [--levels 1,8,16] [--duration 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
from bench_common import CONTAMINATED_CORES, clean, common_arguments, levels_argument, save_json  # noqa: E402
from bench_serving import build_repository  # noqa: E402

from ge_python_backend.ops.bench import (
    Sweep,
    Target,
    run_sweep,  # noqa: E402
)
from ge_python_backend.ops.bench.host import wait_quiet  # noqa: E402
from ge_python_backend.ops.bench.report import format_rows  # noqa: E402
from ge_python_backend.ops.server import TritonServer  # noqa: E402
from ge_python_backend.testing import models  # noqa: E402

#: variant name -> config parameters on top of ge-triton generate's defaults
VARIANTS = {
    "ge_no_metrics": {"metrics": "false"},
    "ge_no_spinning": {"onnxruntime_spinning": "false"},  # the default spins with one slot
    "ge_s2_t1": {"streams": "2", "onnxruntime_intra_op_threads": "1"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(parser, duration=5.0, warmup=1.0, workdir="out/bench/variants")
    levels_argument(parser, (1, 8, 16))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", help="comma-separated subset of: ge, handwritten, " + ", ".join(VARIANTS))
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    onnx_file = models.image_classifier(workdir / "classifier.onnx")
    build_repository(onnx_file, workdir / "repo", VARIANTS)
    names = args.models.split(",") if args.models else ["ge", "handwritten", *VARIANTS]
    inputs = {"image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    runs: dict[tuple[str, int], list] = {}
    busy_seen = []
    with TritonServer(workdir / "repo") as server:
        address = server.grpc_address if args.protocol == "grpc" else server.http_address
        for repeat in range(args.repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                busy_seen.append(wait_quiet())
                print(f"  repeat {repeat + 1}/{args.repeats}: {name} ...", flush=True)
                target = Target(
                    address, name, inputs, args.protocol, metrics_url=server.metrics_url, server_pid=server.process.pid
                )
                for point in run_sweep(target, Sweep(args.levels, duration_s=args.duration, warmup_s=args.warmup)):
                    runs.setdefault((name, int(point.level)), []).append(point)

    def median(points, value) -> float:
        return statistics.median(value(p) for p in points)

    rows = [
        ["model", "concurrency", "infer/s", "runs (infer/s)", "p50 ms", "avg batch", "server CPU ms/req", "cores busy"]
    ]
    for level in args.levels:
        for name in names:
            every = runs[(name, level)]
            points = clean(every)
            rows.append(
                [
                    name,
                    str(level),
                    f"{median(points, lambda p: p.inferences):.1f}",
                    " ".join(f"{p.inferences:.0f}" + ("" if p in points else "*") for p in every),
                    f"{median(points, lambda p: p.latency_ms.p50):.2f}",
                    f"{median(points, lambda p: p.server.get('avg_batch', 0.0)):.2f}",
                    f"{median(points, lambda p: p.cpu_ms_per_request.get('server_ms', float('nan'))):.2f}",
                    f"{median(points, lambda p: p.throughput * sum(p.cpu_ms_per_request.values()) / 1000):.2f}",
                ]
            )
    print("\n" + format_rows(rows))
    print(
        f"medians over quiet runs; * marks a run during which other processes kept >= {CONTAMINATED_CORES} "
        "CPUs busy (left out unless every run was)"
    )
    worst = max((b for b in busy_seen if b is not None), default=None)
    if worst is not None:
        print(f"\nbusiest host before a measurement: {worst:.0%} of the CPUs")
    document = {
        "levels": list(args.levels),
        "repeats": args.repeats,
        "variants": VARIANTS,
        "runs": {f"{n} c={lv}": [p.to_dict() for p in ps] for (n, lv), ps in runs.items()},
    }
    print(f"wrote {save_json(workdir / 'variants.json', document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
