"""The model kinds of the acl engine on the simulator, each against ONNX Runtime run directly on
the ONNX file: dims gears in ATC's --input_shape order, static AIPP, dynamic AIPP set per request,
and shape-range models (also through the runner). The AIPP reference is ATC's documentation in
numpy (ge_python_backend/testing/aipp_reference.py), never the simulator's code.
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend import sim
from ge_python_backend.ascend.aipp import (
    DEFAULT_BIAS,
    DEFAULT_MATRIX_RGB,
    DEFAULT_MATRIX_YUV,
    AippConfig,
    AippInputFormat,
    AippMode,
    parse_aipp_config,
    request_overrides,
)
from ge_python_backend.ascend.om import read_om
from ge_python_backend.engines.acl.options import parse_max_shapes
from ge_python_backend.errors import ConfigError, EngineError, InputError
from ge_python_backend.serving.observers import Observer
from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.sim.simom import load_sim_om, write_sim_om
from ge_python_backend.specs import dtype_name
from ge_python_backend.testing.aipp_reference import (
    BIAS,
    MATRIX_RGB_TO_YUV,
    MATRIX_YUV_TO_BGR,
    crop,
    normalise,
    nv12,
    yuv_to_bgr,
)
from tests.support import acl_sim_nets as nets
from tests.support.acl_sim_nets import open_sim
from tests.support.fakes import declared
from tests.support.om_builder import Model, Tensor, standard_om

#: ATC's aipp.cfg syntax (config_file_template.md): RGB888 crop of 8x6 at (3, 2) from 12x10, then
#: per-channel mean, min and variance reciprocal
STATIC_RGB_CFG = """
aipp_op {
    aipp_mode: static
    related_input_rank: 0
    input_format: RGB888_U8
    src_image_size_w: 12
    src_image_size_h: 10
    crop: true
    load_start_pos_w: 3
    load_start_pos_h: 2
    crop_size_w: 8
    crop_size_h: 6
    mean_chn_0: 124
    mean_chn_1: 116
    mean_chn_2: 104
    min_chn_0: 1.5
    min_chn_1: 0.5
    min_chn_2: 0.0
    var_reci_chn_0: 0.0171
    var_reci_chn_1: 0.0175
    var_reci_chn_2: 0.0174
}
"""
#: the defaults a dynamic-AIPP model's aipp_config file gives (a request overrides any field)
DYNAMIC_DEFAULTS_CFG = """
aipp_op {
    aipp_mode: dynamic
    related_input_rank: 0
    input_format: RGB888_U8
    crop: true
    crop_size_w: 8
    crop_size_h: 6
    mean_chn_0: 30
    mean_chn_1: 40
    mean_chn_2: 50
    var_reci_chn_0: 0.02
    var_reci_chn_1: 0.03
    var_reci_chn_2: 0.04
}
"""

pytestmark = pytest.mark.usefixtures("clean_simulator")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kinds")
    three = nets.three_inputs(folder / "three.onnx")
    doc = nets.scaled(folder / "doc.onnx", {"data": [1, 1, 40, "W"], "label": [1, "L"], "mask": ["M", "K"]})
    pair = nets.scaled(folder / "pair.onnx", {"b": ["B0", "B1"], "c": ["C0", "C1"]})
    conv = nets.image_conv(folder / "conv.onnx")
    conv_n = nets.image_conv(folder / "conv_n.onnx", batch="N")
    matmul = nets.matmul_add(folder / "matmul.onnx")
    # a static input listed first, the dynamic ones in reverse graph order
    sim.sim_compile(three, folder / "dims.om", input_shapes="s:2,3;b:-1,-1;a:-1,4", dynamic_dims="2,3,1;4,5,2;1,1,3")
    # aclmdlGetInputDynamicDims.md 54-66
    sim.sim_compile(
        doc,
        folder / "doc.om",
        input_shapes="data:1,1,40,-1;label:1,-1;mask:-1,-1",
        dynamic_dims="20,20,1,1;40,40,2,2;80,60,4,4",
    )
    sim.sim_compile(three, folder / "ab.om", input_shapes="a:-1,4;b:-1,-1", dynamic_dims="1,2,3;2,5,1;3,1,2")
    sim.sim_compile(pair, folder / "pair.om", input_shapes="b:-1,-1;c:-1,-1", dynamic_dims="1,2,3,4;2,2,5,1")
    for name in ("ab", "pair"):  # the same files without the --input_shape order
        om = load_sim_om(folder / f"{name}.om")
        write_sim_om(folder / f"{name}_unrecorded.om", replace(om, shape_order_recorded=False))
    (folder / "aipp.cfg").write_text(STATIC_RGB_CFG)
    sim.sim_compile(conv, folder / "static_rgb.om", insert_op_conf=folder / "aipp.cfg")
    yuv = AippConfig(
        input_format=AippInputFormat.YUV420SP_U8,
        src_image_size_w=8,
        src_image_size_h=6,
        csc_switch=True,
        mean_chn=(20, 30, 40, 0),
        var_reci_chn=(0.01, 0.02, 0.03, 1.0),
    )
    sim.sim_compile(conv, folder / "static_yuv.om", insert_op_conf=[yuv])
    dynamic = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=4 * 10 * 12 * 3)
    sim.sim_compile(
        conv_n, folder / "dynamic.om", input_shapes="x:-1,3,6,8", batch_gears="1,2,4", insert_op_conf=[dynamic]
    )
    (folder / "defaults.cfg").write_text(DYNAMIC_DEFAULTS_CFG)
    sim.sim_compile(matmul, folder / "range8.om", input_shapes="x:1~8,4")
    sim.sim_compile(matmul, folder / "unbounded.om", input_shapes="x:-1,4")
    return {
        "dir": folder,
        "three": three,
        "doc": doc,
        "pair": pair,
        "conv": conv,
        "conv_n": conv_n,
        "matmul": matmul,
    }


class Opened:
    """An engine bound to this thread, closed at exit."""

    def __init__(self, path, slots=1, **options):
        self.engine = open_sim(path, slots=slots, **options)

    def __enter__(self):
        self.engine.bind_thread()
        return self.engine

    def __exit__(self, *exc):
        self.engine.close()


def run(engine, feeds, settings=None, slot=0):
    """Stage ``feeds`` (exactly their shapes) on a slot, run it and return copies of the outputs."""
    views = engine.slots[slot].inputs({n: a.shape for n, a in feeds.items()}, settings)
    for name, value in feeds.items():
        views[name][...] = value
    return {n: np.array(a) for n, a in engine.slots[slot].run().items()}


def assert_as_onnxruntime(outputs, onnx_path, feeds, atol=1e-6, rtol=1e-6):
    expected = nets.reference(onnx_path, feeds)
    assert set(outputs) == set(expected)
    for name, want in expected.items():
        assert outputs[name].shape == want.shape, name
        np.testing.assert_allclose(outputs[name], want, atol=atol, rtol=rtol, err_msg=name)


def random_feeds(shapes, seed):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


class RawAcl:
    """pyACL calls of a test itself (the simulator's acl), in a context of its own."""

    def __enter__(self):
        self.acl = acl = sim.get_acl()
        assert acl.init() in (0, 100002)  # 100002: already initialised by an engine (acl.cpp 387-392)
        assert acl.rt.set_device(0) == 0
        self.context, ret = acl.rt.create_context(0)
        assert ret == 0
        self._made: list[tuple[str, int]] = []
        return self

    def load(self, path):
        """(model id, desc, input dataset, output dataset) with device buffers of every size."""
        acl = self.acl
        model_id, ret = acl.mdl.load_from_file(str(path))
        assert ret == 0, acl.get_recent_err_msg()
        self._made.append(("model", model_id))
        desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(desc, model_id) == 0
        self._made.append(("desc", desc))
        datasets = []
        for count, size in (
            (acl.mdl.get_num_inputs(desc), acl.mdl.get_input_size_by_index),
            (acl.mdl.get_num_outputs(desc), acl.mdl.get_output_size_by_index),
        ):
            dataset = acl.mdl.create_dataset()
            self._made.append(("dataset", dataset))
            for i in range(count):
                nbytes = max(size(desc, i), 64)
                ptr, ret = acl.rt.malloc(nbytes, 0)
                assert ret == 0
                self._made.append(("memory", ptr))
                buffer = acl.create_data_buffer(ptr, nbytes)
                self._made.append(("buffer", buffer))
                acl.mdl.add_dataset_buffer(dataset, buffer)
            datasets.append(dataset)
        return model_id, desc, datasets[0], datasets[1]

    def buffer_address(self, dataset, index):
        return self.acl.get_data_buffer_addr(self.acl.mdl.get_dataset_buffer(dataset, index))

    def __exit__(self, *exc):
        acl = self.acl
        release = {
            "model": acl.mdl.unload,
            "desc": acl.mdl.destroy_desc,
            "dataset": acl.mdl.destroy_dataset,
            "memory": acl.rt.free,
            "buffer": acl.destroy_data_buffer,
        }
        for kind in ("buffer", "dataset", "model", "memory", "desc"):
            for made, handle in self._made:
                if made == kind:
                    assert release[kind](handle) == 0, (kind, acl.get_recent_err_msg())
        assert acl.rt.destroy_context(self.context) == 0
        assert acl.rt.reset_device(0) == 0


# --- dims: gears in ATC's --input_shape order --------------------------------------------------


def dims_shapes(gear):
    """Each input's shape at a gear of dims.om: --dynamic_dims lists the -1 values in --input_shape
    order, s:2,3;b:-1,-1;a:-1,4 (--dynamic_dims.md 31)."""
    b0, b1, a0 = gear
    return {"a": (a0, 4), "b": (b0, b1), "s": (2, 3)}


DIMS_GEARS = ((2, 3, 1), (4, 5, 2), (1, 1, 3))


def test_dims_gears_follow_the_input_shape_order_and_answer_as_onnxruntime(built):
    with Opened(built["dir"] / "dims.om") as engine:
        # the runtime walks user_designate_shape_order = the --input_shape names (multi_batch_clone_pass.cc 413-453)
        assert engine.layout.shape_order == ("s", "b", "a")
        assert [dict(g.shapes) for g in engine.spec.shape_gears] == [dims_shapes(g) for g in DIMS_GEARS]
        for seed, gear in enumerate(DIMS_GEARS + DIMS_GEARS[::-1]):
            feeds = random_feeds(dims_shapes(gear), seed)
            assert_as_onnxruntime(run(engine, feeds), built["three"], feeds)
        with pytest.raises(EngineError, match="cannot run"):  # a shape set that is no gear
            run(engine, random_feeds({"a": (2, 4), "b": (2, 3), "s": (2, 3)}, 0))


def test_get_input_dynamic_dims_gives_the_full_dims_in_input_shape_order_static_input_included(built):
    with RawAcl() as raw:
        acl = raw.acl
        _, desc, _, _ = raw.load(built["dir"] / "dims.om")
        count, ret = acl.mdl.get_input_dynamic_gear_count(desc, -1)
        assert (count, ret) == (3, 0)
        dims, ret = acl.mdl.get_input_dynamic_dims(desc, -1, count)
        assert ret == 0
        # model_om2.cpp 1876-1921: per gear the dims of every input in the order, -1s filled
        want = [[d for name in ("s", "b", "a") for d in dims_shapes(g)[name]] for g in DIMS_GEARS]
        assert [g["dims"][: g["dimCount"]] for g in dims] == want
        assert [g["dimCount"] for g in dims] == [6, 6, 6]


def test_get_and_set_input_dynamic_dims_reproduce_the_documented_example(built):
    """aclmdlGetInputDynamicDims.md 54-66: data(1,1,40,-1), label(1,-1), mask(-1,-1) with gears
    20,20,1,1;40,40,2,2;80,60,4,4 report dimCount 8 and these dims; aclmdlSetInputDynamicDims.md 44
    takes the same layout; a static value that differs is 145012, a non-gear 145013 (ge_executor.cc
    585-637)."""
    with RawAcl() as raw:
        acl = raw.acl
        model_id, desc, inputs, _ = raw.load(built["dir"] / "doc.om")
        count, _ = acl.mdl.get_input_dynamic_gear_count(desc, -1)
        dims, ret = acl.mdl.get_input_dynamic_dims(desc, -1, count)
        assert ret == 0 and count == 3
        assert [(g["dimCount"], g["dims"]) for g in dims] == [
            (8, [1, 1, 40, 20, 1, 20, 1, 1]),
            (8, [1, 1, 40, 40, 1, 40, 2, 2]),
            (8, [1, 1, 40, 80, 1, 60, 4, 4]),
        ]
        index, ret = acl.mdl.get_input_index_by_name(desc, "ascend_mbatch_shape_data")
        assert ret == 0 and index == 3  # after every user input (multi_batch_clone_pass.cc 494-496)
        doc_dims = {"dimCount": 8, "name": "", "dims": [1, 1, 40, 20, 1, 20, 1, 1]}
        assert acl.mdl.set_input_dynamic_dims(model_id, inputs, index, doc_dims) == 0
        static_wrong = {"dimCount": 8, "name": "", "dims": [1, 1, 41, 20, 1, 20, 1, 1]}
        assert acl.mdl.set_input_dynamic_dims(model_id, inputs, index, static_wrong) == 145012
        not_a_gear = {"dimCount": 8, "name": "", "dims": [1, 1, 40, 20, 1, 40, 1, 1]}
        assert acl.mdl.set_input_dynamic_dims(model_id, inputs, index, not_a_gear) == 145013
        wrong_count = {"dimCount": 4, "name": "", "dims": [20, 20, 1, 1]}  # the -1 values alone
        assert acl.mdl.set_input_dynamic_dims(model_id, inputs, index, wrong_count) == 145012


def test_doc_example_model_answers_as_onnxruntime_at_every_gear(built):
    with Opened(built["dir"] / "doc.om") as engine:
        for seed, (w, label, m, k) in enumerate(((20, 20, 1, 1), (40, 40, 2, 2), (80, 60, 4, 4))):
            feeds = random_feeds({"data": (1, 1, 40, w), "label": (1, label), "mask": (m, k)}, seed)
            assert_as_onnxruntime(run(engine, feeds), built["doc"], feeds)


def test_a_file_without_the_order_is_served_when_the_gears_fit_one_order_only(built):
    path = built["dir"] / "ab_unrecorded.om"
    assert "shape_order" not in _description(path)
    with Opened(path) as engine:
        assert engine.layout.shape_order == ("a", "b")
        for seed, (a0, b0, b1) in enumerate(((1, 2, 3), (2, 5, 1), (3, 1, 2))):
            feeds = random_feeds({"a": (a0, 4), "b": (b0, b1), "s": (2, 3)}, seed)
            assert_as_onnxruntime(run(engine, feeds), built["three"], feeds)


def test_a_file_without_the_order_is_refused_when_two_orders_fit_the_gears(built):
    """b:-1,-1 and c:-1,-1 with gears 1,2,3,4 and 2,2,5,1: (b, c) and (c, b) both fit and mean different
    shapes; get_input_dynamic_dims does not name the inputs (aclmdlGetInputDynamicDims.md: name unused)."""
    with pytest.raises(ConfigError, match=r"fit several input orders \(b/c, c/b\).*does not say which"):
        open_sim(built["dir"] / "pair_unrecorded.om")
    with Opened(built["dir"] / "pair.om") as engine:  # the order in the file decides
        assert engine.layout.shape_order == ("b", "c")
        feeds = random_feeds({"b": (1, 2), "c": (3, 4)}, 0)
        assert_as_onnxruntime(run(engine, feeds), built["pair"], feeds)


@pytest.mark.parametrize("order", [["data", "label", "mask"], []], ids=["recorded", "absent"])
def test_the_om_reader_says_whether_the_file_records_the_order(tmp_path, order):
    """user_designate_shape_order on the Case op (multi_batch_clone_pass.cc 413-453); without it the
    reader's order is a guess, which the engine must not take for the file's."""
    model = Model(
        inputs=[
            Tensor("data", "DT_FLOAT", (1, 1, 40, 40), "ND", origin_dims=(1, 1, 40, -1)),
            Tensor("label", "DT_FLOAT", (1, 30), "ND", origin_dims=(1, -1)),
            Tensor("mask", "DT_FLOAT", (2, 2), "ND", origin_dims=(-1, -1)),
        ],
        outputs=[Tensor("out", "DT_FLOAT", (1, 40), "ND", src=("op", 0))],
        dynamic_type=3,
        gears=[[20, 20, 1, 1], [40, 30, 2, 2]],
        shape_order=order,
    )
    path = tmp_path / "dims.om"
    path.write_bytes(standard_om(model, with_inout=True))
    found = read_om(path)
    assert found.shape_order == ("data", "label", "mask")  # recorded, or the model-order guess
    assert found.shape_order_recorded is bool(order)


def _description(path: Path) -> dict:
    data = path.read_bytes()
    _, _, json_len, _ = struct.unpack_from("<8sIIQ", data)
    return json.loads(data[24 : 24 + json_len])


# --- static AIPP --------------------------------------------------------------------------------


def test_the_static_rgb_config_reads_as_atc_writes_it():
    (config,) = parse_aipp_config(STATIC_RGB_CFG)
    assert config.input_format is AippInputFormat.RGB888_U8 and config.aipp_mode is AippMode.STATIC
    assert (config.src_image_size_w, config.src_image_size_h) == (12, 10)
    assert (config.load_start_pos_w, config.load_start_pos_h, config.crop_size_w, config.crop_size_h) == (3, 2, 8, 6)
    assert config.mean_chn == (124, 116, 104, 0) and config.min_chn == (1.5, 0.5, 0.0, 0.0)
    assert config.var_reci_chn == (0.0171, 0.0175, 0.0174, 1.0)  # var_reci_chn_3 defaults to 1.0 (aipp_op.cc 807-817)


def test_static_rgb_aipp_answers_as_onnxruntime_on_the_documented_transform(built):
    with Opened(built["dir"] / "static_rgb.om") as engine:
        (image,) = engine.spec.inputs
        # the AIPP input is forced to UINT8 NHWC of the source size (config_file_template.md 47)
        assert (image.dtype, image.shape, image.format) == ("UINT8", (1, 10, 12, 3), "NHWC")
        rng = np.random.default_rng(5)
        for _ in range(3):
            pixels = rng.integers(0, 256, (1, 10, 12, 3), dtype=np.uint8)
            network = normalise(crop(pixels, 3, 2, 8, 6), (124, 116, 104), (1.5, 0.5, 0.0), (0.0171, 0.0175, 0.0174))
            outputs = run(engine, {"x": pixels})
            assert_as_onnxruntime(outputs, built["conv"], {"x": network}, atol=1e-3, rtol=1e-3)
    with RawAcl() as raw:
        acl = raw.acl
        model_id, desc, _, _ = raw.load(built["dir"] / "static_rgb.om")
        assert acl.mdl.get_input_format(desc, 0) == 1 and acl.mdl.get_input_data_type(desc, 0) == 4  # NHWC, UINT8
        assert acl.mdl.get_aipp_type(model_id, 0)[0::2] == (1, 0)  # ACL_DATA_WITH_STATIC_AIPP (acl_mdl.h 132-137)


def test_the_default_csc_matrix_and_biases_are_atcs():
    assert DEFAULT_MATRIX_YUV == MATRIX_YUV_TO_BGR
    assert DEFAULT_MATRIX_RGB == MATRIX_RGB_TO_YUV
    assert DEFAULT_BIAS == BIAS
    text = "aipp_op {\n input_format: YUV420SP_U8\n csc_switch: true\n}\n"
    (config,) = parse_aipp_config(text)
    assert config.matrix == MATRIX_YUV_TO_BGR and config.input_bias == BIAS
    (rgb,) = parse_aipp_config(text.replace("YUV420SP_U8", "RGB888_U8"))
    assert rgb.matrix == MATRIX_RGB_TO_YUV and rgb.output_bias == BIAS


def test_static_yuv420sp_with_csc_answers_as_onnxruntime_and_reports_v1_and_v2_dims(built):
    with RawAcl() as raw:
        acl = raw.acl
        _, desc, _, _ = raw.load(built["dir"] / "static_yuv.om")
        v1, _ = acl.mdl.get_input_dims(desc, 0)
        v2, _ = acl.mdl.get_input_dims_v2(desc, 0)
        size = acl.mdl.get_input_size_by_index(desc, 0)
    # V1: the image, C = 3 for YUV420SP; V2: H x 1.5, C = 1, its product the buffer size
    # (aclmdlGetInputDims.md 31-61, aclmdlGetInputDimsV2.md 31-61)
    assert v1["dims"] == [1, 6, 8, 3] and v2["dims"] == [1, 9, 8, 1]
    assert size == int(np.prod(v2["dims"])) == 6 * 8 * 3 // 2
    with Opened(built["dir"] / "static_yuv.om") as engine:
        (image,) = engine.spec.inputs
        assert (image.dtype, image.shape) == ("UINT8", (1, 9, 8, 1))  # clients send the V2 buffer
        rng = np.random.default_rng(6)
        for u, v in ((120, 140), (136, 118)):
            luma = rng.integers(60, 181, (6, 8), dtype=np.uint8)
            network = normalise(yuv_to_bgr(luma, u, v), (20, 30, 40), (0, 0, 0), (0.01, 0.02, 0.03))
            outputs = run(engine, {"x": nv12(luma, u, v)})
            assert_as_onnxruntime(outputs, built["conv"], {"x": network}, atol=1e-3, rtol=1e-3)


# --- dynamic AIPP -------------------------------------------------------------------------------


def dynamic_engine(built, slots=1):
    return Opened(built["dir"] / "dynamic.om", slots=slots, aipp_config=str(built["dir"] / "defaults.cfg"))


def dynamic_reference(pixels, start_w, start_h, mean=(30, 40, 50), var_reci=(0.02, 0.03, 0.04)):
    return normalise(crop(pixels, start_w, start_h, 8, 6), mean, (0, 0, 0), var_reci)


def test_dynamic_aipp_values_set_per_request_answer_as_onnxruntime(built):
    rng = np.random.default_rng(7)
    with dynamic_engine(built) as engine:
        cases = [
            ({}, (1, 10, 12, 3), (0, 0), (30, 40, 50), (0.02, 0.03, 0.04)),  # the aipp_config file alone
            ({"load_start_pos_w": 4, "load_start_pos_h": 2}, (2, 10, 12, 3), (4, 2), (30, 40, 50), (0.02, 0.03, 0.04)),
            ({"mean_chn_0": 100, "var_reci_chn_1": "0.5"}, (4, 7, 9, 3), (0, 0), (100, 40, 50), (0.02, 0.5, 0.04)),
            ({"crop": "true", "load_start_pos_w": 1}, (1, 6, 9, 3), (1, 0), (30, 40, 50), (0.02, 0.03, 0.04)),
        ]
        for parameters, shape, (start_w, start_h), mean, var_reci in cases:
            settings = engine.batch_settings(parameters, {"x": shape})
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            outputs = run(engine, {"x": pixels}, settings)
            network = dynamic_reference(pixels, start_w, start_h, mean, var_reci)
            assert_as_onnxruntime(outputs, built["conv_n"], {"x": network}, atol=1e-3, rtol=1e-3)


def test_acl_max_shapes_can_raise_the_dynamic_aipp_image_buffer(built):
    """No source gives the size the runtime answers for a dynamic-AIPP image input (fidelity row
    86a): the buffer is the runtime's size, or the shape parameter acl_max_shapes gives where that
    needs more (here 4 x 20 x 20 x 3 = 4800 bytes against the simulator's 1440)."""
    path = built["dir"] / "dynamic.om"
    with Opened(path) as engine:
        default = engine.slots[0].device_bytes
    with Opened(path, acl_max_shapes=parse_max_shapes("x:4,20,20,3")) as engine:
        assert engine.slots[0].device_bytes - default == 4 * 20 * 20 * 3 - 4 * 10 * 12 * 3


def test_a_yuv420sp_request_with_csc_starts_from_atcs_yuv_matrix(built):
    """A request may switch the dynamic AIPP to YUV420SP_U8 with CSC; a matrix field it sets changes
    ATC's default YUV420SP matrix (aipp_op.cc 776-787), not the RGB one."""
    rng = np.random.default_rng(10)
    luma = rng.integers(60, 181, (6, 8), dtype=np.uint8)
    image = nv12(luma, 126, 131)
    parameters = {"input_format": "YUV420SP_U8", "csc_switch": True, "matrix_r0c1": 500, "crop": False}
    matrix = ((298, 500, 0), (298, -100, -208), (298, 0, 409))
    with dynamic_engine(built) as engine:
        settings = engine.batch_settings(parameters, {"x": image.shape})
        ((_, config),) = settings
        assert config.matrix == matrix and (config.src_image_size_w, config.src_image_size_h) == (8, 6)
        network = normalise(yuv_to_bgr(luma, 126, 131, matrix), (30, 40, 50), (0, 0, 0), (0.02, 0.03, 0.04))
        outputs = run(engine, {"x": image}, settings)
        assert_as_onnxruntime(outputs, built["conv_n"], {"x": network}, atol=1e-3, rtol=1e-3)


def test_a_file_with_csc_on_for_rgb_gives_a_yuv420sp_request_the_yuv_default_matrix(built, tmp_path):
    """ATC fills each matrix entry the config leaves out with the default of the input format in
    force (SetCscDefaultValue, aipp_op.cc 776-798): an aipp_config file that turns CSC on for RGB
    leaves the matrix to the format, so a request that sends YUV420SP_U8 gets the YUV default; the
    entries the file or the request give stay."""
    text = "aipp_op {\n aipp_mode: dynamic\n input_format: RGB888_U8\n csc_switch: true\n crop: true\n}\n"
    (base,) = parse_aipp_config(text)
    assert base.matrix == MATRIX_RGB_TO_YUV
    switched = request_overrides({"input_format": "YUV420SP_U8"}, base).applied_to(base)
    assert switched.matrix == MATRIX_YUV_TO_BGR
    back = request_overrides({"input_format": "RGB888_U8"}, switched).applied_to(switched)
    assert back.matrix == MATRIX_RGB_TO_YUV
    (partial,) = parse_aipp_config(text.replace("crop: true", "crop: true\n matrix_r0c0: 1"))
    mixed = request_overrides({"input_format": "YUV420SP_U8", "matrix_r1c1": 7}, partial).applied_to(partial)
    assert mixed.matrix == ((1, 516, 0), (298, 7, -208), (298, 0, 409))
    explicit = replace(base, matrix=MATRIX_RGB_TO_YUV, matrix_defaulted=())  # a matrix given in full
    assert request_overrides({"input_format": "YUV420SP_U8"}, explicit).applied_to(explicit).matrix == MATRIX_RGB_TO_YUV
    cfg = tmp_path / "csc_rgb.cfg"
    cfg.write_text(text.replace("crop: true", "crop: true\n crop_size_w: 8\n crop_size_h: 6"))
    with Opened(built["dir"] / "dynamic.om", aipp_config=str(cfg)) as engine:
        ((_, config),) = engine.batch_settings({"input_format": "YUV420SP_U8", "crop": False}, {"x": (1, 9, 8, 1)})
        assert config.matrix == MATRIX_YUV_TO_BGR
        ((_, config),) = engine.batch_settings({}, {"x": (1, 10, 12, 3)})
        assert config.matrix == MATRIX_RGB_TO_YUV


def test_requests_with_different_aipp_values_get_different_settings(built):
    shapes = {"x": (1, 10, 12, 3)}
    with dynamic_engine(built) as engine:
        first = engine.batch_settings({"load_start_pos_w": 2}, shapes)
        assert engine.batch_settings({"load_start_pos_w": 2}, shapes) == first
        assert engine.batch_settings({"load_start_pos_w": 3}, shapes) != first
        assert engine.batch_settings({"mean_chn_2": 9}, shapes) != engine.batch_settings({}, shapes)
        assert engine.batch_settings({}, {"x": (1, 9, 12, 3)}) != engine.batch_settings({}, shapes)  # source size


class Recorder(Observer):
    def __init__(self):
        self.batches = []
        self._lock = threading.Lock()

    def batch(self, rows, padding):
        with self._lock:
            self.batches.append((rows, padding))


def submit(engine, requests, *, max_batch_size, outputs, observers=()):
    """Run ``requests`` ([(inputs, parameters)]) through one Runner.submit; [(outputs, error)] in order."""
    runner = Runner(
        engine,
        batching=True,
        max_batch_size=max_batch_size,
        outputs=declared(engine.spec, **{n: dtype_name(t) for n, t in outputs.items()}),
        preprocess=lambda inputs, info: inputs,
        postprocess=lambda outputs, info: outputs,
        observers=observers,
    )
    answers: dict[int, tuple] = {}
    done = threading.Event()

    def respond(index):
        def answer(outputs, error):
            answers[index] = ({n: np.array(a) for n, a in outputs.items()} if outputs else None, error)
            if len(answers) == len(requests):
                done.set()

        return answer

    try:
        runner.submit(
            [
                Request(RequestInfo(request_id=str(i), parameters=parameters), inputs, respond(i))
                for i, (inputs, parameters) in enumerate(requests)
            ]
        )
        assert done.wait(30)
    finally:
        runner.close()
    return [answers[i] for i in range(len(requests))], runner


def staged_shapes(engine, monkeypatch):
    """The input shapes every slot is staged with, in order."""
    seen = []
    for slot in engine.slots:
        original = slot.inputs

        def spy(shapes, settings=None, original=original):
            seen.append({n: tuple(s) for n, s in shapes.items()})
            return original(shapes, settings)

        monkeypatch.setattr(slot, "inputs", spy)
    return seen


@pytest.mark.parametrize("same", [True, False], ids=["same-values", "different-values"])
def test_the_runner_batches_only_requests_with_equal_aipp_values(built, monkeypatch, same):
    """One AIPP set per execute, written before it (aclmdlSetInputAIPP.md; aipp_intro.md 33): the engine
    keeps requests with other values out of the batch; equal values share it."""
    rng = np.random.default_rng(8)
    images = [rng.integers(0, 256, (1, 10, 12, 3), dtype=np.uint8) for _ in range(2)]
    starts = [2, 2] if same else [2, 4]
    with dynamic_engine(built) as engine:
        seen = staged_shapes(engine, monkeypatch)
        recorder = Recorder()
        results, _ = submit(
            engine,
            [({"x": image}, {"load_start_pos_w": start}) for image, start in zip(images, starts)],
            max_batch_size=4,
            outputs={"c": np.float32},
            observers=[recorder],
        )
    assert seen == ([{"x": (2, 10, 12, 3)}] if same else [{"x": (1, 10, 12, 3)}] * 2)
    assert sorted(recorder.batches) == ([(2, 0)] if same else [(1, 0), (1, 0)])
    for image, start, (outputs, error) in zip(images, starts, results):
        assert error is None, error
        assert_as_onnxruntime(outputs, built["conv_n"], {"x": dynamic_reference(image, start, 0)}, 1e-3, 1e-3)


@pytest.mark.parametrize(
    "parameters, reason",
    [
        ({"load_start_pos_w": 5}, r"the crop 8x6 at \(5,0\) leaves the 12x10 image"),
        ({"crop_size_w": 7}, r"the AIPP output is 7x6 .*the model input is 8x6"),
        ({"crop": False}, r"the AIPP output is 12x10 .*the model input is 8x6"),
    ],
)
def test_an_aipp_the_network_cannot_take_is_an_input_error_naming_the_input(built, parameters, reason):
    """set_input_aipp refuses a crop outside the source and an output that is not the model's H x W
    (aipp_param_check.cpp 215-260; aclmdlSetInputAIPP.md 52-71): the request fails, not the batch."""
    with dynamic_engine(built) as engine:
        with pytest.raises(InputError, match=rf"input 'x': the dynamic AIPP cannot run this request: {reason}"):
            engine.batch_settings(parameters, {"x": (1, 10, 12, 3)})
        image = np.zeros((1, 10, 12, 3), np.uint8)
        results, runner = submit(
            engine, [({"x": image}, parameters), ({"x": image}, {})], max_batch_size=4, outputs={"c": np.float32}
        )
        assert isinstance(results[0][1], InputError) and "'x'" in str(results[0][1])
        assert results[1][1] is None and runner.out_of_service is None  # the other request runs


def test_a_request_parameter_of_the_wrong_type_is_an_input_error(built):
    refused = pytest.raises(InputError, match="request parameter mean_chn_0 is 'dark'; accepted: an integer")
    with dynamic_engine(built) as engine, refused:
        engine.batch_settings({"mean_chn_0": "dark"}, {"x": (1, 10, 12, 3)})


@pytest.mark.parametrize("fill", [None, 0], ids=["fresh-memory", "zeroed"])
def test_executing_without_set_input_aipp_is_refused_by_the_simulator(built, fill):
    """The docs require set_input_aipp before execute (ATC AIPP/aipp_intro.md 33); CANN's host does
    not check it (davinci_model.cc 6577-6580) and the device's answer is undocumented: the simulator
    refuses the run."""
    with RawAcl() as raw:
        acl = raw.acl
        model_id, desc, inputs, outputs = raw.load(built["dir"] / "dynamic.om")
        index, ret = acl.mdl.get_input_index_by_name(desc, "ascend_dynamic_aipp_data")
        assert ret == 0 and acl.mdl.get_aipp_type(model_id, index)[0] == 3  # ACL_DYNAMIC_AIPP_NODE
        gear_index, _ = acl.mdl.get_input_index_by_name(desc, "ascend_mbatch_shape_data")
        assert acl.mdl.set_dynamic_batch_size(model_id, inputs, gear_index, 1) == 0
        if fill is not None:
            size = acl.mdl.get_input_size_by_index(desc, index)
            assert acl.rt.memset(raw.buffer_address(inputs, index), size, fill, size) == 0
        assert acl.mdl.execute(model_id, inputs, outputs) == 507011
        assert "were never set: call set_input_aipp" in acl.get_recent_err_msg()
        aipp = acl.mdl.create_aipp(4)  # dynamic batch: made for the largest gear (--insert_op_conf.md 73-79)
        try:
            for call, arguments in (
                (acl.mdl.set_aipp_input_format, (AippInputFormat.RGB888_U8.value,)),
                (acl.mdl.set_aipp_src_image_size, (8, 6)),
            ):
                assert call(aipp, *arguments) == 0
            assert acl.mdl.set_input_aipp(model_id, inputs, index, aipp) == 0
            assert acl.mdl.execute(model_id, inputs, outputs) == 0
        finally:
            assert acl.mdl.destroy_aipp(aipp) == 0


# --- shape ranges -------------------------------------------------------------------------------


def matmul_feeds(batch, seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32)}


def test_a_range_model_answers_as_onnxruntime_at_every_batch_in_its_range(built):
    with Opened(built["dir"] / "range8.om", slots=2) as engine:
        for batch in (1, 3, 8, 2, 8, 1):
            for slot in (0, 1):
                feeds = matmul_feeds(batch, batch + slot)
                assert_as_onnxruntime(run(engine, feeds, slot=slot), built["matmul"], feeds)
    with RawAcl() as raw:
        acl = raw.acl
        _, desc, _, _ = raw.load(built["dir"] / "range8.om")
        # [min, max] per axis, static axes [d, d] (model_om2.cpp 471-543); sizes from the range maxima (426-458)
        assert acl.mdl.get_input_dims_range(desc, 0) == ({"rangeCount": 2, "range": [[1, 8], [4, 4]]}, 0)
        assert acl.mdl.get_input_dims(desc, 0)[0]["dims"] == [-1, 4]
        assert acl.mdl.get_input_size_by_index(desc, 0) == 8 * 4 * 4


@pytest.mark.parametrize("batch, axis_text", [(9, "axis 0 is 9"), (0, "axis 0 is 0")])
def test_a_shape_outside_the_range_is_refused_naming_the_axis_and_the_range(built, batch, axis_text):
    """The runtime refuses an input outside its range ("Input [i] shape out of shape range", 100000,
    model.cpp 567-623); the engine says so before anything is queued."""
    with Opened(built["dir"] / "range8.om") as engine:
        with pytest.raises(EngineError, match=rf"'x' {axis_text}; the model's range is 1..8"):
            engine.slots[0].inputs({"x": (batch, 4)})
        with pytest.raises(EngineError, match="'x' has rank 2"):
            engine.slots[0].inputs({"x": (2, 4, 1)})
        feeds = matmul_feeds(8)  # the slot still runs
        assert_as_onnxruntime(run(engine, feeds), built["matmul"], feeds)


def test_the_simulator_refuses_an_input_desc_outside_the_range(built):
    """Execute on the dynamic-shape path checks each input desc against its range: 100000
    (model.cpp 567-623)."""
    with RawAcl() as raw:
        acl = raw.acl
        model_id, _, inputs, outputs = raw.load(built["dir"] / "range8.om")
        for dims, want in (([9, 4], 100000), ([2, 4], 0)):
            desc = acl.create_tensor_desc(0, dims, 2)
            _, ret = acl.mdl.set_dataset_tensor_desc(inputs, desc, 0)
            acl.destroy_tensor_desc(desc)
            assert ret == 0
            assert acl.mdl.execute(model_id, inputs, outputs) == want
        out = acl.mdl.get_dataset_tensor_desc(outputs, 0)  # rewritten by execute (model.cpp 672-693)
        assert [acl.get_tensor_desc_dim(out, i) for i in range(acl.get_tensor_desc_num_dims(out))] == [2, 3]


def test_an_unbounded_range_needs_acl_max_shapes(built):
    path = built["dir"] / "unbounded.om"
    with pytest.raises(ConfigError, match=r"input 'x' \[-1,4\] has no upper bound.*acl_max_shapes, e.g. x:8,4"):
        open_sim(path)
    with pytest.raises(ConfigError, match=r"output 'y' \[-1,3\] has no upper bound.*acl_max_shapes"):
        open_sim(path, acl_max_shapes=parse_max_shapes("x:16,4"))
    assert sim.live() == []
    with RawAcl() as raw:
        acl = raw.acl
        _, desc, _, _ = raw.load(path)
        # a -1 (0~) upper bound: sizes are 0 (option_utils.cc 230-272; model_om2.cpp 426-458, 877-894)
        assert acl.mdl.get_input_dims_range(desc, 0)[0]["range"] == [[0, -1], [4, 4]]
        assert acl.mdl.get_input_size_by_index(desc, 0) == 0 and acl.mdl.get_output_size_by_index(desc, 0) == 0
    with Opened(path, acl_max_shapes=parse_max_shapes("x:16,4;y:16,3;h:16,3")) as engine:
        for batch in (1, 12, 16, 5):
            feeds = matmul_feeds(batch, batch)
            assert_as_onnxruntime(run(engine, feeds), built["matmul"], feeds)
        with pytest.raises(EngineError, match=r"input 'x' of shape \[17,4\] needs 272 bytes, its buffer holds 256"):
            engine.slots[0].inputs({"x": (17, 4)})


def test_an_output_outgrowing_its_buffer_is_a_clear_engine_error(built):
    """A buffer smaller than the output fails execute (hybrid_model_executor.cc 245-269: 500002)."""
    path = built["dir"] / "unbounded.om"
    with Opened(path, acl_max_shapes=parse_max_shapes("x:16,4;y:8,3;h:16,3")) as engine:
        with pytest.raises(EngineError, match=r"output 'y'.*\[12, 3\].*96-byte buffer") as info:
            run(engine, matmul_feeds(12))
        assert not info.value.fatal
        feeds = matmul_feeds(8)  # the slot is usable again
        assert_as_onnxruntime(run(engine, feeds), built["matmul"], feeds)


def test_get_cur_output_dims_is_refused_on_a_range_model(built):
    with RawAcl() as raw:
        acl = raw.acl
        _, desc, _, _ = raw.load(built["dir"] / "range8.om")
        assert acl.mdl.get_cur_output_dims(desc, 0) == ({}, 200001)  # model.cpp 1981-1985


def test_the_runner_batches_a_range_model_along_the_batch_axis_without_padding(built, monkeypatch):
    """Axis 0 ranges over 1..8 (get_input_dims_range, model_om2.cpp 471-543): any batch in it runs as
    it is, so no row is padding."""
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (3, 2, 5, 4, 1)]  # 15 rows
    with Opened(built["dir"] / "range8.om") as engine:
        assert engine.spec.batch.kind == "dynamic" and engine.spec.batch.limit == 8
        seen = staged_shapes(engine, monkeypatch)
        recorder = Recorder()
        results, _ = submit(
            engine,
            [({"x": a}, {}) for a in arrays],
            max_batch_size=8,
            outputs={"y": np.float32, "h": np.float16},
            observers=[recorder],
        )
    assert sorted(s["x"] for s in seen) == [(7, 4), (8, 4)]  # 15 rows in two calls, no row of padding
    assert sorted(recorder.batches) == [(7, 0), (8, 0)]
    for array, (outputs, error) in zip(arrays, results):
        assert error is None, error
        assert_as_onnxruntime(outputs, built["matmul"], {"x": array})
