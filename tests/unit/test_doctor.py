"""``ge-triton doctor``: every check, made to fail with a fake file tree, environment, command or a
simulated device (and shown to pass), then the whole run and the CLI's exit code on a repository
whose model the device would refuse."""

from __future__ import annotations

import json
import os
import stat
from importlib import metadata
from pathlib import Path

import pytest

from ge_python_backend import sim
from ge_python_backend.cli import main
from ge_python_backend.ops.deploy.facts import model_facts
from ge_python_backend.ops.doctor import Level, run_doctor
from ge_python_backend.ops.doctor import host as host_checks
from ge_python_backend.ops.doctor.devices import initialised, pyacl_devices
from ge_python_backend.ops.doctor.host import HostView
from ge_python_backend.ops.doctor.repository import model_findings, read_models
from ge_python_backend.sim import SimConfig, Simulator
from ge_python_backend.testing.models import matmul_add
from ge_python_backend.version import __version__

MIB = 1 << 20


def script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def host(tmp_path: Path, **settings) -> HostView:
    """A host whose tools are ``tools``; ge-triton serve's environment is ``tmp_path`` (where
    ``_stub_python`` writes the python3 these tests put on PATH, so both are that one)."""
    tools = {k: v for k, v in settings.pop("tools", {}).items()}
    settings.setdefault("serve_bin", tmp_path)
    return HostView(environ=settings.pop("environ", {}), root=tmp_path, which=tools.get, **settings)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- the host --------------------------------------------------------------------------------------


def test_python_packages_lists_versions_and_fails_on_a_missing_dependency(monkeypatch):
    found = host_checks.python_packages()
    assert found.level is Level.OK and f"ge-python-backend {__version__}" in found.message
    requires = metadata.requires("ge-python-backend") or []
    monkeypatch.setattr(host_checks.metadata, "requires", lambda _: [*requires, "no-such-package>=1"])
    broken = host_checks.python_packages()
    assert broken.level is Level.ERROR and "missing: no-such-package" in broken.message


def _stub_python(tmp_path: Path, answer: dict) -> str:
    return script(tmp_path, "python3", f"cat <<'EOF'\n{json.dumps(answer)}\nEOF\n")


STUB = {"version": "3.11.2", "prefix": "/opt/env", "package": __version__}


@pytest.mark.parametrize(
    "answer, pythonpath_acl, needs_acl, levels, words",
    [
        ({**STUB, "acl": "/opt/env/site/acl.so", "acl_how": "site-packages", "acl_imports": True}, False, True,
         ("ok", "ok"), "import acl works in the stub's environment"),
        ({**STUB, "acl": "/c/acl.so", "acl_how": "a .pth file: x.pth", "acl_imports": True}, False, True,
         ("ok", "ok"), "a .pth file"),
        (STUB, True, True, ("ok", "warn"), "acl is only on PYTHONPATH"),
        (STUB, False, True, ("ok", "error"), "import acl fails"),
        (STUB, False, False, ("ok", "warn"), "import acl fails"),
        ({**STUB, "acl": "/c/acl.so", "acl_how": "site-packages", "acl_error": "ImportError('libascendcl.so')"},
         False, True, ("ok", "error"), "importing it fails: ImportError('libascendcl.so')"),
        ({"version": "3.11.2", "prefix": "/opt/env", "package_error": "ModuleNotFoundError()"}, False, False,
         ("error", "warn"), "cannot import ge_python_backend"),
        ({**STUB, "package": "0.0.1"}, False, False, ("warn", "warn"), "this command is"),
    ],
)  # fmt: skip
def test_the_stub_environment_is_what_its_python3_imports_without_pythonpath(
    tmp_path, answer, pythonpath_acl, needs_acl, levels, words
):
    folder = tmp_path / "cann" / "python"
    if pythonpath_acl:
        write(folder / "acl.py", "")
    view = host(tmp_path, tools={"python3": _stub_python(tmp_path, answer)}, environ={"PYTHONPATH": str(folder)})
    found = host_checks.stub_environment(view, needs_acl)
    assert tuple(f.level.value for f in found) == levels
    assert words in " ".join(f.message for f in found)


def test_the_stub_check_runs_the_real_python3_with_pythonpath_ignored(tmp_path):
    """The probe script itself, run by this interpreter with -E: it finds this package, and an acl
    put on PYTHONPATH only is reported as the PYTHONPATH fallback."""
    folder = write(tmp_path / "cann" / "acl.py", "rt = mdl = None\n").parent
    view = HostView(environ={**os.environ, "PYTHONPATH": str(folder)}, which={"python3": os.sys.executable}.get)
    stub_python, stub_acl = host_checks.stub_environment(view, needs_acl=True)
    assert stub_python.level is Level.OK and __version__ in stub_python.message
    assert stub_acl.level is Level.WARN and str(folder) in stub_acl.message
    nothing = host_checks.stub_environment(HostView(which={}.get), needs_acl=False)
    assert [(f.check, f.level) for f in nothing][:2] == [("stub-python", Level.OK), ("stub-python-path", Level.WARN)]
    assert "a tritonserver started from this shell: no python3 on PATH" in nothing[1].message


def test_the_stub_python_is_checked_the_way_the_server_is_started(tmp_path):
    """ge-triton serve puts its own environment first on PATH for tritonserver: a python3 on the
    shell's PATH without the package (pyenv's) is a warning for a tritonserver started by hand,
    not an error, and each finding says which way it is about."""
    elsewhere = tmp_path / "pyenv"
    elsewhere.mkdir()
    lacking = _stub_python(elsewhere, {"version": "3.12.0", "prefix": "/root/.pyenv", "package_error": "No module"})
    view = HostView(environ=dict(os.environ), which={"python3": lacking}.get)  # serve_bin: this environment's
    serve, plain, _ = host_checks.stub_environment(view, needs_acl=False)
    assert (serve.check, serve.level) == ("stub-python", Level.OK)
    assert serve.message.startswith("ge-triton serve: the stub runs ") and __version__ in serve.message
    assert (plain.check, plain.level) == ("stub-python-path", Level.WARN)
    assert plain.message.startswith(f"a tritonserver started from this shell: the stub runs {lacking} ")
    assert "cannot import ge_python_backend" in plain.message and "ge-triton serve's stub is fine" in plain.message
    assert plain.fix.startswith("start it with ge-triton serve, or put ")
    broken = HostView(environ=dict(os.environ), which={"python3": lacking}.get, serve_bin=elsewhere)
    (both, _) = host_checks.stub_environment(broken, needs_acl=False)  # one interpreter: both ways
    assert both.level is Level.ERROR and both.message.startswith(
        "ge-triton serve and a tritonserver started from this shell: the stub runs"
    )


def test_cann_versions_come_from_the_files_aclsysgetcannversion_reads(tmp_path):
    home = "/usr/local/Ascend/ascend-toolkit/latest"
    write(tmp_path / home.lstrip("/") / "share/info/runtime/version.info", "Version=8.0.0\nversion_dir=8.0\n")
    write(tmp_path / home.lstrip("/") / "share/info/compiler/version.info", "Version=8.0.0\n")
    view = host(tmp_path, environ={"ASCEND_HOME_PATH": home})
    no_driver = host_checks.cann_install(view, needs_acl=True)
    assert no_driver.level is Level.WARN and "runtime 8.0.0" in no_driver.message and "no driver" in no_driver.message
    write(tmp_path / "etc/ascend_install.info", "Driver_Install_Path_Param=/usr/local/Ascend\n")
    write(tmp_path / "usr/local/Ascend/driver/version.info", "Version=24.1.rc2\n")
    found = host_checks.cann_install(view, needs_acl=True)
    assert found.level is Level.OK and found.facts == {"runtime": "8.0.0", "compiler": "8.0.0", "driver": "24.1.rc2"}
    old = tmp_path / "old"
    write(old / "usr/local/Ascend/nnrt/latest/x86_64-linux/ascend_nnrt_install.info", "version=6.0.RC1\n")
    assert host_checks.cann_versions(host(old)) == {"nnrt": "6.0.RC1"}
    empty = host(tmp_path / "empty")
    assert host_checks.cann_install(empty, needs_acl=True).level is Level.ERROR
    assert host_checks.cann_install(empty, needs_acl=False).level is Level.WARN


def test_npu_smi_is_read_when_present_and_never_required(tmp_path):
    assert host_checks.npu_smi(host(tmp_path)).level is Level.OK
    output = "| npu-smi 24.1.rc2    Version: 24.1.rc2 |\n| 0  310P3  OK  |\n"
    tool = script(tmp_path, "npu-smi", f"cat <<'EOF'\n{output}EOF\n")
    found = host_checks.npu_smi(host(tmp_path, tools={"npu-smi": tool}))
    assert found.level is Level.OK and "npu-smi 24.1.rc2" in found.message
    broken = script(tmp_path, "npu-smi-broken", "echo 'dcmi module initialize failed'; exit 8\n")
    failing = host_checks.npu_smi(host(tmp_path, tools={"npu-smi": broken}))
    assert failing.level is Level.WARN and "exited with 8: dcmi module initialize failed" in failing.message


def test_the_device_nodes_must_be_openable(tmp_path):
    assert host_checks.device_nodes(host(tmp_path), needs_npu=True).level is Level.ERROR
    assert host_checks.device_nodes(host(tmp_path), needs_npu=False).level is Level.WARN
    for name in ("davinci0", "davinci1", "davinci_manager", "devmm_svm"):
        write(tmp_path / "dev" / name, "")
    assert host_checks.device_nodes(host(tmp_path), needs_npu=True).level is Level.OK
    closed = host(tmp_path, access=lambda path, mode: path.name != "davinci_manager")
    found = host_checks.device_nodes(closed, needs_npu=True)
    assert found.level is Level.ERROR and "davinci_manager cannot be opened" in found.message
    assert "HwHiAiUser" in found.fix


def test_tritonserver_version_and_what_its_python_backend_offers(tmp_path, monkeypatch):
    binary = write(tmp_path / "opt/tritonserver/bin/tritonserver", "")
    write(tmp_path / "opt/tritonserver/TRITON_VERSION", "2.43.0\n")
    old = host_checks.tritonserver(host(tmp_path, tools={"tritonserver": str(binary)}))
    assert old.level is Level.OK and "Triton 24.02" in old.message
    assert old.facts["response_senders"] is False and old.facts["is_ready"] is False
    new = host_checks.tritonserver(
        host(tmp_path, tools={"tritonserver": str(binary)}, environ={"TRITON_SERVER_VERSION": "2.68.0"})
    )
    assert new.facts["response_senders"] is True and new.facts["is_ready"] is True and "26.03" in new.message
    (tmp_path / "opt/tritonserver/TRITON_VERSION").unlink()
    unknown = host_checks.tritonserver(host(tmp_path, tools={"tritonserver": str(binary)}))
    assert unknown.level is Level.WARN and "version is unknown" in unknown.message
    bundled = host_checks.tritonserver(host(tmp_path))  # the nvidia-pytriton wheel of this venv
    assert bundled.level is Level.OK and "2.51.0 (Triton 24.10)" in bundled.message
    monkeypatch.setattr(host_checks.util, "find_spec", lambda name: None)
    assert host_checks.tritonserver(host(tmp_path)).level is Level.WARN


def test_shared_memory_against_what_the_instances_need(tmp_path):
    def sized(total_mib: int):
        stats = os.statvfs(tmp_path)
        blocks = total_mib * MIB // stats.f_frsize
        return type(stats)((stats.f_bsize, stats.f_frsize, blocks, blocks, blocks, *stats[5:]))

    small = host(tmp_path, statvfs=lambda path: sized(64))
    assert host_checks.shared_memory(small, None).level is Level.WARN  # docker's default
    assert host_checks.shared_memory(small, 32 * MIB).level is Level.OK
    short = host_checks.shared_memory(small, 200 * MIB)
    assert short.level is Level.ERROR and "--shm-size=201m" in short.fix


# --- pyACL and the devices ------------------------------------------------------------------


def test_pyacl_reports_the_run_mode_and_each_device_and_finalizes_again():
    simulator = Simulator(SimConfig(run_mode="device"))
    acl = simulator.acl
    with initialised(acl) as problem:
        assert problem is None
        found, runtime = pyacl_devices(acl, "acl-sim", [0, 9])
    assert [f.level for f in found] == [Level.OK, Level.OK, Level.ERROR]
    assert "on the device (ACL_DEVICE)" in found[0].message
    assert "Ascend310P3 (Atlas inference series (310P), NpuArch 2002)" in found[1].message
    assert "1023 events" in found[1].message and "device 9" in found[2].message
    assert runtime.device_mode and runtime.devices[0].free == runtime.devices[0].total
    assert acl.init() == 0  # finalized again: this init is the first
    assert acl.finalize() == 0 and simulator.live() == []


def test_a_soc_without_known_limits_and_a_failing_init_are_findings():
    acl = Simulator(SimConfig(soc_name="Ascend999")).acl
    with initialised(acl):
        found, _ = pyacl_devices(acl, "acl-sim", [0])
    assert found[1].level is Level.WARN and "no stream or event limits are known" in found[1].message

    class Refusing:
        def init(self):
            return 100000

    with initialised(Refusing()) as problem:
        assert problem.level is Level.ERROR and "acl.init returned 100000" in problem.message


# --- a repository --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    """Three acl-sim models: one compiled for another SoC, one with shape ranges, one plain."""
    folder = tmp_path_factory.mktemp("doctor")
    onnx = matmul_add(folder / "m.onnx")
    for name, kwargs in (
        ("foreign", {"batch_gears": "1,2,4", "soc_version": "Ascend910B3"}),
        ("ranged", {"input_shapes": "x:1~8,4"}),
        ("plain", {"batch_gears": "1,2,4", "soc_version": "Ascend310P1"}),
    ):
        sim.sim_compile(onnx, folder / f"{name}.om", **kwargs)
        assert main(["generate", str(folder / f"{name}.om"), "-o", str(folder / "repo"), "-n", name,
                     "--engine", "acl-sim", "--instances", "2", "--streams", "2"]) == 0  # fmt: skip
    return folder / "repo"


def findings_of(repository: Path, config: SimConfig | None = None):
    acl = Simulator(config).acl
    _, models = read_models(repository)
    with initialised(acl):
        _, runtime = pyacl_devices(acl, "acl-sim", [0])
        found = model_findings(models, runtime, acl, None)
    return {f.check: f for f in found}


def test_each_model_s_soc_is_checked_against_its_device_before_a_load_fails(repository):
    found = findings_of(repository)
    foreign = found["model:foreign:soc-device-0"]
    assert foreign.level is Level.ERROR and "the load will fail (E10001)" in foreign.message
    assert "--soc_version=Ascend310P3" in foreign.fix
    assert found["model:plain:soc-device-0"].level is Level.OK  # Ascend310P1: the same NpuArch
    assert "records no soc_version" in found["model:ranged:soc-device-0"].message
    assert "batch gears [1, 2, 4]" in found["model:plain:kinds"].message
    assert "shape ranges (loaded with system-managed memory)" in found["model:ranged:kinds"].message


def test_predicted_device_memory_and_streams_against_the_device(repository):
    roomy = findings_of(repository)
    assert roomy["memory-device-0"].level is Level.OK
    assert "weights 254 B once (shared)" in roomy["memory-device-0"].message
    assert "per copy" in roomy["memory-device-0"].message  # the range model loads system-managed
    # 2 instances x (1 + 2 + 2 x 2) per gear model; the range model's + 1 load stream: 14 + 14 + 16
    assert "take 44 of 1024 streams and 48 of 1023 events" in roomy["streams-device-0"].message
    tight = findings_of(repository, SimConfig(device_memory=2048))
    assert (
        tight["memory-device-0"].level is Level.ERROR
        and "predicted of 2.0 KiB free" in tight["memory-device-0"].message
    )
    few = findings_of(repository, SimConfig(soc_name="Ascend310B1"))
    assert few["streams-device-0"].level is Level.OK  # 512 streams, 65536 events


def test_stream_limits_sum_every_model_on_the_device(repository, tmp_path):
    crowded = tmp_path / "repo"
    for name in ("plain", "ranged"):
        folder = crowded / name
        folder.mkdir(parents=True)
        for path in (repository / name).rglob("*"):
            target = folder / path.relative_to(repository / name)
            if path.is_dir():
                target.mkdir(exist_ok=True)
            else:
                text = path.read_bytes()
                if path.name == "config.pbtxt":
                    text = text.replace(b"count: 2", b"count: 90")
                target.write_bytes(text)
    assert model_facts(crowded / "plain").instances == 90
    found = findings_of(crowded)
    assert found["streams-device-0"].level is Level.ERROR and "of 1024 streams" in found["streams-device-0"].message


def test_a_model_compiled_at_load_needs_its_atc_not_an_om(tmp_path):
    """Finding (review): doctor reported "no model file" for a folder that holds model.onnx for an acl
    engine, which check accepts and the load compiles with ATC."""
    onnx = matmul_add(tmp_path / "m.onnx")
    assert main(["generate", str(onnx), "-o", str(tmp_path / "repo"), "-n", "onnx", "--engine", "acl-sim"]) == 0
    found, models = read_models(tmp_path / "repo")
    assert [f.level for f in found] == [Level.OK] and models[0].model_path.name == "model.onnx"
    there = {f.check: f for f in model_findings(models, None, None, None, which=lambda name: f"/opt/bin/{name}")}
    assert (
        there["model:onnx"].level is Level.OK and "compiled with ATC at load (/opt/bin/" in there["model:onnx"].message
    )
    assert not any(check.startswith(("memory-", "streams-")) for check in there)  # no .om to size yet
    (missing,) = model_findings(models, None, None, None, which=lambda name: None)
    assert missing.level is Level.ERROR and "is not on PATH: the load will fail" in missing.message


def test_a_ge_backend_folder_laid_out_as_cannes_example_is_its_model_file_compiled_at_load(tmp_path):
    folder = tmp_path / "repo" / "resnet"
    matmul_add(folder / "1" / "my.onnx")
    write(
        folder / "config.pbtxt",
        'name: "resnet"\nbackend: "npu_ge"\nmax_batch_size: 0\ndefault_model_filename: "my.onnx"\n',
    )
    found, models = read_models(tmp_path / "repo")
    assert [f.level for f in found if f.level is Level.ERROR] == [], found
    assert models[0].model_path == folder / "1" / "my.onnx" and models[0].compiled and models[0].engine == "acl"
    # the backend is looked up where the found tritonserver keeps its backends, which doctor reports
    assert not any("no tritonserver found" in f.message for f in found), found
    (there,) = model_findings(models, None, None, None, which=lambda name: f"/opt/bin/{name}")
    assert there.level is Level.OK and "my.onnx is compiled with ATC at load (/opt/bin/atc)" in there.message


def test_check_errors_are_doctor_errors(tmp_path):
    broken = write(tmp_path / "repo" / "bad" / "config.pbtxt", "name: 'bad'\nbackend: 'python'\nnonsense: 1\n")
    found, models = read_models(broken.parent.parent)
    assert models == [] and found[0].level is Level.ERROR and "ge-triton check" in found[0].fix


@pytest.mark.usefixtures("clean_simulator")
def test_the_cli_exits_1_when_a_check_is_an_error_and_writes_the_json(repository, tmp_path, capsys):
    out = tmp_path / "doctor.json"
    assert main(["doctor", str(repository), "--engine", "acl-sim", "--device", "0", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "ERROR model:foreign:soc-device-0" in text and "fix: compile it again" in text
    report = json.loads(out.read_text())
    assert report["summary"]["error"] >= 1
    assert {f["check"] for f in report["findings"]} >= {
        "python",
        "stub-python",
        "cann",
        "tritonserver",
        "shm",
        "device-0",
    }


def test_doctor_without_pyacl_still_reports_the_rest(monkeypatch, tmp_path):
    report = run_doctor(None, engine_name="acl", host=host(tmp_path, tools={}))
    checks = {f.check: f for f in report.findings}
    assert checks["pyacl"].level is Level.WARN and "pyACL" in checks["pyacl"].message
    assert {"python", "stub-python", "cann", "npu-smi", "dev-davinci", "tritonserver", "shm"} <= set(checks)
