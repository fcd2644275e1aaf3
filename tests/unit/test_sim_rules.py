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
    conv = nets.image_conv(folder / "conv.onnx")
    dynamic = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=6 * 8 * 3)
    sim_compile(conv, folder / "dynamic_aipp.om", insert_op_conf=[dynamic])
    static = AippConfig(
        input_format=AippInputFormat.RGB888_U8,
        src_image_size_w=8,
        src_image_size_h=6,
        csc_switch=True,
        mean_chn=(10, 20, 30, 40),
        min_chn=(0.5, 0.5, 0.5, 0.5),
    )
    sim_compile(conv, folder / "static_aipp.om", insert_op_conf=[static])
    matmul = nets.matmul_add(folder / "matmul.onnx")
    sim_compile(matmul, folder / "batch.om", batch_gears="1,2,4")
    sim_compile(matmul, folder / "range.om", input_shapes="x:1~8,4")
    sim_compile(matmul, folder / "unbounded.om", input_shapes="x:-1,4")
    sim_compile(matmul, folder / "fixed.om", input_shapes="x:3,4")
    return {
        "wide_aipp": folder / "wide_aipp.om",
        "dynamic_aipp": folder / "dynamic_aipp.om",
        "static_aipp": folder / "static_aipp.om",
        "batch": folder / "batch.om",
        "range": folder / "range.om",
        "unbounded": folder / "unbounded.om",
        "fixed": folder / "fixed.om",
    }


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


# --- AIPP: sizes, setters, first AIPP info, the parameter write ------------------------------------


@pytest.fixture
def acl():
    sim = simulator()
    yield sim.acl
    assert sim.acl.rt.reset_device(0) == 0
    assert sim.live() == []
    sim.reset()


def test_aipp_data_size_and_create_aipp_follow_acl_aipp_om2(acl):
    """aclmdlGetAippDataSize = 96 x batch + 64, batch > 0 (acl_aipp_om2.cpp 372-382); create_aipp(0)
    is NULL (330-363)."""
    assert acl.mdl.get_aipp_data_size(2) == (256, 0)
    assert acl.mdl.get_aipp_data_size(0) == (0, 100000)
    assert acl.mdl.create_aipp(0) == 0


@pytest.mark.parametrize(
    "setter, arguments",
    [
        ("set_aipp_input_format", (0,)),  # 1..14
        ("set_aipp_input_format", (15,)),
        ("set_aipp_src_image_size", (1, 4)),  # width 2..4096
        ("set_aipp_src_image_size", (4097, 4)),
        ("set_aipp_src_image_size", (8, 0)),  # height 1..4096
        ("set_aipp_csc_params", (1, 32677, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),  # -32677..32676
        ("set_aipp_csc_params", (2, *(0,) * 15)),  # a switch is 0 or 1
        ("set_aipp_rbuv_swap_switch", (2,)),
        ("set_aipp_ax_swap_switch", (2,)),
        ("set_aipp_crop_params", (1, 4096, 0, 8, 6, 0)),  # start 0..4095
        ("set_aipp_crop_params", (1, 0, 0, 0, 6, 0)),  # size 1..4096
        ("set_aipp_crop_params", (1, 0, 0, 8, 6, 1)),  # batch index < batch
        ("set_aipp_padding_params", (1, 33, 0, 0, 0, 0)),  # each 0..32
        ("set_aipp_dtc_pixel_mean", (256, 0, 0, 0, 0)),  # 0..255
        ("set_aipp_dtc_pixel_min", (0.0, 0.0, 0.0, 255.5, 0)),  # 0..255
        ("set_aipp_pixel_var_reci", (65505.0, 1.0, 1.0, 1.0, 0)),  # -65504..65504
    ],
)
def test_aipp_setters_refuse_values_outside_their_ranges(acl, setter, arguments):
    """acl_aipp_om2.cpp 384-692 and model_common.h 100-116: each out-of-range value is 100000."""
    aipp = acl.mdl.create_aipp(1)
    try:
        assert getattr(acl.mdl, setter)(aipp, *arguments) == 100000
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0


def test_csc_off_is_stored_without_checking_the_matrix(acl):
    """With the switch off the setter returns before the matrix checks (acl_aipp_om2.cpp 413-455)."""
    aipp = acl.mdl.create_aipp(1)
    try:
        assert acl.mdl.set_aipp_csc_params(aipp, 0, 99999 % 65536 - 32768, *(0,) * 14) == 0
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0


def test_first_aipp_info_of_a_static_aipp_lacks_three_matrix_keys_and_mean_chn_3(acl, models):
    """The binding exports six matrix entries (mdl_wrap.cpp 656-823); channel 3 of mean and min read
    back as 0 for OM1 models (ge_op_utils.cc 131-136); no AIPP -> 145015, an index past the inputs ->
    100000, both as (None, ret) (acl_aipp.cpp 502-595)."""
    loaded = Loaded(acl, models["static_aipp"])
    try:
        info, ret = acl.mdl.get_first_aipp_info(loaded.model_id, 0)
        assert ret == 0
        assert {"matrixR0C2", "matrixR2C0", "matrixR2C1"}.isdisjoint(info)
        assert info["matrixR0C0"] == 66 and info["cscSwitch"] == 1  # ATC's RGB default (aipp_op.cc 789-797)
        assert (info["meanChn0"], info["meanChn3"], info["minChn3"]) == (10, 0, 0.0)
        assert acl.mdl.get_first_aipp_info(loaded.model_id, 5) == (None, 100000)
    finally:
        loaded.release()
    plain = Loaded(acl, models["batch"])
    try:
        assert acl.mdl.get_first_aipp_info(plain.model_id, 0) == (None, 145015)
    finally:
        plain.release()


def one_image(acl, width=8, height=6):
    aipp = acl.mdl.create_aipp(1)
    assert acl.mdl.set_aipp_input_format(aipp, RGB888) == 0
    assert acl.mdl.set_aipp_src_image_size(aipp, width, height) == 0
    return aipp


def test_the_parameter_write_checks_the_address_then_the_length(acl, models):
    """A NULL parameter buffer -> 100000 from the ACL layer (acl_aipp.cpp 427-437), before GE's 145011;
    64 + 96 x batch above the buffer -> 145012 (ge_executor.cc 670-684)."""
    loaded = Loaded(acl, models["dynamic_aipp"])
    aipp = one_image(acl)
    index = loaded.index("ascend_dynamic_aipp_data")
    tiny, ret = acl.rt.malloc(100, 0)
    assert ret == 0
    made = []
    try:
        for address, size, code in ((0, 160, 100000), (tiny, 100, 145012)):
            dataset = acl.mdl.create_dataset()
            own = acl.create_data_buffer(address, size)
            made.append((dataset, own))
            for i in range(acl.mdl.get_num_inputs(loaded.desc)):
                acl.mdl.add_dataset_buffer(dataset, own if i == index else acl.mdl.get_dataset_buffer(loaded.inputs, i))
            assert acl.mdl.set_input_aipp(loaded.model_id, dataset, index, aipp) == code
        assert acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, index, aipp) == 0
    finally:
        for dataset, own in made:
            assert acl.mdl.destroy_dataset(dataset) == 0 and acl.destroy_data_buffer(own) == 0
        assert acl.rt.free(tiny) == 0
        assert acl.mdl.destroy_aipp(aipp) == 0
        loaded.release()


def test_set_aipp_by_input_index_takes_the_image_index(acl, models):
    """An index past the dataset's buffers -> 100000; an input whose AIPP type is not 2 -> 500001;
    the image index goes on to set_input_aipp of its parameter input (acl_aipp.cpp 476-500)."""
    loaded = Loaded(acl, models["dynamic_aipp"])
    aipp = one_image(acl)
    try:
        image = loaded.index("x")
        parameter = loaded.index("ascend_dynamic_aipp_data")
        assert acl.mdl.set_aipp_by_input_index(loaded.model_id, loaded.inputs, 9, aipp) == 100000
        assert acl.mdl.set_aipp_by_input_index(loaded.model_id, loaded.inputs, parameter, aipp) == 500001
        assert acl.mdl.set_aipp_by_input_index(loaded.model_id, loaded.inputs, image, aipp) == 0
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0
        loaded.release()


# --- loads, memory, ranges, lists ------------------------------------------------------------------


def test_user_memory_below_what_query_size_says_is_refused(acl, models):
    """weightSize below the model's -> 145000 (davinci_model.cc 525-570); work below the minimum ->
    145000 (597-632)."""
    path = str(models["batch"])
    work, weight, ret = acl.mdl.query_size(path)
    assert ret == 0 and work and weight
    work_ptr, _ = acl.rt.malloc(work, 0)
    weight_ptr, _ = acl.rt.malloc(weight, 0)
    try:
        assert acl.mdl.load_from_file_with_mem(path, work_ptr, work, weight_ptr, weight - 1) == (0, 145000)
        assert acl.mdl.load_from_file_with_mem(path, work_ptr, work - 1, weight_ptr, weight) == (0, 145000)
        model_id, ret = acl.mdl.load_from_file_with_mem(path, work_ptr, work, weight_ptr, weight)
        assert ret == 0 and acl.mdl.unload(model_id) == 0
    finally:
        assert acl.rt.free(work_ptr) == 0 and acl.rt.free(weight_ptr) == 0


def test_a_range_model_load_passes_only_the_weights_on(acl, models):
    """RT2 loads take weightPtr/weightSize only (model.cpp 1332-1335): the work memory given is not
    the model's, so freeing it while the model is loaded is allowed."""
    path = str(models["range"])
    work, weight, ret = acl.mdl.query_size(path)
    assert (work, ret) == (0, 0)
    spare, _ = acl.rt.malloc(64, 0)
    weight_ptr, _ = acl.rt.malloc(weight, 0)
    model_id, ret = acl.mdl.load_from_file_with_mem(path, spare, 64, weight_ptr, weight)
    assert ret == 0
    assert acl.rt.free(spare) == 0
    assert acl.rt.free(weight_ptr) == 100000  # the weights are the model's
    assert acl.mdl.unload(model_id) == 0 and acl.rt.free(weight_ptr) == 0


def test_atc_ranges_become_the_dims_ranges_the_runtime_reports(acl, models):
    """--input_shape a~b -> (a, b); d -> (d, d); -1 -> (0, -1) (option_utils.cc 230-272;
    --input_shape.md 41-43, 66), as get_input_dims_range reports them (model_om2.cpp 471-543)."""
    expected = {"range": [[1, 8], [4, 4]], "unbounded": [[0, -1], [4, 4]]}
    for name, ranges in expected.items():
        loaded = Loaded(acl, models[name])
        try:
            assert acl.mdl.get_input_dims_range(loaded.desc, 0) == ({"rangeCount": 2, "range": ranges}, 0)
        finally:
            loaded.release()


def test_a_too_small_output_of_a_range_model_fails_execute_async_itself(acl, models):
    """RT2 sizes the copy into each output on the host inside execute (TensorToOut, memory_copy.cc
    566-572, returned by model.cpp 662-671) with a GE status outside the mapped ranges, which
    ACL_GET_ERRCODE_GE makes 500002 (error_codes_inner.h 23-27): execute_async returns it and
    nothing is queued."""
    loaded = Loaded(acl, models["range"])
    stream, _ = acl.rt.create_stream()
    desc = acl.create_tensor_desc(0, [8, 4], 2)
    small, _ = acl.rt.malloc(4, 0)
    small_buffer = acl.create_data_buffer(small, 4)  # y: 8 x 3 floats do not fit
    outputs = acl.mdl.create_dataset()
    try:
        _, ret = acl.mdl.set_dataset_tensor_desc(loaded.inputs, desc, 0)
        assert ret == 0
        acl.mdl.add_dataset_buffer(outputs, small_buffer)
        acl.mdl.add_dataset_buffer(outputs, acl.mdl.get_dataset_buffer(loaded.outputs, 1))
        assert acl.mdl.execute_async(loaded.model_id, loaded.inputs, outputs, stream) == 500002
        assert "'y'" in acl.get_recent_err_msg()
        assert acl.rt.synchronize_stream(stream) == 0
    finally:
        assert acl.mdl.destroy_dataset(outputs) == 0 and acl.destroy_data_buffer(small_buffer) == 0
        assert acl.rt.free(small) == 0
        acl.destroy_tensor_desc(desc)
        assert acl.rt.destroy_stream(stream) == 0
        loaded.release()


def test_lists_passed_in_must_be_lists_of_exact_ints(acl):
    """utils_methods.cpp 446-468 and prof_wrap.cpp 27-41: a list object of Python ints."""
    import numpy as np

    with pytest.raises(TypeError):
        acl.create_tensor_desc(0, [np.int64(1)], 2)
    with pytest.raises(TypeError):
        acl.create_tensor_desc(0, (1, 2), 2)
    with pytest.raises(TypeError):
        acl.prof.create_config((0,), 1, 0, 0x3)


def test_set_input_dynamic_dims_takes_a_dict_with_a_list_of_dims(acl, models):
    """mdl_wrap.cpp 1031-1074: the dict is required and "dims" a list of at least dimCount ints."""
    loaded = Loaded(acl, models["batch"])
    try:
        index = loaded.index("ascend_mbatch_shape_data")
        for bad in (
            [1, 2],
            {"dimCount": 2, "dims": (1, 2)},
            {"dimCount": 3, "dims": [1, 2]},
            {"dimCount": 1, "dims": ["1"]},
        ):
            with pytest.raises(TypeError):
                acl.mdl.set_input_dynamic_dims(loaded.model_id, loaded.inputs, index, bad)
    finally:
        loaded.release()


def test_get_mem_info_answers_free_and_total_of_the_simulated_device(acl):
    """aclrtGetMemInfo -> (free, total, ret) (acl_rt.h 227-246; rt_memory.cpp 199-209); the simulator
    has no system-reserved memory and no HBM/DDR split to fall back between."""
    free, total, ret = acl.rt.get_mem_info(1)
    assert ret == 0 and free == total == SimConfig().device_memory
    ptr, _ = acl.rt.malloc(1 << 20, 0)
    assert acl.rt.get_mem_info(1)[0] <= total - (1 << 20)
    assert acl.rt.free(ptr) == 0


def test_a_profiler_section_that_is_off_profiles_nothing_and_leaves_the_api_free(tmp_path):
    """Profiling is on only with "switch": "on" (prof_acl_mgr.cpp 2095-2105; msprofiler_impl.cpp
    121-123): otherwise acl.init returns 0, nothing is written and acl.prof.init works."""
    folder = tmp_path / "prof"
    folder.mkdir()
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"profiler": {"switch": "off", "output": str(folder)}}))
    sim = Simulator()
    try:
        assert sim.acl.init(str(config)) == 0
        assert list(folder.iterdir()) == []
        assert sim.acl.prof.init(str(folder)) == 0
        assert sim.acl.prof.finalize() == 0
    finally:
        sim.reset()


# --- what a read of CANN's source corrected in the simulator's rules ------------------------------


def test_a_range_model_takes_a_short_weight_buffer_and_allocates_its_own(acl, models):
    """145000 for an undersized weight buffer is the OM1 rule (davinci_model.cc 525-570); RT2's
    GetOrCreateWeightMem allocates weights of its own when the given buffer is short or NULL
    (sink_weight_assigner.cc 86-93): the load succeeds and the weights take device memory."""
    path = str(models["range"])
    _, weight, _ = acl.mdl.query_size(path)
    short, _ = acl.rt.malloc(weight - 1, 0)
    free_before, _, _ = acl.rt.get_mem_info(1)
    try:
        model_id, ret = acl.mdl.load_from_file_with_mem(path, 0, 0, short, weight - 1)
        assert ret == 0
        free_loaded, _, _ = acl.rt.get_mem_info(1)
        assert free_before - free_loaded >= weight  # its own weights, not the short buffer
        assert acl.mdl.unload(model_id) == 0
    finally:
        assert acl.rt.free(short) == 0


def test_set_dynamic_batch_checks_the_buffer_length_before_the_model_kind(acl, models):
    """GE checks the length (ge_executor.cc 385-394) before it looks at the model's gears (404-414):
    a 2-byte buffer is 145012 on a model without batch gears too, where a long one is 145013."""
    loaded = Loaded(acl, models["fixed"])
    tiny, _ = acl.rt.malloc(2, 0)
    tiny_buffer = acl.create_data_buffer(tiny, 2)
    dataset = acl.mdl.create_dataset()
    try:
        acl.mdl.add_dataset_buffer(dataset, tiny_buffer)
        assert acl.mdl.set_dynamic_batch_size(loaded.model_id, dataset, 0, 2) == 145012
        assert acl.mdl.set_dynamic_hw_size(loaded.model_id, dataset, 0, 4, 4) == 145012
        assert acl.mdl.set_dynamic_batch_size(loaded.model_id, loaded.inputs, 0, 2) == 145013
    finally:
        assert acl.mdl.destroy_dataset(dataset) == 0 and acl.destroy_data_buffer(tiny_buffer) == 0
        assert acl.rt.free(tiny) == 0
        loaded.release()


def test_set_input_aipp_while_the_model_executes_is_refused(acl, models):
    """set_input_aipp copies the parameters with a synchronous aclrtMemcpy at the call
    (ge_executor.cc 686-699), racing an execute still reading them: refused like a gear change
    then (507011, sim)."""
    loaded = Loaded(acl, models["dynamic_aipp"])
    stream, _ = acl.rt.create_stream()
    aipp = acl.mdl.create_aipp(1)
    try:
        assert acl.mdl.set_aipp_input_format(aipp, RGB888) == 0
        assert acl.mdl.set_aipp_src_image_size(aipp, 8, 6) == 0
        index = loaded.index("ascend_dynamic_aipp_data")
        assert acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, index, aipp) == 0
        assert acl.mdl.execute_async(loaded.model_id, loaded.inputs, loaded.outputs, stream) == 0
        assert acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, index, aipp) == 507011
        assert acl.rt.synchronize_stream(stream) == 0
        assert acl.mdl.set_input_aipp(loaded.model_id, loaded.inputs, index, aipp) == 0
    finally:
        assert acl.mdl.destroy_aipp(aipp) == 0 and acl.rt.destroy_stream(stream) == 0
        loaded.release()


@pytest.fixture(scope="module")
def soc_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("socs")
    matmul = nets.matmul_add(folder / "matmul.onnx")
    found = {}
    for soc in ("", "Ascend310P3", "Ascend310P1", "Ascend910B3", "Ascend310X9"):
        found[soc] = folder / f"for_{soc or 'none'}.om"
        sim_compile(matmul, found[soc], input_shapes="x:2,4", soc_version=soc)
    return found


@pytest.mark.parametrize(
    "model_soc, device_soc, ret",
    [
        ("", "Ascend310P3", 0),  # no soc_version: the check is skipped (om_file_helper.cc 262-265)
        ("Ascend310P3", "Ascend310P3", 0),
        ("Ascend310P1", "Ascend310P3", 0),  # both NpuArch 2002 (api_impl.cc 6245-6269)
        ("Ascend910B3", "Ascend310P3", 500002),  # NpuArch 2201 on a 2002 device
        ("Ascend310P3", "Ascend910_9392", 500002),
        ("Ascend910B3", "Ascend910_9392", 0),  # A2 and A3 share NpuArch 2201
        ("Ascend310X9", "Ascend310P3", 500002),  # no platform file names it (soc_info.cc 58-75)
        ("Ascend310P3", "Ascend310X9", 500002),  # nor the device's
    ],
)
def test_a_model_for_another_soc_is_refused_at_load_as_cann_refuses_it(soc_models, model_soc, device_soc, ret):
    """CheckModelCompatibility: aclrtCheckArchCompatibility compares the NpuArch of the model's
    soc_version with the device's (om_file_helper.cc 259-287), PARAM_INVALID -> 500002."""
    sim = simulator(soc_name=device_soc)
    acl = sim.acl
    context, _ = acl.rt.create_context(0)
    model_id, got = acl.mdl.load_from_file(str(soc_models[model_soc]))
    assert got == ret
    if ret:
        message = acl.get_recent_err_msg()
        assert "E10001" in message and model_soc in message and f"--soc_version={device_soc}" in message
    else:
        assert acl.mdl.unload(model_id) == 0
    assert acl.rt.destroy_context(context) == 0 and acl.rt.reset_device(0) == 0
    assert sim.live() == []


def test_a_dynamic_shape_load_needs_room_for_the_stream_it_makes_while_loading(models):
    """The RT2 load creates a stream and destroys it when done (model.cpp 216-233): with room for the
    model's own stream only, a range model is refused (207008) where a static one loads."""
    sim = simulator(soc_name="Ascend310B1")  # 512 streams
    acl = sim.acl
    context, _ = acl.rt.create_context(0)
    streams = []
    while True:
        available, ret = acl.rt.get_stream_available_num()
        assert ret == 0
        if available == 1:  # room for one model stream
            break
        stream, ret = acl.rt.create_stream()
        assert ret == 0
        streams.append(stream)
    assert acl.mdl.load_from_file(str(models["range"]))[1] == 207008
    model_id, ret = acl.mdl.load_from_file(str(models["fixed"]))
    assert ret == 0 and acl.rt.get_stream_available_num() == (0, 0)
    assert acl.mdl.unload(model_id) == 0
    for stream in streams:
        assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_context(context) == 0 and acl.rt.reset_device(0) == 0
    assert sim.live() == []
