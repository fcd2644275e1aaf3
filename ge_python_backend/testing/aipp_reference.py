"""AIPP as ATC documents it, in numpy: the reference the simulated AIPP is tested against, and
what ``ge-triton conformance`` compares a device's AIPP with. It imports nothing of this package,
so it stays independent of the code under test (``ascend/aipp.py``, ``sim/aipp.py``).

Written from hicann/ge docs/zh/user_guides/atc_tools/AIPP/config_file_template.md, never from the
simulator's code: crop, then colour-space conversion, then ``(x - mean_chn - min_chn) *
var_reci_chn`` (lines 10, 265-292); min and var_reci are float16 and the AIPP output is FP16
(lines 37-44, 278-292); RGB is stored RGBRGB... (line 42); YUV420SP_U8 is NV12 (lines 50-55); the
YUV -> BGR formula and the template's matrix and biases (lines 226-262).
"""

from __future__ import annotations

import numpy as np

#: the template's YUV420SP -> BGR matrix and biases (config_file_template.md 240-262; the same
#: numbers as aipp_op.cc 48-71 and SetCscDefaultValue 776-805, which fills row 0 from R2C*_YUV2RGB)
MATRIX_YUV_TO_BGR = ((298, 516, 0), (298, -100, -208), (298, 0, 409))
MATRIX_RGB_TO_YUV = ((66, 129, 25), (-38, -74, 112), (112, -94, -18))  # aipp_op.cc 57-65
BIAS = (16, 128, 128)  # aipp_op.cc 66-71


def to_fp16(values) -> np.ndarray:
    return np.asarray(values, np.float32).astype(np.float16).astype(np.float32)


def normalise(pixels: np.ndarray, mean, minimum, var_reci) -> np.ndarray:
    """(x - mean_chn - min_chn) * var_reci_chn per channel, min/var_reci as float16, the result in
    FP16; ``pixels`` is (N, H, W, C), the result NCHW (what an NCHW network takes)."""
    channels = pixels.shape[-1]
    shifted = pixels.astype(np.float32) - np.asarray(mean[:channels], np.float32) - to_fp16(minimum[:channels])
    return to_fp16(shifted * to_fp16(var_reci[:channels])).transpose(0, 3, 1, 2).copy()


def crop(pixels: np.ndarray, start_w: int, start_h: int, width: int, height: int) -> np.ndarray:
    """(N, H, W, C) images cut to ``width`` x ``height`` at (start_w, start_h)."""
    return pixels[:, start_h : start_h + height, start_w : start_w + width, :]


def nv12(luma: np.ndarray, u: int, v: int) -> np.ndarray:
    """A YUV420SP_U8 buffer (NV12: the Y plane, then U,V interleaved at half resolution) of shape
    (1, 1.5h, w, 1), the V2 dims clients send (aclmdlGetInputDimsV2.md)."""
    h, w = luma.shape
    chroma = np.empty((h // 2, w), np.uint8)
    chroma[:, 0::2], chroma[:, 1::2] = u, v
    return np.concatenate([luma, chroma]).reshape(1, h * 3 // 2, w, 1)


def yuv_to_bgr(luma: np.ndarray, u: int, v: int, matrix=MATRIX_YUV_TO_BGR) -> np.ndarray:
    """[B;G;R] = (M . [Y - ib0; U - ib1; V - ib2]) >> 8, by default with the template's matrix, as (1, h, w, 3).
    The result is checked to need no saturation, which the doc does not define; chroma is constant,
    so how the device upsamples it does not matter either."""
    yuv = np.stack([luma.astype(np.int64), np.full(luma.shape, u), np.full(luma.shape, v)], axis=-1)
    bgr = (yuv - np.array(BIAS)) @ np.array(matrix).T >> 8
    assert bgr.min() >= 0 and bgr.max() <= 255, "choose values the CSC does not saturate"
    return bgr[None]
