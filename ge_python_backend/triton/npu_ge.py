"""Serve the model folders of CANN's own C++ Triton backend (``backend: "npu_ge"``) unchanged.

``ge-triton install-backend --name npu_ge`` installs ``triton.npu_ge_model.NpuGeModel`` as the
Python-based backend ``npu_ge``; this module (Triton-free, so ``check`` uses it too) translates
its configs. Before anything reads a config, each of that backend's parameters (hicann
triton-inference-server-ge-backend: ``src/model_state.cpp`` ParseModelParametersConfig :404-437,
ParseCmdlineConfig :151-184, SetOptions :138-149; its docs ``快速入门.md``, ``性能调优方法论.md``)
is honoured, mapped to ours, or refused with a message naming it and why; docs/npu-ge.md has the
table. Their backend compiles the model online with GE (``aclgrphParseONNX``,
``model_instance_state.cpp:233``); here engine ``acl`` compiles it with ATC at load
(``engines.compile``), so GE options become the ATC flags ATC's own table maps them to
(``ascend.atcflags.GE_OPTION_FLAGS``).

The same keys given as ``--backend-config=npu_ge,KEY=VALUE`` apply to every npu_ge model, the
model config's own winning. The Python backend hands a model no backend configuration, so they
are read from the tritonserver command line (``/proc/<parent>/cmdline``, Linux).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ge_python_backend.ascend.atcflags import GE_OPTION_FLAGS
from ge_python_backend.engines import engine_parameters
from ge_python_backend.engines.registry import COMPILE_SOURCES
from ge_python_backend.errors import ConfigError
from ge_python_backend.triton.lifeline import parent_of
from ge_python_backend.triton.settings import CORE_PARAMETERS, TRITON_PARAMETERS

BACKEND_NAME = "npu_ge"
#: prefixes their backend strips to tell global, session and graph GE options apart (model_state.cpp:138-149)
GE_SCOPES = ("global.", "session.", "graph.")
#: GE options with no ATC flag that are accepted for the value that is ATC's own behaviour
GE_OPTION_DEFAULTS = {
    # ATC compiles for inference (main_impl.cc:1874-1875), the graph run mode their backend sets
    # (model_instance_state.cpp:328-329)
    "ge.graphRunMode": "0",
    # 1: --dynamic_dims gears are set on the data nodes, which is what ATC's --dynamic_dims does
    "ge.dynamicNodeType": "1",
}
#: GE's graph dump, as their dump_graph "1" sets it (model_state.cpp:66-91); ATC reads the same variables
DUMP_GRAPH_ENV = {"DUMP_GE_GRAPH": "2", "DUMP_GRAPH_LEVEL": "2", "PRINT_MODEL": "1"}
#: the folder their outputs relative to the server's working directory go to (dump_graph's
#: ./dump_graph, profiling "true"'s ./profiling): ``ge-triton serve`` sets it to the folder it was
#: started in, since tritonserver's working directory is serve's temporary folder, removed at exit
OUTPUT_DIR_ENV = "GE_TRITON_OUTPUT_DIR"


def output_dir() -> Path:
    """Where the GE backend's ./dump_graph and ./profiling go: ``$GE_TRITON_OUTPUT_DIR``, else the
    server's working directory (theirs: the working directory, model_state.cpp:66-118)."""
    return Path(os.environ.get(OUTPUT_DIR_ENV) or Path.cwd()).absolute()


@dataclass
class Translation:
    """Their parameters as ours, the environment they set, and a line for each decision."""

    parameters: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    atc_flags: list[str] = field(default_factory=list)


def _ours() -> frozenset[str]:
    return frozenset(p.name for p in CORE_PARAMETERS + engine_parameters()) | frozenset(TRITON_PARAMETERS)


def _on(key: str, value: str, off: tuple[str, ...] = ("0", "")) -> bool:
    if value == "1":
        return True
    if value in off:
        return False
    raise ConfigError(f"parameter {key!r} has value {value!r}; the GE backend takes 1 (on) or 0 (off)")


def _ge_option(key: str, value: str, into: Translation) -> None:
    option = key
    for scope in GE_SCOPES:
        option = option.removeprefix(scope)
    if option in GE_OPTION_DEFAULTS:
        if value != GE_OPTION_DEFAULTS[option]:
            raise ConfigError(
                f"parameter {key!r}: {value!r} is not possible here; ATC compiles offline models with "
                f"{option}={GE_OPTION_DEFAULTS[option]}, which is the only value accepted"
            )
        return
    flag = GE_OPTION_FLAGS.get(option)
    if flag is None:
        raise ConfigError(
            f"parameter {key!r}: GE option {option!r} has no ATC flag (hicann/ge api/atc/atc_option_map.cc): the GE "
            "backend builds the graph online with it, this backend compiles an offline model with ATC. Give ATC "
            "flags in parameter atc_flags"
        )
    into.atc_flags.append(f"--{flag}={value}")
    into.notes.append(f"{key}={value} -> ATC {into.atc_flags[-1]}")


def _instance_exec_blocks(key: str, value: str, into: Translation) -> None:
    # their graph sessions (streams) per instance (model_instance_state.cpp:307-316): our streams
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"parameter {key!r} has value {value!r}; the GE backend takes an integer >= 1 (graph sessions per "
            "instance, here execution slots: parameter streams)"
        )
    into.parameters["streams"] = value
    into.notes.append(f"{key}={value} -> streams {value} (execution slots per instance)")


def _device_exec_blocks(key: str, value: str, into: Translation) -> None:
    raise ConfigError(
        f"parameter {key!r} (graph sessions per device, whatever the instance count) is not supported: here "
        "each instance has its own slots; set instance_group count and parameter streams so that "
        "count x streams / devices is the number you want"
    )


def _static_model(key: str, value: str, into: Translation) -> None:
    if _on(key, value):
        into.notes.append(f"{key}=1: ATC compiles a static graph per batch gear anyway")


def _dump_graph(key: str, value: str, into: Translation) -> None:
    if _on(key, value):
        into.env |= DUMP_GRAPH_ENV | {"DUMP_GRAPH_PATH": str(output_dir() / "dump_graph")}
        into.notes.append(f"{key}=1 -> ATC dumps GE graphs to {into.env['DUMP_GRAPH_PATH']}")


def _dump_data(key: str, value: str, into: Translation) -> None:
    if _on(key, value):
        raise ConfigError(
            f"parameter {key!r} is not supported: use parameter acl_dump_config (a data dump from load on, "
            "docs/profiling.md)"
        )


def _profiling(key: str, value: str, into: Translation) -> None:
    """Their profiling switch sets CANN's profiling environment before aclInit (model_state.cpp:94-118):
    "true" profiles from the start into ./profiling, "dynamic" lets msprof attach (--dynamic=on --pid)."""
    if value in ("", "0", "false"):
        return
    if value not in ("true", "dynamic"):
        raise ConfigError(f"parameter {key!r} has value {value!r}; the GE backend takes true or dynamic")
    into.env["PROFILING_MODE"] = value
    where = ""
    if value == "true":
        options = {"output": str(output_dir() / "profiling"), "training_trace": "on", "task_trace": "on"}
        into.env["PROFILING_OPTIONS"] = "{" + ", ".join(f'"{k}":"{v}"' for k, v in options.items()) + "}"
        where = f", results in {options['output']}"
    into.notes.append(f"{key}={value} -> PROFILING_MODE={value} for CANN{where}")


#: the GE backend's own parameters (model_state.cpp:123-125, 404-437) that are not ours
HANDLERS: dict[str, Callable[[str, str, Translation], None]] = {
    "instance_exec_blocks": _instance_exec_blocks,
    "device_exec_blocks": _device_exec_blocks,
    "static_model": _static_model,
    "dump_graph": _dump_graph,
    "dump_data": _dump_data,
    "profiling": _profiling,
}


#: the Python backend's own ``--backend-config`` keys (python_backend r24.02 ``src/python_be.cc``
#: ``cmdline.Find``), which its library reads for this Python-based backend too: not the GE backend's
PYTHON_BACKEND_KEYS = frozenset(
    (
        "shm-default-byte-size",
        "shm-growth-byte-size",
        "shm-region-prefix-name",
        "shm_message_queue_size",
        "stub-timeout-seconds",
        "thread-pool-size",
    )
)


def translate(parameters: Mapping[str, str], backend_config: Mapping[str, str], version_dir: Path) -> Translation:
    """The GE backend's parameters (``backend_config``: the ``--backend-config=npu_ge,...`` keys,
    overridden by the model's ``parameters``) as this backend's; ConfigError naming a key that is
    refused. Our own parameters (``device_ids`` is one: the same list of NPU ids) pass unchanged."""
    done = Translation()
    ours = _ours()
    ge_keys = {k: v for k, v in backend_config.items() if k not in PYTHON_BACKEND_KEYS}
    merged = _slots({**ge_keys, **parameters}, parameters, done)
    for key, value in merged.items():
        came = (
            ""
            if key in parameters
            else f" (from --backend-config={BACKEND_NAME},{key}=... on tritonserver's command line)"
        )
        try:
            if key in HANDLERS:
                HANDLERS[key](key, value, done)
            elif key in ours:
                done.parameters[key] = value
            elif key.startswith(("ge.", *GE_SCOPES)):
                _ge_option(key, value, done)
            else:
                raise ConfigError(
                    f"unknown parameter {key!r} (value {value!r}): neither one of the GE backend's (device_ids, "
                    f"{', '.join(HANDLERS)}, ge.* options) nor one of ours"
                )
        except ConfigError as exc:
            raise ConfigError(f"{exc}{came}") from None
    if done.atc_flags:
        given = done.parameters.get("atc_flags", "")
        done.parameters["atc_flags"] = " ".join([given, *map(shlex.quote, done.atc_flags)]).strip()
    done.parameters.setdefault("engine", "acl")
    if "model_file" not in done.parameters:
        model_file = _first_model_file(version_dir)
        if model_file:
            done.parameters["model_file"] = model_file
            done.notes.append(f"model file {model_file} (the first .onnx, else .pb, as the GE backend finds it)")
    return done


def folder_parameters(backend: str, parameters: Mapping[str, str], version_dir: Path) -> dict[str, str]:
    """The parameters GEModel reads for a model folder of ``backend`` whose config gives
    ``parameters``: a GE backend folder's translated (``translate``; the ``--backend-config`` keys
    of a server are not known offline), any other's as they are. The one reading of a folder's
    parameters for check, deploy and doctor; ConfigError naming a key the load refuses."""
    if backend != BACKEND_NAME:
        return dict(parameters)
    return translate(parameters, {}, version_dir).parameters


def _slots(merged: dict[str, str], parameters: Mapping[str, str], into: Translation) -> dict[str, str]:
    """``merged`` without the one of instance_exec_blocks and streams that does not decide the
    execution slots per instance: both set them, so the model's own wins over a --backend-config
    key, and two different values in the model config are refused."""
    blocks, streams = merged.get("instance_exec_blocks"), merged.get("streams")
    if blocks is None or streams is None or blocks == streams:
        return merged
    if "instance_exec_blocks" in parameters and "streams" in parameters:
        raise ConfigError(
            f"parameters 'instance_exec_blocks' ({blocks}) and 'streams' ({streams}) both set the execution slots "
            "per instance; give one"
        )
    loser, winner = (
        ("streams", "instance_exec_blocks")
        if "instance_exec_blocks" in parameters
        else (
            "instance_exec_blocks",
            "streams",
        )
    )
    into.notes.append(
        f"{loser}={merged[loser]} from --backend-config gives way to the model's {winner}={merged[winner]}: "
        f"streams {merged[winner]} (execution slots per instance)"
    )
    return {k: v for k, v in merged.items() if k != loser}


def _first_model_file(version_dir: Path) -> str:
    """The model file their backend would find in the version folder: none when ours (model.om,
    model.onnx, model.pb) is there, else the first .onnx, else the first .pb, by name."""
    if any((version_dir / name).is_file() for name in ("model.om", *COMPILE_SOURCES)):
        return ""
    for suffix in (".onnx", ".pb"):
        found = sorted(p.name for p in version_dir.glob(f"*{suffix}") if p.is_file())
        if found:
            return found[0]
    return ""


def adapt(config: dict, version_dir: Path) -> list[str]:
    """Translate ``config`` (Triton's JSON form) in place, with the server's ``--backend-config``
    keys, and set the environment their backend sets; returns a line per decision."""
    raw = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    done = translate(raw, server_backend_config(), version_dir)
    config["parameters"] = {k: {"string_value": v} for k, v in done.parameters.items()}
    os.environ.update(done.env)  # as their backend does (setenv, model_state.cpp:66-118), for CANN and ATC
    return done.notes


def server_backend_config(backend: str = BACKEND_NAME) -> dict[str, str]:
    """``KEY=VALUE`` of every ``--backend-config=<backend>,KEY=VALUE`` on the command line of the
    tritonserver that started this process (its parent, or a parent's parent); {} elsewhere."""
    pid = os.getppid()
    for _ in range(3):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return {}
        if Path(argv[0]).name == "tritonserver" or any(a.startswith("--model-repository") for a in argv):
            return _backend_settings(argv, backend)
        parent = parent_of(pid)
        if parent is None:
            return {}
        pid = parent
    return {}


def _backend_settings(argv: list[str], backend: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    values = [a.split("=", 1)[1] for a in argv if a.startswith("--backend-config=")]
    values += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--backend-config"]
    for value in values:
        name, _, setting = value.partition(",")
        key, sep, text = setting.partition("=")
        if name == backend and sep:
            settings[key] = text
    return settings
