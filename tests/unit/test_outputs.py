"""OutputContract: an answer leaves only as the config declares it. Each conversion is checked
against what numpy itself says survives it (a round trip that gives the value back)."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.errors import ContractError
from ge_python_backend.serving.outputs import DeclaredTensor, OutputContract
from ge_python_backend.serving.requests import RequestInfo

ALL = RequestInfo()


def contract(dtype: str, dims=(1,), reshape=None, batching=True) -> OutputContract:
    return OutputContract([DeclaredTensor("y", dtype, dims, reshape)], batching=batching, source="postprocess")


def survives(value: np.ndarray, target: np.dtype) -> bool:
    """The reference: every value is the same number in the target type (Python compares ints and
    floats exactly); between float types, finite values stay finite (rounding is accepted)."""
    with np.errstate(over="ignore", invalid="ignore"):
        converted = value.astype(target)
    if value.dtype.kind == "f" and target.kind == "f":
        return bool(np.all(np.isfinite(converted) | ~np.isfinite(value)))
    return all(before == after for before, after in zip(value.ravel().tolist(), converted.ravel().tolist()))


CASES = [
    (np.int64, "INT8", [-128, 0, 127]),
    (np.int64, "INT8", [300]),
    (np.int64, "INT8", [-129]),
    (np.uint8, "INT8", [200]),
    (np.int8, "UINT8", [-1]),
    (np.int64, "UINT64", [0, 2**62]),
    (np.uint64, "INT64", [2**63]),
    (np.int64, "FP32", [2**24, -(2**24)]),
    (np.int64, "FP32", [2**24 + 1]),
    (np.int64, "FP64", [2**53]),
    (np.int64, "FP64", [2**53 + 1]),
    (np.int32, "FP16", [2048]),
    (np.int32, "FP16", [2049]),
    (np.float64, "FP16", [70000.0]),
    (np.float64, "FP16", [65504.0, 0.1, np.inf, np.nan]),
    (np.float64, "FP32", [1e39]),
    (np.float64, "FP32", [0.1, -3.4e38]),
    (np.bool_, "INT8", [True, False]),
]


@pytest.mark.parametrize("source, target, values", CASES)
def test_a_value_is_sent_only_when_the_declared_type_holds_it(source, target, values):
    value = np.array(values, dtype=source).reshape(-1, 1)
    expected = np.dtype(
        {
            "INT8": np.int8,
            "UINT8": np.uint8,
            "UINT64": np.uint64,
            "INT64": np.int64,
            "FP32": np.float32,
            "FP64": np.float64,
            "FP16": np.float16,
        }[target]
    )
    if survives(value, expected):
        (sent,) = contract(target)({"y": value}, ALL, len(value)).values()
        assert sent.dtype == expected
        np.testing.assert_array_equal(sent, value.astype(expected))
    else:
        with pytest.raises(
            ContractError, match=f"returned output 'y' as .* which the config's TYPE_{target} cannot hold"
        ):
            contract(target)({"y": value}, ALL, len(value))


@pytest.mark.parametrize("value", [np.array([[1.0]]), np.array([[1]], np.int64)])
def test_floats_and_numbers_never_become_bool_or_integers(value):
    target = "INT32" if value.dtype.kind == "f" else "BOOL"
    with pytest.raises(ContractError, match="cannot hold"):
        contract(target)({"y": value}, ALL, 1)


def test_strings_leave_as_utf8_bytes_and_only_strings_are_strings():
    sent = contract("BYTES")({"y": np.array([["été"], [b"\x00raw"]], dtype=object)}, ALL, 2)["y"]
    assert sent.dtype == object and sent.tolist() == [["été".encode()], [b"\x00raw"]]
    assert contract("BYTES")({"y": np.array([["ab"]])}, ALL, 1)["y"].tolist() == [[b"ab"]]  # numpy str
    with pytest.raises(ContractError, match="element 1 of type int; a TYPE_STRING output holds bytes or str"):
        contract("BYTES")({"y": np.array([[b"a"], [3]], dtype=object)}, ALL, 2)
    with pytest.raises(ContractError, match="as INT64; the config declares TYPE_STRING"):
        contract("BYTES")({"y": np.array([[3]])}, ALL, 1)


def test_shapes_and_rows_follow_the_config_and_the_request():
    y = contract("FP32", dims=(-1, 3))
    assert y({"y": np.zeros((2, 5, 3), np.float32)}, ALL, 2)["y"].shape == (2, 5, 3)
    with pytest.raises(ContractError, match="with 4 rows for a request of 2"):
        y({"y": np.zeros((4, 5, 3), np.float32)}, ALL, 2)
    with pytest.raises(ContractError, match="of shape \\[2,5,2\\]; the config declares \\[-1,3\\]"):
        y({"y": np.zeros((2, 5, 2), np.float32)}, ALL, 2)
    unbatched = contract("FP32", dims=(1,), batching=False)
    assert unbatched({"y": np.float32(2.5)}, ALL, None)["y"].shape == (1,)  # a scalar travels as [1]


def test_an_output_with_a_reshape_leaves_in_the_reshape_shape():
    """tritonserver turns the reshape's shape into the dims (core infer_response.cc:298-328)."""
    per_row = contract("FP32", dims=(1,), reshape=())
    assert per_row({"y": np.zeros(3, np.float32)}, ALL, 3)["y"].shape == (3,)
    assert per_row({"y": np.zeros((3, 1), np.float32)}, ALL, 3)["y"].shape == (3,)  # the same elements
    open_reshape = contract("FP32", dims=(-1,), reshape=(-1, 2))
    with pytest.raises(ContractError, match="\\(reshape \\[-1,2\\]\\)"):
        open_reshape({"y": np.zeros((3, 4), np.float32)}, ALL, 3)  # ambiguous: refused, not guessed


def test_the_requested_outputs_are_checked_in_the_config_order_and_only_they_leave():
    both = OutputContract(
        [DeclaredTensor("b", "FP32", (1,)), DeclaredTensor("a", "INT8", (1,))], batching=True, source="postprocess"
    )
    answer = {"a": np.full((1, 1), 300), "b": np.zeros((2, 1), np.float32)}
    with pytest.raises(ContractError, match="output 'b' with 2 rows"):  # b first, as the config lists it
        both(answer, RequestInfo(requested_outputs=("a", "b")), 1)
    assert set(
        both({"a": np.ones((1, 1), np.int8), "b": answer["b"][:1]}, RequestInfo(requested_outputs=("a",)), 1)
    ) == {"a"}
    with pytest.raises(ContractError, match="postprocess returned NoneType; it must return a dict"):
        both(None, ALL, 1)
    with pytest.raises(ContractError, match="returned no output 'a' \\(it returned \\['b'\\]\\)"):
        both({"b": answer["b"]}, ALL, 2)
