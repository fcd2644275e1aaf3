"""Host CPU per image of the pipeline templates' own work (in-process, no server, no network time).

- detection at 640x640 (``hooks.detection.Detector``, the detection template's steps): decoding a
  1280x720 JPEG, letterboxing it to 640x640 with the FP32 NCHW conversion, and decoding + NMS +
  box mapping of a YOLOv8 head ``[8, 84, 8400]`` (80 classes) per image, with 20 and 300 anchors
  above ``conf_threshold`` per image (clusters of overlapping boxes, as around real objects);
- the OCR pipeline (``hooks.ocr.TextReader``, the ocr template's BLS model) on a rendered
  receipt-like page (1000x700, 12 lines) with the rapidocr-onnxruntime wheel's PP-OCRv4 networks
  on ONNX Runtime: the process CPU of everything but the three networks, and the networks' own.

CPU is ``time.process_time`` (every thread of the process) per image, the median of ``--rounds``.
"""

from __future__ import annotations

import io
import time

import numpy as np

from tools.bench.runner import Bench, Report, Table

SUMMARY = "host CPU per image of the detection (640x640) and OCR pipelines' own pre/post-processing (in-process)"
BATCH = 8
ANCHORS = 8400
CLASSES = 80


def add_arguments(parser) -> None:
    parser.add_argument("--rounds", type=int, default=30, help="measurements per case (median reported)")


def _cpu_ms(call, rounds: int) -> float:
    call()  # warm
    times = []
    for _ in range(rounds):
        started = time.process_time()
        call()
        times.append((time.process_time() - started) * 1000)
    return float(np.median(times))


def _jpeg(height: int, width: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, (height // 20, width // 20, 3), dtype=np.uint8)
    picture = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _predictions(candidates: int, seed: int = 0) -> np.ndarray:
    """A v8 head [BATCH, 4 + CLASSES, ANCHORS]: ``candidates`` anchors per image above 0.25, in
    clusters of 10 overlapping boxes around ``candidates // 10`` objects; the rest below 0.1."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((BATCH, ANCHORS, 4 + CLASSES), np.float32)
    rows[..., :2] = rng.random((BATCH, ANCHORS, 2)) * 640
    rows[..., 2:4] = rng.random((BATCH, ANCHORS, 2)) * 60 + 10
    rows[..., 4:] = rng.random((BATCH, ANCHORS, CLASSES)) * 0.1
    for image in range(BATCH):
        chosen = rng.choice(ANCHORS, candidates, replace=False)
        centres = rng.random((candidates // 10 + 1, 2)) * 600 + 20
        for i, anchor in enumerate(chosen):
            rows[image, anchor, :2] = centres[i // 10] + rng.normal(0, 4, 2)
            rows[image, anchor, 2:4] = 80 + rng.normal(0, 6, 2)
            rows[image, anchor, 4 + (i // 10) % CLASSES] = 0.3 + 0.7 * rng.random()
    return rows.transpose(0, 2, 1).copy()


def _detection(rounds: int) -> list[list[str]]:
    from ge_python_backend.hooks.detection import DETECTION_PARAMETERS, Detector, letterbox
    from ge_python_backend.hooks.preprocessing import decode_file
    from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec

    spec = ModelSpec(
        (TensorSpec("images", "FP32", (-1, 3, 640, 640)),),
        (TensorSpec("output0", "FP32", (-1, 4 + CLASSES, ANCHORS)),),
        BatchSupport("dynamic"),
    )
    detector = Detector.build(spec, {p.name: p.default for p in DETECTION_PARAMETERS})
    data = _jpeg(720, 1280)
    pixels = decode_file(data, 3, 1 << 30, "IMAGE")
    placed = [letterbox(pixels, 640, 640)[1]] * BATCH
    rows = [
        ["decode a 1280x720 JPEG", f"{_cpu_ms(lambda: decode_file(data, 3, 1 << 30, 'IMAGE'), rounds):.2f}"],
        [
            "letterbox to 640x640 + FP32 NCHW",
            f"{_cpu_ms(lambda: detector.to_input(letterbox(pixels, 640, 640)[0][None]), rounds):.2f}",
        ],
    ]
    for candidates in (20, 300):
        predictions = _predictions(candidates)
        per_batch = _cpu_ms(lambda p=predictions: detector.postprocess(p, placed), rounds)
        rows.append([f"decode + NMS + map, {candidates} candidates/image (batch of 8)", f"{per_batch / BATCH:.2f}"])
    return rows


def _page() -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    page = Image.new("RGB", (700, 1000), "white")
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=30)
    for line in range(12):
        draw.text(
            (40, 40 + line * 78), f"item {line + 1:02d}  ACME widget  {12.5 * (line + 1):8.2f}", fill="black", font=font
        )
    return np.asarray(page)[:, :, ::-1].copy()


def _ocr(rounds: int) -> list[list[str]]:
    try:
        import rapidocr_onnxruntime
    except ImportError:
        return [["OCR page (rapidocr-onnxruntime not installed: skipped)", "-", "-", "-"]]
    from pathlib import Path

    import onnxruntime as ort

    from ge_python_backend.hooks.ocr import TextReader, characters_of

    folder = Path(rapidocr_onnxruntime.__file__).parent / "models"
    names = ("ch_PP-OCRv4_det_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx")
    sessions = [ort.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"]) for name in names]
    keys = sessions[2].get_modelmeta().custom_metadata_map["character"].splitlines()
    reader = TextReader(characters_of(keys))
    spent = [0.0]

    def network(session):
        name = session.get_inputs()[0].name

        def run(batch):
            started = time.process_time()
            out = session.run(None, {name: batch})[0]
            spent[0] += time.process_time() - started
            return out

        return run

    detect, classify, recognize = (network(s) for s in sessions)
    bgr = _page()
    lines = reader.read(bgr, detect, classify, recognize)
    totals, networks = [], []
    for _ in range(max(rounds // 3, 5)):
        spent[0] = 0.0
        started = time.process_time()
        reader.read(bgr, detect, classify, recognize)
        totals.append((time.process_time() - started) * 1000)
        networks.append(spent[0] * 1000)
    own = float(np.median(np.subtract(totals, networks)))
    return [[f"OCR page 700x1000, {len(lines.texts)} lines read", f"{own:.2f}", f"{np.median(networks):.1f}"]]


def run(bench: Bench) -> Report:
    rounds = bench.args.rounds
    bench.quiet("the detection steps")
    detection = _detection(rounds)
    bench.quiet("the OCR pipeline")
    ocr = _ocr(rounds)
    summary = Table(
        "host CPU per image (ms, median)",
        ("step", "CPU ms per image", "networks' CPU ms (ONNX Runtime, not served)"),
        [row + [""] for row in detection] + ocr,
        chart=(1, "CPU ms per image"),
    )
    return Report(summary, data={"detection": detection, "ocr": ocr})
