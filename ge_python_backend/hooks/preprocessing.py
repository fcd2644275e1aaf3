"""Image pre-processing for hooks: bytes in, the engine's normalised image tensor out.

A request carries one image per element of a BYTES tensor (Triton ``TYPE_STRING``), either

- raw pixels: exactly ``height * width * channels`` bytes, uint8, row major, channels last
  (RGB for 3 channels, grey for 1) — the layout ``numpy_array.tobytes()`` gives for an
  ``[height, width, channels]`` uint8 array; or
- a PNG or JPEG file (decoded with Pillow, when installed), whose size must already be the
  model's: nothing is resized. Its colours are converted to RGB (or grey for 1 channel) with
  Pillow's ``convert``; a 16-bit grey PNG (Pillow mode ``I;16`` or ``I``) is first scaled to 8 bits
  by its high byte, as Pillow itself reads 16-bit RGB and grey-with-alpha PNGs (``convert``
  would clip every value above 255 to white).

An element of exactly the raw size is always read as raw pixels. Elements above
``max_input_bytes`` are refused before anything is decoded. Pixels are then normalised as
``(pixel / 255 - mean) / std`` per channel and laid out as the engine's NCHW or NHWC input in
its FP32 or FP16 type — unless the model input has a static AIPP (an Ascend .om compiled with
ATC's --insert_op_conf): then the device converts and normalises, and the uint8 NHWC pixels go
to it as they are.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.specs import DevicePreprocessing, TensorSpec, format_shape

LAYOUTS = ("NCHW", "NHWC")
_SIGNATURES = {b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG"}
_FLOAT_TYPES = ("FP32", "FP16")


@dataclass(frozen=True)
class ImageInput:
    """The engine input an image becomes: its name, layout, size, channels and data type."""

    name: str
    layout: str
    height: int
    width: int
    channels: int
    dtype: str
    #: a static AIPP takes the uint8 pixels: how it transforms them (None: normalised on the host)
    device_preprocessing: DevicePreprocessing | None = None

    @property
    def raw_size(self) -> int:
        """Bytes of one image as raw uint8 pixels."""
        return self.height * self.width * self.channels

    def describe(self) -> str:
        text = f"{self.name}: {self.dtype} {self.layout} {self.height}x{self.width}x{self.channels}"
        if self.device_preprocessing is not None:
            text += f" to the device's {self.device_preprocessing.describe()}"
        return text


def image_input(tensor: TensorSpec, layout: str = "auto") -> ImageInput:
    """The ImageInput of a rank-4 model input; ``layout`` "auto" uses the tensor's format, else
    the axis holding 1 or 3 channels. ConfigError when the tensor cannot be an image."""
    shape = tensor.shape
    if len(shape) != 4:
        raise ConfigError(
            f"model input {tensor.name!r} has shape {format_shape(shape)}; an image input needs rank 4 (NCHW or NHWC)"
        )
    if tensor.preprocessing is not None:
        return _aipp_image(tensor)
    if tensor.dtype not in _FLOAT_TYPES:
        raise ConfigError(
            f"model input {tensor.name!r} is {tensor.dtype or tensor.native_type}; an image input must be FP32 or FP16"
        )
    if layout == "auto":
        layout = _guess_layout(tensor)
    if layout not in LAYOUTS:
        raise ConfigError(f"image layout {layout!r}: accepted auto, NCHW or NHWC")
    height, width, channels = (shape[2], shape[3], shape[1]) if layout == "NCHW" else (shape[1], shape[2], shape[3])
    if min(height, width, channels) < 1:
        raise ConfigError(
            f"model input {tensor.name!r} has shape {format_shape(shape)} ({layout}): height, width and channels "
            "must be fixed, because images are never resized; export or compile the model with a fixed image size"
        )
    if channels not in (1, 3):
        raise ConfigError(
            f"model input {tensor.name!r} has {channels} channels ({layout} {format_shape(shape)}); images have "
            "1 (grey) or 3 (RGB)"
        )
    return ImageInput(tensor.name, layout, height, width, channels, tensor.dtype)


def _aipp_image(tensor: TensorSpec) -> ImageInput:
    """An input behind a static AIPP takes uint8 NHWC pixels of the source size in its pixel format;
    RGB888_U8 and YUV400_U8 are the ones an RGB or grey image is already in."""
    aipp = tensor.preprocessing
    assert aipp is not None
    if aipp.kind != "aipp-static":
        raise ConfigError(
            f"model input {tensor.name!r} has a dynamic AIPP (set per request): the image size and format are the "
            "client's; use the generic template and send the pixels with their AIPP request parameters"
        )
    channels = {"RGB888_U8": 3, "YUV400_U8": 1}.get(aipp.pixel_format)
    if channels is None:
        raise ConfigError(
            f"model input {tensor.name!r} takes {aipp.pixel_format} images (static AIPP); the classifier sends RGB or "
            "grey pixels: recompile with input_format RGB888_U8 or YUV400_U8, or use the generic template"
        )
    _, height, width, _ = tensor.shape
    return ImageInput(tensor.name, "NHWC", height, width, channels, "UINT8", aipp)


def _guess_layout(tensor: TensorSpec) -> str:
    if tensor.format in LAYOUTS:
        return tensor.format
    first, last = tensor.shape[1] in (1, 3), tensor.shape[3] in (1, 3)
    if last and not first:
        return "NHWC"
    return "NCHW"


def decode_images(images: np.ndarray, image: ImageInput, max_input_bytes: int, tensor: str = "IMAGE") -> np.ndarray:
    """One request's BYTES elements -> uint8 pixels ``[count, height, width, channels]``.

    InputError naming the element when one is too large, of the wrong size or undecodable."""
    blobs = images.reshape(-1)
    if blobs.size == 0:
        raise InputError(f"{tensor} holds no image")
    pixels = np.empty((blobs.size, image.height, image.width, image.channels), np.uint8)
    for index, blob in enumerate(blobs):
        data = blob if isinstance(blob, bytes) else bytes(blob)
        pixels[index] = decode_image(data, image, max_input_bytes, f"{tensor}[{index}]")
    return pixels


def decode_image(
    data: bytes, image: ImageInput, max_input_bytes: int, where: str, any_size: bool = False
) -> np.ndarray:
    """One image's bytes -> uint8 ``[height, width, channels]`` (raw pixels or PNG/JPEG).

    Raw pixels are always the model's size; a file must be too, unless ``any_size`` (the caller
    resizes it, e.g. ``detection.letterbox``): then it comes at its own size."""
    if len(data) > max_input_bytes:
        raise InputError(f"{where} has {len(data)} bytes, above max_input_bytes {max_input_bytes}")
    if len(data) == image.raw_size:
        return np.frombuffer(data, np.uint8).reshape(image.height, image.width, image.channels)
    if _file_kind(data) is None:
        raise InputError(
            f"{where} has {len(data)} bytes: expected {image.raw_size} bytes of raw pixels "
            f"({image.height}x{image.width}x{image.channels} uint8, channels last) or a PNG or JPEG file"
        )
    pixels = decode_file(data, image.channels, max_input_bytes, where)
    if not any_size and pixels.shape[:2] != (image.height, image.width):
        raise InputError(
            f"{where} is a {pixels.shape[1]}x{pixels.shape[0]} (width x height) {_file_kind(data)}; the model takes "
            f"{image.width}x{image.height} and images are not resized: resize it before sending"
        )
    return pixels


def _file_kind(data: bytes) -> str | None:
    return next((name for signature, name in _SIGNATURES.items() if data.startswith(signature)), None)


def decode_file(data: bytes, channels: int, max_input_bytes: int, where: str) -> np.ndarray:
    """A PNG or JPEG file of any size -> uint8 ``[height, width, channels]`` (RGB, or grey for 1)."""
    if len(data) > max_input_bytes:
        raise InputError(f"{where} has {len(data)} bytes, above max_input_bytes {max_input_bytes}")
    kind = _file_kind(data)
    if kind is None:
        raise InputError(f"{where} has {len(data)} bytes and is no PNG or JPEG file")
    try:
        from PIL import Image
    except ImportError:
        raise InputError(
            f"{where} is a {kind} file, but Pillow is not installed in the server's Python: install it "
            "(pip install Pillow) or send raw pixels"
        ) from None
    try:
        with Image.open(io.BytesIO(data), formats=[kind]) as picture:
            width, height = picture.size
            pixels = _eight_bit(picture, channels, where)
    except InputError:
        raise
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError, ... for broken files
        raise InputError(f"{where}: cannot decode the {kind} file ({type(exc).__name__}: {exc})") from None
    return pixels.reshape(height, width, channels)


#: Pillow modes of a 16-bit grey PNG (newer Pillow: I;16, older: I), and their value range
_SIXTEEN_BIT_GREY = ("I;16", "I;16B", "I;16L", "I")


def _eight_bit(picture, channels: int, where: str) -> np.ndarray:
    """A decoded image as uint8 pixels with ``channels`` colours (grey or RGB)."""
    if picture.mode not in _SIXTEEN_BIT_GREY:
        return np.asarray(picture.convert("RGB" if channels == 3 else "L"), dtype=np.uint8)
    values = np.asarray(picture)
    if values.size and (values.min() < 0 or values.max() > 65535):
        raise InputError(f"{where} has grey values outside 0..65535 (mode {picture.mode}); send 8- or 16-bit images")
    grey = (values.astype(np.uint32) >> 8).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1) if channels == 3 else grey


def channel_values(values: tuple[float, ...], channels: int, what: str) -> np.ndarray:
    """Per-channel ``mean``/``std`` values: one per channel, or one for all; ConfigError otherwise."""
    if len(values) not in (1, channels):
        raise ConfigError(f"parameter {what!r} has {len(values)} values; the image has {channels} channel(s)")
    return np.broadcast_to(np.asarray(values, np.float32), (channels,))


def normalize(pixels: np.ndarray, image: ImageInput, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """uint8 ``[count, height, width, channels]`` -> ``(pixel / 255 - mean) / std`` in the
    engine's layout and data type; the pixels themselves for a device-side AIPP."""
    if image.device_preprocessing is not None:
        return pixels
    values = (pixels.astype(np.float32) / np.float32(255.0) - mean) / std
    if image.layout == "NCHW":
        values = values.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(values, dtype=np.float16 if image.dtype == "FP16" else np.float32)
