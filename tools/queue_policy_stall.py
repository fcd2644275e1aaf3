"""Measure tritonserver 2.51's dynamic-batcher stall with a queue policy.

    .venv/bin/python tools/queue_policy_stall.py [--seconds 10] [--concurrency 8]

Serves the same trivial models twice from one tritonserver on loopback, once without and once
with a ``default_queue_policy`` (a max_queue_size far above the load, so nothing is refused),
and runs the bench closed loop of --concurrency gRPC clients against each, keeping every latency. Two
kinds of model: ``identity`` is a plain Python-backend model (no GEModel: Triton alone) and
``linear`` a GEModel on ONNX Runtime, generated with and without ``--max-queue-size``. The table
shows throughput, latency percentiles and the requests that took longer than --stall-ms: with a
policy, requests stall for about 0.5 s at a time and throughput drops. This is why generated
configs carry a queue policy only when asked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ge_python_backend.ops.bench import Point, Sweep, Target, percentile, run_sweep
from ge_python_backend.ops.bench.report import format_rows
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import format_config, mc
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import models

#: A queue far larger than the load: the policy never refuses anything here.
MAX_QUEUE_SIZE = 1024

IDENTITY_MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("probs", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
"""


def _identity(repo: Path, name: str, policy: bool) -> None:
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    for entries, tensor in ((config.input, "x"), (config.output, "probs")):
        entry = entries.add(name=tensor, data_type=mc.TYPE_FP32)
        entry.dims.append(4)
    config.dynamic_batching.max_queue_delay_microseconds = 500
    if policy:
        config.dynamic_batching.default_queue_policy.max_queue_size = MAX_QUEUE_SIZE
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
    (repo / name / "1" / "model.py").write_text(IDENTITY_MODEL, encoding="utf-8")


def build_repository(folder: Path) -> Path:
    repo = folder / "repo"
    onnx_file = models.linear(folder / "linear.onnx")
    for policy in (False, True):
        suffix = "_policy" if policy else ""
        _identity(repo, f"identity{suffix}", policy)
        generate(
            onnx_file, repo, GenerateOptions(name=f"linear{suffix}", max_queue_size=MAX_QUEUE_SIZE if policy else 0)
        )
    return repo


def closed_loop(url: str, model: str, concurrency: int, seconds: float, warmup: float) -> Point:
    """``concurrency`` gRPC clients, each sending its next request (one row) as soon as the last
    is answered, for ``warmup`` unmeasured and then ``seconds`` measured seconds; every latency kept."""
    target = Target(url, model, {"x": np.ones((1, 4), np.float32)})
    (point,) = run_sweep(target, Sweep((concurrency,), duration_s=seconds, warmup_s=warmup, keep_latencies=True))
    return point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per model")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients")
    parser.add_argument("--stall-ms", type=float, default=250.0, help="a request slower than this counts as stalled")
    args = parser.parse_args(argv)
    rows = [
        [
            "model",
            "queue policy",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            f"> {args.stall_ms:g} ms",
            "errors",
        ]
    ]
    with (
        tempfile.TemporaryDirectory(prefix="ge-stall-") as scratch,
        TritonServer(build_repository(Path(scratch))) as server,
    ):
        for kind in ("identity", "linear"):
            for suffix in ("", "_policy"):
                point = closed_loop(server.grpc_address, kind + suffix, args.concurrency, args.seconds, args.warmup)
                latencies = [s * 1000 for s in point.latencies_s]
                rows.append(
                    [
                        kind,
                        f"max_queue_size {MAX_QUEUE_SIZE}" if suffix else "none",
                        str(point.requests),
                        f"{point.throughput:.0f}",
                    ]
                    + [f"{percentile(latencies, q):.1f}" for q in (50, 99, 99.9)]
                    + [
                        f"{point.latency_ms.max:.1f}",
                        str(sum(ms > args.stall_ms for ms in latencies)),
                        str(point.errors),
                    ]
                )
    print(f"closed loop, {args.concurrency} gRPC clients, {args.seconds:g} s per model, 1 row per request")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
