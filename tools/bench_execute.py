"""GEModel.execute in-process (fake pb_utils): the Python cost of one batch, without tritonserver.

Builds tools/bench_host.py's tiny model (FP32 [N,3,32,32] -> Relu) as a GEModel folder on
onnxruntime and on acl-sim (device time 0; 1 instance, 1 stream, answers returned), then calls
``execute`` on batches of batch-1 requests, in blocks, and prints the fastest block's time per
``execute`` (the least disturbed by other tenants of a shared host) and main-thread CPU. Also
times the acl engine's slot alone (stage + run on the simulator), which real pyACL replaces by C
calls. ``--code CHECKOUT`` runs another checkout's ge_python_backend (e.g. the code before a
change), so before/after come from one command each.

The fake pb_utils is cheaper than the real stub's pybind objects, and a loaded server runs the
same code slower (cache, contention): compare figures of this tool with each other only.

    .venv/bin/python tools/bench_execute.py [--batch 8] [--blocks 15] [--code /tmp/before]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="requests per execute")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=400, help="execute calls per block")
    parser.add_argument("--code", type=Path, help="a checkout of the package to measure instead of this one")
    parser.add_argument("--workdir", type=Path, default=Path("out/bench/execute"))
    args = parser.parse_args()
    if args.code is not None:
        sys.path.insert(0, str(args.code.resolve()))
    import numpy as np
    from bench_host import Config, build_repository

    import ge_python_backend
    from ge_python_backend.engines import open_engine
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

    install_fake_pb_utils()
    from ge_python_backend.testing import fake_pb_utils as pb
    from ge_python_backend.triton.model import GEModel

    class Model(GEModel):
        pass

    print(f"ge_python_backend from {Path(ge_python_backend.__file__).parent}")
    workdir = args.workdir.resolve()
    repo, om_file = build_repository(workdir, [Config("return_s1_i1", "return", 1, 1)], [])
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)

    def blocks(call) -> tuple[float, float]:
        for _ in range(args.calls // 4):
            call()
        wall, cpu = [], []
        for _ in range(args.blocks):
            started, thread = time.perf_counter(), time.thread_time()
            for _ in range(args.calls):
                call()
            wall.append((time.perf_counter() - started) / args.calls)
            cpu.append((time.thread_time() - thread) / args.calls)
        return min(wall) * 1e6, min(cpu) * 1e6

    print(f"{'':28} {'us per execute':>15} {'us per request':>15} {'main-thread CPU us':>19}")
    for label, folder in (("GEModel, onnxruntime", "ort"), ("GEModel, acl-sim", "return_s1_i1_d0")):
        batches = [[pb.InferenceRequest([pb.Tensor("x", x)]) for _ in range(args.batch)] for _ in range(args.calls)]
        with ModelHarness(Model, repo / folder) as harness:
            wall, cpu = blocks(_cycling(harness.model.execute, batches))
        print(f"{label:28} {wall:15.1f} {wall / args.batch:15.1f} {cpu:19.1f}")
    engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={"acl_timing_events": True})
    try:
        engine.bind_thread()
        slot = engine.slots[0]
        data = np.zeros((args.batch, 3, 32, 32), np.float32)

        def stage_and_run() -> None:
            np.copyto(slot.inputs({"x": data.shape})["x"], data)
            slot.run()

        wall, cpu = blocks(stage_and_run)
    finally:
        engine.close()
    print(f"{'acl slot on the simulator':28} {wall:15.1f} {wall / args.batch:15.1f} {cpu:19.1f}  (stage + run)")
    return 0


def _cycling(execute, batches: list):
    """A call that executes the next batch of ``batches`` (round and round: fresh request objects
    are built once, outside the timing)."""
    position = [0]

    def call() -> None:
        execute(batches[position[0]])
        position[0] = (position[0] + 1) % len(batches)

    return call


if __name__ == "__main__":
    sys.exit(main())
