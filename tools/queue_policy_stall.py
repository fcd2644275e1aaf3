"""Measure tritonserver 2.51's dynamic-batcher stall with a queue policy.

    .venv/bin/python tools/queue_policy_stall.py [--seconds 8] [--concurrency 8]

Serves the same trivial models twice from one tritonserver on loopback, once without and once
with a ``default_queue_policy`` (a max_queue_size far above the load, so nothing is refused),
and runs a closed loop of --concurrency clients against each (ge_python_backend.bench). Two
kinds of model: ``identity`` is a plain Python-backend model (no GEModel: Triton alone) and
``linear`` a GEModel on ONNX Runtime, generated with and without ``--max-queue-size``. With a
policy, p99 and max latency jump to about 0.5 s and throughput drops: this is why generated
configs carry a queue policy only when asked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ge_python_backend.bench import Sweep, Target, run_sweep
from ge_python_backend.bench.report import format_rows
from ge_python_backend.repository.config import format_config, mc
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.server import TritonServer
from ge_python_backend.testing import models

#: A queue far larger than the load: the policy never refuses anything here.
MAX_QUEUE_SIZE = 1024

IDENTITY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("probs", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
'''


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
        generate(onnx_file, repo, GenerateOptions(name=f"linear{suffix}", max_queue_size=MAX_QUEUE_SIZE if policy else 0))
    return repo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per model")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients")
    args = parser.parse_args(argv)
    sweep = Sweep(levels=(args.concurrency,), duration_s=args.seconds, warmup_s=args.warmup)
    rows = [["model", "queue policy", "req/s", "p50 ms", "p99 ms", "max ms", "errors"]]
    with tempfile.TemporaryDirectory(prefix="ge-stall-") as scratch:
        with TritonServer(build_repository(Path(scratch))) as server:
            for kind in ("identity", "linear"):
                for suffix in ("", "_policy"):
                    target = Target(server.grpc_address, kind + suffix, {"x": np.ones((1, 4), np.float32)})
                    (point,) = run_sweep(target, sweep)
                    latency = point.latency_ms
                    rows.append([kind, f"max_queue_size {MAX_QUEUE_SIZE}" if suffix else "none",
                                 f"{point.throughput:.0f}", f"{latency.p50:.1f}", f"{latency.p99:.1f}",
                                 f"{latency.max:.1f}", str(point.errors)])
    print(f"closed loop, {args.concurrency} clients, {args.seconds:g} s per model (gRPC, 1 row per request)")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
