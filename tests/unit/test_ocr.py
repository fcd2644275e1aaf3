"""PP-OCR hooks against the rapidocr-onnxruntime wheel's own pipeline, on its own det/cls/rec
models run by ONNX Runtime: the same lines, boxes and scores on rendered pages."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.hooks.ocr import (
    TextReader,
    characters_of,
    classifier_input,
    crop_line,
    ctc_decode,
    reading_order,
    recognizer_batches,
)
from tests.support import ocr

pytest.importorskip("cv2", reason="OCR needs OpenCV (opencv-python-headless, the vision extra)")


@pytest.fixture(scope="module")
def networks():
    models = ocr.require_rapidocr()
    sessions = [ocr.session(path) for path in (models.det, models.cls, models.rec)]

    def run(session):
        name = session.get_inputs()[0].name
        return lambda batch: session.run(None, {name: batch})[0]

    return TextReader(characters_of(ocr.characters(models.rec))), [run(s) for s in sessions]


@pytest.mark.parametrize("page", range(len(ocr.PAGES)))
def test_a_page_reads_as_the_wheels_pipeline(networks, page):
    reader, (detect, classify, recognize) = networks
    rgb = ocr.render(*ocr.PAGES[page])
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    expected = ocr.reference(bgr)
    lines = reader.read(bgr, detect, classify, recognize)
    assert lines.texts == tuple(text for _, text, _ in expected)
    np.testing.assert_allclose(lines.boxes, np.reshape([box for box, _, _ in expected], (-1, 4, 2)), atol=0.5)
    np.testing.assert_allclose(lines.scores, [score for _, _, score in expected], atol=1e-4)


def test_the_rendered_texts_are_read(networks):
    """The pages are legible to PP-OCRv4 (else equality with the wheel would prove little)."""
    reader, (detect, classify, recognize) = networks
    for size, lines in ocr.PAGES[:4]:
        bgr = np.ascontiguousarray(ocr.render(size, lines)[:, :, ::-1])
        read = reader.read(bgr, detect, classify, recognize).texts
        assert [t.replace(" ", "") for t in read] == [text.replace(" ", "") for _, text, _, _ in lines]


def test_an_upside_down_line_is_turned_by_the_classifier(networks):
    reader, (detect, classify, _) = networks
    size, lines = ocr.PAGES[2]
    assert lines[0][3], "page 2 holds an upside-down line"
    bgr = np.ascontiguousarray(ocr.render(size, lines)[:, :, ::-1])
    from ge_python_backend.hooks.ocr import detector_input, fit_image, text_boxes

    image, _ = fit_image(bgr, reader.options)
    boxes = text_boxes(detect(detector_input(image, reader.options))[0, 0], *image.shape[:2], reader.options)
    probs = classify(classifier_input([crop_line(image, box) for box in boxes]))
    assert probs.argmax(axis=1).tolist() == [1] and probs[0, 1] > reader.options.cls_thresh


def test_ctc_decoding_merges_repeats_and_drops_blanks():
    characters = characters_of(["a", "b"])  # blank, a, b, space
    steps = [0, 1, 1, 0, 1, 2, 2, 3, 0]
    probs = np.full((1, len(steps), 4), 0.01, np.float32)
    for t, c in enumerate(steps):
        probs[0, t, c] = 0.5 + t / 100
    texts, scores = ctc_decode(probs, characters)
    assert texts == ["aab "]
    kept = [1, 4, 5, 7]  # the first step of each run, blanks dropped
    assert scores[0] == pytest.approx(np.mean([0.5 + t / 100 for t in kept]))
    empty, zero = ctc_decode(np.eye(4, dtype=np.float32)[[0, 0]][None], characters)
    assert empty == [""] and zero[0] == 0


def test_reading_order_equals_the_wheels_sorting():
    from rapidocr_onnxruntime import RapidOCR

    rng = np.random.default_rng(3)
    for _ in range(20):
        corners = rng.integers(0, 200, (12, 1, 2)).astype(np.float32)
        boxes = corners + np.array([[0, 0], [40, 0], [40, 12], [0, 12]], np.float32)
        expected = np.asarray(RapidOCR.sorted_boxes(boxes.copy()))
        np.testing.assert_array_equal(reading_order(boxes), expected)


def test_recognizer_batches_follow_the_lines_width_to_height_order():
    crops = [np.zeros((48, w, 3), np.uint8) for w in (100, 900, 300, 50, 2000, 480, 60)]
    batches = recognizer_batches(crops, batch=3, max_width=1500)
    assert [members for members, _ in batches] == [[3, 6, 0], [2, 5, 1], [4]]
    assert [batch.shape for _, batch in batches] == [(3, 3, 48, 320), (3, 3, 48, 900), (1, 3, 48, 1500)]
