"""No request is answered from a padded non-batch axis, over random gear sets.

A model with compiled shapes (image-size gears, dims gears, batch gears) runs each request on the
shape it has or not at all: padding H/W (or any non-batch axis) up to a larger gear changes what
the model computes. The engine here stands in for the acl engine with the same gate, the
``ModelLayout`` pyACL's description gives (``find_gear``: a shape no gear has is refused), and
answers each row with its element sum and element count, so a row padded along any non-batch axis
would come back with a count the request cannot have. The expected answers and the expected
refusals are computed from the gear set and the request alone.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ge_python_backend import GEModel
from ge_python_backend.ascend.aipp import AippConfig, AippInputFormat, AippMode
from ge_python_backend.ascend.constants import data_type_named
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout
from ge_python_backend.cli import main
from ge_python_backend.engines.base import Engine, PhaseTimes, Slot
from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.repository.atc import AtcRequest, atc_command
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import format_config, read_config_file
from ge_python_backend.serving.observers import FailureKind, Observer
from ge_python_backend.serving.requests import Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.sim import sim_compile
from ge_python_backend.sim.simom import load_sim_om, write_sim_om
from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
from ge_python_backend.testing.aipp_reference import normalise
from tests.support import acl_sim_nets as nets
from tests.support import corpus, refusals
from tests.support.acl_sim_nets import open_sim
from tests.support.fakes import declared
from tests.unit.test_generate_cli import one_line_error
from tests.unit.test_model_kinds import RawAcl
from tests.unit.test_served_shapes import outputs as response_outputs

pb_utils = install_fake_pb_utils()

FP32 = data_type_named("FLOAT")


class _GateSlot(Slot):
    def __init__(self, engine: GearGateEngine) -> None:
        self.index = 0
        self.last_times = PhaseTimes()
        self._engine = engine
        self._x = np.empty(0, np.float32)

    def inputs(self, shapes, settings=None):
        layout = self._engine.layout
        layout.find_gear(shapes)  # ValueError, as the acl engine's slot: a shape no gear has
        self._x = np.full(tuple(shapes["x"]), np.nan, np.float32)
        with self._engine.lock:
            self._engine.staged.append(tuple(shapes["x"]))
        return {"x": self._x}

    def run(self):
        x = self._x
        rows = x.reshape(x.shape[0], -1)
        return {"y": np.stack([rows.sum(axis=1), np.full(x.shape[0], rows.shape[1], np.float32)], axis=1)}


class GearGateEngine(Engine):
    """x FP32 rank 4 -> y FP32 [n, 2]: each row's sum and element count."""

    name = "gear-gate"

    def __init__(self, layout: ModelLayout) -> None:
        self.layout = layout
        self.spec = layout.spec("test")
        self.staged: list[tuple[int, ...]] = []
        self.lock = threading.Lock()
        self._slots = (_GateSlot(self),)

    @property
    def slots(self):
        return self._slots

    def close(self):
        pass


def _layout(kind: str, dims: tuple[int, ...], gears: list[tuple[int, ...]]) -> ModelLayout:
    """A one-input model: each gear's x shape, and y [n, 2] at the gear's batch n."""
    x = LayoutTensor("x", FP32, "NCHW", dims, 0)
    probe = ModelLayout((x,), (), kind, tuple(gears))
    batches = [probe.input_shapes(g)["x"][0] for g in range(probe.gear_count)]
    y = LayoutTensor("y", FP32, "ND", (max(batches), 2), 0)
    return ModelLayout((x,), (y,), kind, tuple(gears), tuple(((n, 2),) for n in batches))


@st.composite
def gear_models(draw):
    """(layout, max_batch_size, every compiled x shape) for a random gear kind and gear set."""
    kind = draw(st.sampled_from(["hw", "dims-batch", "dims", "batch"]))
    size = st.integers(1, 6)
    if kind == "batch":
        gears = draw(st.lists(st.tuples(st.integers(1, 6)), min_size=2, max_size=4, unique=True))
        layout = _layout("batch", (-1, 2, 3, 2), sorted(gears))
    elif kind == "dims-batch":  # the batch is one of the dims: each gear runs exactly its own
        gears = draw(st.lists(st.tuples(size, size, size), min_size=2, max_size=5, unique=True))
        layout = _layout("dims", (-1, 2, -1, -1), gears)
    else:
        n = draw(st.integers(1, 2))
        gears = draw(st.lists(st.tuples(size, size), min_size=2, max_size=5, unique=True))
        layout = _layout("hw" if kind == "hw" else "dims", (n, 2, -1, -1), gears)
    batching = layout.spec("test").batch.kind in ("gears", "static") and draw(st.booleans())
    return layout, 4 if batching else 0, {layout.input_shapes(g)["x"] for g in range(layout.gear_count)}


class _Failures(Observer):
    def __init__(self):
        self.kinds: list[FailureKind] = []

    def failure(self, kind):
        self.kinds.append(kind)


def _run(engine: GearGateEngine, max_batch_size: int, arrays: list[np.ndarray]):
    failures = _Failures()
    runner = Runner(
        engine,
        batching=max_batch_size > 0,
        max_batch_size=max_batch_size,
        outputs=declared(engine.spec, batching=max_batch_size > 0),
        preprocess=None,
        postprocess=None,
        observers=[failures],
    )
    answers: dict[int, tuple] = {}

    def respond(index):
        def answer(outputs, error):
            answers[index] = ({n: np.array(a) for n, a in outputs.items()} if outputs else None, error)

        return answer

    try:
        runner.submit(
            [Request(RequestInfo(request_id=str(i)), {"x": a}, respond(i)) for i, a in enumerate(arrays)], wait=True
        )
    finally:
        runner.close()
    return [answers[i] for i in range(len(arrays))], failures.kinds


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=gear_models(), data=st.data())
def test_no_request_is_ever_answered_from_a_padded_non_batch_axis(model, data):
    layout, max_batch_size, compiled = model
    engine = GearGateEngine(layout)
    # a model with a batch axis (batch gears, or the fixed batch of an image-size or dims model)
    # runs any number of rows on it, split and padded to its batches; one without runs gears as they are
    batch_axis = engine.spec.batch.kind != "none"
    shapes = data.draw(
        st.lists(
            st.one_of(
                st.sampled_from(sorted(compiled)),  # a gear's shape (its batch may change below)
                st.tuples(st.integers(1, 7), st.just(2), st.integers(1, 7), st.integers(1, 7)),
            ),
            min_size=1,
            max_size=6,
        )
    )
    arrays = []
    for index, shape in enumerate(shapes):
        if batch_axis:  # without batching the config declares the model's own batch, which Triton enforces
            rows = data.draw(st.integers(1, max_batch_size)) if max_batch_size else next(iter(compiled))[0]
            shape = (rows,) + shape[1:]
        rng = np.random.default_rng(index)
        arrays.append(rng.integers(0, 9, shape).astype(np.float32))
    results, failure_kinds = _run(engine, max_batch_size, arrays)

    non_batch = {s[1:] for s in compiled}
    for array, (outputs, error) in zip(arrays, results):
        runs = array.shape[1:] in non_batch if batch_axis else array.shape in compiled
        if not runs:
            assert outputs is None and isinstance(error, InputError), (array.shape, compiled, error)
            continue
        assert error is None, (array.shape, compiled, error)
        rows = array.reshape(array.shape[0], -1)
        expected = np.stack([rows.sum(axis=1), np.full(array.shape[0], rows.shape[1], np.float32)], axis=1)
        np.testing.assert_array_equal(outputs["y"], expected)
    assert set(failure_kinds) <= {FailureKind.INPUT}
    assert all(staged in compiled for staged in engine.staged), (engine.staged, compiled)


# -- shape ranges: the batch bound and the ranges of every axis (defects 2 and 7) -----------------


class Model(GEModel):
    pass


def triton_request(arrays):
    return pb_utils.InferenceRequest([pb_utils.Tensor(name, array) for name, array in arrays.items()])


def _generated(tmp_path, input_shapes: str, *flags: str) -> Path:
    om = tmp_path / "range.om"
    sim_compile(nets.matmul_add(tmp_path / "matmul.onnx"), om, input_shapes=input_shapes)
    assert main(["generate", str(om), "-o", str(tmp_path / "repo"), "--name", "range", *flags]) == 0
    return tmp_path / "repo" / "range"


def test_generate_caps_max_batch_size_at_the_range_bound_and_refuses_more(tmp_path, capsys):
    """Finding: x:1~4,... was generated with max_batch_size 8; 30 of 64 valid requests then failed."""
    folder = _generated(tmp_path, "x:1~4,4")
    assert read_config_file(folder / "config.pbtxt").max_batch_size == 4
    assert main(["generate", str(tmp_path / "range.om"), "-o", str(tmp_path / "more"), "--max-batch-size", "8"]) == 2
    message = one_line_error(capsys, "generate")
    assert "--max-batch-size 8 is above the largest batch the model runs, 4" in message and "x [1~4,4]" in message
    assert main(["generate", str(tmp_path / "range.om"), "-o", str(tmp_path / "two"), "--max-batch-size", "2"]) == 0


def test_a_config_above_the_range_bound_is_refused_by_check_and_at_load(tmp_path):
    folder = _generated(tmp_path, "x:1~4,4")
    text = (folder / "config.pbtxt").read_text().replace("max_batch_size: 4", "max_batch_size: 8")
    (folder / "config.pbtxt").write_text(text)
    expected = "max_batch_size 8 is above the largest batch the model runs, 4"
    errors = check_repository(folder.parent, backends=tmp_path).errors
    assert any(expected in e.message for e in errors), errors
    with pytest.raises(pb_utils.TritonModelException, match=expected), ModelHarness(Model, folder):
        pass


# -- a static input beside --dynamic_batch_size (defect 4) ---------------------------------------


def test_generate_writes_a_static_input_beside_batch_gears_as_one_value_per_request(tmp_path):
    """Finding: with s:2,3 beside b:-1,6 and a:-1,4 on gears 1,2,4, only 2-row requests worked ("inputs
    disagree on the batch size: a 1, b 1, s 2"). ATC keeps s as it is in every gear
    (multi_batch_clone_pass.cc:1124-1127), so s is one value per request, as with --unbatched-inputs;
    served through tritonserver: e2e/test_gear_boundaries_served.py."""
    onnx_file = nets.static_beside_batch(tmp_path / "static.onnx")
    om = tmp_path / "static.om"
    sim_compile(onnx_file, om, input_shapes="s:2,3;b:-1,6;a:-1,4", batch_gears="1,2,4")
    assert main(["generate", str(om), "-o", str(tmp_path / "repo"), "--name", "static"]) == 0
    folder = tmp_path / "repo" / "static"
    config = read_config_file(folder / "config.pbtxt")
    assert config.max_batch_size == 4
    assert {e.name: list(e.dims) for e in config.input} == {"a": [4], "b": [6], "s": [2, 3]}
    assert not check_repository(folder.parent, backends=tmp_path).errors


def test_atc_cmd_compiles_a_static_input_beside_batch_gears(tmp_path):
    """Finding: atc-cmd called this combination impossible for ATC."""
    command = atc_command(
        AtcRequest(nets.static_beside_batch(tmp_path / "s.onnx"), "Ascend310P3", batch_gears=(1, 2, 4))
    )
    assert "--input_shape=a:-1,4;b:-1,6;s:2,3" in command.arguments
    assert "--dynamic_batch_size=1,2,4" in command.arguments
    assert any("input 's' [2,3] is fixed: ATC keeps it as it is in every batch gear" in n for n in command.notes)


def test_sim_compile_refuses_what_atc_refuses_beside_batch_gears(tmp_path):
    """ATC's --dynamic_batch_size check (option_utils.cc:312-337): an empty shape (E10012), no input
    with -1 on axis 0 (E10031), -1 beside a dynamic axis 0 (E10018)."""
    static, scalar = nets.static_beside_batch(tmp_path / "static.onnx"), corpus.rank0(tmp_path / "rank0.onnx")
    cases = [
        (scalar, "x:-1,3;s:", "--input_shape gives 's' no dims"),
        (static, "s:2,3;b:2,6;a:2,4", "batch gears need an input with -1 axes"),
        (static, "s:2,3;b:-1,-1;a:-1,4", "input 'b' may be -1 only on axis 0"),
    ]
    for onnx_file, shapes, message in cases:
        with pytest.raises(ConfigError, match=message):
            sim_compile(onnx_file, tmp_path / "m.om", input_shapes=shapes, batch_gears="1,2,4")
    sim_compile(scalar, tmp_path / "m.om", input_shapes="x:-1,3", batch_gears="1,2,4")  # s left out: as ATC


# -- a range without an upper bound: generate writes acl_max_shapes or refuses (defect 3) ---------


def test_generate_sizes_an_unbounded_batch_axis_at_max_batch_size(tmp_path):
    """Finding: x:-1,3,16,16 was generated, check said ok, and the load refused ("give its largest
    shape in parameter acl_max_shapes"); the outputs need their own bound too."""
    folder = _generated(tmp_path, "x:-1,4")
    config = read_config_file(folder / "config.pbtxt")
    assert config.max_batch_size == 8
    assert config.parameters["acl_max_shapes"].string_value == "x:8,4;y:8,3;h:8,3"
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (1, 8, 3)]
    with ModelHarness(Model, folder) as model:
        responses = model.infer([triton_request({"x": a}) for a in arrays])
    for array, response in zip(arrays, responses):
        expected = nets.reference(tmp_path / "matmul.onnx", {"x": array})
        np.testing.assert_allclose(response_outputs(response)["y"], expected["y"], rtol=1e-5, atol=1e-5)
    del config.parameters["acl_max_shapes"]
    (folder / "config.pbtxt").write_text(format_config(config))
    messages = [e.message for e in check_repository(folder.parent, backends=tmp_path).errors]
    for name in ("input 'x' [-1,4]", "output 'y' [-1,3]", "output 'h' [-1,3]"):
        assert any(f"{name} has no upper bound on its shape" in m and "acl_max_shapes" in m for m in messages), name


def test_generate_refuses_unbounded_axes_it_cannot_size_and_takes_max_shapes(tmp_path, capsys):
    onnx_file = nets.two_inputs(tmp_path / "two.onnx")
    om = tmp_path / "two.om"
    sim_compile(onnx_file, om, input_shapes="a:-1,-1;b:-1,-1")
    repo = tmp_path / "repo"
    assert main(["generate", str(om), "-o", str(repo)]) == 2
    message = one_line_error(capsys, "generate")
    assert "the model folder would not load, so nothing was written" in message
    assert "input 'a' [-1,-1] has no upper bound on its shape" in message and "--max-shapes" in message
    assert not repo.exists()
    assert main(["generate", str(om), "-o", str(repo), "--max-shapes", "a:8,16;b:8,16;s:8,16"]) == 0
    config = read_config_file(repo / "two" / "config.pbtxt")
    assert config.parameters["acl_max_shapes"].string_value == "a:8,16;b:8,16;s:8,16;m:8,1"
    a, b = np.ones((2, 16), np.float32), np.full((2, 16), 3, np.int32)
    with ModelHarness(Model, repo / "two") as model:
        (response,) = model.infer([triton_request({"a": a, "b": b})])
    expected = nets.reference(onnx_file, {"a": a, "b": b})
    np.testing.assert_array_equal(response_outputs(response)["s"], expected["s"])
    assert main(["generate", str(om), "-o", str(tmp_path / "r2"), "--max-shapes", "a:8,16,1"]) == 2
    assert "--max-shapes gives 'a' rank 3; the model's input has [-1,-1]" in one_line_error(capsys, "generate")


# -- check finds what the load refuses (defect 5): the corpus offline ------------------------------


@pytest.fixture(scope="module")
def refused_repo(tmp_path_factory):
    return refusals.build(tmp_path_factory.mktemp("refusals"))


@pytest.mark.parametrize("case", refusals.REFUSED, ids=[c.name for c in refusals.REFUSED])
def test_check_reports_what_the_load_refuses_and_only_its_cause(refused_repo, case, tmp_path):
    """The load's refusal of each folder is proven in tritonserver (e2e/test_load_refusals.py); here
    check says why, once: no "missing from the config" or "finds no model file" that follow from a
    default put in place of the bad value (defect 9)."""
    repo, _ = refused_repo
    errors = [p.message for p in check_repository(repo / case.name, backends=tmp_path).errors]
    assert any(case.check_says in message for message in errors), errors
    assert not any("missing from the config" in m or "finds no model file" in m for m in errors), errors


@pytest.mark.parametrize("case", refusals.TAKEN, ids=[c.name for c in refusals.TAKEN])
def test_check_finds_no_error_in_the_folders_the_load_takes(refused_repo, case, tmp_path):
    """Their loads are proven in tritonserver (e2e/test_load_refusals.py): static AIPP compiled at
    load (auto-complete and check describe the UINT8 NHWC image ATC builds, not the ONNX input),
    a GE backend folder with dims gears and max_batch_size 0, CANN's default_model_filename layout."""
    repo, _ = refused_repo
    errors = [p.message for p in check_repository(repo / case.name, backends=tmp_path, ge_backend_ready=True).errors]
    assert errors == []


def test_static_aipp_compiled_at_load_serves_the_declared_image_without_auto_complete(refused_repo):
    """The harness runs no auto-complete: the load builds the ATC command from the config, which
    declares the UINT8 NHWC image (not the FP32 NCHW network input), and answers as ONNX Runtime
    on the documented transform (no crop, no normalisation: the pixels as FP16)."""
    repo, _ = refused_repo
    folder = repo / "taken_static_aipp_declared"
    pixels = np.random.default_rng(4).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    with ModelHarness(Model, folder) as model:
        (response,) = model.infer([triton_request({"x": pixels})])
    network = normalise(pixels, (0, 0, 0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    expected = nets.reference(folder / "1" / "model.onnx", {"x": network})
    np.testing.assert_allclose(response_outputs(response)["c"], expected["c"], rtol=1e-3, atol=1e-3)


def test_the_load_refuses_them_in_process_with_the_words_check_uses(refused_repo):
    """GEModel's own load (the harness, no server) says what check says for each parameter case."""
    repo, cases = refused_repo
    for name in ("profiling_batches_without_dir", "max_shapes_unknown_name", "aipp_config_binary", "engine_misspelt"):
        refusal = pytest.raises(pb_utils.TritonModelException, match=re.escape(cases[name].check_says))
        with refusal, ModelHarness(Model, repo / name):
            pass


# -- tracebacks become one line (defect 6); serve's own refusals (defect 8, offline half) ----------


def test_a_binary_insert_op_conf_is_one_line_naming_the_flag(tmp_path, capsys):
    onnx_file = nets.image_conv(tmp_path / "conv.onnx", batch="N")
    binary = tmp_path / "aipp.cfg"
    binary.write_bytes(refusals.BINARY)
    argv = ["sim-compile", "--model", str(onnx_file), "--output", str(tmp_path / "m.om")]
    assert (
        main([*argv, "--input_shape", "x:-1,3,6,8", "--dynamic_batch_size", "1,2", f"--insert_op_conf={binary}"]) == 2
    )
    message = one_line_error(capsys, "sim-compile")
    assert f"--insert_op_conf {binary} is not a text file in ATC's aipp_op syntax" in message


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--http-port", "99999"], "--http-port 99999: expected a TCP port, 1 to 65535"),
        (["--grpc-port", "8101", "--metrics-port", "8101"], "--grpc-port and --metrics-port are both 8101"),
    ],
)
def test_serve_refuses_ports_it_cannot_use_in_one_line_before_tritonserver_starts(tmp_path, capsys, flags, message):
    """Findings: --http-port 99999 was an OverflowError traceback; equal ports printed tritonserver's usage."""
    (tmp_path / "repo").mkdir()
    assert main(["serve", str(tmp_path / "repo"), *flags]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in captured.err + captured.out


# -- dynamic AIPP: value ranges always checked; an input with shape ranges --------------------------


DYNAMIC = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=4 * 10 * 12 * 3)


def _dynamic_om(tmp_path, input_shapes: str, **gears) -> Path:
    om = tmp_path / f"dynamic_{len(list(tmp_path.iterdir()))}.om"
    conv = nets.image_conv(tmp_path / "conv.onnx", batch="N")
    sim_compile(conv, om, input_shapes=input_shapes, insert_op_conf=[DYNAMIC], **gears)
    return om


def _without_network_format(om: Path) -> Path:
    """The same model, its network input reported in neither NCHW nor NHWC (get_first_aipp_info's
    srcFormat ND), where set_input_aipp skips its output-size checks (acl_aipp.cpp:146-170)."""
    found = load_sim_om(om)
    inputs = tuple(
        replace(m, network=replace(m.network, format="ND")) if m.network is not None else m for m in found.model_inputs
    )
    write_sim_om(om, replace(found, model_inputs=inputs))
    return om


@pytest.mark.parametrize("field, value", [("mean_chn_0", "300"), ("var_reci_chn_0", "nan"), ("min_chn_1", "-1")])
def test_aipp_values_outside_their_ranges_are_input_errors_whatever_the_network_layout(tmp_path, field, value):
    """Finding: without an NCHW/NHWC network the engine checked nothing, so a mean of
    300 reached pyACL, whose setter refused it: the whole batch failed as an engine error. A NaN scale
    passes CANN's setter (its check is val < min || val > max, log_inner.h:309-316) and would reach
    the device: the engine refuses it as the request's error too."""
    om = _without_network_format(_dynamic_om(tmp_path, "x:-1,3,6,8", batch_gears="1,2,4"))
    engine = open_sim(om)
    try:
        with pytest.raises(InputError, match=rf"input 'x': the dynamic AIPP cannot run this request: {field} is "):
            engine.batch_settings({field: value}, {"x": (1, 6, 8, 3)})
        engine.batch_settings({field: "2"}, {"x": (1, 6, 8, 3)})  # in range: no refusal
    finally:
        engine.close()


def test_dynamic_aipp_on_a_shape_range_is_compiled_and_checked_as_cann_checks_it(tmp_path):
    """set_input_aipp skips the batch and W/H checks when the AIPP input has shape ranges
    (acl_aipp.cpp:184-188); ATC keeps the Data's range on an AIPP input (insert_aipp_op_util.cc:470-497).
    sim-compile refused AIPP on a range model, the layout refused such a model at load, and the engine
    and the simulator refused AIPP sets CANN takes. Served through tritonserver:
    e2e/test_gear_boundaries_served.py."""
    om = _dynamic_om(tmp_path, "x:1~4,3,6,8")
    spec = load_sim_om(om).spec()
    assert spec.batch.kind == "dynamic" and spec.batch.limit == 4
    assert main(["generate", str(om), "-o", str(tmp_path / "repo"), "--name", "ranged"]) == 0
    folder = tmp_path / "repo" / "ranged"
    assert read_config_file(folder / "config.pbtxt").max_batch_size == 4
    ranged, geared = open_sim(om), open_sim(_dynamic_om(tmp_path, "x:-1,3,6,8", batch_gears="1,2,4"))
    try:
        ranged.batch_settings({"crop": True, "crop_size_w": 4, "crop_size_h": 4}, {"x": (3, 6, 8, 3)})
        with pytest.raises(InputError, match="the AIPP output is 4x4"):
            geared.batch_settings({"crop": True, "crop_size_w": 4, "crop_size_h": 4}, {"x": (3, 6, 8, 3)})
    finally:
        ranged.close()
        geared.close()


def _aipp_set(acl, crops: list[tuple[int, int]]) -> int:
    """An RGB888 AIPP set of 8x6 images, image i cropped to ``crops[i]`` (width, height) at (0, 0)."""
    aipp = acl.mdl.create_aipp(len(crops))
    assert acl.mdl.set_aipp_input_format(aipp, AippInputFormat.RGB888_U8.value) == 0
    assert acl.mdl.set_aipp_src_image_size(aipp, 8, 6) == 0
    for index, (width, height) in enumerate(crops):
        assert acl.mdl.set_aipp_crop_params(aipp, 1, 0, 0, width, height, index) == 0
    return aipp


def test_the_simulator_skips_set_input_aipps_model_checks_only_for_an_input_with_shape_ranges(tmp_path):
    """Two images cropped to 4x4: accepted by a 1~4 model (acl_aipp.cpp:184-188), refused by a
    dynamic-batch one (batch = the largest gear 4, output = the network's 8x6: acl_aipp.cpp:210-225);
    images of different output sizes are refused by both (aipp_param_check.cpp:296-307)."""
    for shapes, gears, accepted in (("x:1~4,3,6,8", {}, True), ("x:-1,3,6,8", {"batch_gears": "1,2,4"}, False)):
        om = _dynamic_om(tmp_path, shapes, **gears)
        with RawAcl() as raw:
            acl = raw.acl
            model_id, desc, inputs, _ = raw.load(om)
            index, ret = acl.mdl.get_input_index_by_name(desc, "ascend_dynamic_aipp_data")
            assert ret == 0
            for crops, ok in (([(4, 4), (4, 4)], accepted), ([(4, 4), (6, 4)], False)):
                aipp = _aipp_set(acl, crops)
                try:
                    ret = acl.mdl.set_input_aipp(model_id, inputs, index, aipp)
                    assert (ret == 0) is ok, (shapes, crops, ret, acl.get_recent_err_msg())
                finally:
                    assert acl.mdl.destroy_aipp(aipp) == 0


# -- messages that say what is wrong (defect 10) ---------------------------------------------------


def test_dynamic_aipp_messages_say_where_the_bytes_come_from_and_name_a_misspelt_field(tmp_path):
    """Findings: "3072 bytes of RGB888_U8 images, above the 2000" did not say 3072 = the largest gear 4
    x 768; a misspelt field (mean_chan_0) was silently ignored; acl_profile on a model without
    profiling was told its token was not allowed."""
    small = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=2000)
    om = tmp_path / "small.om"
    sim_compile(
        nets.image_conv(tmp_path / "conv.onnx", batch="N"),
        om,
        input_shapes="x:-1,3,6,8",
        batch_gears="1,2,4",
        insert_op_conf=[small],
    )
    engine = open_sim(om)
    try:
        crop = {"crop": True, "crop_size_w": 8, "crop_size_h": 6}
        expected = "3072 bytes of RGB888_U8 images (4 x 768 bytes of 16x16 (an AIPP set covers the largest batch gear))"
        with pytest.raises(InputError, match=re.escape(expected)):
            engine.batch_settings(crop, {"x": (1, 16, 16, 3)})
        with pytest.raises(InputError, match=r"'mean_chan_0' is not an aipp_op field \(did you mean 'mean_chn_0'\?\)"):
            engine.batch_settings({"mean_chan_0": 10}, {"x": (1, 6, 8, 3)})
        engine.batch_settings({"softmax_threshold": 1}, {"x": (1, 6, 8, 3)})  # not AIPP-like: left to the hooks
        with pytest.raises(InputError, match="this model allows no profiling on demand"):
            engine.batch_settings({"acl_profile": "token"}, {"x": (1, 6, 8, 3)})
    finally:
        engine.close()


# -- docs and display (defect 11) ------------------------------------------------------------------


def test_inspect_shows_a_shape_ranges_bound_and_ranges_in_text_and_json(tmp_path, capsys):
    """Finding: inspect of a 1~8 model said "Batch dynamic (any size on axis 0)" and showed no ranges."""
    om = tmp_path / "range.om"
    sim_compile(nets.matmul_add(tmp_path / "matmul.onnx"), om, input_shapes="x:1~8,4")
    assert main(["inspect", str(om)]) == 0
    text = capsys.readouterr().out
    assert "dynamic (up to 8 on axis 0: the upper bound of its shape range)" in text
    assert re.search(r"x\s+FP32\s+\S+\s+\[-1,4\]\s+\[1~8,4\]", text), text
    assert main(["inspect", str(om), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["batch"] == {"kind": "dynamic", "sizes": [], "limit": 8}
    assert report["inputs"][0]["ranges"] == [[1, 8], [4, 4]]


# -- check reports the cause only (defect 9) -------------------------------------------------------


@pytest.mark.parametrize(
    "parameter, value, cause",
    [
        ("streams", "0", "parameter 'streams' has value '0' (must be >= 1)"),
        ("engine", "acl_sim", "parameter 'engine' has value 'acl_sim' (did you mean 'acl-sim'?)"),
    ],
)
def test_a_bad_parameter_in_a_two_line_config_is_reported_alone(tmp_path, parameter, value, cause):
    """Findings: any bad parameter in a two-line config added "the model's input 'x' ... is missing from
    the config"; `engine: acl_sim` added "engine auto finds no model file here" beside 1/model.om."""
    folder = _generated(tmp_path, "x:1~4,4")
    (folder / "config.pbtxt").write_text(
        f'backend: "python"\nparameters {{ key: "{parameter}" value {{ string_value: "{value}" }} }}\n'
    )
    errors = [p.message for p in check_repository(folder.parent, backends=tmp_path).errors]
    assert len(errors) == 1 and cause in errors[0], errors
