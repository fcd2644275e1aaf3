"""Interleaved A/B of GEModel configurations against the hand-written model.py, with CPU
accounting: which setting moves served throughput, latency and CPU per request.

Same model and server as ``serving``. Every variant is measured ``--repeats`` times, in
alternating order, each time after waiting for a quiet host; the medians over the quiet runs are
reported. On a shared 2-core machine single runs vary by +-15 %: compare medians, and CPU ms per
request, which moves far less with other tenants' load than throughput does.
"""

from __future__ import annotations

import statistics

from tools.bench.measure import sweep, sweep_arguments
from tools.bench.repos import build_serving_repository, classifier_inputs
from tools.bench.runner import CONTAMINATED_CORES, Bench, Report, Table, quiet_points

SUMMARY = "GEModel settings A/B (metrics, spinning, threads) against the hand-written model.py"
QUIET_TIMEOUT = 60.0

#: variant name -> config parameters on top of ge-triton generate's defaults
VARIANTS = {
    "ge_no_metrics": {"metrics": "false"},
    "ge_no_spinning": {"onnxruntime_spinning": "false"},  # the default spins with one slot
    "ge_s2_t1": {"streams": "2", "onnxruntime_intra_op_threads": "1"},
}


def add_arguments(parser) -> None:
    sweep_arguments(parser, duration=5.0, warmup=1.0, levels=(1, 8, 16))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", help="comma-separated subset of: ge, handwritten, " + ", ".join(VARIANTS))


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    repo, _ = build_serving_repository(bench.workdir, VARIANTS)
    names = args.models.split(",") if args.models else ["ge", "handwritten", *VARIANTS]
    inputs = classifier_inputs()
    runs: dict[tuple[str, int], list] = {}
    with TritonServer(repo) as server:
        for repeat in range(args.repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                print(f"  repeat {repeat + 1}/{args.repeats}: {name} ...", flush=True)
                for point in sweep(bench, server, name, inputs, args.levels):
                    runs.setdefault((name, int(point.level)), []).append(point)

    def median(points, value) -> float:
        return statistics.median(value(p) for p in points)

    rows = []
    for level in args.levels:
        for name in names:
            every = runs[(name, level)]
            points = quiet_points(every)
            rows.append(
                [
                    f"{name} c={level}",
                    f"{median(points, lambda p: p.inferences):.1f}",
                    " ".join(f"{p.inferences:.0f}" + ("" if p in points else "*") for p in every),
                    f"{median(points, lambda p: p.latency_ms.p50):.2f}",
                    f"{median(points, lambda p: p.server.get('avg_batch', 0.0)):.2f}",
                    f"{median(points, lambda p: p.cpu_ms_per_request.get('server_ms', float('nan'))):.2f}",
                    f"{median(points, lambda p: p.throughput * sum(p.cpu_ms_per_request.values()) / 1000):.2f}",
                ]
            )
    header = ("model", "infer/s", "runs (infer/s)", "p50 ms", "avg batch", "server CPU ms/req", "cores busy")
    title = (
        f"medians over quiet runs; * marks a run during which other processes kept >= {CONTAMINATED_CORES} "
        "CPUs busy (left out unless every run was)"
    )
    data = {
        "levels": list(args.levels),
        "repeats": args.repeats,
        "variants": VARIANTS,
        "runs": {f"{n} c={lv}": [p.to_dict() for p in ps] for (n, lv), ps in runs.items()},
    }
    return Report(summary=Table(title, header, rows, chart=(1, "infer/s (median)")), data=data)
