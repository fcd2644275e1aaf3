"""GEModel.execute in-process (fake pb_utils): the Python cost of one batch, without tritonserver.

Builds host-path's tiny model (FP32 [N,3,32,32] -> Relu) as a GEModel folder on onnxruntime, on
acl-sim and on engine acl over the null pyACL (tools/bench/nullacl.py: the acl engine's own host
cost; device time 0; 1 instance, 1 stream, answers returned), then calls ``execute`` on batches
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

from tools.bench import nullacl
from tools.bench.repos import GEARS, Config, build_host_repository
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
    configs = [Config("return_s1_i1", "return", 1, 1), Config("null_return_s1_i1", "return", 1, 1, "null")]
    repo, om_file = build_host_repository(bench.workdir, configs, [])
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

    def measure(label: str, folder: str) -> None:
        batches = [[pb.InferenceRequest([pb.Tensor("x", x)]) for _ in range(args.batch)] for _ in range(args.calls)]
        with ModelHarness(Model, repo / folder) as harness:
            bench.quiet(label)
            wall, cpu = blocks(_cycling(harness.model.execute, batches))
        rows.append([label, f"{wall:.1f}", f"{wall / args.batch:.1f}", f"{cpu:.1f}"])

    measure("GEModel, onnxruntime", "ort")
    measure("GEModel, acl-sim", "return_s1_i1_d0")
    engine = open_engine("acl-sim", om_file, device_id=0, slots=1, options={"acl_timing_events": True})
    try:
        engine.bind_thread()
        slot = engine.slots[0]
        gear = min((g for g in GEARS if g >= args.batch), default=max(GEARS))  # the gear the batch runs on
        data = np.zeros((gear, 3, 32, 32), np.float32)

        def stage_and_run() -> None:
            np.copyto(slot.inputs({"x": data.shape})["x"], data)
            slot.run()

        bench.quiet("the acl slot alone")
        wall, cpu = blocks(stage_and_run)
    finally:
        engine.close()
    rows.append(
        [
            f"acl slot on the simulator (stage + run of gear {gear})",
            f"{wall:.1f}",
            f"{wall / args.batch:.1f}",
            f"{cpu:.1f}",
        ]
    )
    nullacl.install()  # from here on `import acl` is the null pyACL, in this process
    measure("GEModel, acl over the null pyACL", "null_return_s1_i1_d0")
    header = ("", f"us per execute of {args.batch}", "us per request", "main-thread CPU us per execute")
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
