"""Which layout serves a detector best: the work inside the GEModel's hooks (the detection-hooks
template), the detection template's ensemble (Python pre -> GEModel -> Python post) and one Python
model that letterboxes, calls the GEModel through BLS and decodes (the BLS layout), at a modelled
device time per batch of 8 and concurrency 16.

The detector is a YOLOv8-layout graph at 640x640 with 80 classes (``testing.models.yolo``: a v8
head [N, 84, 6400]) sim-compiled with batch gears 1, 2, 4, 8 and served on acl-sim with
``acl_sim_device_ms`` per batch; each request is one 640x480 JPEG (a camera frame), about 400 anchors
of which score above 0.25 (a crowded scene: ~320 boxes survive NMS). The three layouts
run the same ``hooks.detection.Detector`` code with the same instance counts (2 per Python model,
each GEModel as generate writes it), the two GEModels on one simulated device; each decodes and
NMS-filters all the requests of a batch in one pass (the hooks layout in ``postprocess_batch``,
over the requests an engine batch answers; the ensemble's post step and the BLS model over an
execute). Rounds alternate the layouts; medians, and each layout's throughput and server CPU per
image against the ensemble's of the same round (paired ratios, medians). On a host that other
work shares, the CPU per image is the steadier figure: the throughput follows what the other
processes leave (their cores are in the table too).
"""

from __future__ import annotations

import io
import statistics

import numpy as np

from tools.bench.measure import sweep, sweep_arguments
from tools.bench.runner import Bench, Report, Table

SUMMARY = "detector layouts at a modelled device time per batch of 8, concurrency 16: hooks, ensemble, BLS"
LAYOUTS = {"hooks": "det_hooks", "ensemble": "det", "bls": "det_bls"}

BLS_MODEL = '''"""The BLS layout of the detector (tools/bench/scenarios/layouts.py)."""

import numpy as np

from ge_python_backend.hooks.detection import DETECTION_PARAMETERS, IMAGE, Detector
from ge_python_backend.params import Parameter
from ge_python_backend.repository.modelfile import served_model_file
from ge_python_backend.triton.step import PipelineStep

MODEL = Parameter("model", str, "", "a model name", "the detector")


class TritonPythonModel(PipelineStep):
    parameters = (MODEL, *DETECTION_PARAMETERS)

    def setup(self):
        self.detector = Detector.build(served_model_file(self.repository / self.values["model"]).spec, self.values)

    def process_batch(self, batch):
        prepared = [self.detector.preprocess(inputs[IMAGE]) for inputs in batch]
        name = self.detector.image.name
        rows = np.concatenate([tensors[name] for tensors, _ in prepared])
        output = self.detector.predictions_output
        predictions = self.infer(self.values["model"], {name: rows}, [output])[output]
        bounds = np.cumsum([0] + [len(placed) for _, placed in prepared])
        split = [predictions[start:end] for start, end in zip(bounds, bounds[1:])]
        return self.detector.postprocess_batch(split, [placed for _, placed in prepared])
'''

BLS_CONFIG = """name: "det_bls"
backend: "python"
max_batch_size: 8
dynamic_batching {{ preferred_batch_size: 8 max_queue_delay_microseconds: 4000 }}
input {{ name: "IMAGE" data_type: TYPE_STRING dims: 1 }}
output {{ name: "NUM_DETS" data_type: TYPE_INT32 dims: 1 }}
output {{ name: "DET_BOXES" data_type: TYPE_FP32 dims: [100, 4] }}
output {{ name: "DET_SCORES" data_type: TYPE_FP32 dims: 100 }}
output {{ name: "DET_CLASSES" data_type: TYPE_INT32 dims: 100 }}
output {{ name: "DET_LABELS" data_type: TYPE_STRING dims: 100 }}
instance_group {{ kind: KIND_CPU count: 2 }}
parameters {{ key: "model" value {{ string_value: "det_model" }} }}
"""


def add_arguments(parser) -> None:
    sweep_arguments(parser, duration=15.0, warmup=3.0)
    parser.add_argument("--device-ms", type=float, default=8.0, help="modelled device time per batch (of 8)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the three layouts")


def build(workdir, device_ms: float):
    from ge_python_backend.repository.config import set_parameters
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import models

    repo, sources = workdir / "repo", workdir / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    onnx = models.yolo(sources / "yolo.onnx", "v8", classes=80, size=640, stride=8, score_bias=-10)
    sim_compile(onnx, sources / "yolo.om", batch_gears=(1, 2, 4, 8))
    generate(sources / "yolo.om", repo, GenerateOptions(name="det", template="detection", overwrite=True))
    for step in ("det_pre", "det_post"):  # batches of 8 gathered as the GEModel's are
        config = repo / step / "config.pbtxt"
        text = config.read_text().replace(
            "dynamic_batching {\n}", "dynamic_batching {\n  max_queue_delay_microseconds: 4000\n}"
        )
        config.write_text(text)
    generate(sources / "yolo.om", repo, GenerateOptions(name="det_hooks", template="detection-hooks", overwrite=True))
    for model in ("det_model", "det_hooks"):  # one simulated NPU: only the layout under load uses it
        set_parameters(repo / model / "config.pbtxt", acl_sim_device_ms=str(device_ms), device_ids="0")
    (repo / "det_bls" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "det_bls" / "1" / "model.py").write_text(BLS_MODEL)
    (repo / "det_bls" / "config.pbtxt").write_text(BLS_CONFIG.format())
    return repo


def _frame() -> bytes:
    from PIL import Image

    rng = np.random.default_rng(1)
    coarse = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(coarse).resize((640, 480), Image.BILINEAR).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    repo = build(bench.workdir, args.device_ms)
    inputs = {"IMAGE": np.array([[_frame()]], dtype=np.object_)}
    points: dict[str, list] = {layout: [] for layout in LAYOUTS}
    with TritonServer(repo) as server:
        for _ in range(args.rounds):
            for layout, model in LAYOUTS.items():
                points[layout] += sweep(bench, server, model, inputs, [args.concurrency])

    def server_cpu(point) -> float:
        return point.cpu_ms_per_request.get("server_ms", float("nan"))

    def paired(found: list, of) -> float:
        """The median over rounds of this layout's ``of`` against the ensemble's of the same round."""
        return statistics.median(of(p) / of(e) for p, e in zip(found, points["ensemble"]))

    rows = []
    for layout, found in points.items():
        rows.append(
            [
                layout,
                f"{statistics.median(p.throughput for p in found):.1f}",
                f"{statistics.median(p.latency_ms.p50 for p in found):.1f}",
                f"{statistics.median(p.latency_ms.p99 for p in found):.1f}",
                f"{statistics.median(server_cpu(p) for p in found):.2f}",
                f"{statistics.median(p.cpu_ms_per_request.get('others_cores', float('nan')) for p in found):.2f}",
                f"{paired(found, lambda p: p.throughput):.2f}",
                f"{paired(found, server_cpu):.2f}",
            ]
        )
    summary = Table(
        f"detector 640x640, {args.device_ms:g} ms per batch (acl-sim), concurrency {args.concurrency}, medians of "
        f"{args.rounds} rounds",
        (
            "layout",
            "images/s",
            "p50 ms",
            "p99 ms",
            "server CPU ms per image",
            "other processes' cores",
            "images/s x ensemble",
            "CPU per image x ensemble",
        ),
        rows,
        chart=(1, "images/s"),
    )
    return Report(summary, data={k: [p.to_dict() for p in v] for k, v in points.items()})
