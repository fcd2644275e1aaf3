"""The benchmark configurations and reports, without a server: labels (``null``,
``LABEL+key=value``), the folders they build, and the ratios ab, images and serving compute
from their measurements (fed made-up points: the arithmetic, not the host, is under test)."""

from __future__ import annotations

import argparse
import math

import pytest

from ge_python_backend.ops.bench.stats import measured_point
from ge_python_backend.repository.config import read_config_file
from tools.bench import repos, runner
from tools.bench.scenarios import ab, images, serving


@pytest.mark.parametrize(
    ("label", "engine", "mode", "streams", "instances", "parameters", "folder"),
    [
        ("default", "acl-sim", None, None, None, (), "default_d0"),
        ("null", "null", None, None, None, (), "null_d0"),
        ("return_s1_i2", "acl-sim", "return", 1, 2, (), "return_s1_i2_d0"),
        ("null_return_s2_i1", "null", "return", 2, 1, (), "null_return_s2_i1_d0"),
        (
            "default+reject_nonfinite=true",
            "acl-sim",
            None,
            None,
            None,
            (("reject_nonfinite", "true"),),
            "default__reject_nonfinite-true_d0",
        ),
        (
            "ort+metrics=false+x=1",
            "onnxruntime",
            None,
            None,
            None,
            (("metrics", "false"), ("x", "1")),
            "ort__metrics-false__x-1",
        ),
    ],
)
def test_labels_name_their_configuration(label, engine, mode, streams, instances, parameters, folder):
    config = repos.config_named(label)
    assert (config.engine, config.mode, config.streams, config.instances) == (engine, mode, streams, instances)
    assert config.parameters == parameters and config.label == label
    assert config.folder(0.0) == folder


@pytest.mark.parametrize("label", ["fast", "default+reject_nonfinite", "null_return_s1", "+x=1"])
def test_unknown_labels_are_refused_with_the_accepted_forms(label):
    with pytest.raises(ValueError, match="default\\+reject_nonfinite=true"):
        repos.config_named(label)


def test_the_null_folder_runs_engine_acl_over_the_null_pyacl(tmp_path):
    configs = [repos.config_named("null+metrics=false"), repos.config_named("default")]
    repo, _ = repos.build_host_repository(tmp_path, configs, [8.0])
    null = read_config_file(repo / "null__metrics-false_d8" / "config.pbtxt")
    parameters = {k: v.string_value for k, v in null.parameters.items()}
    assert parameters["engine"] == "acl" and parameters["metrics"] == "false"
    assert not any(key.startswith("acl_sim_") for key in parameters)  # engine acl would refuse them
    model_py = (repo / "null__metrics-false_d8" / "1" / "model.py").read_text()
    assert str(repos.NULLACL) in model_py and "install(device_ms=8.0, shared_device=True)" in model_py
    assert model_py.index("install(") < model_py.index("from ge_python_backend import GEModel")
    sim = read_config_file(repo / "default_d8" / "config.pbtxt")
    assert (
        sim.parameters["engine"].string_value == "acl-sim" and sim.parameters["acl_sim_device_ms"].string_value == "8"
    )
    assert "acl_sim_shared_device" not in sim.parameters  # the shared device, the simulator's default


def test_stream_devices_give_every_stream_a_device_of_its_own(tmp_path):
    configs = [repos.config_named("null"), repos.config_named("default")]
    repo, _ = repos.build_host_repository(tmp_path, configs, [8.0], shared_device=False)
    sim = read_config_file(repo / "default_d8" / "config.pbtxt")
    assert sim.parameters["acl_sim_shared_device"].string_value == "false"
    assert "install(device_ms=8.0, shared_device=False)" in (repo / "null_d8" / "1" / "model.py").read_text()


def test_ab_needs_no_second_checkout_and_checks_its_labels(tmp_path):
    args = runner.build_parser().parse_args(["ab", "--configs", "ort,null,default+reject_nonfinite=true"])
    assert args.b is None and args.configs == ["ort", "null", "default+reject_nonfinite=true"]
    with pytest.raises(argparse.ArgumentTypeError, match="twice"):
        ab.configurations("null,null")


def _point(infer, stubs_ms, identity_infer, identity_stubs_ms, server_ms=1.0):
    return {
        "infer_per_s": infer,
        "stubs_cpu_ms": stubs_ms,
        "server_cpu_ms": server_ms,
        "identity": identity_infer,
        "identity_stubs_cpu_ms": identity_stubs_ms,
        "identity_server_cpu_ms": 0.5,
    }


def test_ab_targets_pair_each_round_with_its_identity():
    points = {
        "ort_a": [_point(900, 0.12, 1000, 0.08), _point(500, 0.10, 1000, 0.05)],
        "null_a": [_point(800, 0.20, 1000, 0.10), _point(450, 0.14, 500, 0.10)],
        "null+reject_nonfinite=true_a": [_point(700, 0.3, 1000, 0.1), _point(700, 0.3, 1000, 0.1)],
    }
    table = ab.targets(["ort", "null", "null+reject_nonfinite=true"], points)
    rows = {row[0]: row for row in table.rows}
    ort_stubs = rows["onnxruntime: stubs CPU per request / identity's"]
    assert ort_stubs[1] == "1.75" and ort_stubs[3] == "<= 1.5" and ort_stubs[4] == "NO"  # median of 1.5 and 2.0
    null_ceiling = rows[f"{ab.TARGET_NAMES['null']}: infer/s / identity's (host ceiling, c=16)"]
    assert null_ceiling[1] == "0.85" and null_ceiling[4] == "yes"  # median of 0.8 and 0.9
    assert rows["null+reject_nonfinite=true: infer/s / identity's"][1] == "0.70"
    assert not any("acl-sim" in name for name in rows)  # default was not measured: no row
    against = ab.against_identity(["null"], ("a",), points)
    assert against.rows[0][3] == "1.70 (1.40-2.00)"  # stubs x identity's, paired per round


def _image_points(rounds):
    """point name -> one made-up point per (stubs CPU ms, server CPU ms) per request, per round."""
    return {
        name: [{"stubs_cpu_ms": a, "server_cpu_ms": b, "infer_per_s": 100.0, "avg_batch": 8.0} for a, b in found]
        for name, found in rounds.items()
    }


def test_images_target_and_cores_come_from_the_same_rounds():
    kinds = [repos.ImageInput("uint8", 224), repos.ImageInput("uint8", 640)]
    points = _image_points({"uint8_224/null": [(0.1, 0.2), (0.2, 0.4)], "uint8_640/null": [(0.11, 0.3), (0.3, 0.5)]})
    rows = {row[0]: row for row in images.summary(kinds, ["null"], points).rows}
    target = rows["null: UINT8 640 / 224 stubs CPU per request"]
    assert target[1] == "1.30" and target[3] == "<= 1.2" and target[4] == "NO"  # median of 1.1 and 1.5
    cores = rows["null: UINT8 NHWC 1x224x224x3 (static AIPP): host cores at 4,000 images/s"]
    assert float(cores[1]) == pytest.approx(4000 * 0.3 * 1000 / 1e6, abs=0.01)  # 0.3 ms: the median server CPU
    for point, faults in zip(points["uint8_224/null"], (10.0, 30.0)):
        point["split"] = {"user_ms": 0.05, "sys_ms": 0.002, "minflt": faults}
    served = images.served_table(kinds, ["null"], points)
    assert served.rows[0][4] == "300" and served.rows[0][9] == f"{4000 * 300 / 1e6:.2f}"
    assert served.rows[0][6:9] == ["50", "2", "20"]  # its stub: user, sys us and faults per request, medians
    assert served.rows[1][6] == "nan"  # no split measured


def test_images_summary_sets_gemodel_against_the_constant_models_floor_per_round():
    kinds = [repos.ImageInput("uint8", 224), repos.ImageInput("uint8", 640), repos.ImageInput("fp32", 224)]
    points = _image_points(
        {
            "uint8_224/null": [(0.3, 0.6), (0.2, 0.4)],
            "uint8_640/null": [(1.5, 2.0), (1.2, 1.6)],
            "uint8_224/constant": [(0.15, 0.3), (0.1, 0.2)],
            "uint8_640/constant": [(1.2, 1.5), (1.1, 1.4)],
            "fp32_224/null": [(1.0, 1.2), (1.0, 1.2)],
        }
    )
    rows = {row[0]: row for row in images.summary(kinds, ["null"], points).rows}
    target = rows["null: UINT8 640 / 224 stubs CPU per request"]
    assert target[1] == "5.50" and target[3] == "<= 1.2" and target[4] == "NO"  # median of 5.0 and 6.0
    floor = rows["constant: UINT8 640 / 224 stubs CPU per request (the Python backend's floor: what bounds the target)"]
    assert floor[1] == "9.50" and floor[3] == "" and floor[4] == ""  # median of 8.0 and 11.0, no target of its own
    title = kinds[1].title
    added = rows[f"null: {title}: stubs CPU us per request above the constant model's"]
    assert added[1] == "200.00"  # median of 300 and 100 us, each round against its own constant point
    times = rows[f"null: {title}: stubs CPU per request / the constant model's"]
    assert float(times[1]) == pytest.approx((1.5 / 1.2 + 1.2 / 1.1) / 2, abs=0.005)
    assert not any(kinds[2].title in name and "constant" in name for name in rows)  # fp32 had no constant point
    assert not any(name.startswith("constant: FP32") for name in rows)
    served = images.served_table(kinds, ["null", repos.CONSTANT], points)
    assert [row[1] for row in served.rows] == ["null", "constant", "null", "constant", "null"]
    assert served.rows[1][5] == "125"  # the constant model's median stubs CPU us per request


def test_image_inputs_and_their_folders_batch_by_eight(tmp_path):
    small = [repos.ImageInput("uint8", 8), repos.ImageInput("fp32", 8)]
    assert small[0].shape == (8, 8, 3) and small[0].dtype == "uint8" and small[0].request_bytes == 192
    assert small[1].shape == (3, 8, 8) and small[1].request_bytes == 768
    repo, folders = repos.build_images_repository(tmp_path, small, [repos.config_named("null")], queue_delay_us=1234)
    config = read_config_file(repo / folders[("uint8_8", "null")] / "config.pbtxt")
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 1234
    assert config.input[0].data_type == 2 and list(config.input[0].dims) == [8, 8, 3]  # TYPE_UINT8 NHWC: AIPP
    assert config.parameters["engine"].string_value == "acl"
    assert set(folders) == {(i.label, c) for i in small for c in ("null", repos.CONSTANT)}
    assert list(folders).index(("uint8_8", repos.CONSTANT)) == list(folders).index(("uint8_8", "null")) + 1
    floor = repo / folders[("fp32_8", repos.CONSTANT)]
    constant = read_config_file(floor / "config.pbtxt")  # parsed against Triton's model_config schema
    generated = read_config_file(repo / folders[("fp32_8", "null")] / "config.pbtxt")
    assert constant.name == floor.name and constant.backend == "python" and not constant.parameters
    assert constant.input == generated.input and constant.output == generated.output
    assert constant.dynamic_batching == generated.dynamic_batching
    assert constant.instance_group == generated.instance_group and constant.max_batch_size == 8
    assert (floor / "1" / "model.py").read_text() == (repos.BASELINES / "constant_model.py").read_text()


def test_the_constant_model_reads_the_input_and_answers_zeros_of_the_outputs_shape(tmp_path):
    import importlib.util

    import numpy as np

    from ge_python_backend.testing import install_fake_pb_utils, triton_args

    pb_utils = install_fake_pb_utils()
    kinds = [repos.ImageInput("uint8", 8)]
    repo, folders = repos.build_images_repository(tmp_path, kinds, [repos.config_named("null")])
    folder = repo / folders[("uint8_8", repos.CONSTANT)]
    spec = importlib.util.spec_from_file_location("bench_constant_model", folder / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize(triton_args(folder))
    request = pb_utils.InferenceRequest([pb_utils.Tensor("x", np.ones((2, 8, 8, 3), np.uint8))])
    (response,) = model.execute([request])
    (answer,) = response.output_tensors()
    assert answer.name() == "y" and answer.as_numpy().dtype == np.float32
    assert answer.as_numpy().shape == (2, 3) and not answer.as_numpy().any()


def test_serving_targets_are_ratios_of_the_medians_over_the_repeats():
    def run(c8, p50_ms):
        return [
            measured_point("concurrency", 1, 1.0, [p50_ms / 1000] * 3, [], 1),
            measured_point("concurrency", 8, 1.0, [0.01] * c8, [], 1),
        ]

    runs = {
        "GEModel": [run(100, 10.0), run(90, 12.0), run(300, 9.0)],
        "hand-written": [run(200, 10.0), run(100, 10.0), run(110, 30.0)],
    }
    raws = [{"engine settings": {8: {"images_per_s": 100.0}}, "other": {1: {"images_per_s": 100.0}}}] * 3
    ratios = {r.name: r for r in serving.target_ratios(runs, raws, [0, 1, 2])}
    throughput = ratios["GEModel / hand-written throughput, c=8, ratio of the medians over the repeats"]
    assert throughput.values == [pytest.approx(100 / 110)] and throughput.target == 1.0
    p50 = ratios["GEModel / hand-written p50, c=1, ratio of the medians over the repeats"]
    assert p50.values == [pytest.approx(10.0 / 10.0)] and p50.target == 1.0 and not p50.at_least
    paired = ratios["GEModel / hand-written throughput, c=8, per repeat (median, range)"]
    assert paired.target is None and paired.value == pytest.approx(0.9)  # 0.5, 0.9, 2.73: not the same figure
    assert not math.isnan(paired.value)


def test_the_stub_split_reads_proc_and_finds_no_stubs_where_there_are_none():
    import os

    from tools.bench import measure

    user, system, faults = measure.user_sys_faults(os.getpid())
    assert user > 0 and system >= 0 and faults > 0  # this process has run and faulted in its pages
    assert measure.user_sys_faults(2**22 + 1) == (0.0, 0.0, 0.0)  # above pid_max's default: gone
    assert measure.stub_pids(os.getpid(), "no_such_model") == []
