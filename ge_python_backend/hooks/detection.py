"""YOLO-family object detection: images letterboxed in, boxes after class-aware NMS out.

The steps follow Ultralytics' own (``ultralytics/data/augment.py`` ``LetterBox``,
``ultralytics/utils/ops.py`` ``non_max_suppression`` and ``scale_boxes``; YOLOv5's
``utils/general.py`` for the objectness head), cited, not copied:

- **letterbox** to the model's H×W: scale ``r = min(H/h, W/w)``, resized (OpenCV's bilinear
  ``INTER_LINEAR``) only when the size changes, centred on grey 114 with the odd pixel of padding
  at the bottom/right;
- **decode** the raw head: v5 ``[N, boxes, 5 + C]`` (cx, cy, w, h, objectness, class scores) or
  v8/11 ``[N, 4 + C, boxes]`` (cx, cy, w, h, class scores); per anchor the best class, its score
  (times objectness for v5), kept when strictly above ``conf_threshold`` (Ultralytics' ``>``);
- **class-aware NMS** over the whole batch at once (IoU without +1, boxes of one image and one
  class suppress each other, as torchvision's ``batched_nms``), at most ``max_nms`` candidates per
  image by score first, then the ``max_det`` best per image;
- **map back**: minus the padding the letterbox applied, divided by ``r``, clipped to the image
  (Ultralytics' ``scale_boxes`` recomputes the padding from the unrounded scaled size, which can
  be one input pixel off the padding its ``LetterBox`` applied: 120x35 into 64x64 is padded 22
  columns on the left, ``scale_boxes`` subtracts 23; here the applied padding is subtracted).

Answers per image (the ``detection`` template's outputs): ``NUM_DETS`` INT32 ``[1]``,
``DET_BOXES`` FP32 ``[max_det, 4]`` (x1, y1, x2, y2 in the original image's pixels),
``DET_SCORES`` FP32 ``[max_det]``, ``DET_CLASSES`` INT32 ``[max_det]`` and ``DET_LABELS`` BYTES
``[max_det]`` (the labels file's names, else the class numbers); rows past ``NUM_DETS`` hold 0
(classes -1, labels empty), as TensorRT's EfficientNMS plugin pads.

Resizing needs OpenCV (``pip install opencv-python-headless``, the ``vision`` extra): Pillow's
bilinear filter averages over the source when shrinking, which Ultralytics' models were not fed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.hooks.postprocessing import chosen_output, load_labels
from ge_python_backend.hooks.preprocessing import ImageInput, decode_image, image_input
from ge_python_backend.params import Parameter, parse_choice, parse_float, parse_int
from ge_python_backend.specs import ModelSpec, TensorSpec, format_shape

IMAGE = "IMAGE"
NUM_DETS, DET_BOXES, DET_SCORES, DET_CLASSES, DET_LABELS = (
    "NUM_DETS",
    "DET_BOXES",
    "DET_SCORES",
    "DET_CLASSES",
    "DET_LABELS",
)
#: Ultralytics' letterbox colour
PAD_VALUE = 114
#: Ultralytics' cap on the candidates NMS considers per image (``max_nms``)
MAX_NMS = 30000


class Head(str, Enum):
    """How a YOLO model lays out its raw predictions."""

    V5 = "v5"  # [N, boxes, 5 + classes]: cx, cy, w, h, objectness, class scores (YOLOv3/5/7)
    V8 = "v8"  # [N, 4 + classes, boxes]: cx, cy, w, h, class scores (YOLOv8/11)


DETECTION_PARAMETERS = (
    Parameter(
        "conf_threshold",
        parse_float(0.0, 1.0),
        0.25,
        "a number in [0, 1]",
        "a detection is kept when its score is above it",
    ),
    Parameter(
        "iou_threshold",
        parse_float(0.0, 1.0),
        0.45,
        "a number in [0, 1]",
        "NMS drops a box whose IoU with a better one of its class is above it",
    ),
    Parameter("max_det", parse_int(1), 100, "an integer >= 1", "detections returned per image (the DET_* dims)"),
    Parameter(
        "head",
        parse_choice("auto", *(h.value for h in Head)),
        "auto",
        "auto, v5 or v8",
        "the predictions' layout (auto: from the output's shape; v8 also for YOLO11)",
    ),
    Parameter(
        "labels_file",
        str,
        "",
        "a file name in the version folder (or an absolute path), or empty",
        "UTF-8 text, one class name per line (empty: labels.txt when the version folder has one, else class numbers)",
    ),
    Parameter(
        "max_input_bytes",
        parse_int(1),
        16 * 1024 * 1024,
        "an integer >= 1",
        "largest IMAGE element accepted, checked before decoding",
    ),
    Parameter(
        "predictions_output",
        str,
        "",
        "a model output name",
        "the model output holding the raw predictions (default: the model's only output)",
    ),
)


@dataclass(frozen=True)
class Letterbox:
    """Where one image went in the model's input: its own size, the scale and the top-left padding."""

    height: int
    width: int
    scale: float
    pad_x: int
    pad_y: int

    def row(self) -> np.ndarray:
        """As FP32 [5] (height, width, scale, pad_x, pad_y): what an ensemble passes between steps."""
        return np.array([self.height, self.width, self.scale, self.pad_x, self.pad_y], np.float32)

    @classmethod
    def from_row(cls, row: np.ndarray) -> Letterbox:
        height, width, scale, pad_x, pad_y = (float(v) for v in row)
        return cls(int(height), int(width), scale, int(pad_x), int(pad_y))


def letterbox(pixels: np.ndarray, height: int, width: int) -> tuple[np.ndarray, Letterbox]:
    """uint8 ``[h, w, c]`` -> uint8 ``[height, width, c]`` placed as Ultralytics' ``LetterBox``
    (scale-up allowed, no stride rounding), and where it went."""
    h, w = pixels.shape[:2]
    scale = min(height / h, width / w)
    new_w, new_h = int(round(w * scale)), int(round(h * scale))
    pad_w, pad_h = (width - new_w) / 2, (height - new_h) / 2
    left, top = int(round(pad_w - 0.1)), int(round(pad_h - 0.1))
    if (new_w, new_h) != (w, h):
        pixels = _resize(pixels, new_w, new_h)
    out = np.full((height, width, pixels.shape[2]), PAD_VALUE, np.uint8)
    out[top : top + new_h, left : left + new_w] = pixels
    return out, Letterbox(h, w, scale, left, top)


def _resize(pixels: np.ndarray, width: int, height: int) -> np.ndarray:
    try:
        import cv2
    except ImportError:
        raise ConfigError(
            "letterboxing an image of another size needs OpenCV in the server's Python: "
            "pip install opencv-python-headless (or send images of the model's size)"
        ) from None
    resized = cv2.resize(pixels, (width, height), interpolation=cv2.INTER_LINEAR)
    return resized.reshape(height, width, pixels.shape[2])


@dataclass(frozen=True)
class Candidates:
    """Detections of a batch, flat: the image each belongs to, its box (x1, y1, x2, y2 in the
    model's input pixels), score and class; in no particular order."""

    image: np.ndarray  # int64 [n]
    boxes: np.ndarray  # float32 [n, 4]
    scores: np.ndarray  # float32 [n]
    classes: np.ndarray  # int64 [n]

    def take(self, index: np.ndarray) -> Candidates:
        return Candidates(self.image[index], self.boxes[index], self.scores[index], self.classes[index])


def decode(predictions: np.ndarray, head: Head, conf_threshold: float, max_nms: int = MAX_NMS) -> Candidates:
    """Raw predictions of a batch -> the candidates above ``conf_threshold`` (at most ``max_nms``
    per image, best first), boxes as corners."""
    rows = np.asarray(predictions, np.float32)
    if head is Head.V8:
        rows = rows.transpose(0, 2, 1)  # [N, boxes, 4 + C]
        class_scores = rows[..., 4:]
        keep = class_scores.max(axis=2) > conf_threshold
    else:
        class_scores = rows[..., 5:]
        keep = rows[..., 4] > conf_threshold  # YOLOv5 filters on objectness first
    image, anchor = np.nonzero(keep)
    picked = rows[image, anchor]
    scores_of = class_scores[image, anchor]
    if head is Head.V5:
        scores_of = scores_of * picked[:, 4:5]
    classes = scores_of.argmax(axis=1)
    scores = scores_of[np.arange(classes.size), classes]
    above = scores > conf_threshold
    image, picked, scores, classes = image[above], picked[above], scores[above], classes[above]
    cx, cy, half_w, half_h = picked[:, 0], picked[:, 1], picked[:, 2] / 2, picked[:, 3] / 2
    boxes = np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=1)
    found = Candidates(image.astype(np.int64), boxes, scores.astype(np.float32), classes.astype(np.int64))
    return found.take(_best_per_image(found, max_nms))


def _best_per_image(found: Candidates, limit: int) -> np.ndarray:
    """Indices of the ``limit`` best-scoring candidates of each image, ordered by image then score."""
    order = np.lexsort((-found.scores, found.image))
    image = found.image[order]
    first = np.searchsorted(image, image, side="left")
    return order[np.arange(order.size) - first < limit]


def nms(found: Candidates, iou_threshold: float) -> Candidates:
    """Greedy NMS over the whole batch: a box is dropped when a better-scoring box of the same
    image and class overlaps it with IoU above ``iou_threshold``. The survivors, best first.

    Boxes are sorted once by (image, class) and score; each group is suppressed on its own, so the
    work grows with the boxes of a class in an image, not with the whole batch's."""
    group = found.image * (int(found.classes.max(initial=0)) + 1) + found.classes
    order = np.lexsort((-found.scores, group))
    boxes = found.boxes[order].astype(np.float64)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    starts = np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])
    ends = np.r_[starts[1:], order.size]
    kept: list[int] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        alive = np.arange(start, end)
        while alive.size:
            best, alive = alive[0], alive[1:]
            kept.append(best)
            if alive.size:
                alive = alive[_iou(boxes[best], areas[best], boxes[alive], areas[alive]) <= iou_threshold]
    survivors = order[np.asarray(kept, np.int64)]
    return found.take(survivors[np.argsort(-found.scores[survivors], kind="stable")])


def _iou(box: np.ndarray, area: float, others: np.ndarray, areas: np.ndarray) -> np.ndarray:
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = width * height
    return inter / (area + areas - inter)


def scale_boxes(boxes: np.ndarray, placed: Letterbox) -> np.ndarray:
    """Boxes in the model's input pixels -> the original image's, clipped to it."""
    out = boxes.astype(np.float32).copy()
    out[:, [0, 2]] -= placed.pad_x
    out[:, [1, 3]] -= placed.pad_y
    out /= np.float32(placed.scale)
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, placed.width)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, placed.height)
    return out


@dataclass(frozen=True)
class Detector:
    """A YOLO model's pre- and post-processing, built once at load from the config and the model."""

    image: ImageInput
    predictions_output: str
    head: Head
    classes: int
    conf_threshold: float
    iou_threshold: float
    max_det: int
    max_input_bytes: int
    labels: tuple[str, ...] | None = None

    @classmethod
    def build(cls, spec: ModelSpec, values: Mapping[str, Any], labels: tuple[str, ...] | None = None) -> Detector:
        """From the model and the parsed ``DETECTION_PARAMETERS``; ConfigError on any mismatch."""
        if len(spec.inputs) != 1:
            raise ConfigError(f"a detector needs a model with one input; this one has {[t.name for t in spec.inputs]}")
        image = image_input(spec.inputs[0])
        predictions = chosen_output(
            spec, str(values["predictions_output"]), "predictions_output", "the raw predictions"
        )
        head = detect_head(predictions, str(values["head"]))
        classes = predictions.shape[1] - 4 if head is Head.V8 else predictions.shape[2] - 5
        if labels is not None and len(labels) != classes:
            raise ConfigError(f"the labels file has {len(labels)} labels, but the model has {classes} classes")
        return cls(
            image=image,
            predictions_output=predictions.name,
            head=head,
            classes=classes,
            conf_threshold=float(values["conf_threshold"]),
            iou_threshold=float(values["iou_threshold"]),
            max_det=int(values["max_det"]),
            max_input_bytes=int(values["max_input_bytes"]),
            labels=labels,
        )

    def preprocess(self, images: np.ndarray) -> tuple[dict[str, np.ndarray], list[Letterbox]]:
        """One request's IMAGE elements -> the engine's input (one row each) and where each went."""
        blobs = images.reshape(-1)
        if blobs.size == 0:
            raise InputError(f"{IMAGE} holds no image")
        image = self.image
        rows = np.empty((blobs.size, image.height, image.width, image.channels), np.uint8)
        placed = []
        for index, blob in enumerate(blobs):
            data = blob if isinstance(blob, bytes) else bytes(blob)
            pixels = decode_image(data, image, self.max_input_bytes, f"{IMAGE}[{index}]", any_size=True)
            rows[index], where = letterbox(pixels, image.height, image.width)
            placed.append(where)
        return {image.name: self.to_input(rows)}, placed

    def to_input(self, rows: np.ndarray) -> np.ndarray:
        """Letterboxed uint8 NHWC rows -> the engine's input: RGB/255 in its layout and float type,
        or the pixels themselves for a static AIPP (UINT8 NHWC)."""
        image = self.image
        if image.device_preprocessing is not None:
            return rows
        values = rows.astype(np.float32) / np.float32(255)  # as Ultralytics divides (not times 1/255)
        if image.layout == "NCHW":
            values = values.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(values, dtype=np.float16 if image.dtype == "FP16" else np.float32)

    def postprocess(self, predictions: np.ndarray, placed: Sequence[Letterbox]) -> dict[str, np.ndarray]:
        """The raw predictions of ``len(placed)`` images -> their padded detections, one row each."""
        found = nms(decode(predictions, self.head, self.conf_threshold), self.iou_threshold)
        count = len(placed)
        boxes = np.zeros((count, self.max_det, 4), np.float32)
        scores = np.zeros((count, self.max_det), np.float32)
        classes = np.full((count, self.max_det), -1, np.int32)
        numbers = np.zeros((count, 1), np.int32)
        for index, where in enumerate(placed):
            mine = found.take(np.flatnonzero(found.image == index)[: self.max_det])
            n = mine.scores.size
            numbers[index, 0] = n
            boxes[index, :n] = scale_boxes(mine.boxes, where)
            scores[index, :n] = mine.scores
            classes[index, :n] = mine.classes
        labels = self.labels if self.labels is not None else tuple(str(c) for c in range(self.classes))
        names = np.array([label.encode() for label in labels] + [b""], dtype=np.object_)
        return {
            NUM_DETS: numbers,
            DET_BOXES: boxes,
            DET_SCORES: scores,
            DET_CLASSES: classes,
            DET_LABELS: names[classes],  # -1 picks the empty name
        }

    def postprocess_batch(
        self, predictions: Sequence[np.ndarray], placed: Sequence[Sequence[Letterbox]]
    ) -> list[dict[str, np.ndarray]]:
        """Several requests at once, each with its rows of the raw predictions and where its images
        went -> each one's detections, decoded and NMS-filtered in one pass over all of them."""
        answer = self.postprocess(np.concatenate(predictions), [where for request in placed for where in request])
        bounds = np.cumsum([0, *(len(request) for request in placed)]).tolist()
        return [{name: rows[start:end] for name, rows in answer.items()} for start, end in zip(bounds, bounds[1:])]

    def describe(self) -> str:
        return (
            f"YOLO {self.head.value} detector: {IMAGE} letterboxed to {self.image.describe()}, {self.classes} classes "
            f"from {self.predictions_output!r}, conf > {self.conf_threshold}, IoU {self.iou_threshold}, "
            f"max_det {self.max_det}" + (", with labels" if self.labels is not None else "")
        )


def labels_for(version_dir: Path, name: str, classes: int | None = None) -> tuple[str, ...] | None:
    """The class names parameter ``labels_file`` names (relative to ``version_dir``), or
    ``labels.txt`` when it is empty and the file exists; None: no names, the class numbers serve."""
    path = Path(name) if Path(name).is_absolute() else version_dir / (name or "labels.txt")
    return load_labels(path, classes) if name or path.is_file() else None


def detect_head(predictions: TensorSpec, head: str) -> Head:
    """The head layout: given, or read from ``[N, a, b]``: v8 when a < b (4 + classes rows of
    anchors), v5 when a > b (anchors of 5 + classes). ConfigError when it cannot be either."""
    shape = predictions.shape
    if len(shape) != 3 or min(shape[1:]) < 1:
        raise ConfigError(
            f"model output {predictions.name!r} has shape {format_shape(shape)}; YOLO predictions are "
            "[batch, boxes, 5 + classes] (v5) or [batch, 4 + classes, boxes] (v8/11) with fixed sizes"
        )
    if head == "auto":
        if shape[1] == shape[2]:
            raise ConfigError(
                f"model output {predictions.name!r} has shape {format_shape(shape)}: square, so its layout cannot "
                "be told; set parameter head (v5 or v8)"
            )
        return Head.V8 if shape[1] < shape[2] else Head.V5
    found = Head(head)
    smallest = 6 if found is Head.V5 else 5
    size = shape[2] if found is Head.V5 else shape[1]
    if size < smallest:
        raise ConfigError(
            f"model output {predictions.name!r} has shape {format_shape(shape)}; a {found.value} head needs "
            f"{'5 + classes on axis 2' if found is Head.V5 else '4 + classes on axis 1'} (at least {smallest})"
        )
    return found
