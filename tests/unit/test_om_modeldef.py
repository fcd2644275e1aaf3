"""The ModelDef subset: attribute values, compressed attribute names, graphs and ops."""

from __future__ import annotations

import pytest

from ge_python_backend.ascend.om.modeldef import ModelDef
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import (
    Model,
    Tensor,
    attr_b,
    attr_f,
    attr_i,
    attr_list_b,
    attr_list_i,
    attr_list_list_i,
    attr_list_s,
    attr_s,
    encode_enum_name,
    f_bytes,
    f_int,
    map_entry,
    model_def,
    op_def,
)


def model_with(model_attrs: bytes = b"", op_attrs=(), name: str = "m") -> ModelDef:
    graph = f_bytes(1, "g") + f_bytes(6, op_def("op", "Custom", list(op_attrs)))
    return ModelDef(f_bytes(1, name) + f_int(2, 2) + f_bytes(7, graph) + model_attrs, base=0)


def test_attribute_value_kinds():
    attrs = (
        map_entry(11, "s", attr_s("Ascend310"))
        + map_entry(11, "i", attr_i(-7))
        + map_entry(11, "f", attr_f(0.25))
        + map_entry(11, "b", attr_b(False))
        + map_entry(11, "li", attr_list_i([1, -1, 3]))
        + map_entry(11, "li_unpacked", attr_list_i([4, 5], packed=False))
        + map_entry(11, "ls", attr_list_s(["a", "b"]))
        + map_entry(11, "lb", attr_list_b([True, False]))
        + map_entry(11, "lli", attr_list_list_i([[1, 2], [3]]))
        + map_entry(11, "empty_list", f_bytes(1, f_int(20, 1)))
    )
    model = model_with(attrs)
    assert model.name == "m" and model.version == 2
    assert model.attrs == {
        "s": "Ascend310",
        "i": -7,
        "f": 0.25,
        "b": False,
        "li": (1, -1, 3),
        "li_unpacked": (4, 5),
        "ls": ("a", "b"),
        "lb": (True, False),
        "lli": ((1, 2), (3,)),
        "empty_list": (),
    }


def test_compressed_names_single_and_multi_digit_are_decoded():
    model = Model(
        inputs=[Tensor("x", "DT_FLOAT", (1, 3), "NCHW")],
        outputs=[Tensor("y", "DT_FLOAT", (1, 3), src=("relu", 0))],
        compress=True,
        enum_padding=300,  # real names land at indices >= 300: two base-127 digits
    )
    decoded = ModelDef(model_def(model), base=0)
    data, conv, net_output = decoded.graphs[0].ops
    assert (data.name, data.type) == ("x", "Data")
    assert data.attrs["index"] == 0
    assert data.attrs["_input_name_key"] == ("__input0",)  # compressed list of strings
    assert conv.attrs["_kernelname"] == "k"  # compressed string value
    assert data.input_desc[0].attrs["origin_format"] == "NCHW"  # tensor attribute
    assert net_output.attrs["_is_netoutput"] is True
    assert decoded.dictionary.names[300] == "index"


def test_encode_enum_name_digit_order():
    # the builder's encoder, checked against the layout in om-format.md: least significant digit first, +1
    assert encode_enum_name(8) == b"\x00\t"
    assert encode_enum_name(127 * 2 + 5) == b"\x00\x06\x03"


def _dictionary(names, values=(), use_string=None) -> bytes:
    use_string = [False] * len(names) if use_string is None else use_string
    return (
        map_entry(11, "attr_name_enum", attr_list_s(names))
        + map_entry(11, "attr_value_enum", attr_list_s(values))
        + map_entry(11, "attrs_use_string_value", attr_list_b(use_string))
    )


def test_string_values_use_the_value_dictionary():
    model = model_with(
        _dictionary(["index", "mode"], ["fast", "slow"], [False, True]),
        [(encode_enum_name(1), attr_i(1)), (encode_enum_name(0), attr_i(4)), (b"plain", attr_s("kept"))],
    )
    assert model.graphs[0].ops[0].attrs == {"mode": "slow", "index": 4, "plain": "kept"}


@pytest.mark.parametrize(
    "dictionary, op_attr, pattern",
    [
        (
            _dictionary(["index"]),
            (encode_enum_name(5), attr_i(0)),
            r"attr_name_enum\[5\], but the model's attr_name_enum has 1",
        ),
        (b"", (encode_enum_name(0), attr_i(0)), r"attr_name_enum has 0 entries"),
        (_dictionary(["index"]), (b"\x00", attr_i(0)), "malformed compressed attribute name"),
        (_dictionary(["index"]), (b"\x00\x01\x00", attr_i(0)), "malformed compressed attribute name"),
        (_dictionary(["index"]), (b"\x00" + b"\x02" * 6, attr_i(0)), "malformed compressed attribute name"),
        (
            _dictionary(["mode"], ["a"], [True]),
            (encode_enum_name(0), attr_i(3)),
            r"value index 3 outside attr_value_enum \(1 entries\)",
        ),
        (_dictionary(["mode"], ["a"], [True]), (encode_enum_name(0), attr_f(1.0)), "must be an int or a list of ints"),
        (_dictionary(["a", "b"], use_string=[True]), (b"x", attr_i(0)), "one bool per attr_name_enum entry"),
    ],
)
def test_bad_compression_raises_om_format_error(dictionary, op_attr, pattern):
    model = model_with(dictionary, [op_attr])
    with pytest.raises(OmFormatError, match=pattern):
        _ = model.graphs[0].ops[0].attrs


def test_op_fields_and_error_context():
    model = model_with(op_attrs=[(b"bad", f_bytes(3, b"x"))])  # i encoded as bytes
    op = model.graphs[0].ops[0]
    assert (op.name, op.type, op.src_name, op.src_index, op.input_desc) == ("op", "Custom", (), (), ())
    with pytest.raises(OmFormatError, match=r"MODEL_DEF\.graph\[0\]\.op\[0\] \(Custom 'op'\).*field 3 \(i\)"):
        _ = op.attrs
