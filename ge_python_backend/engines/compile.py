"""Compile at load: an ONNX (or TensorFlow) model becomes the .om an NPU engine runs, with ATC, once.

An engine whose ``EngineInfo.atc`` names a program (CANN's ``atc`` for engine ``acl``; the
simulator registers its stand-in for ``acl-sim``) runs a version folder that holds ``model.onnx``
(or ``model.pb``) and no ``model.om``: the ATC command comes from the config through the one
builder ``ge-triton atc-cmd`` prints (``ascend.atc``), ``--soc_version`` from the device, user
flags from parameter ``atc_flags``.

The result is cached outside the model repository (which may be read-only): parameter
``atc_cache_dir``, else ``$GE_TRITON_ATC_CACHE``, else ``$XDG_CACHE_HOME/ge-python-backend/atc``
(``~/.cache/...``; a relative ``atc_cache_dir`` is refused: the stub's working folder is no
place the user chose). An entry is keyed by the content of every file ATC reads (the model, the
external-data files its graph names, each file a flag or a ``--raw_ge_options`` file names), the
ATC arguments, the SoC and the CANN version, so a restart, another instance or another stub
loads it without compiling. An exclusive ``fcntl`` lock per entry makes one process compile
while the others wait and then load its result; the compile writes into a private folder
renamed into place, so a reader never sees half an entry. An entry that lost its ``model.om``
or whose ``model.om`` is not the size it was written with is compiled again, and a private
folder nobody holds the lock of (a stub killed while compiling) is removed. ATC runs with a
time limit (``atc_timeout_s``), its output lines go to the log, and a failure fails the load
with ATC's own error lines (``E10001: ...``) and the command that was run.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.atc import (
    AtcCommand,
    AtcRequest,
    ConfigFacts,
    apply_atc_flags,
    build_atc_command,
    compiled_spec,
)
from ge_python_backend.ascend.atcflags import GE_OPTION_FLAGS, PATH_FLAGS
from ge_python_backend.engines.base import CompileTarget
from ge_python_backend.engines.offline import read_model_spec
from ge_python_backend.engines.registry import ONNX, EngineInfo, stand_in
from ge_python_backend.errors import ConfigError, EngineError
from ge_python_backend.params import Parameter, parse_float
from ge_python_backend.specs import ModelSpec, TensorSpec

LOG = logging.getLogger(__name__)

CACHE_ENV = "GE_TRITON_ATC_CACHE"
DEFAULT_TIMEOUT_S = 3600.0
#: seconds between "still compiling" lines
HEARTBEAT_S = 15.0
#: ATC's error lines: a code (E for errors, W for warnings) and its message (main_impl.cc:2202-2212)
_ERROR_LINE = re.compile(r"^[EW]\d{5}\b")


def _absolute_folder(text: str) -> str:
    """An absolute folder path (``~`` expanded), or "" for the default."""
    if text and not Path(text).expanduser().is_absolute():
        raise ValueError(
            "a relative path: the stub's working folder is not the model's; give an absolute path, or leave it unset "
            f"for ${CACHE_ENV} or ~/.cache/ge-python-backend/atc"
        )
    return str(Path(text).expanduser()) if text else ""


PARAMETERS = (
    Parameter(
        "atc_flags",
        str,
        "",
        "ATC flags --name=value, space-separated (shell quoting): '--precision_mode_v2=origin --aicore_num=12|10'",
        "compile at load: ATC flags added to the derived ones; file paths relative to the version folder",
    ),
    Parameter(
        "atc_cache_dir",
        _absolute_folder,
        "",
        "an absolute path to a writable folder",
        f"compile at load: where compiled models are kept (default ${CACHE_ENV}, else ~/.cache/ge-python-backend/atc)",
    ),
    Parameter(
        "atc_timeout_s",
        parse_float(1.0),
        DEFAULT_TIMEOUT_S,
        "seconds >= 1",
        "compile at load: the longest ATC may run (and another instance may wait for it) before the load fails",
    ),
)


class CompileError(EngineError):
    """ATC failed, timed out or wrote nothing: the load fails with its words."""


@dataclass(frozen=True)
class CompileJob:
    """One model to compile: the source file, what the config says, the target and the options."""

    source: Path
    facts: ConfigFacts
    target: CompileTarget
    program: tuple[str, ...]
    atc_flags: str = ""
    cache_dir: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def default_cache_dir() -> Path:
    """``$GE_TRITON_ATC_CACHE``, else ``$XDG_CACHE_HOME/ge-python-backend/atc`` (``~/.cache/...``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ge-python-backend" / "atc"


def source_inputs(source: Path, facts: ConfigFacts) -> tuple[TensorSpec, ...]:
    """The inputs the ATC command names: an ONNX graph's own (read with the ``onnx`` package, as
    ATC reads the graph: no runtime has to know its operators), or for a TensorFlow model, whose
    graph is not read here, the inputs the config declares. The builder reads names and shapes
    only; the data types are the config's business."""
    if source.suffix.lower() == ".onnx":
        return _onnx_inputs(source)
    if not facts.input_dims:
        raise ConfigError(
            f"{source} is a TensorFlow model: declare its inputs (name, data_type, dims) in the config; "
            "they are not read from a .pb"
        )
    batch = (-1,) if facts.max_batch_size > 0 else ()
    return tuple(TensorSpec(name, "FP32", batch + dims) for name, dims in facts.input_dims.items())


def _onnx_inputs(source: Path) -> tuple[TensorSpec, ...]:
    import onnx

    try:
        graph = onnx.load(str(source), load_external_data=False).graph
    except Exception as exc:  # protobuf DecodeError, OSError
        raise ConfigError(f"{source} is not an ONNX model ATC could read: {exc}") from None
    weights = {tensor.name for tensor in graph.initializer}
    return tuple(
        TensorSpec(
            value.name,
            "FP32",
            tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                for d in value.type.tensor_type.shape.dim
            ),
        )
        for value in graph.input
        if value.name not in weights
    )


def command_for(job: CompileJob, output: str) -> AtcCommand:
    """The ATC command for ``job`` writing ``output`` (.om appended by ATC)."""
    request = AtcRequest(job.source, job.target.soc_version, output=output, facts=job.facts)
    request = apply_atc_flags(request, job.atc_flags, job.source.parent, "parameter 'atc_flags'")
    command = build_atc_command(request, source_inputs(job.source, job.facts))
    return replace(command, arguments=job.program + command.arguments[1:])


def cache_key(job: CompileJob, command: AtcCommand) -> str:
    """What a compiled model depends on: the content of every file ATC reads (``read_files``), the
    ATC arguments (paths aside), the SoC and the CANN version."""
    digest = hashlib.sha256()
    digest.update(_file_digest(job.source).encode())
    flags = [a for a in command.arguments[len(job.program) :] if not a.startswith(("--model=", "--output="))]
    files = {str(path): _file_digest(path) if path.is_file() else "missing" for path in read_files(job.source, command)}
    facts = {"flags": flags, "files": files, "soc": job.target.soc_version, "cann": job.target.cann_version}
    digest.update(json.dumps(facts, sort_keys=True).encode())
    return digest.hexdigest()[:24]


def read_files(source: Path, command: AtcCommand) -> tuple[Path, ...]:
    """The files ATC reads besides ``source``: the external-data files of its graph, the files the
    flags name and those a ``--raw_ge_options`` file names (its GE options mapped to file flags)."""
    found = list(onnx_external_files(source)) if source.suffix.lower() == ".onnx" else []
    for argument in command.arguments:
        name, _, value = argument.removeprefix("--").partition("=")
        if name in PATH_FLAGS and value and Path(value).is_file():
            found.append(Path(value))
            if name == "raw_ge_options":
                found += _raw_option_files(Path(value))
    return tuple(dict.fromkeys(found))


def onnx_external_files(source: Path) -> tuple[Path, ...]:
    """The external-data files an ONNX graph names, as ATC finds them: each ``location`` joined to
    the folder of the model file's real path (hicann/ge parser/parser/onnx/onnx_parser.cc:791-860,
    initializers and Constant nodes; tensors of subgraphs are counted too)."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    try:
        model = onnx.load(str(source), load_external_data=False)
    except Exception:  # not readable: ATC says so when it runs
        return ()
    folder = Path(os.path.realpath(source)).parent
    locations = (
        entry.value
        for tensor in _get_all_tensors(model)
        if uses_external_data(tensor)
        for entry in tensor.external_data
        if entry.key == "location"
    )
    return tuple(dict.fromkeys(folder / location for location in locations))


def _raw_option_files(path: Path) -> list[Path]:
    """Files a --raw_ge_options JSON names through GE options that map to file flags (main_impl.cc:265-440)."""
    try:
        levels = json.loads(path.read_text(encoding="utf-8")).get("compile options", {})
        options = [(option, str(value)) for level in levels.values() for option, value in dict(level).items()]
    except (OSError, ValueError, AttributeError, TypeError):
        return []  # ATC refuses the file when it runs
    named = (Path(value) for option, value in options if GE_OPTION_FLAGS.get(option) in PATH_FLAGS and value)
    return [p for p in named if p.is_file()]


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compiled_model(job: CompileJob, log: Callable[[str], None]) -> Path:
    """The .om of ``job``, from the cache or compiled now (one process at a time per entry)."""
    cache = job.cache_dir or default_cache_dir()
    probe = command_for(job, "model")
    key = cache_key(job, probe)
    entry = cache / f"{job.source.stem}-{key}"
    om = entry / "model.om"
    what = f"{job.source.name} for {job.target.soc_version}"
    if _complete(entry) is None:
        log(f"compile at load: cache hit for {what}: {om} (ATC not run)")
        return om
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = (cache / f"{entry.name}.lock").open("a+")
    except OSError as exc:
        raise ConfigError(
            f"compile at load: cannot write the compiled-model cache {cache} ({exc.strerror or exc}); set parameter "
            f"atc_cache_dir or ${CACHE_ENV} to a writable folder"
        ) from None
    with lock, _exclusive(lock, job.timeout_s, what, log):
        problem = _complete(entry)
        if problem is None:
            log(f"compile at load: {what} was compiled by another instance while this one waited: {om}")
            return om
        _remove_leftovers(cache, log)
        if entry.exists():
            log(f"compile at load: the cached entry {entry} {problem}: compiling it again")
            shutil.rmtree(entry)
        _compile(job, entry, what, log)
    return om


def _complete(entry: Path) -> str | None:
    """None when ``entry`` holds a whole compiled model, else what is wrong with it: no entry, no
    ``model.om`` (a cleaner removed it), or one of another size than the compile wrote."""
    om = entry / "model.om"
    if not om.is_file():
        return "has no model.om" if entry.exists() else "does not exist"
    try:
        written = json.loads((entry / "compile.json").read_text(encoding="utf-8")).get("om_bytes")
    except (OSError, ValueError, AttributeError):
        written = None  # an entry of an older version, or its record is gone: the model decides
    size = om.stat().st_size
    if written is not None and size != written:
        return f"has a model.om of {size} bytes, not the {written} ATC wrote (truncated or replaced)"
    return None


def _remove_leftovers(cache: Path, log: Callable[[str], None]) -> None:
    """Remove the private folders of compiles that ended without finishing (a stub killed while
    ATC ran): those whose entry's lock nobody holds. A compile in progress holds its lock, and this
    process's own lock is another open file, so neither is touched."""
    for work in cache.glob(".*.tmp-*"):
        entry_name = work.name[1:].rpartition(".tmp-")[0]
        try:
            with (cache / f"{entry_name}.lock").open("a+") as other:
                fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                try:
                    shutil.rmtree(work, ignore_errors=True)
                finally:
                    fcntl.flock(other.fileno(), fcntl.LOCK_UN)
        except BlockingIOError:
            continue  # being compiled now
        except OSError:
            continue  # another user's, or gone meanwhile
        log(f"compile at load: removed {work}, left by a compile that did not finish")


@contextlib.contextmanager
def _exclusive(lock: Any, timeout_s: float, what: str, log: Callable[[str], None]) -> Iterator[None]:
    """Hold ``lock`` (an open file) exclusively, waiting at most ``timeout_s`` for its holder."""
    deadline = time.monotonic() + timeout_s
    waited = False
    while True:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not waited:
                lock.seek(0)
                holder = lock.read().strip() or "another process"
                log(f"compile at load: waiting for {holder}, which is compiling {what}")
                waited = True
            if time.monotonic() > deadline:
                raise CompileError(
                    f"compile at load: waited {timeout_s:g} s for another process compiling {what} (parameter "
                    "atc_timeout_s)"
                ) from None
            time.sleep(0.2)
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield
    finally:
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _compile(job: CompileJob, entry: Path, what: str, log: Callable[[str], None]) -> None:
    work = entry.parent / f".{entry.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        command = command_for(job, str(work / "model"))
        for note in command.notes:
            log(f"compile at load: note: {note}")
        log(f"compile at load: compiling {what} with ATC (time limit {job.timeout_s:g} s): {command.shell()}")
        started = time.monotonic()
        output = run_atc(command.arguments, work, job.timeout_s, what, log)
        seconds = time.monotonic() - started
        named = sorted(work.glob("model_*.om"))  # --host_env_os/--host_env_cpu add them (--output.md:11)
        if not (work / "model.om").is_file() and len(named) == 1:
            named[0].rename(work / "model.om")
        if not (work / "model.om").is_file():
            raise CompileError(
                f"compile at load: ATC exited 0 but wrote no {work / 'model.om'}; its output: "
                f"{' | '.join(output[-5:])}; command: {command.shell()}"
            )
        record = {
            "command": list(command.arguments),
            "seconds": round(seconds, 3),
            "om_bytes": (work / "model.om").stat().st_size,
            "output": output,
        }
        (work / "compile.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        work.rename(entry)
        log(f"compile at load: compiled {what} in {seconds:.1f} s: {entry / 'model.om'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_atc(
    arguments: Sequence[str],
    cwd: Path,
    timeout_s: float,
    what: str,
    log: Callable[[str], None],
    *,
    label: str = "compile at load",
    limit: str = "parameter atc_timeout_s",
) -> list[str]:
    """Run ATC (or a program that answers as it does) in ``cwd``, its output lines logged as they come,
    in its own process group that is stopped after ``timeout_s`` and dies with this process; its lines.
    CompileError with ATC's error lines (``Ennnnn: ...``) and the command when it fails or overruns;
    ConfigError when it cannot start. ``label`` starts every message, ``limit`` names the time limit."""
    shell = " ".join(shlex.quote(a) for a in arguments)
    try:
        process = start_atc(arguments, cwd)
    except OSError as exc:
        raise ConfigError(
            f"{label}: cannot run {arguments[0]!r} ({exc.strerror or exc}): install CANN's toolkit and source "
            "its set_env.sh for the server, or put a compiled model.om in the version folder"
        ) from None
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(process, lines, log), daemon=True)
    reader.start()
    started = time.monotonic()
    deadline, beat = started + timeout_s, started + HEARTBEAT_S
    while True:
        try:
            code = process.wait(timeout=max(min(deadline, beat) - time.monotonic(), 0.01))
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now >= deadline:
                stop_atc(process)
                raise CompileError(
                    f"{label}: ATC did not finish {what} within {timeout_s:g} s ({limit}) "
                    f"and was stopped; command: {shell}"
                ) from None
            if now >= beat:
                log(f"{label}: still compiling {what}: {now - started:.0f} s of at most {timeout_s:g} s")
                beat += HEARTBEAT_S
    reader.join(timeout=5)
    if code != 0:
        errors = [line for line in lines if _ERROR_LINE.match(line)] or lines[-10:]
        raise CompileError(
            f"{label}: ATC failed to compile {what} (exit code {code}): {' | '.join(errors)}; command: {shell}"
        )
    return lines


def _read_lines(process: subprocess.Popen, lines: list[str], log: Callable[[str], None]) -> None:
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip()
        if line:
            lines.append(line)
            log(f"atc: {line}")


def start_atc(arguments: Sequence[str], cwd: Path, stderr: int = subprocess.STDOUT) -> subprocess.Popen:
    """ATC (text output, ``stderr`` into stdout unless given) in its own process group, so that
    ``stop_atc`` stops it and the compilers it starts, dying with this process; OSError when it
    cannot start."""
    return subprocess.Popen(
        list(arguments),
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def stop_atc(process: subprocess.Popen) -> None:
    """Kill ATC's process group and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None


#: looked up before any fork: the child may run nothing that takes a lock another thread holds
_PRCTL = _prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGKILL when the process that started it (a stub) dies, so no ATC outlives it
    (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: the SoC an offline check builds the command for: the device's is not known there, and the
#: builder's checks do not depend on it
OFFLINE_SOC = "Ascend310P3"


def offline_command(
    info: EngineInfo, source: Path, facts: ConfigFacts, options: Mapping[str, Any], version_dir: Path
) -> AtcCommand:
    """The ATC command the load of ``source`` will run, built without a device (``OFFLINE_SOC``):
    ConfigError for whatever the builder refuses in the flags, the model or the config, in the
    words of the load (``ge-triton check`` reports it)."""
    job = _job(_compiler(info), source, facts, options, CompileTarget(OFFLINE_SOC, ""))
    return command_for(job, "<cache>/model")


def compiled_model_spec(source: Path, facts: ConfigFacts, options: Mapping[str, Any], version_dir: Path) -> ModelSpec:
    """What the .om compiled at load from the ONNX model ``source`` will take and return, read
    offline (``ascend.atc.compiled_spec``): the model's own spec through the flags of parameter
    ``atc_flags`` and the config's facts. For GEModel's auto-complete and ``check``, which
    describe the model ATC builds, not the ONNX file (an AIPP input is a UINT8 image, dims gears
    leave no batch axis). ConfigError for flags the builder refuses."""
    values = _values(options)
    request = AtcRequest(source, OFFLINE_SOC, facts=facts)
    request = apply_atc_flags(request, values["atc_flags"], version_dir, "parameter 'atc_flags'")
    return compiled_spec(read_model_spec(source, ONNX), request)


def compile_for(
    info: EngineInfo,
    source: Path,
    facts: ConfigFacts,
    options: Mapping[str, Any],
    log: Callable[[str], None],
    version_dir: Path,
) -> Path:
    """The .om engine ``info`` runs for ``source`` (compiled, or from the cache). ``options`` are the
    model's engine parameters (``atc_*`` among them; files they name lie in ``version_dir``)."""
    runs_as = _compiler(info)
    target = runs_as.driver().compile_target(runs_as, options, version_dir)
    return compiled_model(_job(runs_as, source, facts, options, target), log)


def _compiler(info: EngineInfo) -> EngineInfo:
    """The engine that compiles for ``info`` (its stand-in's ATC); ConfigError when it has none."""
    runs_as = stand_in(info)
    if not runs_as.atc:
        raise ConfigError(f"engine {runs_as.name} compiles nothing; give it a {runs_as.model_format.description}")
    return runs_as


def _job(
    runs_as: EngineInfo, source: Path, facts: ConfigFacts, options: Mapping[str, Any], target: CompileTarget
) -> CompileJob:
    values = _values(options)
    return CompileJob(
        source=source,
        facts=facts,
        target=target,
        program=runs_as.atc,
        atc_flags=values["atc_flags"],
        cache_dir=Path(values["atc_cache_dir"]) if values["atc_cache_dir"] else None,
        timeout_s=values["atc_timeout_s"],
    )


def _values(options: Mapping[str, Any]) -> dict[str, Any]:
    """The compile parameters of ``options`` (parsed), defaults for the others."""
    return {p.name: p.default for p in PARAMETERS} | {k: v for k, v in options.items() if k in _NAMES}


_NAMES = frozenset(p.name for p in PARAMETERS)
