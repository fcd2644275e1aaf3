"""Compile at load, in process: the ATC command from the config (the builder atc-cmd uses), atc_flags
checked against ATC's flag list, the cache (key, hit, one compile for concurrent processes), a
failing, overrunning or missing ATC, the simulator's ATC answering as CANN's does, engine auto's
choice, and generate --engine acl. The real server is in tests/e2e/test_compile_at_load.py."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.ascend.atc import AtcRequest, ConfigFacts, apply_atc_flags, build_atc_command
from ge_python_backend.engines import compile as compile_at_load
from ge_python_backend.engines.base import CompileTarget
from ge_python_backend.engines.compile import CompileError, CompileJob, compiled_model
from ge_python_backend.engines.registry import engine_info, resolve_auto
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import atc as sim_atc
from ge_python_backend.testing import models
from tests.support import npu_ge
from tests.support.acl_sim_nets import open_sim

TARGET = CompileTarget("Ascend310P3", "acl 8.0.0")
#: an ATC stand-in for the cache tests: counts its runs in COUNT, sleeps SLEEP s, writes --output.om
FAKE_ATC = """import pathlib, sys, time
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])
count = pathlib.Path(sys.argv[0]).with_name("runs")
with count.open("a") as f:
    f.write("run\\n")
time.sleep(float(pathlib.Path(sys.argv[0]).with_name("sleep").read_text()))
if pathlib.Path(sys.argv[0]).with_name("fail").exists():
    print("ATC run failed, Please check the detail log, Try 'atc --help' for more information")
    print("E10001: Value [x] for parameter [--input_shape] is invalid. Reason: test")
    sys.exit(3)
pathlib.Path(flags["output"] + ".om").write_bytes(b"om")
print("ATC run success, welcome to the next use.")
"""


@pytest.fixture
def linear(tmp_path):
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    return models.linear(version / "model.onnx")


@pytest.fixture
def fake_atc(tmp_path):
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "atc.py").write_text(FAKE_ATC)
    (folder / "sleep").write_text("0")
    return folder


def job_for(source: Path, fake: Path, **changes) -> CompileJob:
    job = CompileJob(
        source=source,
        facts=ConfigFacts("the model config", 8),
        target=TARGET,
        program=(sys.executable, str(fake / "atc.py")),
        cache_dir=fake.parent / "cache",
    )
    return replace(job, **changes)


def runs(fake: Path) -> int:
    path = fake / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


# ----- the command


def test_the_load_derives_the_command_atc_cmd_prints(linear):
    """Gears from max_batch_size (powers of two), shapes from the model, the SoC from the target."""
    command = compile_at_load.command_for(job_for(linear, linear.parent), "/cache/model")
    assert command.arguments[2:] == (
        f"--model={linear}",
        "--framework=5",
        "--output=/cache/model",
        "--soc_version=Ascend310P3",
        "--input_format=ND",
        "--input_shape=x:-1,4",
        "--dynamic_batch_size=1,2,4,8",
    )


def test_a_served_preferred_size_of_just_max_batch_size_counts_as_none():
    config = {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [8]}}
    assert ConfigFacts.from_json(config, "c", served=True).preferred_batch_size == ()
    assert ConfigFacts.from_json(config, "c").preferred_batch_size == (8,)
    config["dynamic_batching"]["preferred_batch_size"] = [2, 8]
    assert ConfigFacts.from_json(config, "c", served=True).preferred_batch_size == (2, 8)


def test_atc_flags_are_checked_and_placed(linear):
    (linear.parent / "fusion.cfg").write_text("{}")
    base = AtcRequest(linear, "Ascend910B3", facts=ConfigFacts("c", 4))
    request = apply_atc_flags(
        base, "--precision_mode_v2=origin --aicore_num='12|10' --fusion_switch_file=fusion.cfg", linear.parent, "p"
    )
    arguments = build_atc_command(request, models_inputs(linear)).arguments
    assert "--precision_mode_v2=origin" in arguments
    assert arguments[-2:] == ("--aicore_num=12|10", f"--fusion_switch_file={linear.parent / 'fusion.cfg'}")


@pytest.mark.parametrize(
    "flags",
    [
        "--oo_constant_folding=false",  # registered by ATC at start (option_register.cc:40-95)
        "--multi_stream_parallel_mode=cv",
        "--precision_mode=cube_fp16in_fp32out",  # both precision flags take it (cmd_flag_info.cc:48-54)
        "--precision_mode_v2=mixed_hif8",
    ],
)
def test_flags_and_values_atc_takes_are_taken(linear, flags):
    """Finding (fidelity rows 125, 129, read against ATC's source): these were refused as not ATC's."""
    base = AtcRequest(linear, "Ascend310P3", facts=ConfigFacts("c", 4))
    request = apply_atc_flags(base, flags, linear.parent, "parameter 'atc_flags'")
    assert flags in build_atc_command(request, models_inputs(linear)).arguments


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--aicore=2", "--aicore is not an ATC flag"),
        ("precision_mode=fp16", "is not an ATC flag of the form --name=value"),
        ("--soc_version=Ascend910B3", "--soc_version cannot be given here (set from the device"),
        ("--dynamic_batch_size=1,2", "set from max_batch_size and preferred_batch_size of the config"),
        ("--mode=1", "it makes ATC do something else"),
        ("--precision_mode=fp32", "--precision_mode=fp32: ATC accepts force_fp16, force_fp32"),
        ("--precision_mode=force_fp16 --precision_mode_v2=fp16", "together; ATC takes one"),
        ("--aicore_num=12", "expected CUBE|VECTOR core counts"),
        ("--aicore_num=0|4", "both > 0"),
    ],
)
def test_bad_atc_flags_are_refused_naming_the_flag(linear, flags, message):
    with pytest.raises(ConfigError, match="parameter 'atc_flags'") as caught:
        apply_atc_flags(AtcRequest(linear, "Ascend310P3"), flags, linear.parent, "parameter 'atc_flags'")
    assert message in str(caught.value)


def test_a_tensorflow_model_takes_the_declared_inputs_and_atcs_default_layout(tmp_path):
    pb = tmp_path / "model.pb"
    pb.write_bytes(b"\x0a\x00")
    facts = ConfigFacts("c", 4, input_dims={"images": (224, 224, 3)})
    command = compile_at_load.command_for(job_for(pb, tmp_path, facts=facts), "out")
    assert "--framework=3" in command.arguments and "--input_shape=images:-1,224,224,3" in command.arguments
    assert not any(a.startswith("--input_format") for a in command.arguments)
    with pytest.raises(ConfigError, match="declare its inputs"):
        compile_at_load.command_for(job_for(pb, tmp_path, facts=ConfigFacts("c", 4)), "out")


def models_inputs(path):
    return compile_at_load.source_inputs(path, ConfigFacts("c"))


# ----- the cache


def test_the_cache_key_follows_what_the_om_depends_on(linear, fake_atc):
    job = job_for(linear, fake_atc)

    def key(**changes):
        changed = replace(job, **changes)
        return compile_at_load.cache_key(changed, compile_at_load.command_for(changed, "model"))

    (linear.parent / "fusion.cfg").write_text("{}")
    with_file = key(atc_flags="--fusion_switch_file=fusion.cfg")
    base = key()
    assert base == key(cache_dir=Path("/elsewhere"))  # where it is cached is not what it is
    others = {
        "flags": key(atc_flags="--precision_mode_v2=origin"),
        "soc": key(target=CompileTarget("Ascend910B3", "acl 8.0.0")),
        "cann": key(target=CompileTarget("Ascend310P3", "acl 8.1.0")),
        "gears": key(facts=ConfigFacts("c", 4)),
        "file": with_file,
    }
    assert len({base, *others.values()}) == 1 + len(others)
    (linear.parent / "fusion.cfg").write_text('{"changed": 1}')
    assert key(atc_flags="--fusion_switch_file=fusion.cfg") != with_file
    models.linear(linear, seed=7)  # other weights, same shapes
    assert key() != base


def with_external_data(source: Path, seed: int = 0) -> Path:
    """``source`` rewritten as a linear model whose weights live in ``weights.bin`` beside it."""
    import onnx

    models.linear(source, seed=seed)
    (source.parent / "weights.bin").unlink(missing_ok=True)  # onnx.save appends to it
    onnx.save(
        onnx.load(str(source)),
        str(source),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return source


def test_the_cache_key_follows_the_external_data_and_the_files_a_raw_ge_options_file_names(linear, fake_atc):
    """ATC reads the external-data files the graph names (onnx_parser.cc:791-860) and the files the
    GE options of --raw_ge_options map to: a change in any of them is another model."""
    job = job_for(with_external_data(linear), fake_atc)

    def key(**changes):
        changed = replace(job, **changes)
        return compile_at_load.cache_key(changed, compile_at_load.command_for(changed, "model"))

    files = compile_at_load.read_files(linear, compile_at_load.command_for(job, "model"))
    assert files == (linear.parent / "weights.bin",)
    base, graph = key(), linear.read_bytes()
    with_external_data(linear, seed=5)  # the same graph file, other weights
    assert linear.read_bytes() == graph and key() != base
    (linear.parent / "fusion.cfg").write_text("{}")
    options = {"compile options": {"graph": {"ge.fusionSwitchFile": str(linear.parent / "fusion.cfg")}}}
    (linear.parent / "raw.json").write_text(json.dumps(options))
    named = key(atc_flags="--raw_ge_options=raw.json")
    (linear.parent / "fusion.cfg").write_text('{"off": 1}')
    assert key(atc_flags="--raw_ge_options=raw.json") != named


def test_the_simulators_atc_reads_external_data_relative_to_the_models_real_folder(linear, tmp_path):
    """The sim-OM carries the weights of weights.bin; a symlinked model.onnx finds them beside its
    target, as ATC does (realpath, onnx_parser.cc:792-805); a missing file is ATC's failure."""
    with_external_data(linear, seed=2)
    link_folder = tmp_path / "elsewhere"
    link_folder.mkdir()
    (link_folder / "model.onnx").symlink_to(linear)
    argv = ("--framework=5", "--input_shape=x:-1,4", "--dynamic_batch_size=1,2", "--soc_version=Ascend310P3")
    done = run_sim_atc(f"--model={link_folder / 'model.onnx'}", f"--output={tmp_path / 'm'}", *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    engine_ = open_sim(tmp_path / "m.om")
    try:
        engine_.bind_thread()
        engine_.slots[0].inputs({"x": (2, 4)})["x"][:] = x
        outputs = engine_.slots[0].run()
    finally:
        engine_.close()
    np.testing.assert_allclose(outputs["logits"], ort.InferenceSession(str(linear)).run(None, {"x": x})[0], rtol=1e-6)
    (linear.parent / "weights.bin").unlink()
    done = run_sim_atc(f"--model={linear}", f"--output={tmp_path / 'n'}", *argv)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.splitlines()[1:] == [
        sim_atc.FAILED,
        f"E19999: tensor 'W' keeps its data in {linear.parent / 'weights.bin'} (external data), which cannot be read: "
        "No such file or directory (acl-sim)",
    ]


def test_an_entry_that_lost_its_om_or_holds_a_truncated_one_is_compiled_again(linear, fake_atc):
    lines: list[str] = []
    om = compiled_model(job_for(linear, fake_atc), lines.append)
    om.unlink()  # a cleaner removed the big files
    lines.clear()
    assert compiled_model(job_for(linear, fake_atc), lines.append) == om
    assert om.read_bytes() == b"om" and runs(fake_atc) == 2
    assert f"compile at load: the cached entry {om.parent} has no model.om: compiling it again" in lines
    om.write_bytes(b"o")  # truncated
    lines.clear()
    assert compiled_model(job_for(linear, fake_atc), lines.append) == om
    assert om.read_bytes() == b"om" and runs(fake_atc) == 3
    assert any("has a model.om of 1 bytes, not the 2 ATC wrote (truncated or replaced)" in line for line in lines)


def test_folders_of_compiles_that_did_not_finish_are_removed_unless_their_compile_runs(linear, fake_atc):
    cache = fake_atc.parent / "cache"
    cache.mkdir()
    dead = cache / ".model-0123.tmp-999999"
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "big").write_bytes(b"x" * 1000)
    running = cache / ".model-4567.tmp-1"
    running.mkdir()
    with (cache / "model-4567.lock").open("a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        lines: list[str] = []
        compiled_model(job_for(linear, fake_atc), lines.append)
    assert not dead.exists() and running.is_dir()
    assert f"compile at load: removed {dead}, left by a compile that did not finish" in lines


@pytest.mark.parametrize("value", ["cache", "./atc", "../shared/atc"])
def test_a_relative_cache_folder_is_refused_naming_the_parameter(value):
    (parameter,) = [p for p in compile_at_load.PARAMETERS if p.name == "atc_cache_dir"]
    with pytest.raises(ConfigError, match=f"parameter 'atc_cache_dir' has value '{re.escape(value)}' \\(a relative"):
        parameter.read(value)
    assert parameter.read("/var/cache/atc") == "/var/cache/atc"
    assert parameter.read("~/atc") == str(Path.home() / "atc")


def test_a_compiled_model_is_reused_and_a_failed_one_is_not_kept(linear, fake_atc):
    lines: list[str] = []
    om = compiled_model(job_for(linear, fake_atc), lines.append)
    assert om.read_bytes() == b"om" and runs(fake_atc) == 1
    assert any("compiling model.onnx for Ascend310P3 with ATC" in line for line in lines)
    assert "atc: ATC run success, welcome to the next use." in lines
    assert (om.parent / "compile.json").is_file()
    lines.clear()
    assert compiled_model(job_for(linear, fake_atc), lines.append) == om
    assert runs(fake_atc) == 1 and lines == [
        f"compile at load: cache hit for model.onnx for Ascend310P3: {om} (ATC not run)"
    ]
    (fake_atc / "fail").touch()
    with pytest.raises(CompileError) as caught:
        compiled_model(job_for(linear, fake_atc, atc_flags="--log=error"), lines.append)
    message = str(caught.value)
    assert (
        "(exit code 3): E10001: Value [x] for parameter [--input_shape] is invalid. Reason: test; command: " in message
    )
    assert f"atc.py --model={linear} --framework=5" in message and "--log=error" in message
    assert [p.name for p in (fake_atc.parent / "cache").iterdir() if p.is_dir()] == [om.parent.name]


def _compile_in_child(args):
    source, fake = args
    return str(compiled_model(job_for(Path(source), Path(fake)), lambda line: None))


def test_processes_that_need_the_same_model_at_once_compile_it_once(linear, fake_atc):
    (fake_atc / "sleep").write_text("1")
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        paths = pool.map(_compile_in_child, [(str(linear), str(fake_atc))] * 3)
    assert len(set(paths)) == 1 and runs(fake_atc) == 1


def test_an_atc_that_overruns_is_stopped_and_the_load_fails(linear, fake_atc):
    (fake_atc / "sleep").write_text("30")
    with pytest.raises(
        CompileError, match=r"did not finish model.onnx for Ascend310P3 within 0.5 s \(parameter atc_timeout_s\)"
    ):
        compiled_model(job_for(linear, fake_atc, timeout_s=0.5), lambda line: None)
    leftovers = subprocess.run(["pgrep", "-f", str(fake_atc / "atc.py")], capture_output=True, text=True).stdout
    assert leftovers == ""


def test_no_atc_program_or_no_writable_cache_is_a_clear_error(linear, fake_atc, tmp_path):
    with pytest.raises(ConfigError, match="cannot run '/nonexistent/atc'.*install CANN's toolkit"):
        compiled_model(job_for(linear, fake_atc, program=("/nonexistent/atc",)), lambda line: None)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="cannot write the compiled-model cache .*set parameter atc_cache_dir"):
        compiled_model(job_for(linear, fake_atc, cache_dir=tmp_path / "a_file" / "cache"), lambda line: None)


# ----- the simulator's ATC


def run_sim_atc(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ge_python_backend.sim.atc", *argv], capture_output=True, text=True)


def test_the_simulators_atc_answers_as_atc_does(linear, tmp_path):
    done = run_sim_atc(
        f"--model={linear}",
        "--framework=5",
        f"--output={tmp_path / 'm'}",
        "--input_shape=x:-1,4",
        "--dynamic_batch_size=1,2",
        "--soc_version=Ascend310P3",
        "--aicore_num=8|",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [sim_atc.STARTED, sim_atc.SUCCEEDED]
    assert (tmp_path / "m.om").read_bytes().startswith(b"GESIMOM\0")
    unknown = run_sim_atc(f"--model={linear}", "--colour=blue")
    assert unknown.returncode != 0 and unknown.stderr.strip() == "ERROR: unknown command line flag 'colour'"


@pytest.mark.parametrize(
    "flags, line",
    [
        (("--framework=3",), "E10001: Value [3] for parameter [--framework] is invalid."),
        (
            ("--framework=5", "--precision_mode=fp32"),
            "E10001: Value [fp32] for parameter [--precision_mode] is invalid.",
        ),
        (("--framework=5", "--precision_mode=force_fp16", "--precision_mode_v2=fp16"), "E10056: Cannot configure both"),
        (("--framework=5", "--aicore_num=x"), "E10001: Value [x] for parameter [--aicore_num] is invalid."),
        (("--framework=5", "--dynamic_batch_size=1"), "E19999: "),
    ],
)
def test_the_simulators_atc_refuses_with_atcs_codes(linear, tmp_path, flags, line):
    done = run_sim_atc(f"--model={linear}", f"--output={tmp_path / 'm'}", *flags)
    assert done.returncode != 0
    assert done.stdout.splitlines()[1] == sim_atc.FAILED
    assert done.stdout.splitlines()[2].startswith(line), done.stdout


def test_an_operator_without_an_onnx_parser_is_e16002(tmp_path):
    done = run_sim_atc(
        f"--model={npu_ge.custom_operator(tmp_path / 'c.onnx')}", "--framework=5", f"--output={tmp_path / 'm'}"
    )
    assert done.stdout.splitlines()[1:] == [
        sim_atc.FAILED,
        "E16002: No ONNX parser is registered for optype com.example::1::CustomOp.",
    ]


# ----- engine auto, generate


def test_engine_auto_compiles_only_onnx_when_a_device_and_an_atc_are_there(linear, monkeypatch):
    lines: list[str] = []
    assert resolve_auto(linear.parent, lines.append).name == "onnxruntime"  # no pyACL here
    assert "acl: " in lines[0]
    monkeypatch.setenv("GE_ACL_SIMULATOR", "1")
    lines.clear()
    assert resolve_auto(linear.parent, lines.append).name == "acl"
    assert lines[0].startswith("engine auto: chose acl (model.onnx present; compiled with ATC at load;")
    assert engine_info("acl").model_source(linear.parent) == (linear, True)
    (linear.parent / "model.om").write_bytes(b"IMOD")
    assert engine_info("acl").model_source(linear.parent) == (linear.parent / "model.om", False)


def test_generate_engine_acl_writes_the_onnx_folder_and_shows_the_atc_command(linear, tmp_path):
    generated = generate(linear, tmp_path / "out", GenerateOptions(name="m", engine="acl"))
    assert (generated.model_dir / "1" / "model.onnx").is_file()
    assert list(generated.config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    (note,) = [n for n in generated.notes if "compiles 1/model.onnx with ATC" in n]
    assert note.endswith(
        "atc --model=1/model.onnx --framework=5 '--output=<cache>/model' --soc_version=<the device's SoC> "
        '--input_format=ND --input_shape="x:-1,4" --dynamic_batch_size="1,2,4,8"'
    )


_HARNESS = """
import sys
from pathlib import Path
import numpy as np
from ge_python_backend.testing import ModelHarness, install_fake_pb_utils
install_fake_pb_utils()
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.model import GEModel
class TritonPythonModel(GEModel):
    pass
with ModelHarness(TritonPythonModel, Path(sys.argv[1])) as model:
    (response,) = model.infer([pb.InferenceRequest([pb.Tensor("x", np.ones((3, 4), np.float32))])])
    np.save(sys.argv[2], response.output_tensors()[0].as_numpy())
"""


def test_files_the_parameters_name_stay_in_the_version_folder_when_the_model_is_compiled(linear, tmp_path):
    """The compiled .om lives in the cache; acl_json (and every file parameter) is still read from
    the version folder, by the compile (which initialises pyACL) and by the engine alike."""
    (linear.parent / "acl.json").write_text("{}")
    model_dir = linear.parent.parent
    (model_dir / "config.pbtxt").write_text(
        'name: "m"\nbackend: "ge"\nmax_batch_size: 8\n'
        'input [{name: "x" data_type: TYPE_FP32 dims: [4]}]\n'
        'output [{name: "logits" data_type: TYPE_FP32 dims: [3]}, {name: "probs" data_type: TYPE_FP32 dims: [3]}]\n'
        'parameters [{key: "engine" value {string_value: "acl-sim"}},\n'
        ' {key: "acl_json" value {string_value: "acl.json"}},\n'
        f' {{key: "atc_cache_dir" value {{string_value: "{tmp_path / "cache"}"}}}}]\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", _HARNESS, str(model_dir), str(tmp_path / "logits.npy")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (expected, _) = ort.InferenceSession(str(linear)).run(None, {"x": np.ones((3, 4), np.float32)})
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "flags, says",
    [
        ("", "with --input_shape=x:-1,3,<size>,<size> in parameter 'atc_flags', or, instead of batch gears, compile"),
        ("", "with --dynamic_dims=v,v,...;v,v,... in parameter 'atc_flags' (one value per -1 axis of --input_shape"),
        ("--input_shape=z:1,3,8,8", "--input_shape names 'z', which is not a model input"),
        ("--input_shape=x:-1,3,8,8 --dynamic_dims=1,2;3,4", "--dynamic_dims gear 1,2 has 2 value(s); --input_shape"),
        ("--insert_op_conf=missing.cfg", "--insert_op_conf "),
        ("--input_shape=x:1~2,3,8,8", "the shape ranges of --input_shape in parameter 'atc_flags' give axis 0 x [1~2]"),
    ],
)
def test_a_refused_load_names_the_fix_as_atc_flags_spells_it(tmp_path, flags, says):
    """The load and check say what to write in atc_flags (ATC's --input_shape=...), not atc-cmd's
    --input-shape "...", which a model folder has no place for."""
    source = models.image_conv(tmp_path / "model.onnx", batch="N", height="H", width="W")
    job = CompileJob(source, ConfigFacts("the model config", 4), TARGET, ("atc",), atc_flags=flags)
    with pytest.raises(ConfigError) as caught:
        compile_at_load.command_for(job, "out")
    message = str(caught.value)
    assert says in message, message
    assert "--input-shape" not in message and "--dynamic-dims" not in message and "--insert-op-conf" not in message
