"""What a model repository implies for its pods: which models run on an NPU, on which device
ids, how many model copies load at start, how much shared memory their I/O takes.

The repository is checked first with ``ge-triton check``'s own code: a repository with errors
is refused (it would fail in every pod), so the configs read here are known to parse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.engines import EngineInfo, auto_candidates, engine_info, engine_parameters
from ge_python_backend.engines.registry import AUTO
from ge_python_backend.errors import ConfigError, GEError
from ge_python_backend.repository.check import Problem, check_repository
from ge_python_backend.repository.config import mc, read_config_file
from ge_python_backend.specs import NUMPY_DTYPES, api_type
from ge_python_backend.triton.npu_ge import folder_parameters
from ge_python_backend.triton.settings import CORE_PARAMETERS, instance_device, instances_on

#: ONNX Runtime's execution provider that runs on an Ascend NPU.
CANN_PROVIDER = "CANNExecutionProvider"


@dataclass(frozen=True)
class ModelFacts:
    """One model folder, as its pods will load it."""

    name: str
    engine: str  # the engine that runs it (engine: auto resolved as on an NPU host)
    npu: bool  # needs an Ascend NPU: engine acl, or ONNX Runtime's CANN provider
    device_ids: tuple[int, ...]  # parameter device_ids (or device_id), default (0,)
    devices_used: tuple[int, ...]  # the ids its instances actually take (round-robin by instance index)
    instances: int  # Triton instances (instance_group counts)
    streams: int  # execution slots per instance
    versions: int  # versions Triton loads (version_policy)
    io_bytes: int | None  # inputs and outputs of one largest batch; None with variable dims or strings
    multi_copy: bool  # each slot loads its own model copy (the acl engines)
    queue_delay_us: int = 0  # how long the batcher holds a request to fill a batch (by design)
    model_path: Path | None = None  # the model file of the newest version
    compiled: bool = False  # model_path is an .onnx or .pb the engine compiles with ATC at load
    #: every parameter GEModel and the engines declare, as they read it (the config's value, else the default)
    values: Mapping[str, Any] = field(default_factory=dict)

    def instances_on(self, device: int) -> int:
        """Instances on ``device``, as GEModel spreads them (``triton.settings.instance_device``)."""
        return instances_on(self.device_ids, self.instances, device)

    @property
    def copies(self) -> int:
        """Model copies loaded at start: what the startup budget is sized from."""
        return self.versions * self.instances * (self.streams if self.multi_copy else 1)


@dataclass(frozen=True)
class RepositoryFacts:
    path: Path
    models: tuple[ModelFacts, ...]
    size_bytes: int
    warnings: tuple[Problem, ...]  # what ge-triton check warns about (deploy goes on)

    @property
    def needs_npu(self) -> bool:
        return any(m.npu for m in self.models)

    @property
    def copies(self) -> int:
        return sum(m.copies for m in self.models)

    @property
    def instances(self) -> int:
        return sum(m.versions * m.instances for m in self.models)


def read_repository(path: Path) -> RepositoryFacts:
    """Check ``path`` and describe its models; ConfigError if it is missing, empty or has errors."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"model repository {path} is not a folder (give the folder ge-triton generate wrote)")
    if (path / "config.pbtxt").is_file():
        raise ConfigError(
            f"{path} is a model folder (it holds config.pbtxt); give the repository that holds it ({path.parent})"
        )
    report = check_repository(path)
    if report.errors:
        first = report.errors[0]
        more = f" and {len(report.errors) - 1} more" if len(report.errors) > 1 else ""
        raise ConfigError(
            f"model repository {path} has errors every pod would hit; run `ge-triton check {path}` "
            f"and fix them first: {first}{more}"
        )
    models = tuple(model_facts(path / name) for name in report.models)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return RepositoryFacts(path, models, size, report.warnings)


def model_facts(folder: Path) -> ModelFacts:
    """One model folder (its config known to parse) as its instances load it."""
    config = read_config_file(folder / "config.pbtxt")
    versions = sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    newest = folder / str(versions[-1])
    given = {name: value.string_value for name, value in config.parameters.items()}
    raw = folder_parameters(config.backend, given, newest)  # a GE backend folder's, translated as at load
    declared = CORE_PARAMETERS + engine_parameters()  # model.py's own extra_parameters are left out
    values = {p.name: p.read(raw[p.name]) if p.name in raw else p.default for p in declared}
    info = _engine(newest, values)
    model_path, compiled = info.model_source(newest, values["model_file"])
    providers = raw.get("onnxruntime_providers", "")
    npu = (info.npu and not info.stands_in_for) or CANN_PROVIDER in providers
    device_ids = tuple(values["device_ids"] or (values["device_id"] or 0,))
    instances = sum(group.count or 1 for group in config.instance_group) or 1
    used = tuple(sorted({instance_device(device_ids, i) for i in range(instances)}))
    return ModelFacts(
        name=folder.name,
        engine=info.name,
        npu=npu,
        device_ids=device_ids,
        devices_used=used,
        instances=instances,
        streams=values["streams"],
        versions=_served_versions(config, len(versions)),
        io_bytes=_io_bytes(config),
        multi_copy=info.npu,
        queue_delay_us=max(
            config.dynamic_batching.max_queue_delay_microseconds,
            config.sequence_batching.oldest.max_queue_delay_microseconds,
        ),
        model_path=model_path,
        compiled=compiled,
        values=values,
    )


def _engine(version_dir: Path, values: Mapping[str, Any]) -> EngineInfo:
    """The engine GEModel would run on an NPU host (auto: an NPU engine first, as check does)."""
    if values["engine"] != AUTO:
        return engine_info(values["engine"])
    found = auto_candidates(version_dir, values["model_file"]).found
    if not found:  # check already reported this as an error
        raise ConfigError(f"{version_dir}: engine auto finds no model file")
    return found[0][0]


def _served_versions(config: Any, present: int) -> int:
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return present
    if which == "specific":
        return len(policy.specific.versions)
    wanted = policy.latest.num_versions if which == "latest" else 1
    return min(max(wanted, 1), present)


def _io_bytes(config: Any) -> int | None:
    """Bytes of every input and output of one batch of ``max_batch_size`` rows."""
    rows = max(config.max_batch_size, 1)
    total = 0
    for entry in list(config.input) + list(config.output):
        try:
            dtype = NUMPY_DTYPES.get(api_type(mc.DataType.Name(entry.data_type)))
        except (GEError, ValueError):
            return None
        dims = list(entry.dims)
        if dtype is None or any(d < 0 for d in dims):
            return None
        total += rows * math.prod(dims) * dtype.itemsize
    return total
