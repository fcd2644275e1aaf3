"""Builders of model folders for tests (in-process harness and real tritonserver alike)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.testing import models

MODELS = Path(__file__).parents[1] / "models"
#: the idle timeout of the end-to-end model cell_idle (GEModel's parameter sequence_idle_timeout_ms)
IDLE_TIMEOUT_MS = 1000
#: the simulated device time per batch of the end-to-end model sim_timed (acl_sim_device_ms)
SIM_DEVICE_MS = 5

HOOKED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [
  {{ name: "LABELS" data_type: TYPE_STRING dims: [ 3 ] }},
  {{ name: "SCORES" data_type: TYPE_FP32 dims: [ 3 ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters [
  {{ key: "engine" value: {{ string_value: "onnxruntime" }} }},
  {{ key: "image_size" value: {{ string_value: "8" }} }},
  {{ key: "top_k" value: {{ string_value: "3" }} }}
]
"""


def generated(repo: Path, onnx_file: Path, name: str, **options) -> Path:
    """A generic model folder from ge-triton generate."""
    return generate(onnx_file, repo, GenerateOptions(name=name, **options)).model_dir


def fragile(repo: Path, onnx_file: Path, name: str = "fragile") -> Path:
    """A generated folder whose model.py's postprocess divides by the request parameter ``divisor``."""
    folder = generated(repo, onnx_file, name)
    shutil.copyfile(MODELS / "fragile.py", folder / "1" / "model.py")
    return folder


def hooked_classifier(repo: Path, name: str = "hooked") -> tuple[Path, Path]:
    """A GEModel subclass with pre/post hooks (raw RGB bytes in, top-3 label strings out).

    Returns (model folder, the engine's ONNX file)."""
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True)
    onnx_file = models.image_classifier(folder / "1" / "model.onnx", size=8, channels=(4, 8), classes=10)
    shutil.copyfile(MODELS / "hooked_classifier.py", folder / "1" / "model.py")
    (folder / "config.pbtxt").write_text(HOOKED_CONFIG.format(name=name))
    return folder, onnx_file


def classifier(repo: Path, sources: Path, name: str, image_channels: int = 3, classes: int = 10) -> Path:
    """A classification-template folder (8x8 images, labels "kind 0".., top_k 3, the other options
    at their defaults) for a model on ``image_channels`` colours; returns the engine's ONNX file."""
    onnx_file = models.image_classifier(
        Path(sources) / f"{name}.onnx", size=8, channels=(4,), classes=classes, image_channels=image_channels
    )
    labels = Path(sources) / f"{name}_labels.txt"
    labels.write_text("".join(f"kind {i}\n" for i in range(classes)), encoding="utf-8")
    options = GenerateOptions(
        name=name, template="classification", template_options={"labels": str(labels), "top_k": "3"}
    )
    generate(onnx_file, repo, options)
    return onnx_file
