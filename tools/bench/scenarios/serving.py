"""Served throughput and latency of one ONNX model, four ways, in one run on one machine:

- the raw engine in-process (ONNX Runtime ``session.run`` at batch 1 and at the largest batch):
  the ceiling;
- the GEModel folder from ``ge-triton generate`` on a real tritonserver;
- a hand-written minimal model.py (concatenate, run, slice: baselines/handwritten_model.py) on
  the same server;
- the same ONNX model served by PyTriton with its ``@batch`` decorator (baselines/pytriton_server.py).

The model is ``ge_python_backend.testing.models.image_classifier`` (FP32 3x224x224 -> 1000),
served with dynamic batching up to 8 and 500 us queue delay, batch-1 requests from ``ge-triton
bench``'s asyncio client; repeats are interleaved (the order reverses every repeat) and each
figure is the median over the quiet ones. ``--perf-analyzer`` cross-checks GEModel's figures at
concurrency 1 and 8 with perf_analyzer on the same server. The ratios are those of issue 7.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np

from tools.bench.measure import POINT_HEADER, perf_analyzer_once, point_row, sweep, sweep_arguments, time_calls
from tools.bench.repos import MAX_BATCH, PyTritonProcess, build_serving_repository, classifier_inputs
from tools.bench.runner import CONTAMINATED_CORES, Bench, Ratio, Report, Table, quiet_points, ratio_table

SUMMARY = "GEModel against raw ONNX Runtime, a hand-written model.py and PyTriton, on an image classifier"
QUIET_TIMEOUT = 60.0


def add_arguments(parser) -> None:
    sweep_arguments(parser, duration=6.0, warmup=2.0, levels=(1, 8, 16), note="must include 1 and 8")
    parser.add_argument("--raw-seconds", type=float, default=4.0, help="seconds per raw-engine batch size")
    parser.add_argument("--skip-pytriton", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats; tables show medians")
    parser.add_argument("--perf-analyzer", help="perf_analyzer binary: cross-check the GEModel at concurrency 1 and 8")


def raw_engine(onnx_file: Path, seconds: float) -> dict[str, dict[int, dict[str, float]]]:
    """ONNX Runtime in this process at batch 1 and MAX_BATCH: ms per call, images/s and CPU ms
    per image, for the session the GEModel engine opens for the generated folder (its defaults
    with one slot: ORT's thread pools, spin-waiting on) and for a session with ONNX Runtime's own
    defaults (as the hand-written and PyTriton baselines use)."""
    import onnxruntime as ort

    from ge_python_backend.engines.onnxruntime import load_session

    sessions = {
        "engine settings": load_session(onnx_file, slots=1),
        "ORT defaults": ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"]),
    }
    result: dict[str, dict[int, dict[str, float]]] = {}
    for label, session in sessions.items():
        result[label] = {}
        for batch in (1, MAX_BATCH):
            image = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            cpu = time.process_time()
            timing = time_calls(lambda s=session, i=image: s.run(["logits"], {"image": i}), seconds)
            cpu = time.process_time() - cpu
            result[label][batch] = {
                "ms_per_call": timing.median_s * 1000,
                "images_per_s": batch / timing.median_s,
                "cpu_ms_per_image": cpu * 1000 / (timing.all_calls * batch),
                "calls": timing.calls,
            }
    return result


def representative(points):
    """The run with the median throughput (lower median for an even count)."""
    ordered = sorted(points, key=lambda p: p.inferences)
    return ordered[(len(ordered) - 1) // 2]


def at(points, level):
    return next(p for p in points if p.level == level)


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.bench.report import plot
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    if not {1, 8} <= set(args.levels):
        raise SystemExit("serving: --levels must include 1 and 8 (the targets are stated there)")
    repo, onnx_file = build_serving_repository(bench.workdir)
    inputs = classifier_inputs()
    names = {"GEModel": "ge", "hand-written": "handwritten"} | ({} if args.skip_pytriton else {"PyTriton": "pytriton"})
    runs: dict[str, list[list]] = {label: [] for label in names}
    raws: list[dict] = []  # raw ONNX Runtime, measured in-process at the start of every repeat
    cross_check: dict[int, dict[str, float]] = {}
    print(f"{', '.join(names)}: {args.repeats} interleaved repeat(s) ...", flush=True)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(TritonServer(repo))
        servers = {"GEModel": server, "hand-written": server}
        if not args.skip_pytriton:
            servers["PyTriton"] = stack.enter_context(PyTritonProcess(onnx_file, bench.workdir / "pytriton.log"))
        for repeat in range(args.repeats):
            bench.quiet("raw ONNX Runtime")
            raws.append(raw_engine(onnx_file, args.raw_seconds))
            order = list(names) if repeat % 2 == 0 else list(names)[::-1]
            for label in order:
                runs[label].append(sweep(bench, servers[label], names[label], inputs, args.levels))
            if args.perf_analyzer and repeat == 0:
                for c in (1, 8):
                    bench.quiet(f"perf_analyzer c={c}")
                    cross_check[c] = perf_analyzer_once(args.perf_analyzer, server.grpc_address, "ge", c, args.duration)

    series = {
        label: [representative(quiet_points([run[i] for run in label_runs])) for i in range(len(args.levels))]
        for label, label_runs in runs.items()
    }
    quiet_repeats = [
        i
        for i in range(args.repeats)
        if all(len(quiet_points(label_runs[i])) == len(label_runs[i]) for label_runs in runs.values())
    ]
    notes = []
    if len(quiet_repeats) < args.repeats:
        notes.append(
            f"{args.repeats - len(quiet_repeats)} of {args.repeats} repeat(s) had other processes keeping "
            f">= {CONTAMINATED_CORES} CPUs busy"
            + ("; the ratios use the others" if quiet_repeats else "; no quiet repeat: the ratios use them all")
        )
    ratios = target_ratios(runs, raws, quiet_repeats or list(range(args.repeats)))
    tables = [
        Table(
            f"median run of {args.repeats} per model and level (by throughput; quiet runs only when there are any):",
            POINT_HEADER,
            [point_row(name, p) for name, points in series.items() for p in points],
        ),
        raw_table(raws),
    ]
    if cross_check:
        tables.append(cross_check_table(cross_check, runs["GEModel"][0]))
    data = {
        "model": "image_classifier defaults",
        "protocol": args.protocol,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "raw_onnxruntime": raws,
        "repeats": args.repeats,
        "runs": {label: [[p.to_dict() for p in run] for run in label_runs] for label, label_runs in runs.items()},
        "perf_analyzer": cross_check,
        "ratios": [r.to_dict() for r in ratios],
    }
    title = "image_classifier, batch-1 requests, " + args.protocol
    return Report(
        summary=ratio_table(ratios),
        tables=tables,
        data=data,
        plot=lambda path: plot(series, path, title),
        notes=notes,
    )


def target_ratios(runs: dict[str, list[list]], raws: list[dict], repeats: list[int]) -> list[Ratio]:
    """The serving targets as ratios (GEModel against the baselines), one value per (quiet) repeat."""

    def paired(value) -> list[float]:
        return [value({label: label_runs[i] for label, label_runs in runs.items()}, i) for i in repeats]

    def saturation(points) -> float:
        return max(p.inferences for p in points)

    def raw_same(i: int) -> float:
        return raws[i]["engine settings"][MAX_BATCH]["images_per_s"]

    def raw_best(i: int) -> float:
        return max(r["images_per_s"] for b in raws[i].values() for r in b.values())

    def of_medians(other: str, value) -> list[float]:
        """One value: the median over the repeats of GEModel's ``value`` over the other's median."""
        ours = float(np.median([value(runs["GEModel"][i]) for i in repeats]))
        theirs = float(np.median([value(runs[other][i]) for i in repeats]))
        return [ours / theirs]

    def versus(other: str) -> list[Ratio]:
        throughput_target = {"hand-written": 1.0, "PyTriton": 1.4}[other]
        p50_target = {"hand-written": 1.0, "PyTriton": 0.7}[other]
        return [
            Ratio(
                f"GEModel / {other} throughput, c=8, ratio of the medians over the repeats",
                of_medians(other, lambda run: at(run, 8).inferences),
                throughput_target,
            ),
            Ratio(
                f"GEModel / {other} p50, c=1, ratio of the medians over the repeats",
                of_medians(other, lambda run: at(run, 1).latency_ms.p50),
                p50_target,
                False,
            ),
            Ratio(
                f"GEModel / {other} throughput, c=8, per repeat (median, range)",
                paired(lambda r, i: at(r["GEModel"], 8).inferences / at(r[other], 8).inferences),
            ),
            Ratio(
                f"GEModel / {other} p50, c=1, per repeat (median, range)",
                paired(lambda r, i: at(r["GEModel"], 1).latency_ms.p50 / at(r[other], 1).latency_ms.p50),
            ),
            Ratio(
                f"GEModel / {other} throughput, c=1",
                paired(lambda r, i: at(r["GEModel"], 1).inferences / at(r[other], 1).inferences),
            ),
            Ratio(
                f"GEModel / {other} throughput at saturation",
                paired(lambda r, i: saturation(r["GEModel"]) / saturation(r[other])),
            ),
        ]

    ratios = [
        Ratio(
            f"GEModel at saturation / raw ORT batch {MAX_BATCH}, same session settings",
            paired(lambda r, i: saturation(r["GEModel"]) / raw_same(i)),
            0.90,
        ),
        Ratio(
            "GEModel at saturation / best raw ORT (any batch, any settings)",
            paired(lambda r, i: saturation(r["GEModel"]) / raw_best(i)),
        ),
        *versus("hand-written"),
    ]
    return ratios + (versus("PyTriton") if "PyTriton" in runs else [])


def raw_table(raws: list[dict]) -> Table:
    rows = [
        [f"{label}, batch {batch}"]
        + [f"{r[label][batch]['images_per_s']:.0f} ({r[label][batch]['cpu_ms_per_image']:.2f})" for r in raws]
        for label in raws[0]
        for batch in raws[0][label]
    ]
    header = ("session", *(f"repeat {i + 1}" for i in range(len(raws))))
    return Table("raw ONNX Runtime in-process, per repeat (images/s; CPU ms per image):", header, rows)


def cross_check_table(cross_check: dict, first_run: list) -> Table:
    """bench's GEModel figures next to perf_analyzer's on the same server."""
    rows = []
    for c, pa in cross_check.items():
        p = at(first_run, c)
        rows.append(
            [
                str(c),
                f"{p.inferences:.1f}",
                f"{pa['infer_per_s']:.1f}",
                f"{p.latency_ms.p50:.2f}",
                f"{pa['p50_ms']:.2f}",
            ]
        )
    header = ("concurrency", "bench infer/s", "perf_analyzer infer/s", "bench p50", "perf_analyzer p50")
    return Table("cross-check of the GEModel figures of the first repeat (gRPC, batch-1 requests):", header, rows)
