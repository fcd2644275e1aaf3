"""Served throughput and latency of one ONNX model, four ways, in one run on one machine:

- the raw engine in-process (ONNX Runtime ``session.run`` at batch 1 and at the largest batch):
  the ceiling;
- the GEModel folder from ``ge-triton generate`` on a real tritonserver;
- a hand-written minimal model.py (concatenate, run, slice: tools/handwritten_model.py) on the
  same server;
- the same ONNX model served by PyTriton with its ``@batch`` decorator (tools/pytriton_server.py).

The model is ``ge_python_backend.testing.models.image_classifier`` (FP32 3x224x224 -> 1000),
served with dynamic batching up to 8 and 500 us queue delay, batch-1 requests. Prints the
measured points and a table of ratios against the targets of issue 7.

    .venv/bin/python tools/bench_serving.py [--repeats 3] [--levels 1,8,16] [--duration 6] [--warmup 2]
        [--perf-analyzer /tmp/perf_analyzer/perf_analyzer] [--skip-pytriton]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from bench_common import (  # noqa: E402
    CONTAMINATED_CORES,
    POINT_HEADER,
    Ratio,
    clean,
    common_arguments,
    levels_argument,
    perf_analyzer_run,
    point_row,
    ratio_table,
    save_json,
    sweep_model,
    time_calls,
)

from ge_python_backend.engines.onnxruntime import load_session  # noqa: E402
from ge_python_backend.ops.bench.host import wait_quiet  # noqa: E402
from ge_python_backend.ops.bench.report import format_rows, plot  # noqa: E402
from ge_python_backend.ops.server import TritonServer, free_port  # noqa: E402
from ge_python_backend.repository.config import set_parameters  # noqa: E402
from ge_python_backend.repository.generate import GenerateOptions, generate  # noqa: E402
from ge_python_backend.testing import models  # noqa: E402

TOOLS = Path(__file__).resolve().parent
MAX_BATCH = 8
QUEUE_DELAY_US = 500

HANDWRITTEN_CONFIG = f"""name: "handwritten"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def raw_engine(onnx_file: Path, seconds: float) -> dict[str, dict[int, dict[str, float]]]:
    """ONNX Runtime in this process at batch 1 and MAX_BATCH: ms per call, images/s and CPU ms
    per image, for the session the GEModel engine opens for the generated folder (its defaults
    with one slot: ORT's thread pools, spin-waiting on) and for a session with ONNX Runtime's own
    defaults (as the hand-written and PyTriton baselines use)."""
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


def build_repository(onnx_file: Path, repo: Path, variants: dict[str, dict[str, str]] | None = None) -> None:
    """Model folders ``ge`` (ge-triton generate's defaults) and ``handwritten``, plus one
    generated folder per entry of ``variants`` (name -> config parameters to set)."""
    if repo.exists():
        shutil.rmtree(repo)
    for name, parameters in {"ge": {}, **(variants or {})}.items():
        options = GenerateOptions(
            name=name,
            max_batch_size=MAX_BATCH,
            max_queue_delay_us=QUEUE_DELAY_US,
            streams=int(parameters.get("streams", 1)),
        )
        folder = generate(onnx_file, repo, options).model_dir
        set_parameters(folder / "config.pbtxt", **{k: v for k, v in parameters.items() if k != "streams"})
    hand = repo / "handwritten"
    (hand / "1").mkdir(parents=True)
    (hand / "config.pbtxt").write_text(HANDWRITTEN_CONFIG)
    shutil.copyfile(onnx_file, hand / "1" / "model.onnx")
    shutil.copyfile(TOOLS / "handwritten_model.py", hand / "1" / "model.py")


def perf_analyzer(binary: str, address: str, model: str, concurrency: int, seconds: float) -> dict[str, float]:
    """perf_analyzer (C++ load generator) once at ``concurrency``: infer/s, p50 and p99 in ms."""
    command, env = perf_analyzer_run(
        binary,
        model,
        address,
        concurrency,
        "--measurement-interval",
        str(int(seconds * 1000)),
        "--max-trials",
        "3",
        "--stability-percentage",
        "50",
    )
    output = subprocess.run(command, capture_output=True, text=True, timeout=120 + 10 * seconds, env=env).stdout

    def number(pattern: str) -> float:
        match = re.search(pattern, output)
        return float(match.group(1)) if match else float("nan")

    return {
        "infer_per_s": number(r"Throughput: ([\d.]+) infer/sec"),
        "p50_ms": number(r"p50 latency: (\d+) usec") / 1000,
        "p99_ms": number(r"p99 latency: (\d+) usec") / 1000,
    }


class PyTritonProcess:
    """tools/pytriton_server.py in a child process on free loopback ports."""

    def __init__(self, onnx_file: Path, log: Path, startup_timeout: float = 180.0) -> None:
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(TOOLS / "pytriton_server.py"),
                str(onnx_file),
                "--name",
                "pytriton",
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--metrics-port",
                str(self.metrics_port),
                "--max-batch-size",
                str(MAX_BATCH),
                "--max-queue-delay-us",
                str(QUEUE_DELAY_US),
            ],
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + startup_timeout
        line = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            line = self.process.stdout.readline().strip()
            if line == "ready":
                return
        self.stop()
        raise RuntimeError(f"PyTriton did not start ({line!r}); see {log}")

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> PyTritonProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


def quiet(what: str) -> float | None:
    """Wait for a quiet host; say so when it stayed busy (another tenant on the same cores)."""
    busy = wait_quiet()
    if busy is not None and busy >= 0.15:
        print(f"  warning: {busy:.0%} of the CPUs were busy before {what}")
    return busy


def representative(points):
    """The run with the median throughput (lower median for an even count)."""
    ordered = sorted(points, key=lambda p: p.inferences)
    return ordered[(len(ordered) - 1) // 2]


def at(points, level):
    return next(p for p in points if p.level == level)


def print_cross_check(cross_check: dict, first_run: list) -> None:
    """bench's GEModel figures next to perf_analyzer's on the same server."""
    if not cross_check:
        return
    check_rows = [["concurrency", "bench infer/s", "perf_analyzer infer/s", "bench p50", "perf_analyzer p50"]]
    for c, pa in cross_check.items():
        p = at(first_run, c)
        check_rows.append(
            [
                str(c),
                f"{p.inferences:.1f}",
                f"{pa['infer_per_s']:.1f}",
                f"{p.latency_ms.p50:.2f}",
                f"{pa['p50_ms']:.2f}",
            ]
        )
    print(
        "\ncross-check of the GEModel figures of the first repeat (gRPC, batch-1 requests):\n" + format_rows(check_rows)
    )


def print_raw(raws: list[dict]) -> None:
    """Raw ONNX Runtime per repeat."""
    print("\nraw ONNX Runtime in-process, per repeat (images/s; CPU ms per image):")
    for label in raws[0]:
        for batch in raws[0][label]:
            cells = ", ".join(
                f"{r[label][batch]['images_per_s']:.0f} ({r[label][batch]['cpu_ms_per_image']:.2f})" for r in raws
            )
            print(f"  {label}, batch {batch}: {cells}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(parser, duration=6.0, warmup=2.0, workdir="out/bench/serving")
    levels_argument(parser, (1, 8, 16), "must include 1 and 8")
    parser.add_argument("--raw-seconds", type=float, default=4.0, help="seconds per raw-engine batch size")
    parser.add_argument("--skip-pytriton", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats; tables show medians")
    parser.add_argument("--perf-analyzer", help="perf_analyzer binary: cross-check the GEModel at concurrency 1 and 8")
    args = parser.parse_args()
    if not {1, 8} <= set(args.levels):
        parser.error("--levels must include 1 and 8 (the targets are stated there)")
    workdir = args.workdir.resolve()
    onnx_file = models.image_classifier(workdir / "classifier.onnx")
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    inputs = {"image": image}
    print(f"model: {onnx_file} (image_classifier defaults); {os.cpu_count()} CPUs shared by server and client")

    build_repository(onnx_file, workdir / "repo")
    names = {"GEModel": "ge", "hand-written": "handwritten"} | ({} if args.skip_pytriton else {"PyTriton": "pytriton"})
    runs: dict[str, list[list]] = {label: [] for label in names}
    raws: list[dict] = []  # raw ONNX Runtime, measured in-process at the start of every repeat
    cross_check = {}
    print(
        "tritonserver (GEModel folder, hand-written model.py)"
        + ("" if args.skip_pytriton else " and PyTriton")
        + f": {args.repeats} interleaved repeat(s) ...",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(TritonServer(workdir / "repo"))
        servers = {"GEModel": server, "hand-written": server}
        if not args.skip_pytriton:
            servers["PyTriton"] = stack.enter_context(PyTritonProcess(onnx_file, workdir / "pytriton.log"))
        for repeat in range(args.repeats):
            quiet("raw ONNX Runtime")
            raws.append(raw_engine(onnx_file, args.raw_seconds))
            order = list(names) if repeat % 2 == 0 else list(names)[::-1]
            for label in order:
                quiet(label)
                runs[label].append(sweep_model(servers[label], names[label], inputs, args.levels, args))
            if args.perf_analyzer and repeat == 0:
                for c in (1, 8):
                    quiet(f"perf_analyzer c={c}")
                    cross_check[c] = perf_analyzer(args.perf_analyzer, server.grpc_address, "ge", c, args.duration)

    series = {
        label: [representative(clean([run[i] for run in label_runs])) for i in range(len(args.levels))]
        for label, label_runs in runs.items()
    }
    rows = [POINT_HEADER] + [point_row(name, p) for name, points in series.items() for p in points]
    print(
        f"\nmedian run of {args.repeats} per model and level (by throughput; quiet runs only when there "
        f"are any):\n" + format_rows(rows)
    )
    print_cross_check(cross_check, runs["GEModel"][0])
    print_raw(raws)

    def raw_same(i: int) -> float:
        return raws[i]["engine settings"][MAX_BATCH]["images_per_s"]

    def raw_best(i: int) -> float:
        return max(r["images_per_s"] for b in raws[i].values() for r in b.values())

    quiet_repeats = [
        i
        for i in range(args.repeats)
        if all(len(clean(label_runs[i])) == len(label_runs[i]) for label_runs in runs.values())
    ]
    if len(quiet_repeats) < args.repeats:
        print(
            f"\n{args.repeats - len(quiet_repeats)} of {args.repeats} repeat(s) had other processes keeping "
            f">= {CONTAMINATED_CORES} CPUs busy"
            + ("; the ratios use the others" if quiet_repeats else "; no quiet repeat: the ratios use them all")
        )

    def paired(value) -> list[float]:
        """``value(runs of one repeat, its index)`` for every quiet repeat (every repeat if none was)."""
        return [
            value({label: label_runs[i] for label, label_runs in runs.items()} | {"repeat": i})
            for i in (quiet_repeats or range(args.repeats))
        ]

    def saturation(points) -> float:
        return max(p.inferences for p in points)

    ratios = [
        Ratio(
            f"GEModel at saturation / raw ORT batch {MAX_BATCH}, same session settings",
            paired(lambda r: saturation(r["GEModel"]) / raw_same(r["repeat"])),
            0.90,
        ),
        Ratio(
            "GEModel at saturation / best raw ORT (any batch, any settings)",
            paired(lambda r: saturation(r["GEModel"]) / raw_best(r["repeat"])),
        ),
        Ratio(
            "GEModel / hand-written throughput, c=8",
            paired(lambda r: at(r["GEModel"], 8).inferences / at(r["hand-written"], 8).inferences),
            1.0,
        ),
        Ratio(
            "GEModel / hand-written p50, c=1",
            paired(lambda r: at(r["GEModel"], 1).latency_ms.p50 / at(r["hand-written"], 1).latency_ms.p50),
            1.0,
            False,
        ),
        Ratio(
            "GEModel / hand-written throughput, c=1",
            paired(lambda r: at(r["GEModel"], 1).inferences / at(r["hand-written"], 1).inferences),
        ),
        Ratio(
            "GEModel / hand-written throughput at saturation",
            paired(lambda r: saturation(r["GEModel"]) / saturation(r["hand-written"])),
        ),
    ]
    if "PyTriton" in runs:
        ratios += [
            Ratio(
                "GEModel / PyTriton throughput, c=8",
                paired(lambda r: at(r["GEModel"], 8).inferences / at(r["PyTriton"], 8).inferences),
                1.4,
            ),
            Ratio(
                "GEModel / PyTriton p50, c=1",
                paired(lambda r: at(r["GEModel"], 1).latency_ms.p50 / at(r["PyTriton"], 1).latency_ms.p50),
                0.7,
                False,
            ),
            Ratio(
                "GEModel / PyTriton throughput at saturation",
                paired(lambda r: saturation(r["GEModel"]) / saturation(r["PyTriton"])),
            ),
        ]
    print("\n" + ratio_table(ratios))

    document = {
        "model": "image_classifier defaults",
        "cpus": os.cpu_count(),
        "protocol": args.protocol,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "raw_onnxruntime": raws,
        "repeats": args.repeats,
        "runs": {label: [[p.to_dict() for p in run] for run in label_runs] for label, label_runs in runs.items()},
        "perf_analyzer": cross_check,
        "ratios": [r.to_dict() for r in ratios],
    }
    print(f"\nwrote {save_json(workdir / 'serving.json', document)}")
    print(f"wrote {plot(series, workdir / 'serving.png', 'image_classifier, batch-1 requests, ' + args.protocol)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
