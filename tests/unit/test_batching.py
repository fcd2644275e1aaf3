"""Batch planning, gather and scatter over random shapes, checked against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.serving.batching import (
    Profile,
    choose_profile,
    engine_batches,
    gather,
    plan_group,
    profiles_for,
    scatter,
    split_rows,
)
from ge_python_backend.specs import BatchSupport, ModelSpec, ShapeGear, TensorSpec

GEARS = (1, 2, 4, 8)


def brute_force_best(rows: int, sizes: tuple[int, ...]) -> tuple[int, int]:
    """(calls, padded rows) of the best cover of ``rows`` by sizes, by exhaustive search."""
    for calls in range(1, rows + 1):
        covers = [c for c in itertools.combinations_with_replacement(sizes, calls) if sum(c) >= rows]
        if covers:
            return calls, min(sum(c) for c in covers) - rows
    raise AssertionError("unreachable")


@given(rows=st.integers(1, 24), sizes=st.sets(st.integers(1, 9), min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_split_rows_is_optimal(rows, sizes):
    sizes = tuple(sorted(sizes))
    split = split_rows(rows, sizes)
    assert all(s in sizes for s in split)
    assert sum(split) >= rows
    assert (len(split), sum(split) - rows) == brute_force_best(rows, sizes)


def test_thirteen_rows_on_gears_1_2_4_8():
    profile = Profile(GEARS, 8, {"x": (3,)})
    assert engine_batches(13, profile) == (8, 8)
    assert engine_batches(9, profile) == (8, 1)
    assert engine_batches(6, profile) == (8,)
    # A gear set where greedy "largest first, pad the rest" is not optimal.
    assert engine_batches(7, Profile((4, 6), 6, {})) == (4, 4)


def test_dynamic_profile_runs_everything_up_to_the_limit():
    assert engine_batches(5, Profile(None, 8, {})) == (5,)
    assert engine_batches(19, Profile(None, 8, {})) == (8, 8, 3)
    assert engine_batches(19, Profile(None, None, {})) == (19,)


def _check_plan(rows: list[int], chunks, allowed) -> None:
    covered = {i: [] for i in range(len(rows))}
    for chunk in chunks:
        batch = chunk.shapes["x"][0]
        assert allowed is None or batch in allowed
        assert chunk.rows <= batch and chunk.padding == batch - chunk.rows
        targets = sorted((p.target_start, p.count) for p in chunk.parts)
        position = 0
        for start, count in targets:  # parts fill the chunk from row 0 without gaps or overlap
            assert start == position
            position += count
        assert position == chunk.rows
        for part in chunk.parts:
            covered[part.item].append((part.source_start, part.count))
    for item, pieces in covered.items():  # every row of every item exactly once, in order
        position = 0
        for start, count in sorted(pieces):
            assert start == position
            position += count
        assert position == rows[item]


@given(rows=st.lists(st.integers(1, 12), min_size=1, max_size=10))
@settings(max_examples=150, deadline=None)
def test_plan_group_covers_every_row_once_with_gears(rows):
    profile = Profile(GEARS, 8, {"x": (3,)})
    chunks = plan_group(list(range(len(rows))), rows, {"x": (3,)}, profile)
    _check_plan(rows, chunks, GEARS)
    assert len(chunks) == len(engine_batches(sum(rows), profile))


@given(rows=st.lists(st.integers(1, 20), min_size=1, max_size=8), limit=st.integers(1, 16))
@settings(max_examples=100, deadline=None)
def test_plan_group_dynamic_limit(rows, limit):
    profile = Profile(None, limit, {"x": (3,)})
    chunks = plan_group(list(range(len(rows))), rows, {"x": (3,)}, profile)
    _check_plan(rows, chunks, None)
    assert all(c.shapes["x"][0] <= limit for c in chunks)
    assert sum(c.padding for c in chunks) == 0


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_gather_then_scatter_returns_each_requests_rows(data):
    features = data.draw(st.integers(1, 5))
    rows = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    items = {i: {"x": rng.standard_normal((r, features)).astype(np.float32)} for i, r in enumerate(rows)}
    profile = Profile(GEARS, 8, {"x": (features,)})
    received = {i: [] for i in items}
    for chunk in plan_group(list(items), rows, {"x": (features,)}, profile):
        buffer = np.full(chunk.shapes["x"], np.nan, np.float32)  # stale data must not survive
        gather(chunk, items, {"x": buffer})
        assert not np.isnan(buffer).any()
        assert (buffer[chunk.rows :] == 0).all()
        for part, outputs in scatter(chunk, {"x": buffer, "twice": buffer * 2}):
            assert np.shares_memory(outputs["x"], buffer)  # views, no copies
            received[part.item].append((part.source_start, outputs))
    for item, pieces in received.items():
        got = np.concatenate([o["x"] for _, o in sorted(pieces, key=lambda p: p[0])])
        np.testing.assert_array_equal(got, items[item]["x"])
        twice = np.concatenate([o["twice"] for _, o in sorted(pieces, key=lambda p: p[0])])
        np.testing.assert_array_equal(twice, items[item]["x"] * 2)


def _spec(batch: BatchSupport, shape=(-1, 3, -1, -1), gears=(), kind=""):
    return ModelSpec(
        inputs=(TensorSpec("image", "FP32", shape),),
        outputs=(TensorSpec("out", "FP32", (-1, 10)),),
        batch=batch,
        shape_gears=gears,
        gear_kind=kind,
    )


def test_hw_gears_run_only_their_own_sizes_and_a_size_between_them_is_an_input_error():
    """Finding: a 20x20 request to gears 16x16 and 32x32 was zero-padded to 32x32 and
    answered wrong; padding H/W changes what a convolution computes."""
    gears = tuple(ShapeGear({"image": (1, 3, h, w)}, f"{h}x{w}") for h, w in ((32, 32), (64, 48), (64, 64)))
    profiles = profiles_for(_spec(BatchSupport("static", (1,)), gears=gears, kind="hw"), True, 4)
    assert [p.shapes["image"] for p in profiles] == [(3, 32, 32), (3, 64, 48), (3, 64, 64)]
    chosen = choose_profile(profiles, {"image": (3, 64, 48)})
    image = np.ones((1, 3, 64, 48), np.float32)
    (chunk,) = plan_group([0], {0: 1}, {"image": (3, 64, 48)}, chosen)
    buffer = np.full(chunk.shapes["image"], 7.0, np.float32)
    gather(chunk, {0: {"image": image}}, {"image": buffer})
    np.testing.assert_array_equal(buffer, image)
    for between in ((3, 40, 40), (3, 32, 31), (3, 64, 47), (3, 70, 10)):
        with pytest.raises(InputError, match=r"only the batch axis may be padded.*32x32.*64x48.*64x64"):
            choose_profile(profiles, {"image": between})


def test_dims_gears_with_batch_inside_the_gear_merge_into_batch_sizes():
    gears = tuple(ShapeGear({"image": (b, 3, s, s)}) for b in (1, 4) for s in (16, 32))
    profiles = profiles_for(_spec(BatchSupport("gears", (1, 4)), gears=gears, kind="dims"), True, 4)
    assert sorted((p.batch_sizes, p.shapes["image"]) for p in profiles) == [
        ((1, 4), (3, 16, 16)),
        ((1, 4), (3, 32, 32)),
    ]


def test_profiles_without_batching_and_without_a_batch_axis():
    spec = ModelSpec(
        inputs=(TensorSpec("x", "FP32", (5, 2)),), outputs=(TensorSpec("y", "FP32", (3,)),), batch=BatchSupport("none")
    )
    (profile,) = profiles_for(spec, False, 0)
    assert profile.batch_sizes == ()
    assert profile.describe() == "no batch axis, each request as it is; x [5,2]"  # was "batch ; x [5,2]"
    gears = tuple(ShapeGear({"image": (1, 3, s, s)}, f"dims 1,{s},{s}") for s in (8, 16))
    dims = profiles_for(_spec(BatchSupport("none"), gears=gears, kind="dims"), False, 0)
    assert [p.describe() for p in dims] == [
        "dims 1,8,8: no batch axis, each request as it is; image [1,3,8,8]",
        "dims 1,16,16: no batch axis, each request as it is; image [1,3,16,16]",
    ]
    (chunk,) = plan_group([0], {0: 1}, {"x": (5, 2)}, profile)
    assert not chunk.batch_axis and chunk.shapes["x"] == (5, 2) and chunk.padding == 0
    y = np.arange(3.0)
    ((part, outputs),) = scatter(chunk, {"y": y})
    assert outputs["y"] is y
    with pytest.raises(ConfigError, match="no batch axis"):
        profiles_for(spec, True, 4)


def test_scatter_refuses_outputs_that_lost_the_batch_axis():
    profile = Profile(GEARS, 8, {"x": (2,)})
    (chunk,) = plan_group([0], {0: 3}, {"x": (2,)}, profile)
    with pytest.raises(
        ValueError, match=r"output 'y' has shape \[3\] \(batch axis first\); expected its batch axis to be 4"
    ):
        scatter(chunk, {"y": np.zeros(3)})
