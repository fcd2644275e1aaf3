"""Soak test through a real tritonserver: every answer checked, nothing lost, mixed up or doubled.

    .venv/bin/python tools/soak.py                       # 2,000 requests per engine
    .venv/bin/python tools/soak.py --requests 100000 --concurrency 256

Builds its models (a small linear ONNX model, served on engine onnxruntime, and the same model
compiled to a simulated .om with batch gears 1,2,4,8 on engine acl-sim with 2 streams), starts
its own tritonserver on loopback with dynamic batching, sends the requests with random batch
sizes and random data (ge_python_backend.ops.soak), compares every answer with ONNX Runtime called
directly, prints a report per engine and exits 1 when anything was lost, wrong, duplicated or
errored. Bounded in count (--requests) and time (--time-limit, --deadline).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.ops.soak import OnnxReference, SoakReport, SoakSettings, run_soak
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models

#: engine -> the model it serves
MODELS = {"onnxruntime": "soak_onnxruntime", "acl-sim": "soak_acl_sim"}


def build_repository(folder: Path, engines: Sequence[str] = tuple(MODELS)) -> tuple[Path, dict[str, Path]]:
    """(model repository, model name -> the ONNX file that is its reference)."""
    onnx_file = models.linear(folder / "linear.onnx", features=16, classes=10)
    repo = folder / "repo"
    if "onnxruntime" in engines:
        generate(onnx_file, repo, GenerateOptions(name=MODELS["onnxruntime"]))
    if "acl-sim" in engines:
        sim_compile(onnx_file, folder / "linear.om", batch_gears=(1, 2, 4, 8))
        generate(folder / "linear.om", repo, GenerateOptions(name=MODELS["acl-sim"], streams=2))
    return repo, {MODELS[engine]: onnx_file for engine in engines}


def soak_engines(
    settings: SoakSettings, engines: Sequence[str] = tuple(MODELS), log: Callable[[str], None] = print
) -> list[SoakReport]:
    """Build the models, serve them with one tritonserver and soak each; the reports."""
    reports = []
    with tempfile.TemporaryDirectory(prefix="ge-soak-") as scratch:
        repo, references = build_repository(Path(scratch), engines)
        with TritonServer(repo) as server:
            log(
                f"tritonserver ready on {server.grpc_address}; {settings.requests} requests per model, "
                f"{settings.concurrency} in flight, {settings.streams} streams + unary calls, "
                f"1..{settings.max_rows} rows each"
            )
            for model, onnx_file in references.items():
                report = run_soak(server.grpc_address, model, OnnxReference(onnx_file), settings)
                log(report.describe())
                reports.append(report)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = SoakSettings()
    parser.add_argument(
        "--requests", type=int, default=default.requests, help="requests per engine (default %(default)s)"
    )
    parser.add_argument("--concurrency", type=int, default=default.concurrency, help="requests in flight at once")
    parser.add_argument("--streams", type=int, default=default.streams, help="gRPC bidirectional streams")
    parser.add_argument(
        "--stream-share", type=float, default=default.stream_share, help="fraction of requests sent on streams"
    )
    parser.add_argument("--max-rows", type=int, default=default.max_rows, help="largest batch of one request (1..8)")
    parser.add_argument("--seed", type=int, default=default.seed)
    parser.add_argument(
        "--time-limit", type=float, default=default.time_limit_s, help="seconds after which no request is sent"
    )
    parser.add_argument(
        "--deadline", type=float, default=default.deadline_s, help="seconds to wait for the last answers"
    )
    parser.add_argument("--engine", action="append", choices=tuple(MODELS), help="engine(s) to soak (default: all)")
    args = parser.parse_args(argv)
    if not 1 <= args.max_rows <= 8:
        parser.error(f"--max-rows {args.max_rows}: the models take 1 to 8 rows")
    settings = SoakSettings(
        requests=args.requests,
        concurrency=args.concurrency,
        streams=args.streams,
        stream_share=args.stream_share,
        max_rows=args.max_rows,
        seed=args.seed,
        time_limit_s=args.time_limit,
        deadline_s=args.deadline,
    )
    reports = soak_engines(settings, args.engine or tuple(MODELS))
    return 0 if all(report.clean for report in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
