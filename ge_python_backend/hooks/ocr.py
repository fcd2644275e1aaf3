"""PP-OCR text reading: detect text lines (DB), crop and straighten each, classify its direction,
recognise it (CTC), as PaddleOCR's ``tools/infer/predict_system.py`` and RapidOCR's pipeline do.

Written from PaddleOCR's published algorithm (``ppocr/data/imaug/operators.py``
``DetResizeForTest``, ``ppocr/postprocess/db_postprocess.py``, ``rec_postprocess.py``
``CTCLabelDecode``, ``cls_postprocess.py``; cited, not copied). The three networks are called
through functions the caller gives (``TextReader.read``): a BLS call to a served model, or ONNX
Runtime in a test, so everything here is pure and runs in-process.

- **whole image**: a side above ``max_side_len`` is reduced to it, one below ``min_side_len``
  raised to it (both rounded to multiples of 32); an image lower than ``min_height`` or wider
  than ``width_height_ratio`` times its height is padded with black above and below;
- **detector input**: limited to ``det_limit_side_len`` (type ``max``: the longer side at most
  that, PaddleOCR's default; ``min``: the shorter side at least, RapidOCR's), each side rounded to
  a multiple of 32, BGR ``(pixel/255 - 0.5) / 0.5``, NCHW;
- **DB post-processing**: probability above ``det_thresh``, the bitmap dilated 2x2, each contour's
  minimum-area rectangle kept when its short side is at least 3, its mean probability (inside the
  rectangle) at least ``det_box_thresh``; expanded by ``area * det_unclip_ratio / perimeter``
  (round joins), its rectangle again (short side at least 5), scaled to the image, clockwise
  from the top-left, clipped, kept when wider and higher than 3 pixels;
- **reading order**: top to bottom by the top-left corner, a line within 10 pixels of the one
  before it and left of it swapped ahead (PaddleOCR's ``sorted_boxes``);
- **crops**: a perspective warp of each box to its longer edges' size (bicubic, replicated
  border), turned 90 degrees when at least 1.5 times higher than wide;
- **direction**: each crop resized to height 48 (width at most 192, zero-padded), turned 180
  degrees when the classifier says "180" with a score above ``cls_thresh``;
- **recognition**: the crops ordered by width/height, ``rec_batch`` at a time, each resized to
  height 48 and zero-padded to its batch's widest line (at least 320, PaddleOCR's 48x320 input;
  at most ``rec_max_width``, beyond which a line is squeezed): the recogniser's input width is a
  range, not buckets, because the padding changes what CTC reads (a space more or less); CTC
  greedy decoding (repeats merged, blanks dropped), score the mean probability of the kept
  characters; a line is answered when its score is at least ``text_score``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Parameter, parse_choice, parse_float, parse_int

#: The recogniser's and classifier's input height, and the narrowest recogniser input (PaddleOCR's 3x48x320)
LINE_HEIGHT = 48
REC_MIN_WIDTH = 320
CLS_WIDTH = 192


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:
        raise ConfigError("OCR needs OpenCV in the server's Python: pip install opencv-python-headless") from None
    return cv2


@dataclass(frozen=True)
class OcrOptions:
    """The pipeline's parameters (PaddleOCR's names without their prefixes where they have one)."""

    det_limit_side_len: int = 960
    det_limit_type: str = "max"
    det_thresh: float = 0.3
    det_box_thresh: float = 0.5
    det_unclip_ratio: float = 1.6
    det_max_candidates: int = 1000
    cls_thresh: float = 0.9
    cls_batch: int = 6
    text_score: float = 0.5
    max_side_len: int = 2000
    min_side_len: int = 30
    min_height: int = 30
    width_height_ratio: float = 8.0
    rec_batch: int = 6
    rec_max_width: int = 3200


@dataclass(frozen=True)
class Placement:
    """How the detector's image relates to the client's: scale per axis and black rows added on top."""

    height: int
    width: int
    ratio_h: float
    ratio_w: float
    top: int


@dataclass(frozen=True)
class Lines:
    """What one image reads: texts in reading order, their scores and boxes (4 corners, clockwise
    from the top-left, in the client's image pixels)."""

    texts: tuple[str, ...]
    scores: np.ndarray  # float32 [n]
    boxes: np.ndarray  # float32 [n, 4, 2]


def _round32(size: float) -> int:
    return int(round(int(size) / 32) * 32)


def _resized(image: np.ndarray, ratio: float) -> np.ndarray:
    h, w = image.shape[:2]
    height, width = _round32(h * ratio), _round32(w * ratio)
    if height <= 0 or width <= 0:
        raise ValueError(f"an image of {w}x{h} pixels is too small to read")
    return _cv2().resize(image, (width, height))


def fit_image(image: np.ndarray, options: OcrOptions) -> tuple[np.ndarray, Placement]:
    """The whole image sized and padded for detection (BGR or RGB alike), and how it was placed."""
    h, w = image.shape[:2]
    ratio_h = ratio_w = 1.0
    if max(h, w) > options.max_side_len:
        image = _resized(image, options.max_side_len / max(h, w))
    if min(image.shape[:2]) < options.min_side_len:
        image = _resized(image, options.min_side_len / min(image.shape[:2]))
    if image.shape[:2] != (h, w):
        ratio_h, ratio_w = h / image.shape[0], w / image.shape[1]
    height, width = image.shape[:2]
    top = 0
    if height <= options.min_height or width / height > options.width_height_ratio:
        target = max(int(width / options.width_height_ratio), options.min_height) * 2
        top = int(abs(target - height) / 2)
        image = _cv2().copyMakeBorder(image, top, top, 0, 0, _cv2().BORDER_CONSTANT, value=(0, 0, 0))
    return image, Placement(h, w, ratio_h, ratio_w, top)


def detector_input(image: np.ndarray, options: OcrOptions) -> np.ndarray:
    """BGR uint8 [h, w, 3] -> the detector's FP32 [1, 3, H, W], H and W multiples of 32."""
    h, w = image.shape[:2]
    limit = options.det_limit_side_len
    if options.det_limit_type == "max":
        ratio = limit / max(h, w) if max(h, w) > limit else 1.0
    else:
        ratio = limit / min(h, w) if min(h, w) < limit else 1.0
    height, width = _round32(h * ratio), _round32(w * ratio)
    if height <= 0 or width <= 0:
        raise ValueError(f"an image of {w}x{h} pixels is too small to detect text in")
    resized = _cv2().resize(image, (width, height))
    return _normalized(resized)[None]


def _normalized(pixels: np.ndarray) -> np.ndarray:
    """uint8 [h, w, 3] -> FP32 [3, h, w] as (pixel/255 - 0.5) / 0.5."""
    values = (pixels.astype(np.float32) / np.float32(255) - np.float32(0.5)) / np.float32(0.5)
    return np.ascontiguousarray(values.transpose(2, 0, 1))


def _rectangle(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle of ``points``: corners from the top-left clockwise (left pair
    and right pair by x, each ordered by y), and its shorter side."""
    cv2 = _cv2()
    rect = cv2.minAreaRect(points)
    corners = np.asarray(sorted(cv2.boxPoints(rect).tolist(), key=lambda p: p[0]), np.float32)
    left = corners[:2] if corners[1, 1] > corners[0, 1] else corners[1::-1]
    right = corners[2:] if corners[3, 1] > corners[2, 1] else corners[:1:-1]
    return np.stack([left[0], right[0], right[1], left[1]]), min(rect[1])


def _mean_inside(prob: np.ndarray, box: np.ndarray) -> float:
    """Mean probability over the pixels of the filled quadrilateral ``box``."""
    cv2 = _cv2()
    h, w = prob.shape
    x0 = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1))
    x1 = int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    y0 = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1))
    y1 = int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    corners = box.copy()
    corners[:, 0] -= x0
    corners[:, 1] -= y0
    cv2.fillPoly(mask, [corners.astype(np.int32)], (1,))
    return float(cv2.mean(prob[y0 : y1 + 1, x0 : x1 + 1], mask)[0])


def _expanded(box: np.ndarray, ratio: float) -> np.ndarray:
    """``box`` grown by area * ratio / perimeter with round joins (DB's unclip)."""
    import pyclipper

    closed = np.concatenate([box, box[:1]]).astype(np.float64)
    area = abs(float(np.dot(closed[:-1, 0], closed[1:, 1]) - np.dot(closed[1:, 0], closed[:-1, 1]))) / 2
    perimeter = float(np.linalg.norm(np.diff(closed, axis=0), axis=1).sum())
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.asarray(offset.Execute(area * ratio / perimeter), np.float32).reshape(-1, 2)


def text_boxes(prob: np.ndarray, height: int, width: int, options: OcrOptions) -> np.ndarray:
    """The detector's probability map [H', W'] -> text boxes [n, 4, 2] (float32, whole pixels) in
    an image of ``height`` x ``width``, clockwise from the top-left; in contour order."""
    cv2 = _cv2()
    bitmap = cv2.dilate((prob > options.det_thresh).astype(np.uint8), np.ones((2, 2), np.uint8))
    contours = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[-2]
    map_h, map_w = prob.shape
    boxes = []
    for contour in contours[: options.det_max_candidates]:
        box, short = _rectangle(contour)
        if short < 3 or _mean_inside(prob, box) < options.det_box_thresh:
            continue
        expanded = _expanded(box, options.det_unclip_ratio)
        if expanded.shape[0] < 3:  # nothing left to span a rectangle
            continue
        box, short = _rectangle(expanded)
        if short < 5:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / map_w * width), 0, width)
        box[:, 1] = np.clip(np.round(box[:, 1] / map_h * height), 0, height)
        box = _clockwise(box.astype(np.int32).astype(np.float32))
        box[:, 0] = np.clip(box[:, 0], 0, width - 1).astype(np.int32)
        box[:, 1] = np.clip(box[:, 1], 0, height - 1).astype(np.int32)
        if int(np.linalg.norm(box[0] - box[1])) <= 3 or int(np.linalg.norm(box[0] - box[3])) <= 3:
            continue
        boxes.append(box)
    return np.asarray(boxes, np.float32).reshape(-1, 4, 2)


def _clockwise(box: np.ndarray) -> np.ndarray:
    """Corners top-left, top-right, bottom-right, bottom-left: the two leftmost by y, then the two rightmost."""
    by_x = box[np.argsort(box[:, 0], kind="stable")]
    left = by_x[:2][np.argsort(by_x[:2, 1], kind="stable")]
    right = by_x[2:][np.argsort(by_x[2:, 1], kind="stable")]
    return np.stack([left[0], right[0], right[1], left[1]])


def reading_order(boxes: np.ndarray) -> np.ndarray:
    """Boxes top to bottom by their top-left corner; a box less than 10 pixels lower than the one
    before it and left of it moves ahead of it (PaddleOCR's ``sorted_boxes``)."""
    ordered = sorted(boxes, key=lambda b: (float(b[0, 1]), float(b[0, 0])))
    for i in range(len(ordered) - 1):
        for j in range(i, -1, -1):
            lower, upper = ordered[j + 1], ordered[j]
            if abs(lower[0, 1] - upper[0, 1]) < 10 and lower[0, 0] < upper[0, 0]:
                ordered[j], ordered[j + 1] = lower, upper
            else:
                break
    return np.asarray(ordered, np.float32).reshape(-1, 4, 2)


def crop_line(image: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The quadrilateral ``box`` of ``image`` warped upright to its longer edges' size."""
    cv2 = _cv2()
    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
    matrix = cv2.getPerspectiveTransform(box.astype(np.float32), target)
    crop = cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    return np.rot90(crop) if crop.shape[0] / crop.shape[1] >= 1.5 else crop


def _line_input(crop: np.ndarray, width: int) -> np.ndarray:
    """A crop resized to LINE_HEIGHT (its width kept in proportion, at most ``width``), normalised
    and zero-padded on the right to ``width``: FP32 [3, LINE_HEIGHT, width]."""
    h, w = crop.shape[:2]
    resized_w = min(width, int(math.ceil(LINE_HEIGHT * w / h)))
    out = np.zeros((3, LINE_HEIGHT, width), np.float32)
    out[:, :, :resized_w] = _normalized(_cv2().resize(crop, (resized_w, LINE_HEIGHT)))
    return out


def classifier_input(crops: Sequence[np.ndarray]) -> np.ndarray:
    """Crops -> the direction classifier's FP32 [n, 3, 48, 192]."""
    return np.stack([_line_input(crop, CLS_WIDTH) for crop in crops])


def turn_upside_down(crops: list[np.ndarray], probs: np.ndarray, threshold: float) -> list[np.ndarray]:
    """Crops the classifier finds upside down (class 1, "180", above ``threshold``) turned 180 degrees."""
    best = probs.argmax(axis=1)
    return [
        np.ascontiguousarray(crop[::-1, ::-1]) if best[i] == 1 and probs[i, 1] > threshold else crop
        for i, crop in enumerate(crops)
    ]


def recognizer_batches(crops: Sequence[np.ndarray], batch: int, max_width: int) -> list[tuple[list[int], np.ndarray]]:
    """Crops in batches as PaddleOCR forms them: ordered by width/height, ``batch`` at a time, each
    batch as wide as its widest line at LINE_HEIGHT (at least REC_MIN_WIDTH, at most
    ``max_width``): (the crops' indices, FP32 [k, 3, 48, width]) per batch."""
    ratios = np.array([crop.shape[1] / crop.shape[0] for crop in crops])
    order = np.argsort(ratios, kind="stable")
    batches = []
    for start in range(0, len(order), batch):
        members = [int(i) for i in order[start : start + batch]]
        widest = max(REC_MIN_WIDTH / LINE_HEIGHT, *(ratios[i] for i in members))
        width = min(int(LINE_HEIGHT * widest), max_width)
        batches.append((members, np.stack([_line_input(crops[i], width) for i in members])))
    return batches


def ctc_decode(probs: np.ndarray, characters: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Recogniser output [n, steps, classes] (class 0 the CTC blank, the last a space) -> texts and
    scores: per step the best class, repeats merged, blanks dropped; score the mean probability of
    the characters kept (0 for an empty line)."""
    best = probs.argmax(axis=2)
    best_prob = probs.max(axis=2)
    keep = np.ones(best.shape, bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= best != 0
    texts, scores = [], np.zeros(len(best), np.float32)
    for row in range(len(best)):
        texts.append("".join(characters[i] for i in best[row][keep[row]]))
        kept = best_prob[row][keep[row]]
        scores[row] = kept.mean() if kept.size else 0.0
    return texts, scores


def characters_of(keys: Sequence[str]) -> tuple[str, ...]:
    """A PP-OCR character list (one per line of its keys file, or the rec model's ``character``
    metadata) -> the recogniser's classes: the CTC blank first, a space last."""
    return ("", *keys, " ")


Network = Callable[[np.ndarray], np.ndarray]

#: The OCR model's config parameters: the OcrOptions fields a user tunes (PaddleOCR's names)
OCR_PARAMETERS = (
    Parameter("det_limit_side_len", parse_int(32), 960, "an integer >= 32", "the detector's input side limit"),
    Parameter(
        "det_limit_type",
        parse_choice("max", "min"),
        "max",
        "max or min",
        "max: the longer side at most det_limit_side_len (PaddleOCR); min: the shorter at least (RapidOCR)",
    ),
    Parameter("det_thresh", parse_float(0.0, 1.0), 0.3, "a number in [0, 1]", "text pixels: probability above it"),
    Parameter("det_box_thresh", parse_float(0.0, 1.0), 0.5, "a number in [0, 1]", "a box's mean probability"),
    Parameter("det_unclip_ratio", parse_float(0.0), 1.6, "a number >= 0", "how far a text box is expanded"),
    Parameter("cls_thresh", parse_float(0.0, 1.0), 0.9, "a number in [0, 1]", "a line is turned above this score"),
    Parameter("cls_batch", parse_int(1), 6, "an integer >= 1", "lines per direction classifier call"),
    Parameter("rec_batch", parse_int(1), 6, "an integer >= 1", "lines per recogniser call (its batch range)"),
    Parameter("rec_max_width", parse_int(LINE_HEIGHT), 3200, "an integer >= 48", "the recogniser's widest input"),
    Parameter("text_score", parse_float(0.0, 1.0), 0.5, "a number in [0, 1]", "a line is answered from this score"),
)


def ocr_options(values: Mapping[str, Any]) -> OcrOptions:
    """OcrOptions from the parsed OCR_PARAMETERS (the others at their defaults)."""
    return OcrOptions(**{p.name: values[p.name] for p in OCR_PARAMETERS})


@dataclass(frozen=True)
class TextReader:
    """The PP-OCR pipeline around three networks, each given as a function of its input batch."""

    characters: tuple[str, ...]
    options: OcrOptions = OcrOptions()

    def read(self, bgr: np.ndarray, detect: Network, classify: Network, recognize: Network) -> Lines:
        """One BGR uint8 image -> its text lines."""
        options = self.options
        image, placed = fit_image(bgr, options)
        prob = detect(detector_input(image, options))[0, 0]
        boxes = reading_order(text_boxes(prob, image.shape[0], image.shape[1], options))
        if not len(boxes):
            return Lines((), np.zeros(0, np.float32), np.zeros((0, 4, 2), np.float32))
        crops = [crop_line(image, box) for box in boxes]
        step = options.cls_batch
        probs = np.concatenate([classify(classifier_input(crops[i : i + step])) for i in range(0, len(crops), step)])
        crops = turn_upside_down(crops, probs, options.cls_thresh)
        texts: list[str] = [""] * len(crops)
        scores = np.zeros(len(crops), np.float32)
        for members, batch in recognizer_batches(crops, options.rec_batch, options.rec_max_width):
            found, found_scores = ctc_decode(recognize(batch), self.characters)
            for index, text, score in zip(members, found, found_scores):
                texts[index], scores[index] = text, score
        kept = np.flatnonzero(scores >= options.text_score)
        return Lines(tuple(texts[i] for i in kept), scores[kept], self.to_client(boxes[kept], placed))

    @staticmethod
    def to_client(boxes: np.ndarray, placed: Placement) -> np.ndarray:
        """Boxes in the detector's image -> the client's image pixels, clipped to it."""
        out = boxes.astype(np.float32).copy()
        out[..., 1] -= placed.top
        out[..., 0] *= placed.ratio_w
        out[..., 1] *= placed.ratio_h
        out[..., 0] = out[..., 0].clip(0, placed.width)
        out[..., 1] = out[..., 1].clip(0, placed.height)
        return out
