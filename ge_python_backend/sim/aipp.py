"""The device side of AIPP in the simulator: the transform, and the dynamic-AIPP parameter block.

``transform`` turns the image bytes an AIPP input holds into the tensor the network takes, in the
order ATC documents (config_file_template.md: channel swap > crop > colour-space conversion >
mean/normalise > padding):

- channel swap: ``rbuv_swap_switch`` swaps R/B (U/V for YUV420SP: NV21 -> NV12); for 4-channel
  formats ``ax_swap_switch`` says the X/A channel comes first (XRGB, XBGR) rather than last
  (RGBX, BGRX), and it is dropped (CSC_config.md: "for 4-channel input the A or X channel is
  ignored");
- crop: ``load_start_pos`` and ``crop_size`` (the network's W/H when 0);
- CSC: output channel k = row k of the matrix applied to the channels in memory order; YUV
  input: ``(M . (x - input_bias)) >> 8``, other input: ``((M . x) >> 8) + output_bias``
  (config_file_template.md's formulas, with the row order of the CSC_config.md tables); the
  rounding and saturation are not documented: the simulator shifts (floor) and clips to 0..255;
- normalise (float network input only; "uint8 -> uint8: no effect"): ``(x - mean_chn - min_chn)
  * var_reci_chn``, with min and var_reci held as float16 as the device holds them, and the
  result in float16 (AIPP output is FP16, config_file_template.md 44, 268);
- padding: ``padding_value`` around the crop;
- the result in the network's layout (NCHW or NHWC) and type; a network that takes fewer channels
  than the AIPP produces (e.g. GRAY from a CSC) takes the first ones.

YUV420SP chroma is upsampled by repetition (each U/V pair covers 2x2 pixels; the device's
interpolation is not documented).
"""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np

from ge_python_backend.ascend.aipp import (
    DYNAMIC_AIPP_BATCH_BYTES,
    DYNAMIC_AIPP_HEAD_BYTES,
    AippConfig,
    AippInputFormat,
    AippMode,
)
from ge_python_backend.sim.simom import NetworkInput

_FLOAT_NETWORK = ("FLOAT", "FLOAT16")


def network_nchw(network: NetworkInput) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D network input in its format."""
    d = network.dims
    return (d[0], d[1], d[2], d[3]) if network.format == "NCHW" else (d[0], d[3], d[1], d[2])


def transform(
    config: AippConfig, image: bytes, batch: int, network: NetworkInput, per_batch: list[AippConfig] | None = None
) -> np.ndarray:
    """The network's input for ``batch`` images held in ``image`` (their AIPP input buffer).

    ``per_batch`` (dynamic AIPP) gives each image's own crop/padding/normalisation values."""
    _, channels, model_h, model_w = network_nchw(network)
    fmt = config.input_format or AippInputFormat.RGB888_U8
    src_h, src_w = config.source_size(model_h, model_w)
    one = fmt.byte_size(1, src_h, src_w)
    data = np.frombuffer(image, np.uint8, count=one * batch)
    outputs = []
    for index in range(batch):
        item = per_batch[index] if per_batch else config
        pixels = _decode(fmt, data[index * one : (index + 1) * one], src_h, src_w, item)
        outputs.append(_process(item, pixels, network, channels, model_h, model_w))
    stacked = np.stack(outputs)  # N, H, W, C
    if network.format == "NCHW":
        stacked = stacked.transpose(0, 3, 1, 2)
    dtype = {"FLOAT": np.float32, "FLOAT16": np.float16, "UINT8": np.uint8, "INT8": np.int8}[network.data_type.name]
    return np.ascontiguousarray(stacked.astype(dtype))


def _decode(fmt: AippInputFormat, raw: np.ndarray, h: int, w: int, config: AippConfig) -> np.ndarray:
    """One image as (h, w, channels) uint8, after the channel swap."""
    if fmt is AippInputFormat.YUV420SP_U8:
        y = raw[: h * w].reshape(h, w)
        uv = raw[h * w :].reshape(h // 2, w // 2, 2).repeat(2, axis=0).repeat(2, axis=1)
        if config.rbuv_swap_switch:  # NV21: V before U
            uv = uv[..., ::-1]
        return np.concatenate([y[..., None], uv], axis=2)
    if fmt is AippInputFormat.YUV400_U8:
        return raw.reshape(h, w, 1)
    pixels = raw.reshape(h, w, fmt.pixel_channels)
    if fmt.pixel_channels == 4:
        pixels = pixels[..., 1:] if config.ax_swap_switch else pixels[..., :3]
    if config.rbuv_swap_switch:
        pixels = pixels[..., ::-1]
    return pixels


def _process(
    config: AippConfig, pixels: np.ndarray, network: NetworkInput, channels: int, model_h: int, model_w: int
) -> np.ndarray:
    if config.crop:
        crop_h, crop_w = config.crop_size(model_h, model_w)
        y0, x0 = config.load_start_pos_h, config.load_start_pos_w
        pixels = pixels[y0 : y0 + crop_h, x0 : x0 + crop_w]
    values = pixels.astype(np.int32)
    if config.csc_switch:
        matrix = np.array(config.matrix, np.int32)
        fmt = config.input_format or AippInputFormat.RGB888_U8
        if fmt.yuv:
            values = (values - np.array(config.input_bias, np.int32)) @ matrix.T >> 8
        else:
            values = (values @ matrix.T >> 8) + np.array(config.output_bias, np.int32)
        values = np.clip(values, 0, 255)
    values = values[..., :channels]
    if network.data_type.name in _FLOAT_NETWORK:
        mean = np.array(config.mean_chn[:channels], np.float32)
        low = np.array(config.min_chn[:channels], np.float16).astype(np.float32)
        scale = np.array(config.var_reci_chn[:channels], np.float16).astype(np.float32)
        result = ((values.astype(np.float32) - mean - low) * scale).astype(np.float16)
    else:
        result = values.astype(np.uint8)
    if config.padding:
        pad = (
            (config.top_padding_size, config.bottom_padding_size),
            (config.left_padding_size, config.right_padding_size),
            (0, 0),
        )
        result = np.pad(result, pad, constant_values=config.padding_value)
    return result


# -- the dynamic-AIPP parameter block (hicann/ge inc/graph_metadef/common/dynamic_aipp.h:20-97) -

# head (64 bytes): inputFormat u8, cscSwitch i8, rbuvSwapSwitch i8, axSwapSwitch i8, batchNum i8,
# 3 reserved, srcImageSizeW i32, srcImageSizeH i32, 9 x i16 matrix, 6 reserved, 3 x u8 output
# bias, 3 x u8 input bias, reserved to 64.
_HEAD = struct.Struct("<BbbbbxxxII9hxxxxxx3B3B18x")
# batch entry (96 bytes): crop/scf/padding/rotate switches, 4 reserved, crop start W/H and size
# W/H, scf in/out W/H, padding top/bottom/left/right, 4 x i16 mean, 4 x fp16 min, 4 x fp16 var_reci.
_BATCH = struct.Struct("<bbbbxxxx4i4i4i4h4e4e16x")
assert _HEAD.size == DYNAMIC_AIPP_HEAD_BYTES and _BATCH.size == DYNAMIC_AIPP_BATCH_BYTES


def encode_dynamic(head: AippConfig, batches: list[AippConfig]) -> bytes:
    """The block ``set_input_aipp`` copies into the ``ascend_dynamic_aipp_data`` buffer
    (ge_executor.cc 655-707: the 64-byte head, then one 96-byte entry per batch image)."""
    fmt = head.input_format.value if head.input_format is not None else 0
    matrix = [v for row in (head.matrix or ((0, 0, 0),) * 3) for v in row]
    data = _HEAD.pack(
        fmt,
        head.csc_switch,
        head.rbuv_swap_switch,
        head.ax_swap_switch,
        len(batches),
        head.src_image_size_w,
        head.src_image_size_h,
        *matrix,
        *head.output_bias,
        *head.input_bias,
    )
    for item in batches:
        data += _BATCH.pack(
            item.crop,
            False,
            item.padding,
            False,
            item.load_start_pos_w,
            item.load_start_pos_h,
            item.crop_size_w,
            item.crop_size_h,
            0,
            0,
            0,
            0,
            item.top_padding_size,
            item.bottom_padding_size,
            item.left_padding_size,
            item.right_padding_size,
            *item.mean_chn,
            *item.min_chn,
            *item.var_reci_chn,
        )
    return data


_FORMAT_CODES = frozenset(f.value for f in AippInputFormat)


def _batches_in(size: int) -> int:
    return (size - DYNAMIC_AIPP_HEAD_BYTES) // DYNAMIC_AIPP_BATCH_BYTES


def decode_dynamic(data: bytes) -> tuple[AippConfig, list[AippConfig]] | None:
    """The head and per-batch configs of a parameter block; None when set_input_aipp never wrote it:
    its input format is not an aclAippInputFormat (fresh device memory holds garbage, not zeros) or
    its image count does not fit the block."""
    head = _HEAD.unpack_from(data)
    fmt, csc, rbuv, ax, count, src_w, src_h = head[:7]
    if fmt not in _FORMAT_CODES or not 0 < count <= _batches_in(len(data)):
        return None
    matrix = head[7:16]
    base = AippConfig(
        aipp_mode=AippMode.DYNAMIC,
        input_format=AippInputFormat(fmt),
        src_image_size_w=src_w,
        src_image_size_h=src_h,
        csc_switch=bool(csc),
        rbuv_swap_switch=bool(rbuv),
        ax_swap_switch=bool(ax),
        matrix=tuple((matrix[3 * r], matrix[3 * r + 1], matrix[3 * r + 2]) for r in range(3)) if csc else (),
        output_bias=(head[16], head[17], head[18]),
        input_bias=(head[19], head[20], head[21]),
    )
    batches = []
    for index in range(count):
        entry = _BATCH.unpack_from(data, DYNAMIC_AIPP_HEAD_BYTES + index * DYNAMIC_AIPP_BATCH_BYTES)
        crop, _, padding, _ = entry[:4]
        batches.append(
            replace(
                base,
                crop=bool(crop),
                load_start_pos_w=entry[4],
                load_start_pos_h=entry[5],
                crop_size_w=entry[6],
                crop_size_h=entry[7],
                padding=bool(padding),
                top_padding_size=entry[12],
                bottom_padding_size=entry[13],
                left_padding_size=entry[14],
                right_padding_size=entry[15],
                mean_chn=(entry[16], entry[17], entry[18], entry[19]),
                min_chn=(entry[20], entry[21], entry[22], entry[23]),
                var_reci_chn=(entry[24], entry[25], entry[26], entry[27]),
            )
        )
    return base, batches
