"""PP-OCR for the tests: the det/cls/rec ONNX models the rapidocr-onnxruntime wheel ships, that
wheel's own pipeline as the reference, and rendered text images.

``tools/bootstrap.sh`` installs the wheel; without it the tests that need it are skipped with the
reason (``require_rapidocr``)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

#: What the reference is told, so it runs as the served pipeline does (PaddleOCR's detector limit)
REFERENCE_OPTIONS = {"det_limit_type": "max", "det_limit_side_len": 960}


@dataclass(frozen=True)
class PpOcrModels:
    det: Path
    cls: Path
    rec: Path


def require_rapidocr() -> PpOcrModels:
    """The wheel's model files; skips the test when the wheel is absent."""
    try:
        import rapidocr_onnxruntime
    except ImportError as exc:
        pytest.skip(f"rapidocr-onnxruntime is not installed ({exc}); tools/bootstrap.sh installs it")
    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    return PpOcrModels(
        models / "ch_PP-OCRv4_det_infer.onnx",
        models / "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        models / "ch_PP-OCRv4_rec_infer.onnx",
    )


def reference(bgr: np.ndarray) -> list[tuple[np.ndarray, str, float]]:
    """The wheel's own pipeline on a BGR image: (box [4, 2], text, score) per line, reading order."""
    from rapidocr_onnxruntime import RapidOCR

    result, _ = _engine(RapidOCR)(bgr)
    return [(np.asarray(box, np.float32), text, float(score)) for box, text, score in (result or [])]


_ENGINES: dict = {}


def _engine(kind):
    if "engine" not in _ENGINES:
        _ENGINES["engine"] = kind(**REFERENCE_OPTIONS)
    return _ENGINES["engine"]


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


#: (image size, [(position, text, font size, upside down)]): lines of several sizes, a line turned
#: 180 degrees (the direction classifier's case), digits and punctuation, two lines side by side,
#: a strip padded before detection (wider than 8 times its height)
PAGES = (
    ((420, 120), [((16, 20), "Hello Ascend 310P", 30, False), ((24, 70), "invoice 2026-12-06", 26, False)]),
    (
        (360, 200),
        [((20, 16), "TOTAL 42.50", 34, False), ((20, 80), "Thank you", 30, False), ((20, 140), "No. 7781", 28, False)],
    ),
    ((400, 110), [((20, 30), "upside down line", 32, True)]),
    ((300, 90), [((12, 24), "GE backend", 36, False)]),
    (
        (480, 160),
        [
            ((10, 14), "left column", 24, False),
            ((250, 16), "right column", 24, False),
            ((10, 100), "PP-OCRv4 on Triton", 28, False),
        ],
    ),
    ((640, 96), [((8, 30), "a long single line of text to read through", 28, False)]),
    ((900, 60), [((10, 10), "a strip wider than eight times its height", 30, False)]),
)


def render(size: tuple[int, int], lines) -> np.ndarray:
    """An RGB uint8 page with black text on white."""
    from PIL import Image, ImageDraw

    page = Image.new("RGB", size, "white")
    for (x, y), text, font_size, upside_down in lines:
        font = _font(font_size)
        left, top, right, bottom = font.getbbox(text)
        line = Image.new("RGB", (right + 8, bottom + 8), "white")
        ImageDraw.Draw(line).text((4, 4), text, fill="black", font=font)
        if upside_down:
            line = line.rotate(180)
        page.paste(line, (x, y))
    return np.asarray(page)


def png(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def characters(rec: Path) -> list[str]:
    """The rec model's character list, from its ONNX metadata (as the wheel reads it)."""
    return session(rec).get_modelmeta().custom_metadata_map["character"].splitlines()
