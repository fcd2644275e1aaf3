"""A GEModel subclass with both hooks, used by the tests (and shown in the README).

Input IMAGE (TYPE_STRING, dims [1]): raw RGB bytes of a SIZE x SIZE image, row major (HWC).
preprocess: bytes -> normalized FP32 NCHW tensor "image" for the engine.
postprocess: logits -> the top-k labels (TYPE_STRING) and their scores (FP32).
"""

from __future__ import annotations

import numpy as np

from ge_python_backend import GEModel, InputError
from ge_python_backend.params import Parameter, parse_int

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def decode(images: np.ndarray, size: int) -> np.ndarray:
    """[batch, 1] raw RGB bytes -> [batch, 3, size, size] normalized floats."""
    expected = size * size * 3
    pixels = []
    for index, blob in enumerate(images.reshape(-1)):
        if len(blob) != expected:
            raise InputError(f"IMAGE[{index}] has {len(blob)} bytes; expected {expected} ({size}x{size} RGB)")
        pixels.append(np.frombuffer(blob, np.uint8).reshape(size, size, 3))
    batch = np.stack(pixels).transpose(0, 3, 1, 2).astype(np.float32) / 255.0
    return (batch - MEAN) / STD


def top_k(logits: np.ndarray, k: int, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    scores = np.take_along_axis(logits, order, axis=1)
    names = np.array([[labels[i].encode() for i in row] for row in order], dtype=np.object_)
    return names, scores.astype(np.float32)


class TritonPythonModel(GEModel):
    extra_parameters = (
        Parameter("image_size", parse_int(1), 8, "an integer >= 1", "side of the square input image"),
        Parameter("top_k", parse_int(1), 3, "an integer >= 1", "labels returned per image"),
    )

    def initialize(self, args):
        super().initialize(args)
        classes = self.engine.spec.output("logits").shape[-1]
        self.labels = [f"class_{i}" for i in range(classes)]

    def preprocess(self, inputs, request):
        return {"image": decode(inputs["IMAGE"], self.settings.extra["image_size"])}

    def postprocess(self, outputs, request):
        labels, scores = top_k(outputs["logits"], self.settings.extra["top_k"], self.labels)
        return {"LABELS": labels, "SCORES": scores}
