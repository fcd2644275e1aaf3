"""GEModel.execute in-process (fake pb_utils): the Python cost of one batch, without tritonserver.

Builds host-path's tiny model (FP32 [N,3,32,32] -> Relu) as a GEModel folder on onnxruntime and on
acl-sim (device time 0; 1 instance, 1 stream, answers returned), then calls ``execute`` on batches
of batch-1 requests, in blocks, and reports the fastest block's time per ``execute`` (the least
disturbed by other tenants of a shared host) and main-thread CPU. Also times the acl engine's slot
alone (stage + run on the simulator), which real pyACL replaces by C calls. ``--code CHECKOUT``
runs another checkout's ge_python_backend (e.g. the code before a change), so before and after
come from one command each.

The fake pb_utils is cheaper than the real stub's pybind objects, and a loaded server runs the
same code slower (cache, contention): compare figures of this scenario with each other only.
"""

from __future__ import annotations

import time
from pathlib import Path

from tools.bench.repos import Config, build_host_repository
from tools.bench.runner import Bench, Report, Table

SUMMARY = "GEModel.execute in-process (fake pb_utils): the Python cost of one batch"


def add_arguments(parser) -> None:
    parser.add_argument("--batch", type=int, default=8, help="requests per execute")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=400, help="execute calls per block")
    parser.add_argument("--code", type=Path, help="a checkout of the package to measure instead of this one")


def run(bench: Bench) -> Report:
    import numpy as np

    import ge_python_backend
    from ge_python_backend.engines import open_engine
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

    install_fake_pb_utils()
    from ge_python_backend.testing import fake_pb_utils as pb
    from ge_python_backend.triton.model import GEModel

    class Model(GEModel):
        pass

    args = bench.args
    package = Path(ge_python_backend.__file__).parent
    print(f"ge_python_backend from {package}")
    repo, om_file = build_host_repository(bench.workdir, [Config("return_s1_i1", "return", 1, 1)], [])
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

    rows = []
    for label, folder in (("GEModel, onnxruntime", "ort"), ("GEModel, acl-sim", "return_s1_i1_d0")):
        batches = [[pb.InferenceRequest([pb.Tensor("x", x)]) for _ in range(args.batch)] for _ in range(args.calls)]
        with ModelHarness(Model, repo / folder) as harness:
            bench.quiet(label)
            wall, cpu = blocks(_cycling(harness.model.execute, batches))
        rows.append([label, f"{wall:.1f}", f"{wall / args.batch:.1f}", f"{cpu:.1f}"])
    engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={"acl_timing_events": True})
    try:
        engine.bind_thread()
        slot = engine.slots[0]
        data = np.zeros((args.batch, 3, 32, 32), np.float32)

        def stage_and_run() -> None:
            np.copyto(slot.inputs({"x": data.shape})["x"], data)
            slot.run()

        bench.quiet("the acl slot alone")
        wall, cpu = blocks(stage_and_run)
    finally:
        engine.close()
    rows.append(["acl slot on the simulator (stage + run)", f"{wall:.1f}", f"{wall / args.batch:.1f}", f"{cpu:.1f}"])
    header = ("", f"us per execute of {args.batch}", "us per request", "main-thread CPU us")
    title = f"fastest of {args.blocks} blocks of {args.calls} calls; ge_python_backend from {package}"
    summary = Table(title, header, rows, chart=(1, f"us per execute of {args.batch} requests"))
    return Report(summary=summary, data={"package": str(package), "batch": args.batch, "rows": rows})


def _cycling(execute, batches: list):
    """A call that executes the next batch of ``batches`` (round and round: fresh request objects
    are built once, outside the timing)."""
    position = [0]

    def call() -> None:
        execute(batches[position[0]])
        position[0] = (position[0] + 1) % len(batches)

    return call
