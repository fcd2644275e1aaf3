"""The soak's verdicts: each kind of bad answer is counted as what it is."""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.ops.soak import OnnxReference, SoakError, SoakReport, SoakSettings, _Ledger
from ge_python_backend.testing import models


@pytest.fixture
def reference(tmp_path):
    return OnnxReference(models.linear(tmp_path / "linear.onnx"))


def ledger(reference, requests: int = 5) -> _Ledger:
    return _Ledger(SoakReport("m", requests), reference, SoakSettings(requests=requests))


def sent(book: _Ledger, reference, count: int) -> dict[str, dict]:
    rng = np.random.default_rng(0)
    requests = {f"r{i}": reference.random_request(rng, i + 1) for i in range(count)}
    for request_id, inputs in requests.items():
        book.sent(request_id, inputs)
    return requests


def test_correct_answers_are_verified_and_the_rest_counted_by_kind(reference):
    book = ledger(reference)
    requests = sent(book, reference, 5)
    expected = {rid: dict(zip(["logits", "probs"], reference.session.run(None, r))) for rid, r in requests.items()}
    book.answer("r0", expected["r0"], None)
    book.answer("r0", expected["r0"], None)  # a second answer
    book.answer("r1", expected["r2"], None)  # another request's outputs
    book.answer("r2", None, "boom")
    book.answer("r9", expected["r3"], None)  # never sent
    book.close()  # r3 and r4 never answered
    report = book.report
    assert (report.sent, report.verified, report.duplicated, report.wrong, report.errored, report.lost) == (
        5,
        1,
        1,
        2,
        1,
        2,
    )
    assert not report.clean
    assert any("answered twice" in s for s in report.samples)
    assert any("never sent" in s for s in report.samples)


def test_a_clean_run_and_its_description(reference):
    book = ledger(reference, 2)
    for request_id, inputs in sent(book, reference, 2).items():
        book.answer(request_id, dict(zip(["logits", "probs"], reference.session.run(None, inputs))), None)
    book.close()
    assert book.report.clean
    assert "verified 2, refused 0, lost 0, wrong 0, duplicated 0, errored 0 -> OK" in book.report.describe()


def test_mismatched_echo_and_wrong_shapes_are_wrong(reference):
    book = ledger(reference, 2)
    requests = sent(book, reference, 2)
    book.answer("r0", None, None, mismatch="answered with request id 'r1'")
    outputs = dict(zip(["logits", "probs"], reference.session.run(None, requests["r1"])))
    outputs["probs"] = outputs["probs"][:1]
    book.answer("r1", outputs, None)
    assert book.report.wrong == 2 and book.report.verified == 0


def test_plans_and_references_are_checked(tmp_path):
    with pytest.raises(SoakError, match="stream_share"):
        SoakSettings(stream_share=2)
    with pytest.raises(SoakError, match="must each be >= 1"):
        SoakSettings(requests=0)
    fixed = models.two_inputs(tmp_path / "pair.onnx")
    with pytest.raises(SoakError, match="fixed other axes"):
        OnnxReference(fixed)


@pytest.mark.parametrize(
    "elem_type, message",
    [
        ("STRING", "input 'x' is BYTES; a soak sends random numbers"),
        ("BFLOAT16", "input 'x': data type BF16 has no numpy equivalent"),
    ],
)
def test_inputs_that_cannot_hold_random_numbers_are_refused(tmp_path, elem_type, message):
    import onnx
    from onnx import TensorProto, helper

    kind = getattr(TensorProto, elem_type)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", kind, ["batch", 4])],
        [helper.make_tensor_value_info("y", kind, ["batch", 4])],
    )
    path = tmp_path / "identity.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(SoakError, match=message):
        OnnxReference(path)


def test_a_bad_request_must_be_refused_and_outputs_for_it_are_wrong(reference):
    book = ledger(reference, requests=2)
    rng = np.random.default_rng(1)
    book.sent("bad1", reference.bad_request(rng, 8), bad=True)
    book.sent("bad2", reference.bad_request(rng, 8), bad=True)
    book.answer("bad1", None, "unexpected datatype")
    book.answer("bad2", {"probs": np.zeros((1, 10), np.float32)}, None)
    assert (book.report.refused, book.report.wrong) == (1, 1)
    assert "bad request 'bad2' was answered with outputs" in book.report.samples


def test_bad_requests_differ_from_good_ones_in_what_the_core_checks(reference):
    rng = np.random.default_rng(2)
    good = reference.random_request(rng, 1)
    kinds = set()
    for _ in range(60):
        bad = reference.bad_request(rng, 8)
        (name,) = bad
        if bad[name].dtype != good[name].dtype:
            kinds.add("dtype")
        elif bad[name].shape[1:] != good[name].shape[1:]:
            kinds.add("dims")
        else:
            assert len(bad[name]) == 9
            kinds.add("rows")
    assert kinds == {"dtype", "dims", "rows"}
