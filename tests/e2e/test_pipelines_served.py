"""The pipeline templates through the real tritonserver, on acl-sim: detection (YOLO v5 and v8
heads as an ensemble, the v5 head in GEModel's hooks; the models compiled at load) against a
reference of letterbox, decoding and NMS written apart from the templates
(tests/support/yolo_reference.py) and ONNX Runtime called directly; OCR (a BLS model over
PP-OCR's det, cls and rec from the rapidocr-onnxruntime wheel, sim-compiled with a shape range
over H/W for det and over batch and width for rec; and the same three ONNX files compiled at load
with the ranges generate states in atc_flags) against that wheel's own pipeline on rendered pages;
text (a BERT-style encoder sim-compiled with dims gears over batch and sequence, behind the
padding model) against the unpadded encoder on ONNX Runtime."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support import ocr, yolo_reference
from tests.support.clients import infer_many, url

pytestmark = pytest.mark.e2e
cv2 = pytest.importorskip("cv2", reason="the detection template needs OpenCV (the vision extra)")

SIZE = 64
MAX_DET = 20
CLASSES = ("cat", "dog", "bird")
#: served name -> (head, template): each head as the ensemble (detection), and in hooks
#: (detection-hooks: the heads' decoding is the ensemble's code, so one head serves here, keeping
#: the module's server lean)
DETECTORS = {
    "det_v5": ("v5", "detection"),
    "det_v8": ("v8", "detection"),
    "hooked_v5": ("v5", "detection-hooks"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    repo, sources = root / "repo", root / "sources"
    files = {}
    labels = sources / "classes.txt"
    sources.mkdir()
    labels.write_text("\n".join(CLASSES) + "\n")
    for name, (head, template) in DETECTORS.items():
        files[name] = models.yolo(sources / f"{name}.onnx", head, classes=len(CLASSES), size=SIZE)
        template_options = {"max_det": str(MAX_DET), "conf_threshold": "0.2"}
        if head == "v5":
            template_options["classes"] = str(labels)
        options = GenerateOptions(name=name, template=template, engine="acl-sim", template_options=template_options)
        generate(files[name], repo, options)
    _ocr(repo, sources)
    files["encoder"] = models.text_encoder(sources / "encoder.onnx")
    gears = ";".join(",".join([f"{b},{s}"] * 3) for b in (1, 2, 4, 8) for s in (16, 32, 64))
    shapes = "input_ids:-1,-1;attention_mask:-1,-1;token_type_ids:-1,-1"
    sim_compile(files["encoder"], sources / "encoder.om", input_shapes=shapes, dynamic_dims=gears)
    generate(sources / "encoder.om", repo, GenerateOptions(name="bert", template="text"))
    return repo, files, root / "atc-cache"


def _ocr(repo, sources) -> None:
    """The OCR template over PP-OCR's networks as simulated .om files, when the wheel is installed."""
    try:
        wheel = ocr.require_rapidocr()
    except pytest.skip.Exception:
        return
    det, cls, rec = sources / "det.om", sources / "cls.om", sources / "rec.om"
    sim_compile(wheel.det, det, input_shapes="x:1,3,32~960,32~960")
    sim_compile(wheel.cls, cls, input_shapes="x:-1,3,48,192", batch_gears="1,2,4,8")
    sim_compile(wheel.rec, rec, input_shapes="x:1~6,3,48,320~3200")
    keys = sources / "keys.txt"  # an .om keeps no ONNX metadata: the character list goes with --set keys
    keys.write_text("\n".join(ocr.characters(wheel.rec)) + "\n", encoding="utf-8")
    options = {"cls": str(cls), "rec": str(rec), "keys": str(keys)}
    generate(det, repo, GenerateOptions(name="ocr", template="ocr", template_options=options))
    # the wheel's ONNX files as they come (the character list from the rec file's metadata), compiled at load
    options = {"cls": str(wheel.cls), "rec": str(wheel.rec), "instances": "1"}
    onnx_options = GenerateOptions(name="ocr_onnx", template="ocr", engine="acl-sim", instance_count=1)
    generate(wheel.det, repo, replace(onnx_options, template_options=options))


@pytest.fixture(scope="module")
def server(built):
    repo, _, cache = built
    with TritonServer(repo, env={"GE_TRITON_ATC_CACHE": str(cache)}) as running:
        yield running


def picture(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(height // 6, 1), max(width // 6, 1), 3), dtype=np.uint8)
    return cv2.resize(coarse, (width, height), interpolation=cv2.INTER_NEAREST)


def encoded(pixels: np.ndarray, kind: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind, **({"quality": 95} if kind == "JPEG" else {}))
    return buffer.getvalue()


def decoded(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def expected(onnx_file, data: bytes, head: str) -> list[yolo_reference.Detection]:
    pixels = decoded(data)
    boxed = yolo_reference.letterbox(pixels, SIZE, SIZE)
    tensor = (boxed.astype(np.float32) / 255).transpose(2, 0, 1)[None]
    (prediction,) = ort.InferenceSession(str(onnx_file)).run(None, {"images": tensor})
    return yolo_reference.detect(prediction[0], head, 0.2, 0.45, MAX_DET, pixels.shape[:2], (SIZE, SIZE))


SHAPES = [(64, 64), (48, 80), (120, 35), (200, 150), (33, 97), (64, 64), (90, 91), (17, 170)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("name", list(DETECTORS))
def test_detections_equal_the_reference(server, built, protocol, name):
    _, files, _ = built
    head, _ = DETECTORS[name]
    blobs = [encoded(picture(h, w, seed=i), "PNG" if i % 2 else "JPEG") for i, (h, w) in enumerate(SHAPES)]
    requests = [{"IMAGE": np.array([[blob]], dtype=np.object_)} for blob in blobs]
    answers = infer_many(protocol, url(server, protocol), name, requests, concurrency=8)
    found = 0
    for blob, (outputs, error) in zip(blobs, answers):
        assert error is None, error
        reference = expected(files[name], blob, head)
        n = int(outputs["NUM_DETS"][0, 0])
        assert n == len(reference)
        found += n
        np.testing.assert_allclose(
            outputs["DET_BOXES"][0, :n], np.reshape([d.box for d in reference], (n, 4)), atol=0.5
        )
        np.testing.assert_allclose(outputs["DET_SCORES"][0, :n], [d.score for d in reference], atol=1e-4)
        assert outputs["DET_CLASSES"][0, :n].tolist() == [d.cls for d in reference]
        names = CLASSES if head == "v5" else tuple(str(c) for c in range(len(CLASSES)))
        assert outputs["DET_LABELS"][0, :n].tolist() == [names[d.cls].encode() for d in reference]
        assert outputs["DET_BOXES"].shape == (1, MAX_DET, 4)
    assert found > len(SHAPES), "the images must give detections for the comparison to mean something"


@pytest.mark.parametrize("name", ["det_v8", "hooked_v5"])
def test_a_bad_image_fails_alone(server, name):
    good = encoded(picture(50, 70, seed=1), "PNG")
    requests = [{"IMAGE": np.array([[data]], dtype=np.object_)} for data in (good, b"not an image", good)]
    answers = infer_many("grpc", url(server, "grpc"), name, requests)
    assert answers[0][1] is None and answers[2][1] is None
    assert "IMAGE[0] has 12 bytes: expected 12288 bytes of raw pixels" in str(answers[1][1])


@pytest.mark.parametrize("name", ["ocr", "ocr_onnx"])
def test_ocr_reads_each_page_as_the_wheels_pipeline(server, name):
    """``ocr``: det, cls and rec as .om files sim-compiled by hand; ``ocr_onnx``: the wheel's ONNX
    files compiled at load with the shape ranges generate wrote in their atc_flags."""
    ocr.require_rapidocr()
    pages = [ocr.render(size, lines) for size, lines in ocr.PAGES]
    requests = [{"IMAGE": np.array([ocr.png(rgb)], dtype=np.object_)} for rgb in pages]
    answers = infer_many("grpc", url(server, "grpc"), name, requests, concurrency=4)
    for rgb, (outputs, error) in zip(pages, answers):
        assert error is None, error
        expected = ocr.reference(np.ascontiguousarray(rgb[:, :, ::-1]))
        assert [t.decode() for t in outputs["TEXTS"]] == [text for _, text, _ in expected]
        boxes = np.reshape([box for box, _, _ in expected], (-1, 4, 2))
        np.testing.assert_allclose(outputs["BOXES"], boxes, atol=0.5)
        np.testing.assert_allclose(outputs["SCORES"], [score for _, _, score in expected], atol=1e-4)


def test_ocr_refuses_what_is_no_image(server):
    ocr.require_rapidocr()
    ((_, error),) = infer_many(
        "http", url(server, "http"), "ocr", [{"IMAGE": np.array([b"plain text"], dtype=np.object_)}]
    )
    assert error is not None and "IMAGE[0] has 10 bytes and is no PNG or JPEG file" in str(error)


def test_texts_of_any_length_answer_as_the_unpadded_encoder(server, built):
    _, files, _ = built
    rng = np.random.default_rng(5)
    lengths = [3, 17, 1, 64, 30, 9, 33, 16, 2, 50, 12, 7]
    requests = []
    for index, length in enumerate(lengths):
        rows = 1 + index % 2
        request = {"input_ids": rng.integers(1, 50, (rows, length)).astype(np.int64)}
        if index % 3:
            request["attention_mask"] = np.ones((rows, length), np.int64)
        if index % 4 == 1:
            request["token_type_ids"] = rng.integers(0, 2, (rows, length)).astype(np.int64)
        requests.append(request)
    for protocol in ("http", "grpc"):
        answers = infer_many(protocol, url(server, protocol), "bert", requests, concurrency=12)
        for request, (outputs, error) in zip(requests, answers):
            assert error is None, error
            ids = request["input_ids"]
            feeds = {
                "input_ids": ids,
                "attention_mask": request.get("attention_mask", np.ones_like(ids)),
                "token_type_ids": request.get("token_type_ids", np.zeros_like(ids)),
            }
            expected = models.reference(files["encoder"], feeds)
            assert outputs["last_hidden_state"].shape == expected["last_hidden_state"].shape
            np.testing.assert_allclose(outputs["last_hidden_state"], expected["last_hidden_state"], atol=1e-4)
            np.testing.assert_allclose(outputs["pooler_output"], expected["pooler_output"], atol=1e-4)


def test_a_text_longer_than_the_model_fails_alone(server):
    good = {"input_ids": np.ones((1, 5), np.int64)}
    requests = [good, {"input_ids": np.ones((1, 65), np.int64)}, good]
    answers = infer_many("grpc", url(server, "grpc"), "bert", requests)
    assert answers[0][1] is None and answers[2][1] is None
    assert "input_ids has 65 tokens; the model takes at most 64" in str(answers[1][1])
