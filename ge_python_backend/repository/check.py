"""Validate a model repository offline and report every problem with the file it is in.

Nothing is loaded or run: config.pbtxt is parsed with Triton's schema, model files are read
through ``modelfile.read_model_file`` and model.py through ``ast`` (``modelcode``). Checks:

- config: parses, no fields tritonserver 2.51 does not know, ``name`` equals the folder name;
- the server's own load rules, in its words (``_check_server_rules``): names, data types and
  dims of every tensor, no empty reshape without batching, positive preferred sizes, control
  tensors of the sequence batcher, warm-up dims, a version policy that selects a version;
- versions: folders read as the server reads them (``versions``: leading zeros ignored, ``7abc``
  read as 7, beyond int64 aborts the server: ``fatal``); backend python has
  ``<version>/model.py``; backend ge needs the ge backend installed (a warning);
- parameters: known to GEModel, the engines, Triton or model.py's ``extra_parameters``, and
  well-formed (parsed by the same ``Parameter`` parsers GEModel uses);
- engine and model file: present, of the kind the engine runs; what the engine's load refuses in
  its parameters (files that are missing or malformed, combinations it refuses, shapes it cannot
  size: the engine's ``offline_problems``, the same functions the load calls);
- a config GEModel's auto-complete would complete is completed first, exactly as at load
  (``triton.settings.auto_complete``), and its contradictions are reported as the load reports them;
- I/O: names, data types and dims (batch axis removed when ``max_batch_size`` > 0) agree with
  the model file, unless model.py overrides ``preprocess``/``postprocess``;
- batching: ``max_batch_size`` within the model's batch gears and a shape range's batch bound,
  preferred sizes gears and <= ``max_batch_size``, no ``dynamic_batching`` without batching,
  warm-up inputs known, and no batching where an output keeps its batch off axis 0 or carries none;
- the classification template's load checks (labels file, image size, top_k);
- instance groups: no KIND_GPU on an NPU engine.

What only the server can tell (no GPU on this machine, ...) is ``check --load``'s
(``ops.loadcheck``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from ge_python_backend.ascend.atc import ConfigFacts
from ge_python_backend.engines import EngineInfo, auto_candidates, engine_info, engine_parameters
from ge_python_backend.engines.compile import compiled_model_spec, offline_command
from ge_python_backend.engines.registry import AUTO, ONNX
from ge_python_backend.errors import ConfigError, GEError
from ge_python_backend.hooks.classification import ImageClassifier
from ge_python_backend.modelconfig.matching import compare_io, layout_problems, refine_spec
from ge_python_backend.params import Parameter
from ge_python_backend.repository.config import config_json, mc, read_config_file
from ge_python_backend.repository.ge_backend import GE_BACKEND_NAME, NPU_GE_BACKEND_NAME, ge_backend_file
from ge_python_backend.repository.modelcode import HOOKS, ModelCode, read_model_code
from ge_python_backend.repository.modelfile import read_model_file
from ge_python_backend.repository.versions import FolderKind, read_version_folder
from ge_python_backend.serving.axes import Layout
from ge_python_backend.specs import ModelSpec, TensorSpec, api_type
from ge_python_backend.triton.npu_ge import folder_parameters
from ge_python_backend.triton.router_settings import RouterSettings
from ge_python_backend.triton.settings import (
    CORE_PARAMETERS,
    TRITON_PARAMETERS,
    ModelSettings,
    auto_complete,
    read_settings,
)

#: the platform of an ensemble model (Triton's own scheduler)
ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class Problem:
    """``fatal``: loading it would abort or hang tritonserver itself (not only fail this model),
    so ``check --load`` never loads it."""

    path: Path
    severity: str  # "error" or "warning"
    message: str
    fatal: bool = False

    def __str__(self) -> str:
        return f"{self.path}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class CheckReport:
    models: tuple[str, ...]
    problems: tuple[Problem, ...]
    #: the repository checked (a model folder checked alone: its parent)
    root: Path = Path()

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")

    def fatal_models(self) -> tuple[str, ...]:
        """Models with a problem that would abort tritonserver itself."""
        return tuple(sorted({p.path.relative_to(self.root).parts[0] for p in self.problems if p.fatal}))


def check_repository(
    repository: Path, backends: Path | None = None, ge_backend_ready: bool = False, peers: Path | None = None
) -> CheckReport:
    """Check every model folder of ``repository`` (or ``repository`` itself when it is one).

    ``backends``: the Triton backends folder where backend "ge" should be installed (None: no
    tritonserver was found, so whether it is installed cannot be told); ``ge_backend_ready``:
    the server that loads the models installs it itself; ``peers``: the repository a router's
    members are in (default: the one its folder is in)."""
    repository = Path(repository)
    if not repository.is_dir():
        raise ConfigError(f"model repository {repository} is not a folder")
    if (repository / "config.pbtxt").is_file():
        folders, root = [repository], repository.parent
    else:
        folders, root = sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")), repository
    if not folders:
        return CheckReport((), (Problem(repository, "error", "holds no model folder"),), root)
    ge_backend = _GeBackend(backends, ge_backend_ready)
    problems: list[Problem] = []
    for folder in folders:
        problems += _ModelCheck(folder, ge_backend, peers or folder.parent).run()
    return CheckReport(tuple(f.name for f in folders), tuple(problems), root)


class _GeBackend:
    """Whether a Python-based backend ("ge", "npu_ge") is installed, looked up once per name
    (``ready``: the server that will load the models installs it itself, as ``check --load`` and
    ``ge-triton serve`` do)."""

    def __init__(self, backends: Path | None, ready: bool = False) -> None:
        self._backends = backends
        self._ready = ready
        self._answers: dict[str, str] = {}

    def missing(self, name: str = GE_BACKEND_NAME) -> str | None:
        """None when the Python-based backend ``name`` is installed; otherwise what to tell the user."""
        if self._ready:
            return None
        if name not in self._answers:
            self._answers[name] = self._look(name)
        return self._answers[name] or None

    def _look(self, name: str) -> str:
        backends = self._backends
        if backends is None:
            return f"no tritonserver found to tell whether backend {name} is installed; `ge-triton serve` installs it"
        if ge_backend_file(backends, name).is_file():
            return ""
        option = "" if name == GE_BACKEND_NAME else f" --name {name}"
        return (
            f"backend {name} is not installed in {backends}: run `ge-triton install-backend{option}` "
            "(`ge-triton serve` installs it into the backend folder it prepares)"
        )


@dataclass
class _Parameters:
    """Parameter values (defaults where a value was malformed) and what model.py declares."""

    values: dict[str, Any]
    extras: tuple[Parameter, ...] | None
    valid: bool = True
    layout: Layout = field(default_factory=Layout)
    #: GEModel's settings reader accepts the parameters (the per-version checks may read them)
    readable: bool = False
    #: a parameter is an error: the per-version checks, which depend on the values, are not run (their
    #: findings would follow from the default put in its place, not from the folder)
    refused: bool = False


class _ModelCheck:
    def __init__(self, folder: Path, ge_backend: _GeBackend, peers: Path) -> None:
        self.folder = folder
        self.config_path = folder / "config.pbtxt"
        self.ge_backend = ge_backend
        self.peers = peers
        self.problems: list[Problem] = []

    def error(self, path: Path, message: str, fatal: bool = False) -> None:
        self.problems.append(Problem(path, "error", message, fatal))

    def warning(self, path: Path, message: str) -> None:
        self.problems.append(Problem(path, "warning", message))

    # -- the model folder -------------------------------------------------------------------

    def run(self) -> list[Problem]:
        config = self._read_config()
        if config is None:
            return self.problems
        if config.name and config.name != self.folder.name:
            self.error(
                self.config_path,
                f"name {config.name!r} differs from the folder name {self.folder.name!r}; "
                "Triton requires them to be equal",
            )
        self._check_scheduling(config)
        self._check_server_rules(config)
        versions = self._versions(config)
        if config.backend == NPU_GE_BACKEND_NAME and versions and not self._translate(config, versions[-1]):
            return self.problems
        if config.platform == ENSEMBLE:
            self._check_ensemble(config)
            return self.problems
        if config.backend not in ("python", "ge", NPU_GE_BACKEND_NAME):
            what = f"backend {config.backend!r}" if config.backend else f"platform {config.platform!r}"
            if not config.backend and not config.platform:
                self.error(self.config_path, 'no backend: set backend: "python" (model.py) or "ge" (no per-model code)')
            else:
                self.warning(self.config_path, f"{what} is not served by ge_python_backend; only generic checks ran")
            return self.problems
        codes = {v: self._model_code(config, v) for v in versions}
        if any(code.problem for code in codes.values()):
            return self.problems  # reported: the file cannot load, nothing more can be told from it
        if codes and all(code.step for code in codes.values()):
            return self.problems  # a pipeline step: no model file, no engine; the generic checks ran
        if any(not code.uses_package for code in codes.values()):
            self.warning(self.config_path, "model.py does not use ge_python_backend; only generic checks ran")
            return self.problems
        if codes and all(code.router for code in codes.values()):
            self._check_router(config)
            return self.problems
        parameters = self._parameters(config, codes)
        if parameters.refused:
            return self.problems  # reported: what follows from the parameters cannot be told
        engines = {self._check_version(config, version, codes[version], parameters) for version in versions}
        self._check_instances(config, engines)
        return self.problems

    def _check_ensemble(self, config) -> None:
        """What tritonserver 2.51 refuses in an ensemble's steps, in its words (CORE r24.10
        ``src/ensemble_utils.cc``): a step's model missing from the repository, an input_map key
        that is not an input of the step's model, an output_map key that is not one of its outputs.
        A step model whose config leaves a side to auto-complete is checked on that side by
        ``check --load`` only."""
        name = config.name or self.folder.name
        steps = config.ensemble_scheduling.step
        if not steps:
            self.error(self.config_path, f"ensemble {name}: must specify one or more 'step's in ensemble")
        for step in steps:
            folder = self.folder.parent / step.model_name
            try:
                model = read_config_file(folder / "config.pbtxt")
            except ConfigError:
                self.error(
                    self.config_path,
                    f"ensemble {name} steps through model {step.model_name!r}, which has no readable config.pbtxt in "
                    f"{self.folder.parent}",
                )
                continue
            inputs, outputs = {e.name for e in model.input}, {e.name for e in model.output}
            for key, tensor in sorted(step.input_map.items()):
                if inputs and key not in inputs:
                    self.error(
                        self.config_path,
                        f"in ensemble {name}, ensemble tensor {tensor} is mapped to non-existing input {key} in model "
                        f"{step.model_name} (its inputs: {', '.join(sorted(inputs))})",
                    )
            for key, tensor in sorted(step.output_map.items()):
                if outputs and key not in outputs:
                    self.error(
                        self.config_path,
                        f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output {key} in "
                        f"model {step.model_name} (its outputs: {', '.join(sorted(outputs))})",
                    )

    def _translate(self, config, version: int) -> bool:
        """A GE backend config's parameters as the npu_ge backend translates them at load (the
        ``--backend-config`` keys of a server are not known here); False when one is refused."""
        raw = {key: value.string_value for key, value in config.parameters.items()}
        try:
            translated = folder_parameters(config.backend, raw, self._version_dirs[version])
        except ConfigError as exc:
            self.error(self.config_path, str(exc))
            return False
        config.ClearField("parameters")
        for key, value in translated.items():
            config.parameters[key].string_value = value
        return True

    def _read_config(self):
        if not self.config_path.is_file():
            self.error(self.folder, "no config.pbtxt (ge-triton generate writes one)")
            return None
        try:
            return read_config_file(self.config_path)
        except ConfigError as exc:
            self.error(self.config_path, str(exc).removeprefix(f"{self.config_path}: "))
            return None

    def _check_scheduling(self, config) -> None:
        max_batch = config.max_batch_size
        if max_batch < 0:
            self.error(self.config_path, f"max_batch_size is {max_batch}; expected 0 (no batching) or more")
        if config.HasField("dynamic_batching") and max_batch <= 0:
            self.warning(
                self.config_path,
                "dynamic_batching has no effect with max_batch_size 0 (tritonserver loads it, requests "
                "run alone): remove dynamic_batching or set max_batch_size",
            )
        for preferred in _preferred_sizes(config):
            if max_batch > 0 and not 1 <= preferred <= max_batch:
                self.error(
                    self.config_path, f"preferred_batch_size {preferred} is outside 1..max_batch_size ({max_batch})"
                )
        inputs = {entry.name for entry in config.input}
        for warmup in config.model_warmup:
            for name in warmup.inputs:
                if name not in inputs:
                    self.error(
                        self.config_path,
                        f"model_warmup {warmup.name!r} feeds {name!r}, which is not a config "
                        f"input ({', '.join(sorted(inputs)) or 'none'})",
                    )
            if max_batch > 0 and warmup.batch_size > max_batch:
                self.error(
                    self.config_path,
                    f"model_warmup {warmup.name!r} has batch_size {warmup.batch_size}, above "
                    f"max_batch_size {max_batch}",
                )

    def _check_server_rules(self, config) -> None:
        """Rules tritonserver 2.51 applies to every config at load, with its own words (CORE r24.10
        ``src/model_config_utils.cc``: ``ValidateIOShape`` :296-420, ``ValidateModelConfig``
        :1366-1625; warm-up in ``src/backend_model_instance.cc:353-510``)."""
        non_batching = config.max_batch_size == 0
        for kind in ("input", "output"):
            for entry in getattr(config, kind):
                self._check_tensor_entry(kind, entry, non_batching)
        for preferred in config.dynamic_batching.preferred_batch_size:
            if preferred <= 0:
                self.error(self.config_path, f"dynamic batching preferred size {preferred} must be positive")
        if non_batching and config.dynamic_batching.preferred_batch_size:
            self.error(
                self.config_path,
                "dynamic batching preferred size must be <= max batch size, and max_batch_size is 0: Triton refuses "
                "the model; remove preferred_batch_size",
            )
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                self._check_control(control_input.name, control)
        inputs = {entry.name: entry for entry in config.input}
        for warmup in config.model_warmup:
            for name, data in warmup.inputs.items():
                if -1 in data.dims:
                    self.error(
                        self.config_path,
                        f"model_warmup {warmup.name!r}: warmup setting expects all variable-size dimensions are "
                        f"specified for input {name!r} (dims {list(data.dims)})",
                    )
                if name in inputs and not any(data.dims) and list(inputs[name].dims):
                    self.error(self.config_path, f"model_warmup {warmup.name!r} gives input {name!r} no dims")

    def _check_tensor_entry(self, kind: str, entry, non_batching: bool) -> None:
        if not entry.name:
            self.error(self.config_path, f"model {kind} must specify 'name'")
            return
        where = f"model {kind} {entry.name!r}"
        if entry.data_type == mc.TYPE_INVALID:
            self.error(self.config_path, f"{where} must specify 'data_type'")
        if not entry.dims:
            self.error(
                self.config_path,
                f"{where} must specify 'dims' (a scalar is dims: [1]; with max_batch_size > 0 add reshape: "
                "{ shape: [ ] })",
            )
        if entry.HasField("reshape") and not entry.reshape.shape and non_batching:
            self.error(
                self.config_path,
                f"{where} cannot have empty reshape for non-batching model as scalar tensors are not supported: "
                "declare dims: [1] without reshape (GEModel hands the model the scalar)",
            )
        if any(d < 1 and d != -1 for d in entry.dims):
            self.error(
                self.config_path,
                f"{where} dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
                f"(dims {list(entry.dims)})",
            )
        if entry.HasField("reshape") and any(d < 1 and d != -1 for d in entry.reshape.shape):
            self.error(
                self.config_path,
                f"{where} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension",
            )

    def _check_control(self, name: str, control) -> None:
        kind = mc.ModelSequenceBatching.Control.Kind.Name(control.kind)
        values = [
            (field_name, list(getattr(control, field_name)))
            for field_name in ("int32_false_true", "fp32_false_true", "bool_false_true")
            if getattr(control, field_name)
        ]
        if kind == "CONTROL_SEQUENCE_CORRID":
            allowed = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)
            if control.data_type not in allowed:
                self.error(
                    self.config_path,
                    f"unexpected data type for control CONTROL_SEQUENCE_CORRID ({name!r}). Allowed data types are "
                    "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
                )
            return
        if len(values) != 1:
            self.error(
                self.config_path,
                f"sequence batching control {name!r} ({kind}) must specify exactly one of 'int32_false_true', "
                "'fp32_false_true' or 'bool_false_true'",
            )
        for field_name, listed in values:
            if len(listed) != 2:
                self.error(
                    self.config_path,
                    f"sequence batching control {field_name!r} must have exactly 2 entries for {kind} ({name!r})",
                )

    def _versions(self, config) -> list[int]:
        """The version folders, read the way tritonserver 2.51 reads them (``versions``)."""
        versions: dict[int, Path] = {}
        for entry in sorted(self.folder.iterdir()):
            if not entry.is_dir():
                continue
            found = read_version_folder(entry.name)
            if found.kind is FolderKind.FATAL:
                self.error(entry, f"version folder name {found.reason}", fatal=True)
            elif found.kind is FolderKind.MISREAD:
                self.error(entry, found.reason, fatal=True)
            elif found.kind is FolderKind.IGNORED:
                if entry.name not in ("__pycache__", "warmup"):
                    self.warning(entry, f"{found.reason}; Triton ignores it")
            elif found.version is not None:
                versions[found.version] = entry
        if not versions:
            self.error(self.folder, "no version folder: put the model in a numeric folder such as 1/")
        for wanted in config.version_policy.specific.versions:
            if wanted not in versions:
                self.error(self.config_path, f"version_policy asks for version {wanted}, which has no folder")
        if config.version_policy.HasField("latest") and config.version_policy.latest.num_versions < 1:
            self.error(
                self.config_path,
                "version_policy latest num_versions is 0: tritonserver loads no version ('at least one version must "
                "be available under the version policy'); use 1 or more",
            )
        self._version_dirs = versions
        return sorted(versions)

    def _model_code(self, config, version: int) -> ModelCode:
        version_dir = self._version_dirs[version]
        path = version_dir / (config.default_model_filename or "model.py")
        if config.backend in (GE_BACKEND_NAME, NPU_GE_BACKEND_NAME):
            path = version_dir / "model.py"  # default_model_filename may name the model file (CANN's example)
            if path.is_file():
                self.warning(
                    path, f'backend "{config.backend}" runs the installed backend\'s model.py; this file is not used'
                )
            missing = self.ge_backend.missing(config.backend)
            if missing:
                self.warning(self.config_path, missing)
            return ModelCode(path, True, frozenset(), (), auto_completes=True)
        if not path.is_file():
            self.error(path, 'missing: backend "python" loads it (or use backend "ge", which needs no model.py)')
            return ModelCode(path, True, frozenset(HOOKS), None)
        code = read_model_code(path)
        if code.problem:
            self.error(path, code.problem)
        return code

    def _check_router(self, config) -> None:
        """A router: its parameters, members and own inputs and outputs, read as its load reads them."""
        args = {
            "model_config": config_json(config, self.folder.name),
            "model_repository": str(self.peers / self.folder.name),
            "model_name": self.folder.name,
        }
        try:
            RouterSettings.read(args)
        except ConfigError as exc:
            self.error(self.config_path, str(exc))

    # -- parameters ---------------------------------------------------------------------------

    def _parameters(self, config, codes: Mapping[int, ModelCode]) -> _Parameters:
        extras = _merged_extras(codes.values())
        declared = {p.name: p for p in CORE_PARAMETERS + engine_parameters() + (extras or ())}
        raw = {name: value.string_value for name, value in config.parameters.items()}
        parameters = _Parameters({name: p.default for name, p in declared.items()}, extras)
        for name, text in sorted(raw.items()):
            if name in TRITON_PARAMETERS:
                continue
            if name not in declared:
                parameters.valid = False
                if extras is None:
                    self.warning(
                        self.config_path,
                        f"unknown parameter {name!r}: fine only if model.py declares it in "
                        "extra_parameters (which could not be read from the file)",
                    )
                else:
                    parameters.refused = True
                    self.error(
                        self.config_path,
                        f"unknown parameter {name!r} (value {text!r}); GEModel refuses it. "
                        f"Accepted: {', '.join(sorted(declared))}",
                    )
                continue
            try:
                parameters.values[name] = declared[name].read(text)
            except ConfigError as exc:
                parameters.valid, parameters.refused = False, True
                self.error(self.config_path, str(exc))
        if parameters.valid:
            parameters.readable = self._check_settings(config, extras or ())
            parameters.refused = not parameters.readable
        values = parameters.values
        parameters.layout = Layout.of(
            values["unbatched_inputs"], values["sequence_state"], values["sequence_state_batch_axis"]
        )
        return parameters

    def _check_settings(self, config, extras: tuple[Parameter, ...]) -> bool:
        """What GEModel checks across parameters, by running its own settings reader."""
        try:
            self._settings(config, extras, "1")
        except ConfigError as exc:
            self.error(self.config_path, str(exc))
            return False
        return True

    def _settings(self, config, extras: tuple[Parameter, ...], version_folder: str) -> ModelSettings:
        args = {
            "model_config": config_json(config, self.folder.name),
            "model_repository": str(self.folder),
            "model_version": version_folder,
        }
        return read_settings(args, extras)

    # -- one version ----------------------------------------------------------------------------

    def _check_version(self, config, version: int, code: ModelCode, parameters: _Parameters) -> EngineInfo | None:
        """Check one version folder's model file against the config; returns the engine that runs it."""
        version_dir = self._version_dirs[version]
        found = self._engine_and_file(version_dir, parameters.values)
        if found is None:
            return None
        info, path = found
        try:
            model = read_model_file(path)
        except GEError as exc:
            self.error(path, str(exc).removeprefix(f"{path}: "))
            return info
        compiled = model.format == ONNX and bool(info.atc)  # compiled with ATC at load
        if model.format != info.model_format and not compiled:
            self.error(
                path,
                f"is a {model.format.description} (engine {model.engine.name}), but parameter engine is "
                f"{info.name!r}, which runs a {info.model_format.description}",
            )
            return info
        completed = self._auto_completed(config, version_dir, code, parameters)
        if completed is None:
            return info
        config = completed
        model_spec = model.spec
        if compiled and parameters.readable:
            compiled_spec = self._compiled(config, info, path, version_dir, parameters)
            if compiled_spec is None:
                return info
            model_spec = compiled_spec
        problems: list[str] = []
        inputs = _config_tensors(config.input, "input", problems).values()
        outputs = _config_tensors(config.output, "output", problems).values()
        batching = config.max_batch_size > 0
        try:
            parameters.layout.check(model_spec)
            spec = refine_spec(model_spec, inputs, outputs, batching=batching, layout=parameters.layout)
            states = frozenset(n for pair in parameters.values["sequence_state"] for n in (pair.input, pair.output))
            problems += compare_io(
                spec,
                inputs,
                outputs,
                batching=batching,
                layout=parameters.layout,
                states=states,
                overrides=code.overrides,
            )
            problems += layout_problems(spec, parameters.layout, max_batch_size=config.max_batch_size)
        except ConfigError as exc:
            self.error(self.config_path, str(exc))
            return info
        self._check_batching(config, spec, model.path, parameters.layout)
        for message in problems:
            self.error(self.config_path, f"{message} (model file {path.relative_to(self.folder)})")
        if parameters.readable:
            options = self._settings(config, parameters.extras or (), version_dir.name).engine_options
            for message in info.offline_problems(options, version_dir, spec):
                self.error(self.config_path, message)
            for message in info.offline_warnings(options, version_dir, spec):
                self.warning(self.config_path, message)
        if parameters.readable and "ImageClassifier" in code.imported:
            self._check_classifier(config, parameters.extras or (), version_dir, spec)
        return info

    def _compiled(self, config, info: EngineInfo, source: Path, version_dir: Path, parameters: _Parameters):
        """The model ATC will build from ``source`` at load, and the command it will run, checked
        by the builder the load uses (flags, shapes, gears, AIPP); None, reported, when the load
        would refuse them."""
        options = self._settings(config, parameters.extras or (), version_dir.name).engine_options
        served = json.loads(config_json(config, self.folder.name))
        facts = ConfigFacts.from_json(served, "the model config", served=True)
        try:
            offline_command(info, source, facts, options, version_dir)
            return compiled_model_spec(source, facts, options, version_dir)
        except ConfigError as exc:
            self.error(self.config_path, str(exc))
            return None

    def _auto_completed(self, config, version_dir: Path, code: ModelCode, parameters: _Parameters):
        """The config as the server's auto-complete (GEModel's, with tritonserver's default
        auto-complete on) completes it; None, reported, when that would fail the load."""
        if not code.auto_completes or not parameters.readable or not _incomplete(config, code.overrides):
            return config  # a written-out config: compare_io reports every contradiction, with more detail
        data = json_format.MessageToDict(config, preserving_proto_field_name=True)
        try:
            auto_complete(data, version_dir, parameters.extras or (), code.overrides)
        except ConfigError as exc:
            self.error(self.config_path, f"GEModel's auto-complete fails the load: {exc}")
            return None
        return json_format.ParseDict(data, mc.ModelConfig())

    def _check_classifier(self, config, extras: tuple[Parameter, ...], version_dir: Path, spec) -> None:
        """What the classification template's model.py checks at load (labels file, image input,
        top_k), run here so that generate and check refuse what the load would."""
        try:
            ImageClassifier.from_settings(self._settings(config, extras, version_dir.name), spec)
        except ConfigError as exc:
            self.error(version_dir / "model.py", f"the image classifier would not load: {exc}")

    def _engine_and_file(self, version_dir: Path, values: Mapping[str, Any]) -> tuple[EngineInfo, Path] | None:
        """The engine and model file GEModel would pick (for auto: the first candidate, as on an NPU host)."""
        choice, model_file = values["engine"], values["model_file"]
        if choice == AUTO:
            candidates = auto_candidates(version_dir, model_file)
            if not candidates.found:
                self.error(version_dir, candidates.nothing_message("here"))
                return None
            for note in candidates.notes:
                self.warning(version_dir, f"engine auto: {note}")
            return candidates.found[0]
        info = engine_info(choice)
        path = info.model_source(version_dir, model_file)[0]
        if not path.is_file():
            self.error(path, f"missing: engine {info.name} loads it (parameter model_file, else the engine's default)")
            return None
        return info, path

    def _check_instances(self, config, engines: set[EngineInfo | None]) -> None:
        npu = sorted(info.name for info in engines if info is not None and info.npu)
        for index, group in enumerate(config.instance_group):
            if group.kind != mc.ModelInstanceGroup.KIND_GPU and not group.gpus:
                continue
            where = f"instance_group {group.name or '#' + str(index)}"
            if npu:
                self.error(
                    self.config_path,
                    f"{where} asks for GPUs (KIND_GPU/gpus), but engine {npu[0]} runs on an "
                    "NPU: use KIND_CPU and put NPU ids in parameter device_ids",
                )
            else:
                self.warning(
                    self.config_path,
                    f"{where} asks for GPUs (KIND_GPU/gpus): the server fails to load it without CUDA GPUs",
                )

    def _check_batching(self, config, spec: ModelSpec, path: Path, layout: Layout) -> None:
        batch = layout.batch_first_spec(spec).batch
        max_batch = config.max_batch_size
        source = path.relative_to(self.folder)
        if max_batch > 0 and batch.kind == "none":
            self.error(
                self.config_path,
                f"max_batch_size {max_batch}, but {source} has no batch axis (axis 0 is not "
                "a batch axis on every tensor): set max_batch_size 0",
            )
        if batch.kind != "gears":
            return
        gears = ", ".join(map(str, batch.sizes))
        if max_batch > batch.largest:
            self.error(
                self.config_path,
                f"max_batch_size {max_batch} is above the largest batch gear {batch.largest} "
                f"of {source} (gears {gears})",
            )
        for preferred in _preferred_sizes(config):
            if preferred not in batch.sizes:
                self.error(
                    self.config_path,
                    f"preferred_batch_size {preferred} is not a batch gear of {source} "
                    f"(gears {gears}): such batches would be padded",
                )


def _incomplete(config, overrides: frozenset[str]) -> bool:
    """Auto-complete has something to fill: a side without entries (that no hook replaces) or
    an entry without its data type or dims."""
    entries = list(config.input) + list(config.output)
    return (
        (not config.input and "preprocess" not in overrides)
        or (not config.output and "postprocess" not in overrides)
        or any(e.data_type == mc.TYPE_INVALID or not e.dims for e in entries)
    )


def _preferred_sizes(config) -> list[int]:
    sizes = list(config.dynamic_batching.preferred_batch_size)
    if config.sequence_batching.HasField("oldest"):
        sizes += list(config.sequence_batching.oldest.preferred_batch_size)
    return sizes


def _merged_extras(codes) -> tuple[Parameter, ...] | None:
    merged: dict[str, Parameter] = {}
    for code in codes:
        if code.extra_parameters is None:
            return None
        for parameter in code.extra_parameters:
            merged.setdefault(parameter.name, parameter)
    return tuple(merged.values())


def _config_tensors(entries, kind: str, problems: list[str]) -> dict[str, TensorSpec]:
    tensors = {}
    for entry in entries:
        try:
            dtype = api_type(mc.DataType.Name(entry.data_type))
        except ConfigError as exc:
            problems.append(f"{kind} {entry.name!r}: {exc}")
            continue
        dims = entry.reshape.shape if entry.HasField("reshape") else entry.dims
        tensors[entry.name] = TensorSpec(entry.name, dtype, tuple(dims))
    return tensors
