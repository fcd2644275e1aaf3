"""A YOLO detector's pre- and post-processing written as Ultralytics documents it, one image and
one anchor at a time: the reference ``hooks.detection`` (vectorised over a batch) must equal.

Written apart from the hooks on purpose: plain loops, OpenCV's ``copyMakeBorder`` for the padding,
the padding recomputed from the two shapes when boxes are mapped back (as Ultralytics'
``scale_boxes`` does), IoU per pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Detection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in the original image
    score: float
    cls: int


def letterbox(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Ultralytics' LetterBox(new_shape=(height, width), auto=False, scaleup=True, center=True)."""
    import cv2

    h, w = image.shape[:2]
    r = min(height / h, width / w)
    unpadded = (int(round(w * r)), int(round(h * r)))
    dw, dh = (width - unpadded[0]) / 2, (height - unpadded[1]) / 2
    if (w, h) != unpadded:
        image = cv2.resize(image, unpadded, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    return cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))


def _iou(a, b) -> float:
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_w * inter_h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def detect(
    prediction: np.ndarray,
    head: str,
    conf: float,
    iou: float,
    max_det: int,
    original: tuple[int, int],
    model_input: tuple[int, int],
) -> list[Detection]:
    """One image's raw prediction (v5 [boxes, 5 + C] or v8 [4 + C, boxes]) -> its detections,
    best first, mapped to the ``original`` (h, w) image from the ``model_input`` (H, W)."""
    rows = prediction.T if head == "v8" else prediction
    candidates = []
    for row in rows.astype(np.float64):
        if head == "v5":
            if not row[4] > conf:
                continue
            scores = row[5:] * row[4]
        else:
            scores = row[4:]
        best = int(np.argmax(scores))
        if scores[best] > conf:
            cx, cy, w, h = row[:4]
            candidates.append((float(scores[best]), best, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
    candidates.sort(key=lambda c: -c[0])
    candidates = candidates[:30000]
    kept: list[tuple[float, int, tuple]] = []
    for score, cls, box in candidates:
        if all(k[1] != cls or _iou(k[2], box) <= iou for k in kept):
            kept.append((score, cls, box))
    return [Detection(_scale(box, original, model_input), score, cls) for score, cls, box in kept[:max_det]]


def _scale(box, original: tuple[int, int], model_input: tuple[int, int]) -> tuple[float, float, float, float]:
    """Ultralytics' scale_boxes (gain recomputed from the shapes, boxes clipped), with the padding
    the letterbox applied: scale_boxes recomputes it from the unrounded scaled size, which can be
    one input pixel off the padding LetterBox used (an image 120x35 into 64x64: 23 against 22)."""
    gain = min(model_input[0] / original[0], model_input[1] / original[1])
    pad_x = round((model_input[1] - int(round(original[1] * gain))) / 2 - 0.1)
    pad_y = round((model_input[0] - int(round(original[0] * gain))) / 2 - 0.1)
    x1, y1, x2, y2 = (
        (box[0] - pad_x) / gain,
        (box[1] - pad_y) / gain,
        (box[2] - pad_x) / gain,
        (box[3] - pad_y) / gain,
    )
    h, w = original
    return (min(max(x1, 0), w), min(max(y1, 0), h), min(max(x2, 0), w), min(max(y2, 0), h))
