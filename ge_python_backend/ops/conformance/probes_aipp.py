"""AIPP, static and dynamic (fidelity.md rows 50 and 79-97), and what ATC refuses (rows 70, 83).

The static model has a YUV420SP_U8 8 x 6 AIPP with CSC and ATC's default matrix; the dynamic one
takes up to 4 RGB888 images (batch gears 1, 2, 4, max_src_image_size 1440): ``build.py``.
"""

from __future__ import annotations

import math

from ge_python_backend.ascend.aipp import DYNAMIC_AIPP_INPUT
from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME
from ge_python_backend.ops.conformance.probes import UNKNOWN, Loaded, ProbeContext, ProbeFailure, probe

INVALID_PARAM = 100000
DYNAMIC_LENGTH = 145012
AIPP_NOT_EXIST = 145015
FAILURE = 500001
MODEL_EXECUTE = 507011
INVALID_NODE_INDEX = 0xFFFFFFFF
STATIC_AIPP, IMAGE_WITH_DYNAMIC_AIPP, DYNAMIC_AIPP_PARAMETERS = 1, 2, 3
RGB888 = 3
#: the dynamic model's inputs, in runtime order: the image, its AIPP parameters, the gear selector
IMAGE, PARAMETERS = 0, 1
#: the YUV420SP default CSC matrix entries the binding exports (aipp_op.cc 48-72; the binding lacks
#: R0C2, R2C0 and R2C1: mdl_wrap.cpp 656-823)
DEFAULT_YUV_MATRIX = {
    "matrixR0C0": 298,
    "matrixR0C1": 516,
    "matrixR1C0": 298,
    "matrixR1C1": -100,
    "matrixR1C2": -208,
    "matrixR2C2": 409,
}


def aipp_set(context: ProbeContext, batch: int, width: int = 8, height: int = 6) -> int:
    """An RGB888 AIPP set for ``batch`` images of ``width`` x ``height`` (no crop: the network's 8 x 6)."""
    acl = context.acl
    aipp = acl.mdl.create_aipp(batch)
    if not aipp:
        raise ProbeFailure(f"acl.mdl.create_aipp({batch}) returned NULL")
    context.at_exit("acl.mdl.destroy_aipp", acl.mdl.destroy_aipp, aipp)
    context.need(acl.mdl.set_aipp_input_format(aipp, RGB888), "acl.mdl.set_aipp_input_format")
    context.need(acl.mdl.set_aipp_src_image_size(aipp, width, height), "acl.mdl.set_aipp_src_image_size")
    return aipp


def dynamic(context: ProbeContext) -> Loaded:
    context.open_device()
    return context.load("dynamic_aipp")


@probe("P-aipp-static-dims", "50", "a YUV420SP static-AIPP input: V1 the image dims, V2 [n, 1.5h, w, 1] of its size")
def static_dims(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    loaded = context.load("static_aipp")
    v1, v2 = context.input_dims(loaded, 0)
    context.expect("V1 n, h, w", v1[:3], [1, 6, 8])
    context.expect("V1 c (the docs say c, not its value)", v1[3:], UNKNOWN, simulated=[3])
    context.expect("V2", v2, [1, 9, 8, 1])
    context.expect("get_input_size_by_index", acl.mdl.get_input_size_by_index(loaded.desc, 0), 8 * 6 * 3 // 2)


@probe("P-aipp-types", "79", "get_aipp_type: the image (2, its parameter input), the parameter input (3, none)")
def aipp_types(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    kind, attached, ret = acl.mdl.get_aipp_type(loaded.model_id, IMAGE)
    context.expect("image", [kind, attached, ret], [IMAGE_WITH_DYNAMIC_AIPP, PARAMETERS, 0])
    kind, attached, ret = acl.mdl.get_aipp_type(loaded.model_id, PARAMETERS)
    context.expect("parameters", [kind, attached, ret], [DYNAMIC_AIPP_PARAMETERS, INVALID_NODE_INDEX, 0])
    static = context.load("static_aipp")
    kind, _, ret = acl.mdl.get_aipp_type(static.model_id, 0)
    context.expect("a static-AIPP input", [kind, ret], [STATIC_AIPP, 0])


@probe(
    "P-aipp-info", "80, 82, 84", "get_first_aipp_info: no aipp 145015; three matrix keys absent; meanChn3 0; ATC's CSC"
)
def aipp_info(context: ProbeContext) -> None:
    acl = context.acl
    context.open_device()
    plain = context.load("static")
    info, ret = acl.mdl.get_first_aipp_info(plain.model_id, 0)
    context.expect("a model without AIPP", [info, ret], [None, AIPP_NOT_EXIST])
    loaded = context.load("static_aipp")
    info, ret = acl.mdl.get_first_aipp_info(loaded.model_id, 0)
    context.need(ret, "acl.mdl.get_first_aipp_info")
    absent = sorted(k for k in ("matrixR0C2", "matrixR2C0", "matrixR2C1") if k not in info)
    context.expect("matrix keys the dict lacks", absent, ["matrixR0C2", "matrixR2C0", "matrixR2C1"])
    context.expect("meanChn3 (mean_chn_3: 5 in the config)", info.get("meanChn3"), 0)
    context.expect(
        "the CSC matrix (none given: ATC's YUV420SP default)",
        {k: info.get(k) for k in DEFAULT_YUV_MATRIX},
        DEFAULT_YUV_MATRIX,
    )


@probe("P-aipp-sizes", "86, 87", "the parameter input holds 64 + 96 N bytes; get_aipp_data_size(2) = 256")
def aipp_sizes(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    context.expect(
        "parameter input size (N = 4)", acl.mdl.get_input_size_by_index(loaded.desc, PARAMETERS), 64 + 96 * 4
    )
    size, ret = acl.mdl.get_aipp_data_size(2)
    context.expect("get_aipp_data_size(2)", [size, ret], [256, 0])


@probe("P-aipp-image-size", "86a", "the dynamic-AIPP image input's size and dims")
def aipp_image_size(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    size = acl.mdl.get_input_size_by_index(loaded.desc, IMAGE)
    context.expect("get_input_size_by_index(image)", size, UNKNOWN, simulated=1440, note="max_src_image_size is 1440")
    context.expect("V1 and V2 dims of the image", list(context.input_dims(loaded, IMAGE)), UNKNOWN)


@probe(
    "P-aipp-create", "88, 89, 90", "create_aipp(0) is NULL; a 1 x 1 source is 100000; scf exists only in USE_MDL builds"
)
def aipp_create(context: ProbeContext) -> None:
    acl = context.acl
    context.expect("create_aipp(0)", acl.mdl.create_aipp(0), 0)
    aipp = acl.mdl.create_aipp(1)
    if aipp:
        context.at_exit("acl.mdl.destroy_aipp", acl.mdl.destroy_aipp, aipp)
    context.expect("set_aipp_src_image_size(a, 1, 1)", acl.mdl.set_aipp_src_image_size(aipp, 1, 1), INVALID_PARAM)
    context.expect(
        "acl.mdl.set_aipp_scf_params exists", hasattr(acl.mdl, "set_aipp_scf_params"), UNKNOWN, simulated=False
    )


@probe(
    "P-aipp-set", "91, 92, 96", "set_input_aipp: the image's index 100000; a set of batch 1 on N = 4 100000; batch 4 0"
)
def aipp_set_checks(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    inputs, _ = context.io(loaded)
    four = aipp_set(context, 4)
    context.expect(
        "on the image's index", acl.mdl.set_input_aipp(loaded.model_id, inputs.handle, IMAGE, four), INVALID_PARAM
    )
    one = aipp_set(context, 1)
    context.expect(
        "a set of 1 image", acl.mdl.set_input_aipp(loaded.model_id, inputs.handle, PARAMETERS, one), INVALID_PARAM
    )
    context.expect("a set of 4 images", acl.mdl.set_input_aipp(loaded.model_id, inputs.handle, PARAMETERS, four), 0)


@probe("P-aipp-short-buffer", "94", "set_input_aipp into a 100-byte parameter buffer (4 images need 448): 145012")
def aipp_short_buffer(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    inputs, _ = context.io(loaded, {("input", PARAMETERS): 100})
    ret = acl.mdl.set_input_aipp(loaded.model_id, inputs.handle, PARAMETERS, aipp_set(context, 4))
    context.expect("set_input_aipp", ret, DYNAMIC_LENGTH)


@probe("P-aipp-by-input-index", "95", "set_aipp_by_input_index on an input without dynamic AIPP: 500001")
def aipp_by_input_index(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    inputs, _ = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    ret = acl.mdl.set_aipp_by_input_index(loaded.model_id, inputs.handle, index, aipp_set(context, 4))
    context.expect("on ascend_mbatch_shape_data", ret, FAILURE)


@probe("P-aipp-unset", "97", "executing a dynamic-AIPP model whose parameters were never set")
def aipp_unset(context: ProbeContext) -> None:
    acl = context.acl
    loaded = dynamic(context)
    inputs, outputs = context.io(loaded)
    index = context.input_index(loaded, ACL_DYNAMIC_TENSOR_NAME)
    context.need(acl.mdl.set_dynamic_batch_size(loaded.model_id, inputs.handle, index, 4), "set_dynamic_batch_size")
    ret = acl.mdl.execute(loaded.model_id, inputs.handle, outputs.handle)
    context.expect("execute", ret, UNKNOWN, simulated=MODEL_EXECUTE, note="the docs require set_input_aipp first")


def cropped(context: ProbeContext, batch: int, start_w: int) -> int:
    """An RGB888 set of ``batch`` 12 x 10 images, each cropped to the network's 8 x 6 at (start_w, 0)."""
    acl = context.acl
    aipp = aipp_set(context, batch, 12, 10)
    for index in range(batch):
        ret = acl.mdl.set_aipp_crop_params(aipp, 1, start_w if index == 0 else 0, 0, 8, 6, index)
        context.need(ret, "acl.mdl.set_aipp_crop_params")
    return aipp


@probe(
    "P-aipp-value-ranges",
    "137",
    "the AIPP setters refuse a value outside its range (a NaN passes them); set_input_aipp checks the set on "
    "every model, a shape-range one too",
)
def aipp_value_ranges(context: ProbeContext) -> None:
    acl = context.acl
    aipp = aipp_set(context, 1)
    context.expect(
        "set_aipp_dtc_pixel_mean(300, 0, 0, 0)", acl.mdl.set_aipp_dtc_pixel_mean(aipp, 300, 0, 0, 0, 0), INVALID_PARAM
    )
    context.expect(
        "set_aipp_dtc_pixel_min(-1, 0, 0, 0)",
        acl.mdl.set_aipp_dtc_pixel_min(aipp, -1.0, 0.0, 0.0, 0.0, 0),
        INVALID_PARAM,
    )
    context.expect(
        "set_aipp_pixel_var_reci(70000, 1, 1, 1)",
        acl.mdl.set_aipp_pixel_var_reci(aipp, 70000.0, 1.0, 1.0, 1.0, 0),
        INVALID_PARAM,
    )
    context.expect(
        "set_aipp_pixel_var_reci(NaN, 1, 1, 1)",
        acl.mdl.set_aipp_pixel_var_reci(aipp, math.nan, 1.0, 1.0, 1.0, 0),
        0,
        note="the range check is val < min || val > max (log_inner.h:309-316): false for a NaN",
    )
    # AippParamsCheck after the model's checks, which a shape-range input skips (acl_aipp.cpp:184-188, 254-262)
    for name, batch in (("dynamic_aipp", 4), ("range_aipp", 3)):
        loaded = dynamic(context) if name == "dynamic_aipp" else context.load(name)
        inputs, _ = context.io(loaded)
        index = context.input_index(loaded, DYNAMIC_AIPP_INPUT)
        for what, start_w, code in (("inside", 4, 0), ("leaving", 6, INVALID_PARAM)):
            ret = acl.mdl.set_input_aipp(loaded.model_id, inputs.handle, index, cropped(context, batch, start_w))
            context.expect(f"{name}, {batch} images: a crop {what} the 12 x 10 image", ret, code)


def _refused(context: ProbeContext, name: str) -> None:
    context.built_by_the_atc_under_test(name)
    built = context.models.models.get(name)
    context.expect(
        f"the compiler refuses {built.recipe.what if built else name}", built is not None and built.om is None, True
    )
    if built is not None:
        context.expect("what it said", built.error, UNKNOWN)


@probe("P-atc-one-gear", "70", "ATC refuses --dynamic_batch_size with one gear")
def atc_one_gear(context: ProbeContext) -> None:
    _refused(context, "one_gear")


@probe("P-atc-odd-aipp", "83", "ATC refuses a YUV420SP AIPP of odd width")
def atc_odd_aipp(context: ProbeContext) -> None:
    _refused(context, "odd_aipp")
