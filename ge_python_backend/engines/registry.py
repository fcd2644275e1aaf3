"""Every engine, declared once: what it is called, what file it runs, how it is opened.

Settings, ``check``, ``generate``, GEModel and the model-file reader all read this table. The
built-in engines are declared here; a plug-in declares its own through the
``ge_python_backend.engines`` entry-point group (``pyproject.toml``), which is how the pyACL
simulator adds ``acl-sim`` without this package importing it. Engine modules are imported only
when an engine opens or its parameters are read.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ge_python_backend.ascend.om.header import MAGIC as OM_MAGIC
from ge_python_backend.ascend.resources import ModelResources
from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Parameter, parse_bool

if TYPE_CHECKING:
    from ge_python_backend.engines.base import CompileTarget, Engine
    from ge_python_backend.specs import ModelSpec

LOG = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ge_python_backend.engines"
AUTO = "auto"
#: what an engine with ``atc`` compiles at load when its own file is absent, in this order
COMPILE_SOURCES = ("model.onnx", "model.pb")
COMPILE_SUFFIXES = (".onnx", ".pb")

#: The engines this package ships (acl-sim through its plug-in); ``auto`` picks one at load.
EngineName = Literal["onnxruntime", "acl", "acl-sim"]
EngineChoice = Literal["auto", "onnxruntime", "acl", "acl-sim"]


@dataclass(frozen=True)
class ModelRecord:
    """What a model file records, read offline (no engine, no device): its ``spec``, the
    ``--input_shape`` order of a dims-gear model when the file records it (else ``()``), and the
    streams and events a load of it creates (Ascend files; the defaults for others)."""

    spec: ModelSpec
    shape_order: tuple[str, ...] = ()
    resources: ModelResources = ModelResources()


@dataclass(frozen=True)
class ModelFormat:
    """A kind of model file an engine runs: how a file is recognised (its first bytes ``magic``,
    else its ``suffix``) and ``reader``, "module:function" taking a path to its ``ModelRecord``
    (OmFormatError or ConfigError when the file is not readable). A plug-in declares its own
    through its ``EngineInfo``."""

    name: str
    description: str
    reader: str
    magic: bytes = b""
    suffix: str = ""

    def recognises(self, head: bytes, path: Path) -> bool:
        """``path``, whose first bytes are ``head``, is a file of this format."""
        if self.magic:
            return head.startswith(self.magic)
        return bool(self.suffix) and path.suffix.lower() == self.suffix

    def read(self, path: Path) -> ModelRecord:
        module, _, function = self.reader.partition(":")
        return getattr(importlib.import_module(module), function)(Path(path))


#: A CANN offline model (the OM reader, no CANN needed).
OM = ModelFormat("om", "CANN .om", "ge_python_backend.engines.offline:read_cann_om", magic=OM_MAGIC)
#: An ONNX model (read by ONNX Runtime on the CPU).
ONNX = ModelFormat("onnx", "ONNX model", "ge_python_backend.engines.offline:read_onnx", suffix=".onnx")


@dataclass(frozen=True)
class EngineLoad:
    """What an engine opens: ``model_path`` with ``slots`` execution contexts on ``device_id``;
    ``options``: this engine's own parameters as the config sets them (parsed); ``peers``: the
    model's instances on that device; ``version_dir``: where relative paths in ``options`` lie."""

    model_path: Path
    info: EngineInfo
    device_id: int
    slots: int
    options: Mapping[str, Any]
    peers: int
    version_dir: Path


class EngineDriver(ABC):
    """An engine's implementation, the only way the registry reaches it: ``EngineInfo.module``
    defines ``DRIVER``, an instance of a subclass (mypy checks every subclass against this one).
    ``open`` is required; the rest have defaults for an engine without the feature."""

    #: the engine's own config parameters
    parameters: tuple[Parameter, ...] = ()

    @abstractmethod
    def open(self, load: EngineLoad) -> Engine:
        """The opened engine (ConfigError or EngineError saying what is wrong)."""

    def available(self, info: EngineInfo, options: Mapping[str, Any]) -> tuple[bool, str]:
        """Whether ``info`` can run here (for ``engine: auto``), and why (not)."""
        return True, ""

    def compile_target(self, info: EngineInfo, options: Mapping[str, Any], version_dir: Path) -> CompileTarget:
        """What a model compiled at load is for (engines with ``atc``)."""
        raise ConfigError(f"engine {info.name} compiles nothing; give it a {info.model_format.description}")

    def offline_problems(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        """What loading ``spec`` would refuse in ``options`` (the engine's own parsed parameters),
        found without opening it (``check``)."""
        return []

    def offline_warnings(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        """What may fail the load of ``spec`` with ``options`` where the server's environment differs
        from this one's (``check`` warns)."""
        return []

    def generated_parameters(self, spec: ModelSpec, max_batch_size: int, given: Mapping[str, str]) -> dict[str, str]:
        """The parameters a generated config needs to load ``spec`` with ``max_batch_size``
        (``given``: what the user asked for), for ``generate``."""
        return {}

    def on_gpu(self, options: Mapping[str, Any]) -> bool:
        """Whether ``options`` run the model on a GPU Triton places (instance_group KIND_GPU: the
        instance runs on the GPU Triton names in ``initialize``)."""
        return False


@dataclass(frozen=True)
class EngineInfo:
    """One engine: its name, the module whose ``DRIVER`` (an ``EngineDriver``) implements it, the
    model format it runs and how the rest of the package treats it."""

    name: str
    module: str
    model_format: ModelFormat
    default_file: str
    #: drives an NPU (or stands in for one): instance groups must be KIND_CPU, device ids are NPU ids
    npu: bool
    summary: str
    #: "module:function" returning the pyACL module an acl-family engine drives
    pyacl: str = ""
    #: parameters of this engine besides those of ``module``
    parameters: tuple[Parameter, ...] = ()
    #: applies this engine's own parameters before it opens (e.g. configures the simulator)
    prepare: Callable[[Mapping[str, Any]], None] | None = None
    #: this engine's ``parameters`` (not its module's) are refused when another engine runs (they would be
    #: silently ignored)
    exclusive_parameters: bool = False
    #: the engine this one can replace, and the environment variable that asks for it
    stands_in_for: str = ""
    stand_in_env: str = ""
    #: the program (argv start) that plays ATC for this engine: given ATC's flags it compiles an
    #: ONNX or TensorFlow model into the model file this engine runs (compile at load); () for none
    atc: tuple[str, ...] = ()

    def driver(self) -> EngineDriver:
        """The implementation (its module imported now); ConfigError when it has none."""
        found = getattr(importlib.import_module(self.module), "DRIVER", None)
        if not isinstance(found, EngineDriver):
            raise ConfigError(f"engine {self.name!r}: {self.module}.DRIVER is not an EngineDriver ({found!r})")
        return found

    def own_parameters(self) -> tuple[Parameter, ...]:
        return self.driver().parameters + self.parameters

    def offline_problems(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        """What loading the model on this engine would refuse in ``options`` (the parsed engine
        parameters a config sets, of which the engine's own are checked), found without opening it."""
        own = {p.name for p in self.own_parameters()}
        return self.driver().offline_problems({k: v for k, v in options.items() if k in own}, version_dir, spec)

    def offline_warnings(self, options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
        """``EngineDriver.offline_warnings`` on this engine's own parameters of ``options``."""
        own = {p.name for p in self.own_parameters()}
        return self.driver().offline_warnings({k: v for k, v in options.items() if k in own}, version_dir, spec)

    def generated_parameters(self, spec: ModelSpec, max_batch_size: int, given: Mapping[str, str]) -> dict[str, str]:
        """The parameters of this engine a generated config needs (``EngineDriver.generated_parameters``)."""
        return self.driver().generated_parameters(spec, max_batch_size, given)

    def load_pyacl(self) -> Any:
        """The pyACL module (real or simulated) this engine drives."""
        if not self.pyacl:
            raise ConfigError(f"engine {self.name!r} does not drive pyACL")
        module, _, function = self.pyacl.partition(":")
        return getattr(importlib.import_module(module), function)()

    def model_path(self, version_dir: Path, model_file: str = "") -> Path:
        """The model file: parameter ``model_file`` (relative to the version folder, or absolute) or the default."""
        path = Path(model_file or self.default_file)
        return path if path.is_absolute() else Path(version_dir) / path

    def model_source(self, version_dir: Path, model_file: str = "") -> tuple[Path, bool]:
        """The file this engine loads from ``version_dir``, and whether it compiles it first: an
        engine with ``atc`` compiles a ``model_file`` that is an .onnx or .pb, or, when its own
        default file is absent and no ``model_file`` is set, ``model.onnx`` (else ``model.pb``)."""
        path = self.model_path(version_dir, model_file)
        if not self.atc:
            return path, False
        if path.suffix.lower() in COMPILE_SUFFIXES:
            return path, True
        if model_file or path.is_file():
            return path, False
        for name in COMPILE_SOURCES:
            if (Path(version_dir) / name).is_file():
                return Path(version_dir) / name, True
        return path, False


BUILTIN_ENGINES = (
    EngineInfo(
        name="onnxruntime",
        module="ge_python_backend.engines.onnxruntime",
        model_format=ONNX,
        default_file="model.onnx",
        npu=False,
        summary="an .onnx file on ONNX Runtime (CPU, GPU, or ORT's CANN provider)",
    ),
    EngineInfo(
        name="acl",
        module="ge_python_backend.engines.acl",
        model_format=OM,
        default_file="model.om",
        npu=True,
        summary="a CANN .om on an Ascend NPU through pyACL (an .onnx or .pb compiled with CANN's atc at load)",
        pyacl="ge_python_backend.engines.acl.runtime:import_pyacl",
        atc=("atc",),
    ),
)


@cache
def registered() -> dict[str, EngineInfo]:
    """Name -> EngineInfo: the built-in engines, then the plug-ins' (installed entry points). A
    plug-in that cannot be imported is left out, with a warning naming it: the built-in engines
    never depend on one."""
    engines = {info.name: info for info in BUILTIN_ENGINES}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            info = point.load()
        except Exception as exc:
            LOG.warning(
                "engine plug-in %r (%s) is not available: %s: %s", point.name, point.value, type(exc).__name__, exc
            )
            continue
        if not isinstance(info, EngineInfo):
            raise ConfigError(f"entry point {point.name!r} ({point.value}) in {ENTRY_POINT_GROUP} is not an EngineInfo")
        if info.name in engines or info.name == AUTO:
            raise ConfigError(f"entry point {point.value} registers engine {info.name!r}, which already exists")
        engines[info.name] = info
    return engines


def engine_info(name: str) -> EngineInfo:
    """The engine called ``name``; ConfigError listing the registered ones otherwise."""
    found = registered().get(name)
    if found is None:
        raise ConfigError(f"engine {name!r} is not available; available: {', '.join(registered())}")
    return found


def engine_choices() -> tuple[str, ...]:
    """What parameter ``engine`` accepts: ``auto`` and every registered engine."""
    return (AUTO, *registered())


def engine_for_format(model_format: ModelFormat) -> EngineInfo:
    """The engine that runs a model file of ``model_format``."""
    for info in registered().values():
        if info.model_format == model_format:
            return info
    raise ConfigError(f"no registered engine runs a {model_format.description}")


def model_formats() -> tuple[ModelFormat, ...]:
    """Every format a registered engine runs, those recognised by their first bytes first."""
    found = {info.model_format.name: info.model_format for info in registered().values()}
    return tuple(sorted(found.values(), key=lambda f: not f.magic))


def engine_parameters() -> tuple[Parameter, ...]:
    """Every engine-specific parameter any engine accepts."""
    declared: dict[str, Parameter] = {}
    for info in registered().values():
        for parameter in info.own_parameters():
            declared.setdefault(parameter.name, parameter)
    return tuple(declared.values())


def detect_format(path: Path) -> ModelFormat | None:
    """The format of model file ``path``, from its first bytes (else its suffix); None if unknown or unreadable."""
    formats = model_formats()
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(max((len(f.magic) for f in formats), default=0))
    except OSError:
        return None
    return next((f for f in formats if f.recognises(head, Path(path))), None)


@dataclass(frozen=True)
class AutoCandidates:
    """What ``engine: auto`` can run in a version folder: (engine, file) pairs, NPU engines first
    (an NPU engine's pair may name an .onnx it compiles at load), and notes on files present that
    auto will not pick (e.g. a simulated .om)."""

    found: tuple[tuple[EngineInfo, Path], ...]
    notes: tuple[str, ...]
    looked_for: tuple[str, ...]

    def nothing_message(self, where: str) -> str:
        """Why auto finds nothing ``where`` (a folder, or "here")."""
        names = " or ".join(self.looked_for)
        notes = "".join(f"; {note}" for note in self.notes)
        return f"engine auto finds no model file {where} (looked for {names}){notes}"


def auto_candidates(version_dir: Path, model_file: str = "") -> AutoCandidates:
    """The files ``engine: auto`` may run. Stand-ins (the simulator) are never picked by auto:
    a simulated .om must be served with its engine named."""
    found, notes, looked_for = [], [], []
    for info in sorted((i for i in registered().values() if not i.stands_in_for), key=lambda i: not i.npu):
        path, compiled = info.model_source(version_dir, model_file)
        if path.name not in looked_for:
            looked_for.append(path.name)
        if not path.is_file():
            continue
        found_format = detect_format(path)
        if found_format == info.model_format or compiled:
            found.append((info, path))
        elif found_format is not None and not any(p == path for _, p in found):
            note = (
                f"{path.name} is a {found_format.description}: set parameter engine to "
                f"{engine_for_format(found_format).name}"
            )
            if note not in notes:
                notes.append(note)
    return AutoCandidates(tuple(found), tuple(notes), tuple(looked_for))


def resolve_auto(
    version_dir: Path, log: Callable[[str], None], model_file: str = "", options: Mapping[str, Any] | None = None
) -> EngineInfo:
    """Pick an engine for ``engine: auto``: an NPU engine when its file is present and it is
    available here (pyACL imports, a device answers), else the next one whose file is present.
    The choice and the reasons are logged."""
    candidates = auto_candidates(version_dir, model_file)
    reasons: list[str] = []
    for info, path in candidates.found:
        runs_as = stand_in(info)
        available, reason = runs_as.driver().available(runs_as, options or {})
        compiled = bool(info.atc) and path.suffix.lower() in COMPILE_SUFFIXES
        if available and compiled and shutil.which(runs_as.atc[0]) is None:
            available, reason = False, f"{path.name} needs compiling and {runs_as.atc[0]!r} is not on PATH"
        if available:
            because = f"{path.name} present" + ("; compiled with ATC at load" if compiled else "")
            because += f"; {reason}" if reason else ""
            because += "".join(f"; not {r}" for r in reasons)
            because += "".join(f"; not picked: {note}" for note in candidates.notes)
            log(f"engine auto: chose {info.name} ({because})")
            return info
        reasons.append(f"{info.name}: {reason}")
    if reasons:
        raise ConfigError(f"engine auto: nothing runnable in {version_dir}: " + "; ".join(reasons))
    raise ConfigError(candidates.nothing_message(f"in {version_dir}"))


def stand_in(info: EngineInfo) -> EngineInfo:
    """The engine that actually runs for ``info``: a registered stand-in whose environment
    variable is set, else ``info``. ``GE_ACL_SIMULATOR=1`` is a switch for tests on machines
    without pyACL: it runs engine acl on the simulator, logged loudly each time, and is refused
    (ConfigError) where ``info``'s real pyACL imports, so it never serves CPU answers under the
    name of the NPU."""
    for other in registered().values():
        if other.stands_in_for != info.name or not other.stand_in_env:
            continue
        raw = os.environ.get(other.stand_in_env, "")
        if not raw:
            continue
        try:
            wanted = parse_bool(raw)
        except ValueError:
            raise ConfigError(
                f"environment variable {other.stand_in_env}={raw!r}; accepted: 1/0, true/false, yes/no, on/off"
            ) from None
        if wanted:
            if _pyacl_imports(info):
                raise ConfigError(
                    f"environment variable {other.stand_in_env}={raw} asks for engine {other.name!r} in place of "
                    f"{info.name!r}, but CANN's pyACL imports here: it is a test switch for machines without pyACL "
                    f"and never replaces a real NPU. Unset {other.stand_in_env}, or set parameter engine to "
                    f"{other.name!r} to run this model on {other.summary}"
                )
            LOG.warning(
                "!!! %s=%s: engine %r runs on %r (%s), NOT on an Ascend NPU !!!",
                other.stand_in_env,
                raw,
                info.name,
                other.name,
                other.summary,
            )
            return other
    return info


def _pyacl_imports(info: EngineInfo) -> bool:
    """``info`` drives a pyACL that imports here (a real one: its module checks it is CANN's)."""
    if not info.pyacl:
        return False
    try:
        info.load_pyacl()
    except ConfigError:
        return False
    return True


def open_engine(
    name: str,
    model_path: Path,
    *,
    device_id: int,
    slots: int,
    options: Mapping[str, Any],
    peers: int = 1,
    version_dir: Path | None = None,
) -> Engine:
    """Load ``model_path`` on engine ``name`` with ``slots`` execution contexts; ``peers`` instances
    of the model share the device; relative paths in ``options`` lie in ``version_dir`` (default:
    the model file's folder; a model compiled at load lives in the cache instead).

    ``options`` are the engine parameters the config sets; each engine takes its own, and the
    exclusive parameters of another engine (the simulator's) are refused.
    """
    info = stand_in(engine_info(name))
    own_names = {p.name for p in info.own_parameters()}
    for other in registered().values():
        if other is info or not other.exclusive_parameters:
            continue
        stray = sorted(p.name for p in other.parameters if p.name in options and p.name not in own_names)
        if stray:
            raise ConfigError(
                f"parameter {stray[0]!r} applies only to engine {other.name!r} ({other.summary}), "
                f"not to engine {info.name!r}"
            )
    own = {key: value for key, value in options.items() if key in own_names}
    if info.prepare is not None:
        info.prepare(own)
    load = EngineLoad(
        Path(model_path), info, device_id, slots, own, peers, Path(version_dir or Path(model_path).parent)
    )
    return info.driver().open(load)
