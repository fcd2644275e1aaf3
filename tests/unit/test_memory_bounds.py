"""What a client or a file can make this process keep: bounded in bytes, measured with tracemalloc
(numpy and Python objects report their allocations to it) against the bound the code promises.

- The onnxruntime engine's input buffers: a model with a dynamic axis takes
  any shape a client sends, and each shape used to keep its own buffer (16 per input).
- The .om reader's index of a message: one Python object per field amplified a file of
  2-byte fields about sixty times.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import pytest

from ge_python_backend.ascend.om import read_om
from ge_python_backend.engines import open_engine
from ge_python_backend.engines.onnxruntime import BUFFER_CACHE_BYTES
from ge_python_backend.errors import GEError
from ge_python_backend.testing import models
from tests.support import om_builder

MIB = 1 << 20


def retained_bytes(work: Callable[[], object]) -> tuple[int, int]:
    """(bytes still allocated after ``work`` and a collection, peak bytes during it)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = work()
        del result
        gc.collect()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, peak - before


def test_the_onnxruntime_engine_keeps_a_bounded_number_of_bytes_for_client_chosen_shapes(tmp_path):
    engine = open_engine("onnxruntime", models.linear(tmp_path / "linear.onnx"), device_id=0, slots=1, options={})
    (slot,) = engine.slots
    request_bytes = 8 * MIB  # x is FP32 [batch, 4]: 16 bytes a row

    def sixteen_shapes() -> None:
        for extra in range(16):
            rows = request_bytes // 16 + extra  # a new shape every time
            staged = slot.inputs({"x": (rows, 4)})
            staged["x"][...] = 1.0
            outputs = slot.run()
            assert outputs["probs"].shape == (rows, 3)

    try:
        kept, _ = retained_bytes(sixteen_shapes)
    finally:
        engine.close()
    # At most the byte budget besides the last run's own buffer (the last request, ~8 MiB);
    # 3b633e5 kept all sixteen (128 MiB).
    assert kept <= BUFFER_CACHE_BYTES + request_bytes + 2 * MIB, kept / MIB


def test_a_buffer_is_reused_while_its_shape_repeats(tmp_path):
    engine = open_engine("onnxruntime", models.linear(tmp_path / "linear.onnx"), device_id=0, slots=1, options={})
    (slot,) = engine.slots
    try:
        first = slot.inputs({"x": (8, 4)})["x"]
        slot.inputs({"x": (9, 4)})
        assert slot.inputs({"x": (8, 4)})["x"] is first
        large = (BUFFER_CACHE_BYTES // 16 + 1, 4)  # above the budget alone
        huge = slot.inputs({"x": large})["x"]
        assert slot.inputs({"x": large})["x"] is huge  # the last run's buffer stays, whatever its size
        assert slot.inputs({"x": (8, 4)})["x"] is first
        assert slot.inputs({"x": large})["x"] is not huge  # dropped once it was not the last run's
    finally:
        engine.close()


def hostile_model_def(kind: str, size: int) -> bytes:
    """A MODEL_DEF of ``size`` bytes made of 2-byte fields: top-level varints, or empty operators."""
    if kind == "fields":
        return b"\x18\x00" * (size // 2)  # field 3, varint 0
    graph = om_builder.f_bytes(1, "g") + b"\x32\x00" * (size // 2)  # GraphDef.op (6), empty
    return om_builder.f_bytes(1, "m") + om_builder.f_bytes(7, graph)


@pytest.mark.parametrize("kind", ["fields", "operators"])
def test_reading_an_om_of_tiny_fields_costs_a_bounded_multiple_of_its_size(tmp_path, kind):
    """3b633e5 spent ~50x the MODEL_DEF's size on 2-byte fields and ~290x on empty operators (RSS
    6.3 GB and 2 minutes for 7.6 MiB); the wire decoder promises about 8x plus 8 MiB."""
    size = 1 << 19
    path = tmp_path / f"{kind}.om"
    path.write_bytes(om_builder.om_file([[(om_builder.MODEL_DEF, hostile_model_def(kind, size))]]))

    def read() -> None:
        with pytest.raises(GEError):  # no graph, or more than a real MODEL_DEF of its size holds
            read_om(path)

    _, peak = retained_bytes(read)
    assert peak <= 8 * size + 8 * MIB, peak / MIB
