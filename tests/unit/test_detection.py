"""YOLO detection hooks against a reference written apart from them (tests/support/yolo_reference.py):
letterbox, v5 and v8 head decoding, class-aware NMS over a batch and box mapping, on the raw
outputs of small graphs with the real head layouts run by ONNX Runtime."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.hooks import detection
from ge_python_backend.hooks.detection import (
    DET_BOXES,
    DET_CLASSES,
    DET_LABELS,
    DET_SCORES,
    DETECTION_PARAMETERS,
    NUM_DETS,
    Detector,
    Head,
    detect_head,
    letterbox,
)
from ge_python_backend.specs import BatchSupport, ModelSpec, TensorSpec
from ge_python_backend.testing import models
from tests.support import yolo_reference

cv2 = pytest.importorskip("cv2", reason="letterboxing needs OpenCV (opencv-python-headless, the vision extra)")

SIZE = 64
DEFAULTS = {p.name: p.default for p in DETECTION_PARAMETERS}


def picture(height: int, width: int, seed: int) -> np.ndarray:
    """Blocky RGB content (low-resolution noise scaled up), so cells of the model differ."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(height // 6, 1), max(width // 6, 1), 3), dtype=np.uint8)
    return cv2.resize(coarse, (width, height), interpolation=cv2.INTER_NEAREST)


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module", params=["v5", "v8"])
def yolo(request, tmp_path_factory):
    path = models.yolo(tmp_path_factory.mktemp(request.param) / "model.onnx", request.param, classes=3, size=SIZE)
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return request.param, session


def spec_of(head: str, classes: int = 3, cells: int = 64) -> ModelSpec:
    out = (-1, 4 + classes, cells) if head == "v8" else (-1, cells, 5 + classes)
    return ModelSpec(
        (TensorSpec("images", "FP32", (-1, 3, SIZE, SIZE)),),
        (TensorSpec("output0", "FP32", out),),
        BatchSupport("dynamic"),
    )


@pytest.mark.parametrize("shape", [(64, 64), (48, 80), (80, 48), (33, 17), (17, 33), (100, 101), (64, 63), (7, 200)])
def test_letterbox_places_the_image_as_ultralytics(shape):
    image = picture(*shape, seed=sum(shape))
    boxed, placed = letterbox(image, SIZE, SIZE)
    expected = yolo_reference.letterbox(image, SIZE, SIZE)
    assert boxed.shape == expected.shape == (SIZE, SIZE, 3)
    np.testing.assert_array_equal(boxed, expected)
    assert (placed.height, placed.width) == shape


def test_letterbox_of_a_non_square_model_input():
    image = picture(50, 30, seed=1)
    boxed, _ = letterbox(image, 32, 64)
    np.testing.assert_array_equal(boxed, yolo_reference.letterbox(image, 32, 64))


def reference_detections(predictions, head, conf, iou, max_det, originals):
    return [
        yolo_reference.detect(predictions[i], head, conf, iou, max_det, originals[i], (SIZE, SIZE))
        for i in range(len(originals))
    ]


def assert_same(answer: dict, expected: list, max_det: int) -> None:
    for row, found in enumerate(expected):
        n = len(found)
        assert answer[NUM_DETS][row, 0] == n
        np.testing.assert_allclose(
            answer[DET_BOXES][row, :n], np.reshape([d.box for d in found], (n, 4)), atol=1e-3, rtol=0
        )
        np.testing.assert_allclose(answer[DET_SCORES][row, :n], [d.score for d in found], atol=1e-6, rtol=0)
        np.testing.assert_array_equal(answer[DET_CLASSES][row, :n], [d.cls for d in found])
        assert not answer[DET_BOXES][row, n:].any() and not answer[DET_SCORES][row, n:].any()
        assert (answer[DET_CLASSES][row, n:] == -1).all()
        assert answer[DET_BOXES].shape == (len(expected), max_det, 4)


@pytest.mark.parametrize(
    "conf, iou, max_det",
    [(0.25, 0.45, 100), (0.05, 0.3, 100), (0.05, 0.7, 5), (0.5, 0.45, 100), (0.0, 0.0, 300), (0.99, 0.45, 10)],
)
def test_detections_of_a_batch_equal_the_reference(yolo, conf, iou, max_det):
    head, session = yolo
    shapes = [(64, 64), (48, 80), (120, 35), (64, 64), (90, 91)]
    images = [picture(h, w, seed=i) for i, (h, w) in enumerate(shapes)]
    detector = Detector.build(spec_of(head), dict(DEFAULTS, conf_threshold=conf, iou_threshold=iou, max_det=max_det))
    inputs, placed = detector.preprocess(np.array([png(image) for image in images], dtype=np.object_))
    predictions = session.run(None, inputs)[0]
    answer = detector.postprocess(predictions, placed)
    expected_input = np.stack([yolo_reference.letterbox(image, SIZE, SIZE) for image in images])
    np.testing.assert_array_equal(inputs["images"], expected_input.transpose(0, 3, 1, 2).astype(np.float32) / 255)
    assert_same(answer, reference_detections(predictions, head, conf, iou, max_det, shapes), max_det)
    if conf <= 0.25:
        assert sum(answer[NUM_DETS][:, 0]) > len(shapes), "the case must exercise NMS"


def test_random_predictions_with_many_overlaps_equal_the_reference():
    """Dense random boxes over 4 classes in a batch of 3: NMS decides between many overlapping pairs."""
    rng = np.random.default_rng(7)
    for head in ("v5", "v8"):
        anchors, classes = 400, 4
        centres = rng.random((3, anchors, 2)) * SIZE
        sizes = rng.random((3, anchors, 2)) * 24 + 1
        scores = rng.random((3, anchors, classes + (1 if head == "v5" else 0)))
        rows = np.concatenate([centres, sizes, scores], axis=2).astype(np.float32)
        predictions = rows.transpose(0, 2, 1).copy() if head == "v8" else rows
        shapes = [(SIZE, SIZE), (32, 64), (64, 16)]
        placed = [letterbox(np.zeros((*shape, 3), np.uint8), SIZE, SIZE)[1] for shape in shapes]
        detector = Detector.build(spec_of(head, classes, anchors), dict(DEFAULTS, conf_threshold=0.3, max_det=50))
        answer = detector.postprocess(predictions, placed)
        assert_same(answer, reference_detections(predictions, head, 0.3, 0.45, 50, shapes), 50)


def test_raw_pixels_of_the_model_size_skip_the_resize(yolo):
    head, _ = yolo
    image = picture(SIZE, SIZE, seed=3)
    detector = Detector.build(spec_of(head), DEFAULTS)
    inputs, placed = detector.preprocess(np.array([image.tobytes()], dtype=np.object_))
    np.testing.assert_array_equal(inputs["images"][0], image.transpose(2, 0, 1).astype(np.float32) / 255)
    assert (placed[0].scale, placed[0].pad_x, placed[0].pad_y) == (1.0, 0, 0)


def test_without_labels_the_class_numbers_name_the_detections():
    detector = Detector.build(spec_of("v8"), dict(DEFAULTS, conf_threshold=0.05))
    predictions = np.zeros((1, 7, 64), np.float32)
    predictions[0, :4, 0], predictions[0, 6, 0] = (10, 10, 4, 4), 0.9
    answer = detector.postprocess(predictions, [letterbox(np.zeros((SIZE, SIZE, 3), np.uint8), SIZE, SIZE)[1]])
    assert answer[DET_LABELS][0, 0] == b"2" and answer[DET_CLASSES][0, 0] == 2


def test_labels_name_each_detection_and_padding_is_empty():
    labels = ("person", "car", "dog")
    detector = Detector.build(spec_of("v8"), dict(DEFAULTS, conf_threshold=0.05), labels)
    predictions = np.zeros((1, 7, 64), np.float32)
    predictions[0, :4, 0] = (10, 10, 4, 4)
    predictions[0, 5, 0] = 0.9  # class 1
    placed = [letterbox(np.zeros((SIZE, SIZE, 3), np.uint8), SIZE, SIZE)[1]]
    answer = detector.postprocess(predictions, placed)
    assert answer[NUM_DETS][0, 0] == 1
    assert answer[DET_LABELS][0, 0] == b"car" and set(answer[DET_LABELS][0, 1:]) == {b""}
    np.testing.assert_allclose(answer[DET_BOXES][0, 0], (8, 8, 12, 12))


def test_boxes_are_clipped_to_the_original_image():
    detector = Detector.build(spec_of("v5"), DEFAULTS)
    predictions = np.zeros((1, 64, 8), np.float32)
    predictions[0, 0] = (2, 30, 20, 10, 0.9, 0.9, 0, 0)  # reaches left of the letterboxed image
    placed = [letterbox(np.zeros((32, 64, 3), np.uint8), SIZE, SIZE)[1]]  # padded 16 rows top and bottom
    answer = detector.postprocess(predictions, placed)
    np.testing.assert_allclose(answer[DET_BOXES][0, 0], (0, 25 - 16, 12, 35 - 16))
    assert answer[DET_SCORES][0, 0] == pytest.approx(0.81)


@pytest.mark.parametrize(
    "shape, head, expected",
    [((1, 84, 8400), "auto", Head.V8), ((1, 25200, 85), "auto", Head.V5), ((1, 6, 6), "v5", Head.V5)],
)
def test_head_layout_is_read_from_the_output_shape(shape, head, expected):
    assert detect_head(TensorSpec("output0", "FP32", shape), head) is expected


@pytest.mark.parametrize(
    "shape, head, message",
    [
        ((1, 8, 8), "auto", "square, so its layout cannot be told; set parameter head"),
        ((1, 8400), "auto", "YOLO predictions are [batch, boxes, 5 + classes]"),
        ((1, 84, -1), "auto", "with fixed sizes"),
        ((1, 100, 5), "v5", "a v5 head needs 5 + classes on axis 2 (at least 6)"),
    ],
)
def test_an_output_that_is_no_yolo_head_is_refused(shape, head, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        detect_head(TensorSpec("output0", "FP32", shape), head)


def test_a_labels_file_of_another_length_is_refused():
    with pytest.raises(ConfigError, match="the labels file has 2 labels, but the model has 3 classes"):
        Detector.build(spec_of("v8"), DEFAULTS, ("a", "b"))


def test_bad_images_are_refused_naming_the_element():
    detector = Detector.build(spec_of("v8"), DEFAULTS)
    with pytest.raises(InputError, match=r"IMAGE\[1\] has 5 bytes: expected 12288 bytes of raw pixels"):
        detector.preprocess(np.array([png(picture(10, 10, 0)), b"12345"], dtype=np.object_))
    with pytest.raises(InputError, match="IMAGE holds no image"):
        detector.preprocess(np.array([], dtype=np.object_))


def test_threshold_parameters_refuse_values_outside_zero_to_one():
    conf = next(p for p in DETECTION_PARAMETERS if p.name == "conf_threshold")
    for raw in ("1.5", "-0.1", "nan"):
        with pytest.raises(ConfigError, match="parameter 'conf_threshold'"):
            conf.read(raw)


def test_without_opencv_a_resize_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cv2(name, *args, **kwargs):
        if name == "cv2":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cv2)
    with pytest.raises(ConfigError, match="pip install opencv-python-headless"):
        detection.letterbox(np.zeros((10, 20, 3), np.uint8), SIZE, SIZE)
    boxed, _ = detection.letterbox(np.zeros((SIZE, SIZE, 3), np.uint8), SIZE, SIZE)  # same size: no resize
    assert boxed.shape == (SIZE, SIZE, 3)


# -- the detection-hooks template, in-process -----------------------------------------------------


@pytest.mark.parametrize("head", ["v5", "v8"])
def test_the_hooks_layout_answers_requests_split_between_engine_batches_as_the_reference(tmp_path, head):
    """One execute of requests of 3, 6, 1 and 2 images on a model of batches up to 8: the request
    of 6 is split between two engine batches, and each request's answer is made from the
    letterboxes its own preprocess left in its context."""
    import importlib.util

    import onnxruntime as ort

    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.sim import sim_compile
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils

    pb_utils = install_fake_pb_utils()
    onnx_file = models.yolo(tmp_path / "yolo.onnx", head, classes=3, size=SIZE)
    sim_compile(onnx_file, tmp_path / "yolo.om", batch_gears=(1, 2, 4, 8))
    options = GenerateOptions(
        name="det", template="detection-hooks", template_options={"conf_threshold": "0.2", "max_det": "20"}
    )
    folder = generate(tmp_path / "yolo.om", tmp_path / "repo", options).model_dir
    spec = importlib.util.spec_from_file_location(f"detector_{head}", folder / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(4)
    sizes = [[tuple(rng.integers(20, 130, 2)) for _ in range(count)] for count in (3, 6, 1, 2)]
    images = [[picture(h, w, seed=int(h * w)) for h, w in request] for request in sizes]
    requests = [
        pb_utils.InferenceRequest([pb_utils.Tensor("IMAGE", np.array([[png(i)] for i in request], np.object_))])
        for request in images
    ]
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    with ModelHarness(module.TritonPythonModel, folder) as harness:
        answers = harness.infer(requests)
    found = 0
    for request, answer in zip(images, answers):
        assert not answer.has_error(), answer.error().message()
        got = {
            n: pb_utils.get_output_tensor_by_name(answer, n).as_numpy()
            for n in (NUM_DETS, DET_BOXES, DET_SCORES, DET_CLASSES)
        }
        boxed = np.stack([yolo_reference.letterbox(image, SIZE, SIZE) for image in request])
        (predictions,) = session.run(None, {"images": boxed.transpose(0, 3, 1, 2).astype(np.float32) / 255})
        shapes = [image.shape[:2] for image in request]
        assert_same(got, reference_detections(predictions, head, 0.2, 0.45, 20, shapes), 20)
        found += int(got[NUM_DETS].sum())
    assert found > 12, "the images must give detections for the comparison to mean something"
