"""AIPP read from the Data ops of synthetic .om files laid out as ATC writes them.

The attributes follow hicann/ge compiler/graph/preprocess/insert_op/aipp_op.cc (ConvertParamToAttr
1085-1144, the AippData op 1196-1236) and insert_aipp_op_util.cc (input_dims, _aipp_inputs); the
expected configs and buffer dims are written out by hand from those rules and the V2 table of
docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDimsV2.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode
from ge_python_backend.ascend.om import RuntimeInput, read_om
from ge_python_backend.ascend.om.aippinfo import AippTensor
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import BatchSupport, DevicePreprocessing, ShapeGear, TensorSpec
from tests.support.om_builder import (
    Model,
    Tensor,
    aipp_attr,
    attr_b,
    attr_i,
    attr_named,
    attr_s,
    standard_om,
)

BOTH_SOURCES = pytest.mark.parametrize("with_inout", [True, False], ids=["inout", "modeldef"])
NETWORK = "NCHW:DT_FLOAT:image:602112:4:1,3,224,224"

#: every static field ATC saves, with values that differ from the defaults
STATIC_FIELDS = dict(
    aipp_mode=1,
    related_input_rank=0,
    input_format="YUV420SP_U8",
    csc_switch=True,
    crop=True,
    resize=False,
    load_start_pos_w=10,
    load_start_pos_h=12,
    crop_size_w=200,
    crop_size_h=200,
    resize_output_w=0,
    resize_output_h=0,
    padding=True,
    left_padding_size=12,
    right_padding_size=12,
    top_padding_size=12,
    bottom_padding_size=12,
    src_image_size_w=224,
    src_image_size_h=224,
    cpadding_value=0.0,
    rbuv_swap_switch=True,
    ax_swap_switch=False,
    single_line_mode=False,
    mean_chn_0=104,
    mean_chn_1=117,
    mean_chn_2=123,
    mean_chn_3=0,
    min_chn_0=0.5,
    min_chn_1=1.5,
    min_chn_2=2.5,
    min_chn_3=0.0,
    var_reci_chn_0=0.015625,
    var_reci_chn_1=0.0078125,
    var_reci_chn_2=0.00390625,
    var_reci_chn_3=1.0,
    matrix_r0c0=256,
    matrix_r0c1=0,
    matrix_r0c2=359,
    matrix_r1c0=256,
    matrix_r1c1=-88,
    matrix_r1c2=-183,
    matrix_r2c0=256,
    matrix_r2c1=454,
    matrix_r2c2=0,
    output_bias_0=0,
    output_bias_1=0,
    output_bias_2=0,
    input_bias_0=0,
    input_bias_1=128,
    input_bias_2=128,
)

EXPECTED_STATIC = AippConfig(
    aipp_mode=AippMode.STATIC,
    related_input_rank=0,
    input_format=AippInputFormat.YUV420SP_U8,
    src_image_size_w=224,
    src_image_size_h=224,
    crop=True,
    load_start_pos_w=10,
    load_start_pos_h=12,
    crop_size_w=200,
    crop_size_h=200,
    padding=True,
    left_padding_size=12,
    right_padding_size=12,
    top_padding_size=12,
    bottom_padding_size=12,
    csc_switch=True,
    rbuv_swap_switch=True,
    ax_swap_switch=False,
    matrix=((256, 0, 359), (256, -88, -183), (256, 454, 0)),
    input_bias=(0, 128, 128),
    output_bias=(0, 0, 0),
    mean_chn=(104, 117, 123, 0),
    min_chn=(0.5, 1.5, 2.5, 0.0),
    var_reci_chn=(0.015625, 0.0078125, 0.00390625, 1.0),
)


def read(tmp_path, model: Model, with_inout: bool = True):
    path = tmp_path / "aipp.om"
    path.write_bytes(standard_om(model, with_inout=with_inout))
    return read_om(path)


def image(mode: str = "static_aipp", aipp: bytes | None = None, **tensor) -> Tensor:
    """The image Data op after ATC's Aipp InferShape: UINT8 NHWC [N, h, w, C1] (C1 = 3 for YUV420SP)."""
    values: dict[str, Any] = dict(
        name="image", dtype="DT_UINT8", shape=(1, 224, 224, 3), layout="NHWC", input_dims=(1, 336, 224, 1)
    )
    values.update(tensor)
    attrs: dict = {"_data_related_aipp_mode": mode, "_aipp_inputs": [NETWORK]}
    attrs["aipp"] = aipp_attr(**STATIC_FIELDS) if aipp is None else aipp
    return Tensor(**values, attrs=attrs)


def model_of(*inputs: Tensor, **changes) -> Model:
    model = Model(
        inputs=list(inputs),
        outputs=[Tensor("prob", "DT_FLOAT", (1, 1000), "ND", src=("fc", 0))],
    )
    for key, value in changes.items():
        setattr(model, key, value)
    return model


META = Tensor("meta", "DT_FLOAT", (1, 4), "ND")


@BOTH_SOURCES
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compressed"])
def test_static_aipp_every_field(tmp_path, with_inout, compress):
    om = read(tmp_path, model_of(image(), META, compress=compress, enum_padding=130 if compress else 0), with_inout)
    assert om.aipp == {"image": EXPECTED_STATIC}
    assert om.spec.inputs == (
        TensorSpec(
            "image",
            "UINT8",
            (1, 336, 224, 1),  # V2: YUV420SP holds 1.5 h rows of one byte
            "NHWC",
            native_type="DT_UINT8",
            preprocessing=DevicePreprocessing(
                "aipp-static", "YUV420SP_U8", 224, 224, EXPECTED_STATIC.steps(), normalizes=True
            ),
        ),
        TensorSpec("meta", "FP32", (1, 4), "ND", native_type="DT_FLOAT"),
    )
    assert om.aipp_network == {"image": AippTensor("NCHW", "DT_FLOAT", "image", 602112, (1, 3, 224, 224))}
    assert om.runtime_inputs == () and om.aipp_notes == {}


@BOTH_SOURCES
@pytest.mark.parametrize(
    "fmt, v1, v2",
    [
        ("RGB888_U8", (1, 224, 224, 3), (1, 224, 224, 3)),
        ("XRGB8888_U8", (1, 224, 224, 4), (1, 224, 224, 4)),
        ("YUV400_U8", (1, 224, 224, 1), (1, 224, 224, 1)),
        ("YUV420SP_U8", (1, 224, 224, 3), (1, 336, 224, 1)),
    ],
)
def test_the_buffer_dims_follow_the_v2_table_when_the_file_has_no_input_dims(tmp_path, with_inout, fmt, v1, v2):
    fields = dict(aipp_mode=1, related_input_rank=0, input_format=fmt, src_image_size_w=224, src_image_size_h=224)
    om = read(tmp_path, model_of(image(aipp=aipp_attr(**fields), shape=v1, input_dims=None)), with_inout)
    assert om.spec.inputs[0].shape == v2
    assert om.aipp["image"] == AippConfig(input_format=AippInputFormat[fmt], src_image_size_w=224, src_image_size_h=224)


def test_fields_the_file_leaves_out_take_atcs_defaults(tmp_path):
    om = read(tmp_path, model_of(image(aipp=aipp_attr(aipp_mode=1, input_format=3), input_dims=None)))
    assert om.aipp["image"] == AippConfig(input_format=AippInputFormat.RGB888_U8)
    assert om.aipp["image"].var_reci_chn == (1.0, 1.0, 1.0, 1.0) and om.aipp["image"].input_bias == (16, 128, 128)
    assert om.spec.inputs[0].preprocessing == DevicePreprocessing("aipp-static", "RGB888_U8", 0, 0, (), False)


def test_what_the_config_cannot_carry_becomes_a_note(tmp_path):
    fields = dict(STATIC_FIELDS, resize=True, resize_output_w=300, resize_output_h=200, single_line_mode=True)
    om = read(tmp_path, model_of(image(aipp=aipp_attr(**fields))))
    assert om.aipp["image"] == EXPECTED_STATIC
    assert om.aipp_notes == {
        "image": (
            "resize to 300x200 is on (reserved in static AIPP, not modelled)",
            "single_line_mode is on (not modelled)",
        )
    }


def dynamic_model(image_aipp: bool = True, batch_gears: bool = True) -> Model:
    """Dynamic AIPP on a dynamic-batch model: the image, ATC's AippData op and the gear selector."""
    dynamic = aipp_attr(aipp_mode=2, related_input_rank=0, max_src_image_size=602112, support_rotation=False)
    attrs: dict = {"_data_related_aipp_mode": "dynamic_aipp", "_data_aipp_data_name_map": "ascend_dynamic_aipp_data"}
    if image_aipp:
        attrs["aipp"] = dynamic
    picture = Tensor(
        "image", "DT_UINT8", (1, 602112), "NHWC", origin_dims=(-1, 3, 224, 224), aipp_dims=(-1, -1, -1, -1), attrs=attrs
    )
    params = Tensor(
        "ascend_dynamic_aipp_data",
        "DT_UINT8",
        (64 + 96 * 4,),
        "ND",
        op_type="AippData",
        attrs={"_data_related_aipp_mode": "dynamic_aipp_conf", "aipp": dynamic, "_data_aipp_data_name_map": "image"},
    )
    return model_of(picture, params, **({"dynamic_type": 1, "gears": [[1], [4]]} if batch_gears else {}))


EXPECTED_DYNAMIC = AippConfig(aipp_mode=AippMode.DYNAMIC, related_input_rank=0, max_src_image_size=602112)


@BOTH_SOURCES
@pytest.mark.parametrize("image_aipp", [True, False], ids=["on-image", "on-aippdata-only"])
def test_dynamic_aipp_parameters_are_a_runtime_input(tmp_path, with_inout, image_aipp):
    om = read(tmp_path, dynamic_model(image_aipp), with_inout)
    assert om.spec.inputs == (
        TensorSpec(
            "image",
            "UINT8",
            (-1, -1, -1, -1),  # _dynamic_aipp_input_dims: the image size is set per request
            "NHWC",
            native_type="DT_UINT8",
            preprocessing=DevicePreprocessing("aipp-dynamic", ""),
        ),
    )
    assert om.runtime_inputs == (
        RuntimeInput("ascend_dynamic_aipp_data", 1, "aipp_data", "image"),
        RuntimeInput("ascend_mbatch_shape_data", 2, "dynamic_shape"),
    )
    assert om.dynamic_input == "ascend_mbatch_shape_data"
    assert om.aipp == {"image": EXPECTED_DYNAMIC}
    assert om.spec.batch == BatchSupport("gears", (1, 4))


def test_an_old_file_without_aipp_modes_is_read_by_names_and_fields(tmp_path):
    dynamic = aipp_attr(aipp_mode=2, related_input_rank=0, max_src_image_size=1000)
    picture = Tensor("image", "DT_UINT8", (1, 1000), "NHWC", aipp_dims=(1, -1, -1, -1), attrs={"aipp": dynamic})
    params = Tensor("ascend_dynamic_aipp_data", "DT_UINT8", (160,), "ND")
    om = read(tmp_path, model_of(picture, params), with_inout=False)
    assert [t.name for t in om.spec.inputs] == ["image"]
    assert om.runtime_inputs == (RuntimeInput("ascend_dynamic_aipp_data", 1, "aipp_data", ""),)
    assert om.aipp["image"] == AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=1000)


def test_image_size_gears_skip_a_dynamic_aipp_image_and_scale_a_yuv_buffer(tmp_path):
    dynamic = aipp_attr(aipp_mode=2, related_input_rank=2, max_src_image_size=602112)
    model = model_of(
        Tensor("img", "DT_FLOAT", (1, 3, 448, 448), "NCHW", origin_dims=(1, 3, -1, -1)),
        image(
            aipp=aipp_attr(aipp_mode=1, related_input_rank=1, input_format=1),
            name="yuv",
            shape=(1, 448, 448, 3),
            origin_dims=(1, -1, -1, 3),
            input_dims=(1, -1, -1, 1),
        ),
        Tensor(
            "pic",
            "DT_UINT8",
            (1, 602112),
            "NHWC",
            aipp_dims=(1, -1, -1, -1),
            attrs={"_data_related_aipp_mode": "dynamic_aipp", "aipp": dynamic},
        ),
        Tensor("ascend_dynamic_aipp_data", "DT_UINT8", (160,), "ND", op_type="AippData"),
        dynamic_type=2,
        gears=[[224, 224], [448, 320]],
    )
    om = read(tmp_path, model)
    assert om.spec.shape_gears == (
        ShapeGear({"img": (1, 3, 224, 224), "yuv": (1, 336, 224, 1)}, "224x224"),
        ShapeGear({"img": (1, 3, 448, 320), "yuv": (1, 672, 320, 1)}, "448x320"),
    )


@BOTH_SOURCES
@pytest.mark.parametrize(
    "tensor, pattern",
    [
        (image(mode="static"), r"_data_related_aipp_mode is 'static', expected one of static_aipp, dynamic_aipp"),
        (
            image(aipp=aipp_attr(aipp_mode=1, input_format="RGB24")),
            r"input_format is 17 \(RGB24\); the AIPP input formats this reader knows are YUV420SP_U8 \(1\)",
        ),
        (image(aipp=aipp_attr(aipp_mode=0)), r"aipp_mode is 0, expected 1 \(static\) or 2 \(dynamic\)"),
        (
            image(aipp=attr_named({"aipp_mode": attr_i(1), "input_format": attr_i(3), "crop": attr_s("yes")})),
            r"field crop is 'yes', expected true or false",
        ),
        (
            image(aipp=attr_named({"aipp_mode": attr_i(1), "input_format": attr_i(3), "mean_chn_0": attr_b(True)})),
            r"field mean_chn_0 is True, expected an integer",
        ),
        (
            image(mode="static_aipp", aipp=aipp_attr(aipp_mode=2, max_src_image_size=4)),
            r"_data_related_aipp_mode is 'static_aipp' but its aipp attribute has aipp_mode 'dynamic'",
        ),
        (
            image(aipp=attr_s("aipp_mode: static")),
            r"attribute 'aipp' is 'aipp_mode: static', expected named attributes",
        ),
    ],
)
def test_malformed_aipp_attributes_are_refused(tmp_path, with_inout, tensor, pattern):
    with pytest.raises(OmFormatError, match=pattern):
        read(tmp_path, model_of(tensor), with_inout)
