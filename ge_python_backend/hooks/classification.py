"""An image classifier's hooks as one object: IMAGE bytes in, top-k LABELS and SCORES out.

Used by the ``classification`` template's model.py::

    class TritonPythonModel(GEModel):
        extra_parameters = CLASSIFICATION_PARAMETERS
        ...  # initialize: self.classifier = ImageClassifier.from_settings(self.settings, self.engine.spec)

The client sends ``IMAGE`` (``TYPE_STRING``, one image per element: raw pixels or PNG/JPEG, see
``preprocessing``) and receives ``LABELS`` (``TYPE_STRING [top_k]``) and ``SCORES``
(``TYPE_FP32 [top_k]``), best first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ge_python_backend.errors import ConfigError
from ge_python_backend.hooks.postprocessing import chosen_output, load_labels, softmax, top_k
from ge_python_backend.hooks.preprocessing import ImageInput, channel_values, decode_images, image_input, normalize
from ge_python_backend.params import Parameter, parse_bool, parse_choice, parse_int, parse_list
from ge_python_backend.specs import ModelSpec, format_shape
from ge_python_backend.triton.settings import ModelSettings

IMAGE, LABELS, SCORES = "IMAGE", "LABELS", "SCORES"


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("must be > 0")
    return value


AUTO = "auto"
#: ImageNet's per-channel mean and std (torchvision's normalisation), the defaults for RGB
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: ITU-R 601-2 luma weights, as Pillow's convert("L") weighs R, G and B: grey images' defaults
#: are ImageNet's values weighed the same way
LUMA = (0.299, 0.587, 0.114)


def _or_auto(parse: Callable[[str], tuple]) -> Callable[[str], tuple | str]:
    return lambda raw: AUTO if raw == AUTO else parse(raw)


def _channel_default(values: tuple[float, ...] | str, rgb: tuple[float, ...], channels: int) -> tuple[float, ...]:
    """The parameter's values, or for auto the RGB default (channels 3) or its luma (channels 1)."""
    if isinstance(values, tuple):
        return values
    return rgb if channels == 3 else (round(sum(w * v for w, v in zip(LUMA, rgb)), 6),)


CLASSIFICATION_PARAMETERS = (
    Parameter(
        "labels_file",
        str,
        "labels.txt",
        "a file name in the version folder (or an absolute path)",
        "UTF-8 text, one label per line in class-index order",
    ),
    Parameter("top_k", parse_int(1), 5, "an integer >= 1", "labels returned per image (the LABELS/SCORES dims)"),
    Parameter(
        "mean",
        _or_auto(parse_list(float)),
        AUTO,
        "comma-separated numbers, one per channel or one, or auto",
        "subtracted from pixel/255 (auto: ImageNet's for RGB, its luma for grey)",
    ),
    Parameter(
        "std",
        _or_auto(parse_list(_positive_float)),
        AUTO,
        "comma-separated numbers > 0, one per channel or one, or auto",
        "divides pixel/255 - mean (auto: ImageNet's for RGB, its luma for grey)",
    ),
    Parameter(
        "max_input_bytes",
        parse_int(1),
        16 * 1024 * 1024,
        "an integer >= 1",
        "largest IMAGE element accepted, checked before decoding",
    ),
    Parameter("softmax", parse_bool, False, "true or false", "apply softmax to the model's scores before top-k"),
    Parameter(
        "image_layout",
        parse_choice("auto", "NCHW", "NHWC"),
        "auto",
        "auto, NCHW or NHWC",
        "layout of the model's image input (auto: its format, else where the channels are)",
    ),
    Parameter(
        "scores_output",
        str,
        "",
        "a model output name",
        "the model output holding class scores (default: the model's only output)",
    ),
)


@dataclass(frozen=True)
class ImageClassifier:
    image: ImageInput
    scores_output: str
    labels: tuple[str, ...]
    top_k: int
    mean: np.ndarray
    std: np.ndarray
    max_input_bytes: int
    softmax: bool
    batching: bool

    @classmethod
    def from_settings(cls, settings: ModelSettings, spec: ModelSpec) -> ImageClassifier:
        """Build from the parsed parameters and the engine's model; ConfigError on any mismatch."""
        values = settings.extra
        if len(spec.inputs) != 1:
            raise ConfigError(
                f"an image classifier needs a model with one input; this one has {[t.name for t in spec.inputs]}"
            )
        image = image_input(spec.inputs[0], values["image_layout"])
        scores = chosen_output(spec, values["scores_output"], "scores_output", "the class scores")
        classes = scores.shape[-1]
        if len(scores.shape) != 2 or classes < 1:
            raise ConfigError(
                f"model output {scores.name!r} has shape {format_shape(scores.shape)}; class scores must be "
                "[batch, classes] with a fixed number of classes"
            )
        k = values["top_k"]
        if k > classes:
            raise ConfigError(f"parameter 'top_k' is {k}, above the model's {classes} classes")
        if not settings.batching and spec.inputs[0].shape[0] not in (1, -1):
            raise ConfigError(
                f"max_batch_size is 0 but the model's input {image.name!r} takes {spec.inputs[0].shape[0]} images "
                "at once; set max_batch_size >= 1 so requests are gathered into the model's batch"
            )
        if values["max_input_bytes"] < image.raw_size:
            raise ConfigError(
                f"parameter 'max_input_bytes' is {values['max_input_bytes']}, below one raw image "
                f"({image.height}x{image.width}x{image.channels} = {image.raw_size} bytes)"
            )
        _check_config_io(settings, k)
        path = Path(values["labels_file"])
        labels = load_labels(path if path.is_absolute() else settings.version_dir / path, classes)
        return cls(
            image=image,
            scores_output=scores.name,
            labels=labels,
            top_k=k,
            mean=channel_values(
                _channel_default(values["mean"], IMAGENET_MEAN, image.channels), image.channels, "mean"
            ),
            std=channel_values(_channel_default(values["std"], IMAGENET_STD, image.channels), image.channels, "std"),
            max_input_bytes=values["max_input_bytes"],
            softmax=values["softmax"],
            batching=settings.batching,
        )

    def preprocess(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """One request's IMAGE tensor -> the engine's image input (InputError for a bad image)."""
        pixels = decode_images(images, self.image, self.max_input_bytes, IMAGE)
        return {self.image.name: normalize(pixels, self.image, self.mean, self.std)}

    def postprocess(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request's engine outputs -> LABELS and SCORES, best first."""
        scores = outputs[self.scores_output]
        labels, best = top_k(softmax(scores) if self.softmax else scores, self.top_k, self.labels)
        if not self.batching:
            labels, best = labels[0], best[0]
        return {LABELS: labels, SCORES: best}

    def describe(self) -> str:
        return (
            f"image classifier: {IMAGE} -> {self.image.describe()}, {len(self.labels)} labels, "
            f"top {self.top_k} of {self.scores_output!r}{' after softmax' if self.softmax else ''}"
            f"{self._normalization()}"
        )

    def _normalization(self) -> str:
        device = self.image.device_preprocessing
        if device is None:
            return f"; pixels normalised with mean {self.mean.tolist()} and std {self.std.tolist()}"
        if device.normalizes:
            return "; parameters mean and std skipped: the device's AIPP normalises"
        return "; parameters mean and std skipped: the pixels go to the device's AIPP, which does not normalise them"


def _check_config_io(settings: ModelSettings, k: int) -> None:
    """The config must declare IMAGE and LABELS/SCORES with dims [top_k]."""
    inputs = {t.name: t for t in settings.inputs}
    if IMAGE not in inputs or inputs[IMAGE].dtype != "BYTES":
        raise ConfigError(f"the config needs input {IMAGE!r} of data_type TYPE_STRING")
    outputs = {t.name: t for t in settings.outputs}
    for name, dtype in ((LABELS, "BYTES"), (SCORES, "FP32")):
        tensor = outputs.get(name)
        if tensor is None or tensor.dtype != dtype or tensor.shape != (k,):
            found = "missing" if tensor is None else f"{tensor.dtype} {format_shape(tensor.shape)}"
            raise ConfigError(
                f"config output {name!r} must be {dtype} dims [{k}] (parameter top_k is {k}); found {found}"
            )
