"""The classification template through the real tritonserver on images of every mode it takes,
for an RGB and a 1-channel model, both with the template's default mean and std: each answer
equals ONNX Runtime run on the pixels the image stands for (``tests/support/images.py``)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.hooks.postprocessing import top_k
from tests.support import images
from tests.support.clients import infer_one

pytestmark = pytest.mark.e2e
pytest.importorskip("PIL")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: a grey model's defaults: ImageNet's weighed as Pillow's convert("L") weighs R, G and B
LUMA = (0.299, 0.587, 0.114)
GREY_MEAN, GREY_STD = (float(np.dot(LUMA, IMAGENET_MEAN)),), (float(np.dot(LUMA, IMAGENET_STD)),)
IMAGES = images.images()
LABELS = tuple(f"kind {i}" for i in range(10))


def expected(onnx_file, pixels: np.ndarray, mean, std) -> tuple[np.ndarray, np.ndarray]:
    normalised = (pixels.astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)
    (logits,) = ort.InferenceSession(str(onnx_file)).run(None, {"image": normalised.transpose(2, 0, 1)[None]})
    return top_k(logits, 3, LABELS)


@pytest.mark.parametrize("kind", ["rgb", "grey"])
@pytest.mark.parametrize("name", list(IMAGES))
def test_every_image_mode_is_answered_as_onnxruntime_answers_its_pixels(server, sources, kind, name):
    image = IMAGES[name]
    pixels, mean, std = (image.rgb, IMAGENET_MEAN, IMAGENET_STD) if kind == "rgb" else (image.grey, GREY_MEAN, GREY_STD)
    model = f"classifier_{kind}"
    got = infer_one("http", server.http_address, model, {"IMAGE": np.array([[image.data]], dtype=object)})
    labels, scores = expected(sources[model], pixels, mean, std)
    assert got["LABELS"].tolist() == labels.tolist()
    np.testing.assert_allclose(got["SCORES"], scores, atol=1e-5)
