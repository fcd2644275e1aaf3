"""Mutated .om files: only OmFormatError may ever escape read_om, and every call returns promptly."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ge_python_backend.ascend.om import read_om
from ge_python_backend.ascend.om.report import to_json, to_text
from ge_python_backend.errors import OmFormatError
from tests.support.om_builder import (
    MODEL_DEF,
    TASK_INFO,
    Header,
    Model,
    Tensor,
    aipp_attr,
    attr_s,
    inout,
    model_def,
    om_file,
    standard_om,
)
from tests.support.samples import OM_SAMPLES_DIR

SAMPLES = OM_SAMPLES_DIR


def _synthetic_seeds() -> list[bytes]:
    batch = Model(
        inputs=[Tensor("x", "DT_FLOAT", (4, 3, 8, 8), "NCHW", origin_dims=(-1, 3, 8, 8))],
        outputs=[Tensor("y", "DT_FLOAT16", (4, 10), "ND", src=("fc", 0))],
        dynamic_type=1,
        gears=[[1], [4]],
        compress=True,
        enum_padding=130,
        model_attrs={"soc_version": attr_s("Ascend310"), "atc_cmdline": attr_s("atc --framework=5")},
    )
    dims = Model(
        inputs=[Tensor("a", "DT_INT32", (2, 5), "ND", origin_dims=(-1, -1)), Tensor("b", "DT_FLOAT", (3,), "ND")],
        outputs=[Tensor("c", "DT_FLOAT", (2, 5), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=[[1, 5], [2, 5]],
        shape_order=["a"],
    )
    hw = Model(
        inputs=[Tensor("img", "DT_UINT8", (1, 3, 64, 64), "NCHW", origin_dims=(1, 3, -1, -1))],
        outputs=[Tensor("o", "DT_FLOAT", (1, 2), "ND", src=("op", 0))],
        dynamic_type=2,
        gears=[[32, 32], [64, 64]],
    )
    static_aipp = aipp_attr(
        aipp_mode=1, input_format=1, csc_switch=True, matrix_r0c0=298, crop=True, crop_size_w=8, min_chn_0=0.5
    )
    aipp = Model(
        inputs=[
            Tensor(
                "img",
                "DT_UINT8",
                (1, 8, 8, 3),
                "NHWC",
                input_dims=(1, 12, 8, 1),
                attrs={
                    "_data_related_aipp_mode": "static_aipp",
                    "aipp": static_aipp,
                    "_aipp_inputs": ["NCHW:DT_FLOAT:img:768:4:1,3,8,8"],
                },
            ),
            Tensor(
                "pic",
                "DT_UINT8",
                (1, 192),
                "NHWC",
                aipp_dims=(1, -1, -1, -1),
                attrs={
                    "_data_related_aipp_mode": "dynamic_aipp",
                    "_data_aipp_data_name_map": "ascend_dynamic_aipp_data",
                },
            ),
            Tensor(
                "ascend_dynamic_aipp_data",
                "DT_UINT8",
                (160,),
                "ND",
                op_type="AippData",
                attrs={
                    "_data_related_aipp_mode": "dynamic_aipp_conf",
                    "aipp": aipp_attr(aipp_mode=2, max_src_image_size=192),
                },
            ),
        ],
        outputs=[Tensor("o", "DT_FLOAT", (1, 2), "ND", src=("op", 0))],
        compress=True,
    )
    multi = om_file(
        [[(MODEL_DEF, model_def(hw)), (TASK_INFO, b"t" * 8)], [(MODEL_DEF, model_def(dims)), (TASK_INFO, b"u")]],
        Header(wide=True, model_num=2, is_unknow_model=1),
    )
    return [
        standard_om(batch),
        standard_om(batch, Header(wide=True), with_inout=False),
        standard_om(dims, Header(wide=True)),
        standard_om(hw, with_inout=False),
        standard_om(dims, Header(version=0x10000000), with_inout=False),
        om_file([[(8, inout(hw)), (MODEL_DEF, model_def(hw))]], Header(model_type=3)),
        multi,
        standard_om(aipp),
        standard_om(aipp, with_inout=False),
    ]


SEEDS = _synthetic_seeds()
SAMPLE_SEEDS = [p.read_bytes() for p in sorted(SAMPLES.glob("*.om"))] if SAMPLES.is_dir() else []

_LENGTHS = st.sampled_from([0, 1, 2, 7, 8, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1)


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    data = bytearray(seeds[draw(st.integers(0, len(seeds) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        size = len(data)
        anywhere = st.integers(0, max(size - 1, 0))
        # favour the structured head of the file (header fields after the magic, tables, protobuf)
        # over bulk payloads; the magic itself is hit by the whole-file range
        head = st.integers(12, min(size, 2048) - 1) if size > 12 else anywhere
        position = draw(head | anywhere)
        kind = draw(st.sampled_from(["flip", "truncate", "splice", "length32", "length64", "insert", "delete"]))
        if kind == "flip" and size:
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[position:]
        elif kind == "splice" and size:
            start = draw(st.integers(0, size - 1))
            chunk = bytes(data[start : start + draw(st.integers(1, 64))])
            data[position : position + len(chunk)] = chunk
        elif kind == "length32" and position + 4 <= size:
            struct.pack_into("<I", data, position, draw(_LENGTHS))
        elif kind == "length64" and position + 8 <= size:
            struct.pack_into("<Q", data, position, draw(_LENGTHS) * draw(st.sampled_from([1, 2**32])))
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[position : position + draw(st.integers(1, 16))]
    if len(data) >= 256 and data[:4] == b"IMOD" and draw(st.booleans()):
        _fix_body_length(data)  # let half the mutants past the header's length check, into the body
    return bytes(data)


def _fix_body_length(data: bytearray) -> None:
    if struct.unpack_from("<Q", data, 184)[0]:
        struct.pack_into("<Q", data, 184, len(data) - 256)
    else:
        struct.pack_into("<I", data, 76, len(data) - 256)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "fuzz.om"


def check(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        om = read_om(path)
    except OmFormatError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    to_text(om), to_json(om)  # whatever was read must also report


FUZZ = settings(
    max_examples=300, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FUZZ
@given(data=mutated(SEEDS))
def test_mutated_synthetic_files(scratch, data):
    check(scratch, data)


@pytest.mark.skipif(not SAMPLE_SEEDS, reason="om-samples not present")
@FUZZ
@given(data=mutated(SAMPLE_SEEDS or [b""]))
def test_mutated_sample_files(scratch, data):
    check(scratch, data)


def test_seeds_are_valid(scratch):
    for seed in SEEDS + SAMPLE_SEEDS:
        scratch.write_bytes(seed)
        read_om(scratch)
