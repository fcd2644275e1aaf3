"""read_om end to end on synthetic files: every reported field against what the builder laid out."""

from __future__ import annotations

import pytest

from ge_python_backend.ascend.om import IO_FROM_INOUT, IO_FROM_MODEL_DEF, read_om
from ge_python_backend.ascend.resources import ModelResources
from ge_python_backend.engines.offline import model_resources
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import BatchSupport, ShapeGear, TensorSpec
from tests.support.om_builder import (
    MODEL_DEF,
    MODEL_INOUT_INFO,
    TASK_INFO,
    VERSION_1,
    Header,
    Model,
    Tensor,
    attr_i,
    attr_list_i,
    attr_s,
    f_bytes,
    inout,
    map_entry,
    model_def,
    om_file,
    op_def,
    simple_model_def,
    standard_om,
    tensor_desc,
    tlv,
)

BOTH_SOURCES = pytest.mark.parametrize("with_inout", [True, False], ids=["inout", "modeldef"])


def write(tmp_path, data: bytes, name: str = "model.om"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def read(tmp_path, data: bytes):
    return read_om(write(tmp_path, data))


def classifier(**changes) -> Model:
    model = Model(
        name="classifier",
        inputs=[
            Tensor("image", "DT_FLOAT", (8, 3, 224, 224), "NCHW"),
            Tensor("mask", "DT_UINT8", (8, 224, 224), "ND"),
        ],
        outputs=[
            Tensor("logits", "DT_FLOAT16", (8, 1000), "ND", src=("fc", 0)),
            Tensor("feat", "DT_FLOAT", (8, 2048), "ND", src=("pool", 1)),
        ],
        data_op_order=[1, 0],
    )
    for key, value in changes.items():
        setattr(model, key, value)
    return model


@BOTH_SOURCES
def test_static_model_inputs_outputs_and_batch(tmp_path, with_inout):
    om = read(tmp_path, standard_om(classifier(), with_inout=with_inout))
    assert om.io_source == (IO_FROM_INOUT if with_inout else IO_FROM_MODEL_DEF)
    assert om.spec.inputs == (
        TensorSpec("image", "FP32", (8, 3, 224, 224), "NCHW", native_type="DT_FLOAT"),
        TensorSpec("mask", "UINT8", (8, 224, 224), "ND", native_type="DT_UINT8"),
    )
    assert om.spec.outputs == (
        TensorSpec("output_0_fc_0", "FP16", (8, 1000), "ND", native_type="DT_FLOAT16"),
        TensorSpec("output_1_pool_1", "FP32", (8, 2048), "ND", native_type="DT_FLOAT"),
    )
    assert om.spec.batch == BatchSupport("static", (8,))
    assert om.spec.shape_gears == () and om.spec.gear_kind == "" and om.dynamic_input is None
    assert om.spec.source == "om"


TYPES = [
    ("DT_FLOAT", "FP32"),
    ("DT_FLOAT16", "FP16"),
    ("DT_DOUBLE", "FP64"),
    ("DT_BF16", "BF16"),
    ("DT_INT8", "INT8"),
    ("DT_INT16", "INT16"),
    ("DT_INT32", "INT32"),
    ("DT_INT64", "INT64"),
    ("DT_UINT8", "UINT8"),
    ("DT_UINT16", "UINT16"),
    ("DT_UINT32", "UINT32"),
    ("DT_UINT64", "UINT64"),
    ("DT_BOOL", "BOOL"),
    ("DT_STRING", "BYTES"),
    ("DT_COMPLEX64", ""),
]


@BOTH_SOURCES
@pytest.mark.parametrize("native, triton", TYPES)
def test_both_dtype_enums_map_to_triton_names(tmp_path, with_inout, native, triton):
    model = Model(inputs=[Tensor("x", native, (2,))], outputs=[Tensor("y", native, (2,), src=("op", 0))])
    om = read(tmp_path, standard_om(model, with_inout=with_inout))
    assert (om.spec.inputs[0].dtype, om.spec.inputs[0].native_type) == (triton, native)
    assert (om.spec.outputs[0].dtype, om.spec.outputs[0].native_type) == (triton, native)


def test_inout_format_keeps_only_the_primary_format(tmp_path):
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (1, 1, 4, 4, 16), "NC1HWC0", format_bits=(5 << 24) | (3 << 8))],
        outputs=[Tensor("y", "DT_FLOAT", (1, 16), "ND", src=("op", 0))],
    )
    om = read(tmp_path, standard_om(model))
    assert om.spec.inputs[0].format == "NC1HWC0"


@BOTH_SOURCES
@pytest.mark.parametrize(
    "out_node_names, expected",
    [
        (["scores:0", "boxes"], ["scores:0", "boxes:1"]),  # one per output: used, ":src_index" added when missing
        (["only_one"], ["output_0_fc_0", "output_1_pool_1"]),  # count differs: derived names
    ],
)
def test_output_names(tmp_path, with_inout, out_node_names, expected):
    om = read(tmp_path, standard_om(classifier(out_node_names=out_node_names), with_inout=with_inout))
    assert [t.name for t in om.spec.outputs] == expected


def test_fractal_z_output_is_reported_as_hwck(tmp_path):
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (1,))],
        outputs=[Tensor("w", "DT_FLOAT", (64, 3, 7, 5), "FRACTAL_Z", src=("conv", 0))],
    )
    om = read(tmp_path, standard_om(model, with_inout=False))
    assert om.spec.outputs[0].shape == (7, 5, 3, 64)


def batch_model(compress: bool) -> Model:
    return Model(
        inputs=[
            Tensor("x", "DT_FLOAT", (8, 3, 32, 32), "NCHW", origin_dims=(-1, 3, 32, 32)),
            Tensor("scale", "DT_FLOAT", (8, 1), "ND", origin_dims=(-1, 1)),
        ],
        outputs=[Tensor("y", "DT_FLOAT", (8, 10), "ND", src=("fc", 0))],
        dynamic_type=1,
        gears=[[8], [1], [4]],
        compress=compress,
        enum_padding=130 if compress else 0,
    )


@BOTH_SOURCES
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compressed"])
def test_dynamic_batch_gears(tmp_path, with_inout, compress):
    om = read(tmp_path, standard_om(batch_model(compress), with_inout=with_inout))
    assert om.spec.batch == BatchSupport("gears", (1, 4, 8))
    assert [t.shape for t in om.spec.inputs] == [(-1, 3, 32, 32), (-1, 1)]
    assert [t.shape for t in om.spec.outputs] == [(-1, 10)]
    assert om.dynamic_input == "ascend_mbatch_shape_data"
    assert "ascend_mbatch_shape_data" not in [t.name for t in om.spec.inputs]
    assert om.spec.shape_gears == () and om.spec.gear_kind == ""


@BOTH_SOURCES
def test_dynamic_image_size_gears(tmp_path, with_inout):
    model = Model(
        inputs=[
            Tensor("img", "DT_FLOAT", (1, 3, 448, 448), "NCHW", origin_dims=(1, 3, -1, -1)),
            Tensor("img_nhwc", "DT_UINT8", (1, 448, 448, 3), "NHWC", origin_dims=(1, -1, -1, 3)),
            Tensor("meta", "DT_INT32", (1, 4), "ND"),
        ],
        outputs=[Tensor("y", "DT_FLOAT", (1, 10), "ND", src=("fc", 0))],
        dynamic_type=2,
        gears=[[224, 224], [448, 320]],
    )
    om = read(tmp_path, standard_om(model, with_inout=with_inout))
    assert om.spec.gear_kind == "hw"
    assert om.spec.shape_gears == (
        ShapeGear({"img": (1, 3, 224, 224), "img_nhwc": (1, 224, 224, 3)}, "224x224"),
        ShapeGear({"img": (1, 3, 448, 320), "img_nhwc": (1, 448, 320, 3)}, "448x320"),
    )
    assert om.spec.input("img").shape == (1, 3, -1, -1)
    assert om.spec.batch == BatchSupport("static", (1,))
    assert om.dynamic_input == "ascend_mbatch_shape_data"


def dims_model(order: list[str]) -> Model:
    return Model(
        inputs=[
            Tensor("x", "DT_FLOAT", (4, 3, 64), "ND", origin_dims=(-1, 3, -1)),
            Tensor("y", "DT_INT64", (4, 9), "ND", origin_dims=(-1, 9)),
            Tensor("z", "DT_FLOAT", (2,), "ND"),
        ],
        outputs=[Tensor("out", "DT_FLOAT", (4, 3), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=[[1, 16, 1], [4, 64, 4]] if order != ["y", "x"] else [[1, 1, 16], [4, 4, 64]],
        shape_order=order,
    )


@BOTH_SOURCES
@pytest.mark.parametrize("order", [[], ["x", "y"], ["y", "x"]], ids=["input-order", "designated", "reversed"])
def test_dynamic_dims_gears_fill_every_minus_one_in_order(tmp_path, with_inout, order):
    om = read(tmp_path, standard_om(dims_model(order), with_inout=with_inout))
    assert om.spec.gear_kind == "dims"
    shapes = [dict(g.shapes) for g in om.spec.shape_gears]
    assert shapes == [{"x": (1, 3, 16), "y": (1, 9)}, {"x": (4, 3, 64), "y": (4, 9)}]
    assert om.spec.batch == BatchSupport("gears", (1, 4))  # the gears vary axis 0
    assert [t.shape for t in om.spec.inputs] == [(-1, 3, -1), (-1, 9), (2,)]


def test_dims_gears_without_a_batch_axis_keep_shape_based_batch(tmp_path):
    model = Model(
        inputs=[Tensor("seq", "DT_INT32", (2, 128), "ND", origin_dims=(2, -1))],
        outputs=[Tensor("out", "DT_FLOAT", (2, 5), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=[[32], [128]],
    )
    om = read(tmp_path, standard_om(model))
    assert [dict(g.shapes) for g in om.spec.shape_gears] == [{"seq": (2, 32)}, {"seq": (2, 128)}]
    assert [g.label for g in om.spec.shape_gears] == ["32", "128"]
    assert om.spec.batch == BatchSupport("static", (2,))


@BOTH_SOURCES
@pytest.mark.parametrize(
    "changes, pattern",
    [
        ({"dynamic_type": 1, "gears": [[0]]}, r"dynamic batch gear 0 is \[0\], expected one positive batch size"),
        (
            {
                "dynamic_type": 2,
                "gears": [[224]],
                "inputs": [Tensor("x", "DT_FLOAT", (1, 3, 8, 8), "NCHW", origin_dims=(1, 3, -1, -1))],
            },
            r"dynamic image size gear 0 is \[224\], expected positive \(h, w\)",
        ),
        (
            {"dynamic_type": 2, "gears": [[224, 224]]},
            r"dynamic image size gears but no input with dynamic H and W axes",
        ),
        ({"dynamic_type": 3, "gears": [[1, 2]]}, r"dynamic dims gear 0 is \[1, 2\]: expected 1 positive values"),
        ({"dynamic_type": 3, "gears": [[1]], "shape_order": ["nope"]}, r"designated shape order names input 'nope'"),
    ],
)
def test_inconsistent_gears_are_refused(tmp_path, with_inout, changes, pattern):
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (1, 8), "ND", origin_dims=(-1, 8))],
        outputs=[Tensor("y", "DT_FLOAT", (1, 8), "ND", src=("op", 0))],
    )
    for key, value in changes.items():
        setattr(model, key, value)
    with pytest.raises(OmFormatError, match=pattern):
        read(tmp_path, standard_om(model, with_inout=with_inout))


def test_facts_from_model_attributes_and_header(tmp_path):
    cmdline = "atc --model=net.onnx --framework=5 --output=net --soc_version=Ascend310P3 --input_shape=x:1,3"
    model = classifier(
        model_attrs={
            "soc_version": attr_s("Ascend310P3"),
            "atc_version": attr_s("7.0.0"),
            "atc_cmdline": attr_s(cmdline),
            "framework_type": attr_s("5"),
            "opp_version": attr_s("7.0.0.1"),
            "memory_size": attr_i(123456),
            "weight_size": attr_i(64),
            "stream_num": attr_i(2),
            "opp_path": attr_s("unused"),
        }
    )
    om = read(tmp_path, standard_om(model, Header(name="net", platform_version="1.11.z.0", om_ir_version=2)))
    assert dict(om.spec.facts) == {
        "soc_version": "Ascend310P3",
        "atc_version": "7.0.0",
        "atc_cmdline": cmdline,
        "framework_type": "5",
        "framework": "onnx",
        "opp_version": "7.0.0.1",
        "memory_size": "123456",
        "weight_size": "64",
        "stream_num": "2",
        "om_name": "net",
        "om_header_version": "2.0",
        "om_model_type": "IR",
        "om_ir_version": "2",
        "platform_version": "1.11.z.0",
    }


def test_the_streams_and_events_a_model_creates_come_from_its_stream_num_and_event_num(tmp_path):
    """ATTR_MODEL_STREAM_NUM "stream_num" / ATTR_MODEL_EVENT_NUM "event_num" on the ModelDef
    (ge_attr_define.cc 744, 746; read at load by model_utils.cc 1321-1324)."""
    both = classifier(model_attrs={"stream_num": attr_i(3), "event_num": attr_i(7)})
    path = write(tmp_path, standard_om(both), "both.om")
    assert read_om(path).spec.facts["event_num"] == "7"
    assert model_resources(path) == ModelResources(3, 7, True)
    streams_only = write(tmp_path, standard_om(classifier(model_attrs={"stream_num": attr_i(2)})), "streams.om")
    assert model_resources(streams_only) == ModelResources(2, 0, True)
    neither = write(tmp_path, standard_om(classifier()), "neither.om")
    assert model_resources(neither) == ModelResources(1, 0, False)
    assert "assumed" in model_resources(neither).describe()
    assert model_resources(write(tmp_path, b"not a model", "bad.om")) == ModelResources()
    assert model_resources(tmp_path / "missing.om") == ModelResources()


@pytest.mark.parametrize(
    "value, name",
    [("0", "caffe"), ("1", "mindspore"), ("3", "tensorflow"), ("TensorFlow", "tensorflow"), ("Other", "Other")],
)
def test_framework_names(tmp_path, value, name):
    om = read(tmp_path, standard_om(classifier(model_attrs={"framework_type": attr_s(value)})))
    assert om.spec.facts["framework"] == name


def test_header_and_partitions_are_reported(tmp_path):
    data = standard_om(classifier(), Header(name="cls", wide=True))
    om = read(tmp_path, data)
    assert (om.header.version_name, om.header.name, om.header.model_num, om.header.length) == ("2.0", "cls", 1, 0)
    assert om.header.model_length == len(data) - 256 and om.file_size == len(data)
    (model,) = om.models
    assert (model.index, model.name, model.table_offset, model.table_bits) == (0, "classifier", 256, 64)
    assert [p.type_name for p in model.partitions] == ["MODEL_INOUT_INFO", "MODEL_DEF", "WEIGHTS_DATA", "TASK_INFO"]
    assert model.partitions[0].offset == 256 + 8 + 4 * 24
    assert om.submodel_names == ()


def test_v1_header_file(tmp_path):
    om = read(
        tmp_path, standard_om(classifier(), Header(version=VERSION_1, platform_version="1.0.z.0"), with_inout=False)
    )
    assert (om.header.version_name, om.header.platform_version, om.models[0].table_bits) == ("1.0", "1.0.z.0", 32)
    assert [t.name for t in om.spec.inputs] == ["image", "mask"]


def test_multi_model_file_lists_submodels_and_reads_the_root(tmp_path):
    root = classifier(name="root")
    data = om_file(
        [
            [(MODEL_INOUT_INFO, inout(root)), (MODEL_DEF, model_def(root)), (TASK_INFO, b"t")],
            [(MODEL_DEF, simple_model_def("sub_1")), (TASK_INFO, b"tt")],
            [(TASK_INFO, b"no model def")],
        ],
        Header(wide=True, model_num=3, is_unknow_model=1),
    )
    om = read(tmp_path, data)
    assert [m.name for m in om.models] == ["root", "sub_1", ""]
    assert om.submodel_names == ("sub_1", "")
    assert om.io_source == IO_FROM_INOUT and [t.name for t in om.spec.inputs] == ["image", "mask"]


def test_flow_model_type_uses_64bit_table(tmp_path):
    om = read(tmp_path, standard_om(classifier(), Header(model_type=3), with_inout=False))
    assert (om.header.model_type_name, om.models[0].table_bits) == ("flow", 64)


def test_encrypted_om_is_refused(tmp_path):
    path = write(tmp_path, standard_om(classifier(), Header(is_encrypt=1)), "secret.om")
    with pytest.raises(OmFormatError, match=r"secret\.om: is an encrypted OM \(is_encrypt=1\)"):
        read_om(path)


def test_truncated_file_names_the_file_and_the_length_field(tmp_path):
    data = standard_om(classifier())
    path = write(tmp_path, data[:-1], "cut.om")
    with pytest.raises(
        OmFormatError,
        match=rf"cut\.om: header: length says the body .* is {len(data) - 256} bytes, "
        rf"but the file has {len(data) - 257}",
    ):
        read_om(path)


def test_paths_that_are_not_files(tmp_path):
    with pytest.raises(OmFormatError, match=r"missing\.om: cannot read the file: No such file"):
        read_om(tmp_path / "missing.om")
    with pytest.raises(OmFormatError, match="cannot read the file|is not a regular file"):
        read_om(tmp_path)
    with pytest.raises(OmFormatError, match=r"empty\.om: is empty, not a CANN OM"):
        read_om(write(tmp_path, b"", "empty.om"))


def test_model_without_model_def_is_refused(tmp_path):
    with pytest.raises(OmFormatError, match="model 0 has no MODEL_DEF partition"):
        read(tmp_path, om_file([[(TASK_INFO, b"x")]]))


def test_inout_with_two_gear_kinds_is_refused(tmp_path):
    model = classifier()
    data = om_file(
        [
            [
                (
                    MODEL_INOUT_INFO,
                    inout(model)
                    + tlv(2, b"\x01\x00\x00\x00" + (4).to_bytes(8, "little"))
                    + tlv(3, b"\x01\x00\x00\x00\x02\x00\x00\x00" + bytes(16)),
                ),
                (MODEL_DEF, model_def(model)),
            ]
        ]
    )
    with pytest.raises(OmFormatError, match=r"gears of more than one kind \(batch, hw\)"):
        read(tmp_path, data)


def test_duplicate_data_index_is_refused(tmp_path):
    raw = model_def(classifier())
    second = map_entry(10, b"index", attr_i(1))  # the "mask" Data op
    assert raw.count(second) == 1
    data = om_file([[(MODEL_DEF, raw.replace(second, map_entry(10, b"index", attr_i(0))))]])
    with pytest.raises(OmFormatError, match=r"Data ops 'mask' and 'image' both have input index 0"):
        read(tmp_path, data)


def graph_model_def(*ops: bytes) -> bytes:
    return f_bytes(1, "m") + f_bytes(7, f_bytes(1, "g") + b"".join(f_bytes(6, op) for op in ops))


def test_data_op_without_input_desc_and_netoutput_without_sources(tmp_path):
    with pytest.raises(OmFormatError, match=r"Data op 'd' has no input_desc"):
        read(tmp_path, om_file([[(MODEL_DEF, graph_model_def(op_def("d", "Data")))]]))
    no_src = op_def("out", "NetOutput", input_desc=[tensor_desc(Tensor("y", "DT_FLOAT", (1,)))])
    with pytest.raises(OmFormatError, match=r"NetOutput op 'out' has 1 inputs but 0 src_name and 0 src_index"):
        read(tmp_path, om_file([[(MODEL_DEF, graph_model_def(no_src))]]))


def test_model_def_without_graph(tmp_path):
    with pytest.raises(OmFormatError, match="MODEL_DEF of model 'm' has no graph"):
        read(tmp_path, om_file([[(MODEL_DEF, f_bytes(1, "m"))]]))


def _case_model(*case_attrs) -> bytes:
    data = op_def("x", "Data", [(b"index", attr_i(0))], [tensor_desc(Tensor("x", "DT_FLOAT", (1, 4)))])
    return graph_model_def(data, op_def("ascend_mbatch_shape_case", "Case", list(case_attrs)))


def test_case_op_rules(tmp_path):
    no_type = _case_model((b"_batch_num", attr_i(1)), (b"_pred_value_0", attr_list_i([2])))
    assert read(tmp_path, om_file([[(MODEL_DEF, no_type)]])).spec.batch == BatchSupport("static", (1,))
    missing = _case_model(
        (b"_batch_num", attr_i(2)), (b"_pred_value_0", attr_list_i([2])), (b"mbatch_dynamic_type", attr_i(1))
    )
    with pytest.raises(OmFormatError, match=r"_batch_num is 2 but _pred_value_1 is missing"):
        read(tmp_path, om_file([[(MODEL_DEF, missing)]]))
    unknown = _case_model(
        (b"_batch_num", attr_i(1)), (b"_pred_value_0", attr_list_i([2])), (b"mbatch_dynamic_type", attr_i(7))
    )
    with pytest.raises(
        OmFormatError, match=r"mbatch_dynamic_type is 7, expected 1 \(batch\), 2 \(image size\) or 3 \(dims\)"
    ):
        read(tmp_path, om_file([[(MODEL_DEF, unknown)]]))
