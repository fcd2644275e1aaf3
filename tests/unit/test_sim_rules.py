"""Simulator rules of docs/fidelity.md that no engine-level test covers: each checked on a
simulator of its own, against the code CANN's source answers (cited per test).
"""

from __future__ import annotations

import json

import pytest

from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode
from ge_python_backend.sim import SimConfig, Simulator, sim_compile
from tests.support import acl_sim_nets as nets

RGB888 = AippInputFormat.RGB888_U8.value


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("simrules")
    wide = nets.image_conv(folder / "wide.onnx", height=2, width=1100)
    aipp = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=2 * 1100 * 3)
    sim_compile(wide, folder / "wide_aipp.om", insert_op_conf=[aipp])
    return {"wide_aipp": folder / "wide_aipp.om"}


def simulator(**config) -> Simulator:
    found = Simulator(SimConfig(**config))
    assert found.acl.init() == 0
    assert found.acl.rt.set_device(0) == 0
    return found


class Loaded:
    """A loaded model with device buffers of every input and output size."""

    def __init__(self, acl, path):
        self.acl = acl
        self.model_id, ret = acl.mdl.load_from_file(str(path))
        assert ret == 0, acl.get_recent_err_msg()
        self.desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(self.desc, self.model_id) == 0
        self.memory: list[tuple[int, int]] = []
        self.inputs = self._dataset(acl.mdl.get_num_inputs(self.desc), acl.mdl.get_input_size_by_index)
        self.outputs = self._dataset(acl.mdl.get_num_outputs(self.desc), acl.mdl.get_output_size_by_index)

    def _dataset(self, count, size_of):
        dataset = self.acl.mdl.create_dataset()
        for index in range(count):
            size = max(size_of(self.desc, index), 64)
            ptr, ret = self.acl.rt.malloc(size, 0)
            assert ret == 0
            buffer = self.acl.create_data_buffer(ptr, size)
            self.memory.append((ptr, buffer))
            assert self.acl.mdl.add_dataset_buffer(dataset, buffer)[1] == 0
        return dataset

    def index(self, name):
        found, ret = self.acl.mdl.get_input_index_by_name(self.desc, name)
        assert ret == 0
        return found

    def release(self):
        acl = self.acl
        for dataset in (self.inputs, self.outputs):
            assert acl.mdl.destroy_dataset(dataset) == 0
        for ptr, buffer in self.memory:
            assert acl.destroy_data_buffer(buffer) == 0
            assert acl.rt.free(ptr) == 0
        assert acl.mdl.destroy_desc(self.desc) == 0
        assert acl.mdl.unload(self.model_id) == 0


def padded_aipp(acl, width=1090, left=10):
    """One RGB image width x 2, padded on the left to the network's 1100."""
    aipp = acl.mdl.create_aipp(1)
    assert acl.mdl.set_aipp_input_format(aipp, RGB888) == 0
    assert acl.mdl.set_aipp_src_image_size(aipp, width, 2) == 0
    assert acl.mdl.set_aipp_padding_params(aipp, 1, 0, 0, left, 0, 0) == 0
    return aipp


# --- AIPP rules keyed by the SoC's NpuArch (aipp_param_check.cpp) --------------------------------


@pytest.mark.parametrize(
    "soc, ret",
    [
        ("Ascend310P3", 100000),  # DAV_2002: padded width <= 1080 (aipp_param_check.cpp:246-253)
        ("Ascend910B3", 100000),  # DAV_2201
        ("Ascend910A", 100000),  # DAV_1001
        ("Ascend950PR_9579", 100000),  # DAV_3510
        ("Ascend310B1", 0),  # DAV_3002: no width check ("no need to check aipp output width", 254-256)
    ],
)
def test_the_1080_padded_width_rule_applies_on_the_four_archs_the_source_names(models, soc, ret):
    sim = simulator(soc_name=soc)
    acl = sim.acl
    loaded = Loaded(acl, models["wide_aipp"])
    aipp = padded_aipp(acl)
    try:
        assert (
            acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, loaded.index("ascend_dynamic_aipp_data"), aipp)
            == ret
        )
        if ret:
            assert "padded width 1100 is above 1080" in acl.get_recent_err_msg()
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0
        loaded.release()
        sim.reset()


def test_dynamic_aipp_on_an_arch_outside_the_five_is_refused(models):
    """AippInputFormatCheck: any arch but DAV_1001/3002/2002/2201/3510 -> "dynamic aipp not support
    arch" (aipp_param_check.cpp:36-51); Ascend035 is NpuArch 3505 (cann/Ascend035.ini:11)."""
    sim = simulator(soc_name="Ascend035")
    acl = sim.acl
    loaded = Loaded(acl, models["wide_aipp"])
    aipp = padded_aipp(acl, width=1100, left=0)
    try:
        index = loaded.index("ascend_dynamic_aipp_data")
        assert acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, index, aipp) == 100000
        assert "not supported on NpuArch 3505" in acl.get_recent_err_msg()
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0
        loaded.release()
        sim.reset()


# --- the dump API (hicann/runtime src/acl/aclrt_impl/toolchain/dump.cpp 103-239) -------------------


def test_the_dump_api_answers_cann_codes(tmp_path):
    folder = tmp_path / "dump"
    folder.mkdir()
    good = tmp_path / "dump.json"
    good.write_text(json.dumps({"dump": {"dump_path": str(folder), "dump_list": [{"model_name": "m"}]}}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dump": {"dump_path": str(folder), "dump_list": [{}], "dump_mode": "both"}}))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    sim = Simulator()
    acl = sim.acl
    try:
        assert acl.mdl.init_dump() == 100001  # before aclInit (106-112)
        assert acl.init() == 0
        assert acl.mdl.set_dump(str(good)) == 100045  # before init_dump (151-158)
        assert acl.mdl.finalize_dump() == 100045  # (204-211)
        assert acl.mdl.init_dump() == 0
        assert acl.mdl.init_dump() == 100002  # again without finalize (115-121)
        assert acl.mdl.set_dump() == 100000  # NULL (160)
        assert (
            acl.mdl.set_dump(str(tmp_path / "missing.json")) == 100003
        )  # GetConfigStrFromFile (json_parser.cpp 188-191)
        assert acl.mdl.set_dump("") == 100003  # "" does not resolve either
        assert acl.mdl.set_dump(str(empty)) == 0  # an empty file: nothing to set (json_parser.cpp 197-201)
        assert acl.mdl.set_dump(str(bad)) == 100009  # ADUMP_INPUT_FAILED (dump.cpp 180-185)
        assert acl.mdl.set_dump(str(good)) == 0
        assert acl.mdl.finalize_dump() == 0
    finally:
        sim.reset()


# --- the profiling API (prof_acl_mgr.cpp 525-566; msprofiler_acl_api.cpp 95-124) -------------------


def test_the_profiling_api_answers_cann_codes(tmp_path):
    folder = tmp_path / "prof"
    folder.mkdir()
    sim = Simulator()
    acl = sim.acl
    try:
        assert acl.init() == 0
        config = acl.prof.create_config([0], 1, 0, 0x3)
        assert config
        assert acl.prof.start(config) == 100043  # before init: not run (8.5/9.0)
        assert acl.prof.init("") == 100000  # path length 0 (msprofiler_acl_api.cpp 95-124)
        assert acl.prof.init(str(folder)) == 0
        assert acl.prof.init(str(folder)) == 100002  # ProfInitPrecheck: already inited (537-543)
        assert acl.prof.start(config) == 0
        assert acl.prof.stop(config) == 0
        assert acl.prof.destroy_config(config) == 0
        assert acl.prof.finalize() == 0
    finally:
        sim.reset()
    on = tmp_path / "acl.json"
    on.write_text(json.dumps({"profiler": {"switch": "on", "output": str(folder)}}))
    sim = Simulator()
    try:
        assert sim.acl.init(str(on)) == 0
        assert sim.acl.prof.init(str(folder)) == 100042  # profiling on through acl.json (530-536)
    finally:
        sim.reset()
