"""What each model of a repository will meet on this host, said before a load fails: its ``.om``'s
SoC against each device it is configured for, its build facts, the device memory and the streams
and events its instances will take on each device against what the device has, and its kinds.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.limits import SOC_VERSIONS, arch_compatible, platform_npu_arch
from ge_python_backend.ascend.resources import ModelResources
from ge_python_backend.engines.acl.engine import copy_events, instance_streams, size_text
from ge_python_backend.engines.offline import model_resources, read_model_spec
from ge_python_backend.engines.registry import detect_format, engine_info, stand_in
from ge_python_backend.errors import GEError
from ge_python_backend.ops.deploy.facts import ModelFacts, model_facts
from ge_python_backend.ops.doctor.devices import DeviceFacts, RuntimeFacts
from ge_python_backend.ops.doctor.findings import Finding, error, ok, warn
from ge_python_backend.ops.server import ServerError, find_tritonserver
from ge_python_backend.repository.check import check_repository
from ge_python_backend.specs import ModelSpec

#: a prediction above this share of the free memory is a warning (other processes move it)
MEMORY_HEADROOM = 0.8


@dataclass(frozen=True)
class ModelCost:
    """One acl model's load on one device: bytes and streams/events of all its instances there."""

    name: str
    device: int
    memory: int | None
    streams: int | None
    events: int
    breakdown: str


def read_models(repository: Path) -> tuple[list[Finding], list[ModelFacts]]:
    """``ge-triton check``'s errors as findings, and the facts of every model that checks out
    (whether a Python-based backend is installed is looked up where the tritonserver ``serve``
    starts keeps its backends)."""
    try:
        backends: Path | None = find_tritonserver().backends
    except ServerError:
        backends = None
    report = check_repository(repository, backends)
    findings = [error("check", f"{p.path}: {p.message}", f"ge-triton check {repository}") for p in report.errors] + [
        warn("check", f"{p.path}: {p.message}") for p in report.warnings
    ]
    broken = {p.path.relative_to(report.root).parts[0] for p in report.errors}
    models = []
    for name in report.models:
        if name in broken:
            continue
        try:
            models.append(model_facts(report.root / name))
        except GEError as exc:
            findings.append(error(f"model:{name}", str(exc), f"ge-triton check {repository}"))
    if not findings:
        findings.append(ok("check", f"{len(models)} model(s), no problems (ge-triton check)"))
    return findings, models


def model_findings(
    models: list[ModelFacts],
    runtime: RuntimeFacts | None,
    acl: Any,
    device_filter: int | None,
    which: Callable[[str], str | None] = shutil.which,
) -> list[Finding]:
    """Per model: file, kinds and SoC; per device: memory, streams and events of every acl model on it.
    A model compiled with ATC at load has no .om yet: its ATC is looked up (``which``) instead."""
    findings: list[Finding] = []
    costs: dict[int, list[ModelCost]] = defaultdict(list)
    for model in models:
        if model.compiled:
            findings.append(_compiled(model, which))
            continue
        spec = _spec(model, findings)
        if spec is None or model.engine not in ("acl", "acl-sim"):
            continue
        findings.append(_kinds(model, spec))
        devices = [d for d in model.devices_used if device_filter is None or d == device_filter]
        for device in devices:
            facts = runtime.devices.get(device) if runtime is not None else None
            findings.append(_soc(model, spec, device, facts.soc if facts else None))
            costs[device].append(_cost(model, device, acl, runtime))
    for device, on_device in sorted(costs.items()):
        facts = runtime.devices.get(device) if runtime is not None else None
        findings += [_memory(device, on_device, facts), _streams(device, on_device, facts)]
    return findings


def _spec(model: ModelFacts, findings: list[Finding]) -> ModelSpec | None:
    path = model.model_path
    model_format = detect_format(path) if path is not None and path.is_file() else None
    if path is None or model_format is None:
        findings.append(error(f"model:{model.name}", f"no model file for engine {model.engine} ({path})"))
        return None
    try:
        spec = read_model_spec(path, model_format)
    except GEError as exc:
        findings.append(error(f"model:{model.name}", f"{path}: {exc}"))
        return None
    facts = spec.facts
    built = ", ".join(f"{k} {facts[k]}" for k in ("atc_version", "opp_version", "soc_version") if facts.get(k))
    findings.append(
        ok(
            f"model:{model.name}",
            f"{path.name} on engine {model.engine}; built by {built or 'no recorded ATC'}",
            **{k: facts[k] for k in ("atc_version", "opp_version", "soc_version") if facts.get(k)},
        )
    )
    return spec


def _compiled(model: ModelFacts, which: Callable[[str], str | None]) -> Finding:
    """An .onnx or .pb the engine compiles at load (engines/compile.py): the load fails when the
    engine's ATC cannot run; the .om it writes is for the device's SoC, and what it costs on the
    device is known only once it exists."""
    check = f"model:{model.name}"
    name = model.model_path.name if model.model_path is not None else "the model"
    program = stand_in(engine_info(model.engine)).atc[0]
    found = which(program)
    if found is None:
        return error(
            check,
            f"{name} is compiled with ATC at load (engine {model.engine}), and {program!r} is not on PATH: the "
            "load will fail",
            "install CANN's toolkit and source its set_env.sh where tritonserver starts, or put a compiled "
            "model.om in the version folder",
        )
    return ok(
        check,
        f"{name} is compiled with ATC at load ({found}) for the device's SoC; its device memory, streams and "
        "events are not predicted (no .om yet)",
        atc=found,
    )


def _kinds(model: ModelFacts, spec: ModelSpec) -> Finding:
    batch = spec.batch
    kinds = [f"batch {batch.kind}" + (f" {list(batch.sizes)}" if batch.sizes else "")]
    if spec.gear_kind:
        kinds.append(f"{spec.gear_kind} gears: " + ", ".join(g.label for g in spec.shape_gears))
    kinds += [f"input {t.name}: {t.preprocessing.describe()}" for t in spec.inputs if t.preprocessing is not None]
    if any(t.ranges for t in spec.inputs):
        kinds.append("shape ranges (loaded with system-managed memory)")
    return ok(f"model:{model.name}:kinds", "; ".join(kinds))


def _soc(model: ModelFacts, spec: ModelSpec, device: int, device_soc: str | None) -> Finding:
    """The load checks the model's soc_version against the device's NpuArch and refuses another one
    (om_file_helper.cc 259-287; ascend/limits.py: arch_compatible)."""
    check = f"model:{model.name}:soc-device-{device}"
    soc = spec.facts.get("soc_version", "")
    if not soc:
        return ok(check, "the file records no soc_version: CANN skips the SoC check")
    if device_soc is None:
        return warn(
            check,
            f"compiled for {soc}; device {device}'s SoC is unknown (pyACL did not answer)",
            "run doctor where pyACL works to check it",
        )
    compatible = arch_compatible(soc, device_soc)
    known = soc in SOC_VERSIONS and device_soc in SOC_VERSIONS
    if compatible:
        return ok(check, f"compiled for {soc}, device {device} is {device_soc}: the same NpuArch")
    fix = f"compile it again with atc --soc_version={device_soc}"
    if not known:
        return warn(
            check,
            f"compiled for {soc}, device {device} is {device_soc}; CANN's platform files in our tables "
            "name only one of them, so whether the load accepts it is the runtime's to say",
            fix,
        )
    return error(
        check,
        f"compiled for {soc} (NpuArch {platform_npu_arch(soc)}), device {device} is {device_soc} "
        f"(NpuArch {platform_npu_arch(device_soc)}): the load will fail (E10001)",
        fix,
    )


def _sizes(model: ModelFacts, acl: Any) -> tuple[int, int] | None:
    """(work, weight) bytes of one copy: pyACL's query_size (reads the file, loads nothing), else the
    sizes the .om records (memory_size, weight_size)."""
    path = str(model.model_path)
    if acl is not None:
        try:
            work, weight, ret = acl.mdl.query_size(path)
        except Exception:  # a binding that cannot read this kind of file
            ret = -1
        if ret == 0:
            return int(work), int(weight)
    model_format = detect_format(Path(path))
    if model_format is None:
        return None
    facts = read_model_spec(Path(path), model_format).facts
    try:
        return int(facts["memory_size"]), int(facts["weight_size"])
    except (KeyError, ValueError):
        return None


def _cost(model: ModelFacts, device: int, acl: Any, runtime: RuntimeFacts | None) -> ModelCost:
    """Each instance on ``device`` holds ``streams`` copies: S x (work + I/O) + weights once when they
    are shared (acl_share_weights, and not a dynamic-shape model: those load system-managed)."""
    instances = model.instances_on(device) * model.versions
    resources: ModelResources = model_resources(model.model_path) if model.model_path else ModelResources()
    sizes = _sizes(model, acl)
    share = model.values["acl_share_weights"] and not resources.dynamic
    io = model.io_bytes
    memory = None
    breakdown = f"{instances} instance(s) x {model.streams} copies"
    if sizes is not None:
        work, weight = sizes
        per_instance = model.streams * (work + (io or 0)) + (weight if share else model.streams * weight)
        memory = instances * per_instance
        breakdown += (
            f" x (work {size_text(work)} + I/O {size_text(io or 0)}) + weights {size_text(weight)} "
            + ("once (shared)" if share else "per copy")
            + ("" if io is not None else "; I/O unknown (variable dims)")
        )
    limits = runtime.devices[device].limits if runtime is not None and device in runtime.devices else None
    device_mode = runtime.device_mode if runtime is not None else False
    streams = instances * instance_streams(limits, resources, model.streams, device_mode) if limits else None
    timing = model.values["acl_timing_events"]
    if timing is None:  # GEModel's default: timing events when its metrics report them
        timing = model.values["metrics"]
    events = instances * model.streams * copy_events(resources, timing)
    return ModelCost(model.name, device, memory, streams, events, breakdown)


def _memory(device: int, costs: list[ModelCost], facts: DeviceFacts | None) -> Finding:
    check = f"memory-device-{device}"
    known = [c for c in costs if c.memory is not None]
    unknown = [c.name for c in costs if c.memory is None]
    total = sum(c.memory for c in known if c.memory is not None)
    parts = "; ".join(
        f"{c.name}: {size_text(c.memory) if c.memory is not None else '?'} = {c.breakdown}" for c in costs
    )
    if unknown and not known:
        return warn(
            check, f"device memory of {', '.join(unknown)} cannot be predicted (no sizes)", "run doctor with pyACL"
        )
    if facts is None or facts.free is None:
        return warn(check, f"about {size_text(total)} predicted ({parts}); the device's free memory is unknown")
    message = f"about {size_text(total)} predicted of {size_text(facts.free)} free ({parts})"
    if total > facts.free:
        return error(
            check, message, "lower instance counts or parameter 'streams', or share weights (acl_share_weights)"
        )
    if total > MEMORY_HEADROOM * facts.free:
        return warn(check, message + ": little headroom", "other processes on the device move the free memory")
    return ok(check, message, predicted=total, free=facts.free)


def _streams(device: int, costs: list[ModelCost], facts: DeviceFacts | None) -> Finding:
    check = f"streams-device-{device}"
    limits = facts.limits if facts is not None else None
    if limits is None:
        return warn(check, "the device's stream and event limits are unknown: not checked")
    streams = sum(c.streams or 0 for c in costs)
    events = sum(c.events for c in costs)
    message = (
        f"the models' instances take {streams} of {limits.streams} streams and {events} of {limits.events} "
        f"events on device {device} ({', '.join(c.name for c in costs)})"
    )
    if streams > limits.streams or events > limits.events:
        return error(check, message, "lower instance counts or parameter 'streams' (or acl_timing_events false)")
    return ok(check, message, streams=streams, events=events)
