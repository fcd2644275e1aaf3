"""Dynamic-dims gears in CANN's layout: ``_pred_value_<i>`` holds the -1 values of the inputs of ATC's
--input_shape, in that order (static inputs included in the order); every expectation below is
expanded by hand from that rule (hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--dynamic_dims.md:31,
docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDynamicDims.md), never from the reader."""

from __future__ import annotations

import pytest

from ge_python_backend.ascend.om import read_om
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import ShapeGear
from tests.support.om_builder import Model, Tensor, standard_om

BOTH_SOURCES = pytest.mark.parametrize("with_inout", [True, False], ids=["inout", "modeldef"])


def read(tmp_path, model: Model, with_inout: bool):
    path = tmp_path / "dims.om"
    path.write_bytes(standard_om(model, with_inout=with_inout))
    return read_om(path)


def doc_inputs() -> list[Tensor]:
    """The doc's example, data(1,1,40,-1), label(1,-1), mask(-1,-1), at their largest gear, plus a static scale."""
    return [
        Tensor("data", "DT_FLOAT", (1, 1, 40, 40), "ND", origin_dims=(1, 1, 40, -1)),
        Tensor("label", "DT_FLOAT", (1, 30), "ND", origin_dims=(1, -1)),
        Tensor("mask", "DT_FLOAT", (2, 2), "ND", origin_dims=(-1, -1)),
        Tensor("scale", "DT_FLOAT", (1, 4), "ND"),
    ]


def dims_model(order: list[str], gears: list[list[int]]) -> Model:
    return Model(
        inputs=doc_inputs(),
        outputs=[Tensor("out", "DT_FLOAT", (1, 40), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=gears,
        shape_order=order,
    )


@BOTH_SOURCES
def test_the_documented_example(tmp_path, with_inout):
    # aclmdlGetInputDynamicDims.md: gear "20,20,1,1" is data [1,1,40,20], label [1,20], mask [1,1]
    om = read(tmp_path, dims_model(["data", "label", "mask"], [[20, 20, 1, 1], [40, 30, 2, 2]]), with_inout)
    assert om.shape_order == ("data", "label", "mask")
    assert om.spec.gear_kind == "dims"
    assert om.spec.shape_gears == (
        ShapeGear({"data": (1, 1, 40, 20), "label": (1, 20), "mask": (1, 1)}, "20,20,1,1"),
        ShapeGear({"data": (1, 1, 40, 40), "label": (1, 30), "mask": (2, 2)}, "40,30,2,2"),
    )
    assert [t.shape for t in om.spec.inputs] == [(1, 1, 40, -1), (1, -1), (-1, -1), (1, 4)]


@BOTH_SOURCES
def test_static_input_first_and_dynamic_inputs_in_reverse_graph_order(tmp_path, with_inout):
    # --input_shape="scale:1,4;mask:-1,-1;label:1,-1;data:1,1,40,-1" --dynamic_dims="1,1,20,20;2,2,30,40"
    order = ["scale", "mask", "label", "data"]
    om = read(tmp_path, dims_model(order, [[1, 1, 20, 20], [2, 2, 30, 40]]), with_inout)
    assert om.shape_order == tuple(order)
    first, second = om.spec.shape_gears
    assert dict(first.shapes) == {"scale": (1, 4), "mask": (1, 1), "label": (1, 20), "data": (1, 1, 40, 20)}
    assert list(first.shapes) == order  # a gear lists its inputs in the --input_shape order
    assert dict(second.shapes) == {"scale": (1, 4), "mask": (2, 2), "label": (1, 30), "data": (1, 1, 40, 40)}
    assert (first.label, second.label) == ("1,1,20,20", "2,2,30,40")


@BOTH_SOURCES
def test_files_without_an_order_take_the_dynamic_inputs_in_model_order(tmp_path, with_inout):
    om = read(tmp_path, dims_model([], [[20, 20, 1, 1], [40, 30, 2, 2]]), with_inout)
    assert om.shape_order == ("data", "label", "mask")
    assert dict(om.spec.shape_gears[0].shapes) == {"data": (1, 1, 40, 20), "label": (1, 20), "mask": (1, 1)}


@BOTH_SOURCES
def test_the_order_follows_the_data_index_not_the_graph_order(tmp_path, with_inout):
    model = dims_model([], [[20, 20, 1, 1], [40, 30, 2, 2]])
    model.data_op_order = [3, 2, 1, 0]  # the ops appear reversed in the graph; their index attributes decide
    om = read(tmp_path, model, with_inout)
    assert om.shape_order == ("data", "label", "mask")


def test_other_gear_kinds_have_no_order(tmp_path):
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (4, 3), "ND", origin_dims=(-1, 3))],
        outputs=[Tensor("y", "DT_FLOAT", (4, 3), "ND", src=("op", 0))],
        dynamic_type=1,
        gears=[[1], [4]],
        shape_order=["x"],
    )
    assert read(tmp_path, model, True).shape_order == ()


@BOTH_SOURCES
@pytest.mark.parametrize(
    "order, gears, pattern",
    [
        (
            ["scale", "mask", "label", "data"],
            [[1, 1, 20], [2, 2, 30]],
            r"dims gear 0 is \[1, 1, 20\]: expected 4 positive values, one per -1 axis of the inputs "
            r"\['scale', 'mask', 'label', 'data'\]",
        ),
        (["mask", "data"], [[1, 1, 20], [2, 2, 30]], r"inputs \['label'\] have -1 axes but the designated shape order"),
        (["data", "data"], [[1, 2], [3, 4]], r"names an input twice"),
        (["data", "label", "ghost"], [[1, 2], [3, 4]], r"names input 'ghost', which the model does not have"),
        (["data", "label", "mask"], [[20, 0, 1, 1], [40, 30, 2, 2]], r"dims gear 0 is \[20, 0, 1, 1\]"),
    ],
)
def test_inconsistent_orders_are_refused(tmp_path, with_inout, order, gears, pattern):
    with pytest.raises(OmFormatError, match=pattern):
        read(tmp_path, dims_model(order, gears), with_inout)
