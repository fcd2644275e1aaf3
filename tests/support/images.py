"""PNG and JPEG images in every mode the classification template accepts, each with the 8-bit
pixels it stands for, computed here from the pixels it was made of (the reference the decoded
image must equal; for lossy JPEG and for colour-to-grey conversions, Pillow's own decode and
``convert`` called directly)."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SIZE = 8


@dataclass(frozen=True)
class Encoded:
    data: bytes
    #: the pixels it stands for: uint8 [SIZE, SIZE, 3]
    rgb: np.ndarray
    #: for a grey model: uint8 [SIZE, SIZE, 1]
    grey: np.ndarray


def _save(picture, kind: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format=kind)
    return buffer.getvalue()


def _from_rgb(data: bytes, rgb: np.ndarray) -> Encoded:
    """An image whose colours are ``rgb``: a grey model sees Pillow's convert("L") of them."""
    from PIL import Image

    grey = np.asarray(Image.fromarray(rgb).convert("L"))[..., None]
    return Encoded(data, rgb, grey)


def _from_grey(data: bytes, grey: np.ndarray) -> Encoded:
    return Encoded(data, np.repeat(grey[..., None], 3, axis=2), grey[..., None])


def _decoded(data: bytes) -> Encoded:
    """A lossy file: the reference is Pillow's own decode and conversion of the same bytes."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:
        rgb = np.asarray(picture.convert("RGB"))
        grey = np.asarray(picture.convert("L"))[..., None]
    return Encoded(data, rgb, grey)


def _png16(samples: np.ndarray, colour_type: int) -> bytes:
    """A 16-bit PNG written by hand (Pillow writes none in RGB): ``samples`` uint16 [h, w(, 3)]."""
    height, width = samples.shape[:2]
    rows = samples.astype(">u2").reshape(height, -1).tobytes()
    stride = len(rows) // height
    raw = b"".join(b"\x00" + rows[i * stride : (i + 1) * stride] for i in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def images(seed: int = 0) -> dict[str, Encoded]:
    """Name -> image, for every mode: PNG 1, L, LA, P, RGB, RGBA, 16-bit grey (Pillow's I;16)
    and 16-bit RGB; JPEG L, RGB, CMYK."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8)
    wide = rng.integers(0, 65536, (SIZE, SIZE), dtype=np.uint16)  # not multiples of 257
    wide_rgb = rng.integers(0, 65536, (SIZE, SIZE, 3), dtype=np.uint16)
    palette = rng.integers(0, 256, (16, 3), dtype=np.uint8)
    indexes = rng.integers(0, 16, (SIZE, SIZE), dtype=np.uint8)
    alpha = rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8)
    paletted = Image.fromarray(indexes, "P")
    paletted.putpalette(palette.reshape(-1).tolist())
    smooth = np.repeat(np.linspace(40, 200, SIZE, dtype=np.uint8)[None, :, None], SIZE, axis=0)
    built: dict[str, Callable[[], Encoded]] = {
        "PNG 1": lambda: _from_grey(
            _save(Image.fromarray(grey >= 128)), np.where(grey >= 128, 255, 0).astype(np.uint8)
        ),
        "PNG L": lambda: _from_grey(_save(Image.fromarray(grey)), grey),
        "PNG LA": lambda: _from_grey(_save(Image.fromarray(np.stack([grey, alpha], axis=2), "LA")), grey),
        "PNG P": lambda: _from_rgb(_save(paletted), palette[indexes]),
        "PNG RGB": lambda: _from_rgb(_save(Image.fromarray(rgb)), rgb),
        "PNG RGBA": lambda: _from_rgb(_save(Image.fromarray(np.dstack([rgb, alpha]), "RGBA")), rgb),
        "PNG 16-bit grey": lambda: _from_grey(_save(Image.fromarray(wide)), (wide >> 8).astype(np.uint8)),
        "PNG 16-bit RGB": lambda: _from_rgb(_png16(wide_rgb, 2), (wide_rgb >> 8).astype(np.uint8)),
        "JPEG L": lambda: _decoded(_save(Image.fromarray(smooth[..., 0]), "JPEG")),
        "JPEG RGB": lambda: _decoded(_save(Image.fromarray(np.repeat(smooth, 3, axis=2)), "JPEG")),
        "JPEG CMYK": lambda: _decoded(_save(Image.fromarray(np.repeat(smooth, 4, axis=2), "CMYK"), "JPEG")),
    }
    return {name: build() for name, build in built.items()}
