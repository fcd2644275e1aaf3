"""``acl.mdl`` dynamic-AIPP calls of the simulator: build an AIPP set, check it, write it.

Ranges and checks follow hicann/ge api/acl/acl_model/model/acl_aipp_om2.cpp 330-692 (the setters),
acl_aipp.cpp 107-500 and aipp_param_check.cpp 28-395 (set_input_aipp), ge_executor.cc 655-707
(the write into the parameter input). ``set_aipp_scf_params`` is left out, as in pyACL builds
without USE_MDL, and set_input_aipp refuses scaling anyway (aipp_param_check.cpp 278-283).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ge_python_backend.ascend.aipp import (
    DYNAMIC_AIPP_BATCH_BYTES,
    DYNAMIC_AIPP_HEAD_BYTES,
    SUPPORTED_FORMATS,
    AippConfig,
    AippInputFormat,
    AippMode,
)
from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.ascend.limits import npu_arch
from ge_python_backend.sim.aipp import encode_dynamic, network_nchw
from ge_python_backend.sim.mdl_desc import DYNAMIC_AIPP_NODE, WITH_DYNAMIC_AIPP
from ge_python_backend.sim.mdl_gears import refuse_while_executing
from ge_python_backend.sim.models import AippSet, LoadedModel
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.simom import InputRole
from ge_python_backend.sim.state import INVALID_PARAM

DYNAMIC_LENGTH = ret_code("ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID")
FAILURE = ret_code("ACL_ERROR_FAILURE")
#: the AIPP output width after padding is at most 1080 on these NpuArchs (DAV_1001 910, DAV_2002
#: 310P, DAV_2201 910B/910_93, DAV_3510 950; aipp_param_check.cpp:241-257), not on others (DAV_3002 310B)
MAX_PADDED_WIDTH = 1080
PADDED_WIDTH_ARCHS = frozenset({1001, 2002, 2201, 3510})
#: NpuArchs whose dynamic AIPP takes the four formats; any other arch refuses dynamic AIPP
#: (AippInputFormatCheck, aipp_param_check.cpp:28-53)
DYNAMIC_AIPP_ARCHS = frozenset({1001, 2002, 2201, 3002, 3510})


def _switch(value: int, name: str) -> bool:
    if value not in (0, 1):
        raise AclFail(INVALID_PARAM, f"{name} must be 0 or 1, got {value}")
    return bool(value)


def _within(name: str, value: float, low: float, high: float) -> None:
    # CANN's check, ACL_CHECK_RANGE_INT/FLOAT (api/acl/common/log_inner.h:309-316): a NaN passes it
    if value < low or value > high:
        raise AclFail(INVALID_PARAM, f"{name} is {value}; accepted {low}..{high}")


class AippCalls(Namespace):
    """create_aipp, the set_aipp_* setters, set_input_aipp and set_aipp_by_input_index."""

    def _aipp(self, handle: int) -> AippSet:
        return self._sim.lookup(self._sim.aipps, handle, "AIPP set")

    def _entry(self, aipp: AippSet, batch_index: int) -> int:
        if batch_index >= len(aipp.batches):
            raise AclFail(
                INVALID_PARAM, f"batch index {batch_index}: the AIPP set was created for {len(aipp.batches)} image(s)"
            )
        return batch_index

    @acl_function("K", outputs=(0,))
    def get_aipp_data_size(self, batch_size):
        """64 + 96 x batch (acl_aipp_om2.cpp 372-382)."""
        if batch_size == 0:
            raise AclFail(INVALID_PARAM, "batch size must be > 0")
        return DYNAMIC_AIPP_HEAD_BYTES + DYNAMIC_AIPP_BATCH_BYTES * batch_size

    @acl_function("K", value=True)
    def create_aipp(self, batch_size):
        if batch_size == 0:
            return 0  # NULL (acl_aipp_om2.cpp 330-363)
        blank = AippConfig(aipp_mode=AippMode.DYNAMIC, input_bias=(0, 0, 0), output_bias=(0, 0, 0))
        return self._sim.add(self._sim.aipps, lambda handle: AippSet(handle, blank, [blank] * batch_size))

    @acl_function("k")
    def destroy_aipp(self, aipp):
        self._sim.remove(self._sim.aipps, aipp, "AIPP set")

    @acl_function("kI")
    def set_aipp_input_format(self, aipp, input_format):
        found = self._aipp(aipp)
        try:
            fmt = AippInputFormat(input_format)
        except ValueError:
            raise AclFail(INVALID_PARAM, f"input format {input_format} is not an aclAippInputFormat (1..14)") from None
        found.head = replace(found.head, input_format=fmt)

    @acl_function("kbhhhhhhhhhBBBBBB")
    def set_aipp_csc_params(self, aipp, switch, *values):
        found = self._aipp(aipp)
        on = _switch(switch, "csc switch")
        if not on:  # stored, and nothing else is checked or stored (acl_aipp_om2.cpp 413-455)
            found.head = replace(found.head, csc_switch=False)
            return
        matrix, out_bias, in_bias = values[:9], values[9:12], values[12:15]
        for i, value in enumerate(matrix):
            _within(f"matrix_r{i // 3}c{i % 3}", value, -32677, 32676)
        found.head = replace(
            found.head,
            csc_switch=True,
            matrix=tuple((matrix[3 * r], matrix[3 * r + 1], matrix[3 * r + 2]) for r in range(3)),
            output_bias=(out_bias[0], out_bias[1], out_bias[2]),
            input_bias=(in_bias[0], in_bias[1], in_bias[2]),
        )

    @acl_function("kb")
    def set_aipp_rbuv_swap_switch(self, aipp, switch):
        found = self._aipp(aipp)
        found.head = replace(found.head, rbuv_swap_switch=_switch(switch, "rbuv swap switch"))

    @acl_function("kb")
    def set_aipp_ax_swap_switch(self, aipp, switch):
        found = self._aipp(aipp)
        found.head = replace(found.head, ax_swap_switch=_switch(switch, "ax swap switch"))

    @acl_function("kii")
    def set_aipp_src_image_size(self, aipp, width, height):
        found = self._aipp(aipp)
        _within("source width", width, 2, 4096)
        _within("source height", height, 1, 4096)
        found.head = replace(found.head, src_image_size_w=width, src_image_size_h=height)

    @acl_function("kbiiiiK")
    def set_aipp_crop_params(self, aipp, switch, start_w, start_h, size_w, size_h, batch_index):
        found = self._aipp(aipp)
        index = self._entry(found, batch_index)
        if not _switch(switch, "crop switch"):
            found.batches[index] = replace(found.batches[index], crop=False)
            return
        for name, value, low, high in (
            ("crop start w", start_w, 0, 4095),
            ("crop start h", start_h, 0, 4095),
            ("crop width", size_w, 1, 4096),
            ("crop height", size_h, 1, 4096),
        ):
            _within(name, value, low, high)
        found.batches[index] = replace(
            found.batches[index],
            crop=True,
            load_start_pos_w=start_w,
            load_start_pos_h=start_h,
            crop_size_w=size_w,
            crop_size_h=size_h,
        )

    @acl_function("kbiiiiK")
    def set_aipp_padding_params(self, aipp, switch, top, bottom, left, right, batch_index):
        found = self._aipp(aipp)
        index = self._entry(found, batch_index)
        if not _switch(switch, "padding switch"):
            found.batches[index] = replace(found.batches[index], padding=False)
            return
        for name, value in (
            ("top padding", top),
            ("bottom padding", bottom),
            ("left padding", left),
            ("right padding", right),
        ):
            _within(name, value, 0, 32)
        found.batches[index] = replace(
            found.batches[index],
            padding=True,
            top_padding_size=top,
            bottom_padding_size=bottom,
            left_padding_size=left,
            right_padding_size=right,
        )

    def _set_channels(
        self, aipp: int, batch_index: int, what: str, field: str, values: tuple, low: float, high: float
    ) -> None:
        """One image's four per-channel values of ``field``, each within low..high."""
        found = self._aipp(aipp)
        index = self._entry(found, batch_index)
        for i, value in enumerate(values):
            _within(f"{what} of channel {i}", value, low, high)
        changed: dict[str, Any] = {field: values}
        found.batches[index] = replace(found.batches[index], **changed)

    @acl_function("khhhhK")
    def set_aipp_dtc_pixel_mean(self, aipp, m0, m1, m2, m3, batch_index):
        self._set_channels(aipp, batch_index, "mean", "mean_chn", (m0, m1, m2, m3), 0, 255)

    @acl_function("kffffK")
    def set_aipp_dtc_pixel_min(self, aipp, f0, f1, f2, f3, batch_index):
        self._set_channels(aipp, batch_index, "min", "min_chn", (f0, f1, f2, f3), 0.0, 255.0)

    @acl_function("kffffK")
    def set_aipp_pixel_var_reci(self, aipp, f0, f1, f2, f3, batch_index):
        self._set_channels(
            aipp, batch_index, "variance reciprocal", "var_reci_chn", (f0, f1, f2, f3), -65504.0, 65504.0
        )

    # --- onto a dataset ---------------------------------------------------------------------------

    @acl_function("Ikkk")
    def set_input_aipp(self, model_id, dataset, index, aipp):
        """Check the set against the model and write it into the parameter input at ``index``."""
        self._set_input_aipp(model_id, dataset, index, aipp)

    def _set_input_aipp(self, model_id: int, dataset: int, index: int, aipp: int) -> None:
        """The parameters reach the buffer by a synchronous aclrtMemcpy at the call (ge_executor.cc
        686-699), not on a stream: while the model executes that races the run reading them, which
        the simulator refuses as it refuses a gear change then (507011, sim)."""
        sim = self._sim
        model = sim.model(model_id)
        refuse_while_executing(model, "setting its dynamic AIPP")
        found = self._aipp(aipp)
        entries = model.om.model_inputs
        if index >= len(entries):
            raise AclFail(INVALID_PARAM, f"input index {index} is out of range; the model has {len(entries)}")
        entry = entries[index]
        if entry.role is not InputRole.AIPP_DATA:
            raise AclFail(
                INVALID_PARAM,
                f"input {index} ({entry.tensor.name!r}) is not a dynamic-AIPP parameter "
                f"input (its AIPP type is not {DYNAMIC_AIPP_NODE})",
            )
        _check_set(model, entry.image, found, npu_arch(sim.config.soc_name))
        dataset_found = sim.lookup(sim.datasets, dataset, "dataset")
        if index >= len(dataset_found.buffers):
            raise AclFail(
                INVALID_PARAM, f"dataset {dataset:#x} has {len(dataset_found.buffers)} buffer(s), no index {index}"
            )
        buffer = sim.lookup(sim.buffers, dataset_found.buffers[index], "data buffer")
        if buffer.addr == 0:
            raise AclFail(INVALID_PARAM, f"the {entry.tensor.name!r} buffer has a NULL address")
        need = DYNAMIC_AIPP_HEAD_BYTES + DYNAMIC_AIPP_BATCH_BYTES * len(found.batches)
        if buffer.size < need:
            raise AclFail(
                DYNAMIC_LENGTH, f"the {entry.tensor.name!r} buffer has {buffer.size} bytes, the AIPP set needs {need}"
            )
        sim.write(buffer.addr, encode_dynamic(found.head, found.batches), True, f"{entry.tensor.name!r} buffer")

    @acl_function("Ikkk")
    def set_aipp_by_input_index(self, model_id, dataset, index, aipp):
        """``index`` is the image input; its AIPP type must be 2 (else 500001, acl_aipp.cpp 476-500)."""
        sim = self._sim
        model = sim.model(model_id)
        self._aipp(aipp)
        dataset_found = sim.lookup(sim.datasets, dataset, "dataset")
        if index >= len(dataset_found.buffers):
            raise AclFail(
                INVALID_PARAM, f"dataset {dataset:#x} has {len(dataset_found.buffers)} buffer(s), no index {index}"
            )
        entry = model.om.model_inputs[index] if index < len(model.om.model_inputs) else None
        attached = model.om.index_of(InputRole.AIPP_DATA, entry.tensor.name) if entry else None
        if entry is None or not entry.tensor.dynamic_aipp or attached is None:
            raise AclFail(FAILURE, f"input {index} has no dynamic AIPP (its AIPP type is not {WITH_DYNAMIC_AIPP})")
        self._set_input_aipp(model_id, dataset, attached, aipp)


def _check_set(model: LoadedModel, image: str, aipp: AippSet, arch: int | None) -> None:
    """AippParamsCheck (aipp_param_check.cpp:312-347) with the simulated SoC's NpuArch (None: a SoC the
    platform tables do not know, whose arch rules are skipped), and the model checks of set_input_aipp
    (acl_aipp.cpp 107-262): the batch and the output W/H, skipped when the image input has shape
    ranges (acl_aipp.cpp:184-188); every image's output W/H equals the first's either way
    (AippDynamicBatchParaCheck, aipp_param_check.cpp:262-310)."""
    entry = model.om.client_input(image)
    network, config = entry.network, entry.tensor.aipp
    if network is None or config is None:
        raise AclFail(INVALID_PARAM, f"input {image!r} has no dynamic AIPP")
    fmt = _check_head(aipp.head, arch)
    width, height = aipp.head.src_image_size_w, aipp.head.src_image_size_h
    batch, _, model_h, model_w = network_nchw(network)
    layout = model.om.layout
    ranged = bool(entry.tensor.ranges)
    if batch < 0 and layout.kind == "batch":  # dynamic batch: made for the largest gear (--insert_op_conf.md 73-76)
        batch = max(g[0] for g in layout.gears)
    if not ranged and batch > 0 and len(aipp.batches) != batch:
        raise AclFail(INVALID_PARAM, f"the AIPP set is for {len(aipp.batches)} image(s), the model input takes {batch}")
    size = fmt.byte_size(len(aipp.batches), height, width)
    if size > config.max_src_image_size:
        raise AclFail(
            INVALID_PARAM,
            f"{len(aipp.batches)} x {width}x{height} {fmt.name} is {size} bytes, above "
            f"the model's max_src_image_size {config.max_src_image_size}",
        )
    first: tuple[int, int] | None = None
    for number, item in enumerate(aipp.batches):
        output = _check_image(
            number,
            replace(item, input_format=fmt, src_image_size_w=width, src_image_size_h=height),
            None if ranged else (model_h, model_w),
            arch,
        )
        first = first or output
        if output != first:
            raise AclFail(
                INVALID_PARAM,
                f"image {number}: the AIPP output is {output[1]}x{output[0]}, image 0's is {first[1]}x{first[0]}; "
                "every image of a set must give the same size",
            )


def _check_head(head: AippConfig, arch: int | None) -> AippInputFormat:
    fmt = head.input_format
    if fmt is None:
        raise AclFail(INVALID_PARAM, "the AIPP set has no input format (set_aipp_input_format)")
    if arch is not None and arch not in DYNAMIC_AIPP_ARCHS:
        raise AclFail(INVALID_PARAM, f"dynamic AIPP is not supported on NpuArch {arch}")
    if fmt not in SUPPORTED_FORMATS:
        raise AclFail(INVALID_PARAM, f"input format {fmt.name} is not supported by dynamic AIPP")
    if head.csc_switch and fmt is AippInputFormat.YUV400_U8:
        raise AclFail(INVALID_PARAM, "CSC is not allowed for YUV400_U8")
    width, height = head.src_image_size_w, head.src_image_size_h
    if not width or not height:
        raise AclFail(INVALID_PARAM, "the source image size is not set (set_aipp_src_image_size)")
    if fmt is AippInputFormat.YUV420SP_U8 and (width % 2 or height % 2):
        raise AclFail(INVALID_PARAM, f"YUV420SP_U8 needs an even source size, got {width}x{height}")
    return fmt


def _check_image(number: int, item: AippConfig, model_hw: tuple[int, int] | None, arch: int | None) -> tuple[int, int]:
    """One image's checks; its output (H, W). ``model_hw``: the network's H, W it must equal (None:
    not checked, an input with shape ranges)."""
    width, height = item.src_image_size_w, item.src_image_size_h
    if item.crop:
        if item.load_start_pos_w + item.crop_size_w > width or item.load_start_pos_h + item.crop_size_h > height:
            raise AclFail(INVALID_PARAM, f"image {number}: the crop leaves the {width}x{height} source")
        if item.input_format is AippInputFormat.YUV420SP_U8 and (
            item.load_start_pos_w % 2 or item.load_start_pos_h % 2
        ):
            raise AclFail(INVALID_PARAM, f"image {number}: YUV420SP_U8 crops start at even positions")
    out_h, out_w = item.output_size(height, width)
    if model_hw is not None and (out_h, out_w) != model_hw:
        raise AclFail(
            INVALID_PARAM,
            f"image {number}: the AIPP output is {out_w}x{out_h}, the model input is "
            f"{model_hw[1]}x{model_hw[0]}; they must be equal",
        )
    if item.padding and arch in PADDED_WIDTH_ARCHS and out_w > MAX_PADDED_WIDTH:
        raise AclFail(
            INVALID_PARAM, f"image {number}: the padded width {out_w} is above {MAX_PADDED_WIDTH} (NpuArch {arch})"
        )
    return out_h, out_w
