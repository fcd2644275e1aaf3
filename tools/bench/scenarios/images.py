"""Figures per image for a real NPU's owner: the host CPU one request costs, by input kind and
size, and the host cores a 310P3 needs at its image rates.

Four request kinds, each a batch-1 gRPC request from perf_analyzer at concurrency 16, gathered by
Triton's dynamic batching into batches of 8 (preferred size 8, ``--queue-delay-us`` 4,000 for a
batch to fill; the "avg batch" column says how full they were) and run on an .om with
gears 1,2,4,8 whose answer is small (ReduceMean over H, W -> FP32 [N,3]), so the input's path is
what is measured:

- UINT8 NHWC 1x224x224x3 and 1x640x640x3 through static AIPP (RGB888_U8: the .om takes the
  image as the camera gives it, the AIPP input path);
- FP32 NCHW 1x3x224x224 and 1x3x640x640 (the same model without AIPP).

Each is served by ``ge-triton generate``'s folder on engine acl over the null pyACL (``null``:
the host path a real NPU sees, device time 0; tools/bench/nullacl.py) and, for reference, on
acl-sim (``default``: the simulator's own cost included), and beside the first configuration the
constant model (``constant``: tools/bench/baselines/constant_model.py with the same config and no
engine: it reads the input and answers zeros of the output's shape, the Python backend's own floor
for the same request, measured next to its GEModel folder in every round). Per point, after a quiet-host wait:
server CPU per request (tritonserver and its stubs, over a perf_analyzer window between two
metrics scrapes) and the stubs' share. perf_analyzer hands the inputs over in system shared
memory by default (``--shared-memory none``: over gRPC; on this 2-core host the client's
sending of 640x640 requests then keeps batches from filling). ``--rounds`` repeats every point, interleaved; medians.

In process: the gather of 8 requests into a slot buffer (``serving.batching``: plan + gather,
as the runner does per batch) against one numpy memcpy of the same bytes, per request kind
(the ``gather`` scenario's case). From the served figures: host cores one 310P3 needs at 4,000
and 12,000 images/s = images/s x server CPU us per image / 1e6. The issue-25 target: a UINT8
640x640x3 request costs at most 1.2x a 224x224x3 one in stub CPU (copies, not Python, should
scale with bytes); beside it the constant model's own 640 / 224, which bounds it, and per request
kind what GEModel adds to the floor (stubs CPU minus the constant model's, and their ratio).
"""

from __future__ import annotations

import collections
import math
import statistics

from tools.bench.measure import perf_analyzer_arguments, perf_analyzer_binary, perf_window, positive_int, stub_pids
from tools.bench.repos import CONSTANT, GEARS, ROWS, ImageInput, build_images_repository, config_named
from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table
from tools.bench.scenarios.ab import configurations
from tools.bench.scenarios.gather import case as gather_case
from tools.bench.scenarios.gather import case_cells, case_header

SUMMARY = (
    "server CPU per image for UINT8 (AIPP) and FP32 images of 224 and 640, the gather's GB/s, host cores per 310P3"
)
CONCURRENCY = 16
IMAGES = (ImageInput("uint8", 224), ImageInput("uint8", 640), ImageInput("fp32", 224), ImageInput("fp32", 640))
#: a 310P3's ResNet-50 rates (issue 25: Ascend ModelZoo, 4,250 at batch 64 with AIPP; 9,492 INT8 at batch 4)
RATES = (4000, 12000)
TARGET = 1.2


def add_arguments(parser) -> None:
    perf_analyzer_arguments(parser)
    parser.add_argument(
        "--rounds", type=positive_int, default=2, help="measure every point this many times, interleaved"
    )
    parser.add_argument("--window", type=float, default=3.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument(
        "--configs",
        type=configurations,
        default=["null", "default"],
        help="configurations per request kind (default: null, engine acl over the null pyACL, and default on acl-sim)",
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[224, 640],
        help="image sizes (height = width)",
    )
    parser.add_argument(
        "--shared-memory",
        choices=("none", "system"),
        default="system",
        help="perf_analyzer's --shared-memory: system (default) hands the images over in shared memory, so the "
        "client's sending does not starve the batches on a 2-core host; none sends them over gRPC (the receive "
        "counts in tritonserver's CPU, as with a remote client)",
    )
    delay = "dynamic batching's max_queue_delay_microseconds (preferred batch size 8): how long a batch waits to fill"
    parser.add_argument("--queue-delay-us", type=int, default=4000, help=delay)
    parser.add_argument("--gather-seconds", type=float, default=1.5, help="seconds per request kind for the gather")


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    images = [ImageInput(kind, size) for kind in ("uint8", "fp32") for size in args.sizes]
    configs = [config_named(label) for label in args.configs]
    analyzer = perf_analyzer_binary(args.perf_analyzer)

    print("the gather of 8 requests into a slot buffer, in this process ...", flush=True)
    gathers = {}
    for image in images:
        bench.quiet(f"gather {image.label}")
        gathers[image.label] = gather_case(ROWS, GEARS, args.gather_seconds, image.shape, image.dtype, False)

    repo, folders = build_images_repository(bench.workdir, images, configs, args.queue_delay_us)
    extra = ["--shared-memory", args.shared_memory] if args.shared_memory != "none" else []
    points: dict[str, list[dict]] = collections.defaultdict(list)
    print(f"tritonserver, perf_analyzer gRPC batch-1 requests at concurrency {CONCURRENCY} ...", flush=True)
    with TritonServer(repo, model_control_mode="explicit", load_models=tuple(folders.values())) as server:
        for round_number in range(args.rounds):
            print(f" round {round_number + 1} of {args.rounds}", flush=True)
            order = list(folders.items())
            for (image_label, config_label), name in order if round_number % 2 == 0 else order[::-1]:
                result = perf_window(
                    bench,
                    server,
                    analyzer,
                    name,
                    CONCURRENCY,
                    args.warmup,
                    args.window,
                    (server.process.pid,),
                    extra=extra,
                    split_pids=stub_pids(server.process.pid, name),
                )
                result["stubs_cpu_ms"] = result["server_cpu_ms"] - result["pid_cpu_ms"][server.process.pid]
                result["round"] = round_number
                points[f"{image_label}/{config_label}"].append(result)
                print(
                    f"  {name:>24} {result['infer_per_s']:7.0f} infer/s  batch {result['avg_batch']:.2f}  "
                    f"server {result['server_cpu_ms'] * 1000:.0f} us/req  stubs {result['stubs_cpu_ms'] * 1000:.0f}  "
                    f"others {result['others_cores']:.2f}",
                    flush=True,
                )
                if result["failures"]:
                    print(f"  warning: {result['failures']:.0f} request(s) failed", flush=True)
    data = {
        "rounds": args.rounds,
        "window_s": args.window,
        "shared_memory": args.shared_memory,
        "gather": gathers,
        "points": points,
    }
    tables = [served_table(images, [*args.configs, CONSTANT], points), gather_table(images, gathers)]
    return Report(summary=summary(images, args.configs, points), tables=tables, data=data)


def _median(points: list[dict], key: str) -> float:
    return statistics.median(p[key] for p in points)


#: the measured model's own stub: user and system CPU (us) and minor page faults per request
SPLIT = (("user_ms", 1000), ("sys_ms", 1000), ("minflt", 1))


def _median_split(points: list[dict], key: str) -> float:
    return statistics.median(p.get("split", {}).get(key, math.nan) for p in points)


def served_table(images: list[ImageInput], labels: list[str], points: dict[str, list[dict]]) -> Table:
    rows = []
    for image in images:
        for label in labels:
            found = points.get(f"{image.label}/{label}")
            if not found:  # the constant model of a folder that was not measured
                continue
            server_us = _median(found, "server_cpu_ms") * 1000
            rows.append(
                [
                    image.title,
                    label,
                    f"{_median(found, 'infer_per_s'):.0f}",
                    f"{_median(found, 'avg_batch'):.2f}",
                    f"{server_us:.0f}",
                    f"{_median(found, 'stubs_cpu_ms') * 1000:.0f}",
                    *(f"{_median_split(found, key) * scale:.0f}" for key, scale in SPLIT),
                    *(f"{rate * server_us / 1e6:.2f}" for rate in RATES),
                ]
            )
    header = (
        "request",
        "served by",
        "infer/s",
        "avg batch",
        "server CPU us/req",
        "stubs CPU us/req",
        "its stub user us/req",
        "its stub sys us/req",
        "its stub minor faults/req",
        *(f"cores at {rate:,}/s" for rate in RATES),
    )
    title = (
        f"served, concurrency {CONCURRENCY}, batches of up to {ROWS} (medians over the rounds); "
        "cores = images/s x server CPU us per image / 1e6; its stub: the measured model's own stub process "
        "(/proc/PID/stat utime, stime, minflt over the window)"
    )
    return Table(title, header, rows, chart=(4, "server CPU us per request"))


def gather_table(images: list[ImageInput], gathers: dict[str, dict]) -> Table:
    rows = [[image.title, *case_cells(gathers[image.label])] for image in images]
    header = ("8 requests of", *case_header("gather"))
    title = "the gather of 8 requests into a slot buffer against one memcpy of their bytes (in process, medians)"
    return Table(title, header, rows)


def summary(images: list[ImageInput], labels: list[str], points: dict[str, list[dict]]) -> Table:
    """The target (UINT8 640 / 224 stub CPU per request, paired per round) on the first
    configuration (null: the real NPU's host path) and what bounds it: the constant model's own
    640 / 224 (the Python backend's floor, measured next to it in every round); per request kind,
    what GEModel adds to that floor; and the server CPU per image behind the cores."""
    label = labels[0]
    ratios = []
    big, small = max(i.size for i in images), min(i.size for i in images)
    sizes = f"{big} / {small}"
    for kind in ("uint8", "fp32") if big != small else ():
        large, little = f"{kind}_{big}", f"{kind}_{small}"
        for served in (label, CONSTANT):
            if f"{large}/{served}" not in points or f"{little}/{served}" not in points:
                continue
            name = f"{served}: {kind.upper()} {sizes} stubs CPU per request"
            paired = _paired(points, large, little, served, "stubs_cpu_ms")
            if kind == "uint8" and served == label:
                ratios.append(Ratio(name, paired, TARGET, False))
                paired = _paired(points, large, little, served, "server_cpu_ms")
                ratios.append(Ratio(f"{label}: UINT8 {sizes} server CPU per request", paired))
            elif kind == "uint8":
                ratios.append(Ratio(f"{name} (the Python backend's floor: what bounds the target)", paired))
            else:
                ratios.append(Ratio(name, paired))
    for image in images:
        ours, floor = points.get(f"{image.label}/{label}"), points.get(f"{image.label}/{CONSTANT}")
        if ours and floor:
            ratios.append(
                Ratio(
                    f"{label}: {image.title}: stubs CPU us per request above the constant model's",
                    [(g["stubs_cpu_ms"] - c["stubs_cpu_ms"]) * 1000 for g, c in zip(ours, floor)],
                )
            )
            ratios.append(
                Ratio(
                    f"{label}: {image.title}: stubs CPU per request / the constant model's",
                    [g["stubs_cpu_ms"] / c["stubs_cpu_ms"] for g, c in zip(ours, floor)],
                )
            )
    for image in images:
        found = points[f"{image.label}/{label}"]
        for rate in RATES:
            ratios.append(
                Ratio(
                    f"{label}: {image.title}: host cores at {rate:,} images/s",
                    [rate * p["server_cpu_ms"] * 1000 / 1e6 for p in found],
                )
            )
    title = "target, what bounds it, what GEModel adds to the floor, host cores per 310P3 (medians over the rounds)"
    return ratio_table(ratios, title)


def _paired(points: dict[str, list[dict]], large: str, little: str, served: str, key: str) -> list[float]:
    """``large`` / ``little`` ``key`` per request of ``served``, per round."""
    return [b[key] / s[key] for b, s in zip(points[f"{large}/{served}"], points[f"{little}/{served}"])]
