"""``ge-triton doctor``: a preflight of a host (and a repository) that loads nothing heavy.

Each check is a small function returning ``Finding``s (ok / warn / error, a message and the
fix): the host (``host.py``), pyACL and the devices (``devices.py``) and, given a repository, what
each model will meet there (``repository.py``). Nothing is required: a missing CANN, npu-smi or
NPU is itself a finding. On ``acl-sim`` the device checks run on the simulator's device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ge_python_backend.engines.registry import engine_info, stand_in
from ge_python_backend.errors import GEError
from ge_python_backend.ops.deploy.resolved import shm_needed
from ge_python_backend.ops.doctor.devices import initialised, pyacl_devices
from ge_python_backend.ops.doctor.findings import DoctorReport, Finding, Level, error, warn
from ge_python_backend.ops.doctor.host import (
    HostView,
    cann_install,
    device_nodes,
    npu_smi,
    python_packages,
    shared_memory,
    stub_environment,
    tritonserver,
)
from ge_python_backend.ops.doctor.repository import model_findings, read_models

__all__ = ["DoctorReport", "Finding", "HostView", "Level", "run_doctor"]


def run_doctor(
    repository: Path | None = None,
    *,
    device: int | None = None,
    engine_name: str = "acl",
    host: HostView | None = None,
    acl: Any = None,
) -> DoctorReport:
    """Every check; ``acl`` is the pyACL module to ask (default: the one engine ``engine_name``
    loads, or its stand-in under GE_ACL_SIMULATOR=1)."""
    host = host or HostView()
    report = DoctorReport([python_packages()])
    repo_findings, models = read_models(repository) if repository is not None else ([], [])
    needs_acl = any(m.engine == "acl" for m in models)
    report.findings += stub_environment(host, needs_acl)
    report.findings += [cann_install(host, needs_acl), npu_smi(host), device_nodes(host, needs_acl)]
    report.findings += [tritonserver(host), shared_memory(host, shm_needed(tuple(models)) if models else None)]
    if acl is None:
        acl, problem = _pyacl(engine_name, needs_acl)
        if problem is not None:
            report.findings.append(problem)
    if acl is None:
        report.findings += repo_findings + model_findings(models, None, None, device, host.which)
        return report
    with initialised(acl) as problem:
        if problem is not None:
            report.findings += [problem, *repo_findings, *model_findings(models, None, None, device, host.which)]
            return report
        found, runtime = pyacl_devices(acl, engine_name, [device] if device is not None else None)
        report.findings += found + repo_findings + model_findings(models, runtime, acl, device, host.which)
    return report


def _pyacl(engine_name: str, needs_acl: bool) -> tuple[Any, Finding | None]:
    """The pyACL module of ``engine_name``, or why there is none (an error when a model needs it)."""
    try:
        return stand_in(engine_info(engine_name)).load_pyacl(), None
    except GEError as exc:
        level = error if needs_acl else warn
        return None, level("pyacl", f"engine {engine_name}: {exc}".split(". ")[0], "see stub-acl and cann above")
