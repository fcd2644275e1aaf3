"""``ge-triton conformance``: docs/fidelity.md as code, on whatever pyACL is present.

First the probes that need a fresh process (init, finalize, acl.json, acl.prof.init before any
load), then the conformance models are compiled for the device's SoC (the host's ATC, or the
simulator's for ``acl-sim``), then every other probe and the model kinds end to end through the
acl engine. Each outcome is pass, fail (observed against claimed) or skip (why); the report
carries the CANN version, the SoC, the run mode and every observed value. The same run on
``acl-sim`` and on a device is the differential check between the simulator and CANN.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.constants import describe_ret
from ge_python_backend.engines.acl.runtime import REPEAT_INITIALIZE
from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.conformance import kinds as _kinds  # noqa: F401 - registers the K-* probes
from ge_python_backend.ops.conformance import probes_aipp as _aipp  # noqa: F401
from ge_python_backend.ops.conformance import probes_atc as _atc  # noqa: F401
from ge_python_backend.ops.conformance import probes_init as _init  # noqa: F401
from ge_python_backend.ops.conformance import probes_model as _model  # noqa: F401
from ge_python_backend.ops.conformance import probes_runtime as _runtime  # noqa: F401
from ge_python_backend.ops.conformance import probes_tools as _tools  # noqa: F401
from ge_python_backend.ops.conformance.atc import Atc
from ge_python_backend.ops.conformance.build import BuiltModels, build_models
from ge_python_backend.ops.conformance.probes import (
    PROBES,
    EngineName,
    Probe,
    ProbeContext,
    ProbeResult,
    ordered,
    run_probe,
)
from ge_python_backend.ops.doctor.host import HostView, cann_versions
from ge_python_backend.version import __version__

__all__ = ["PROBES", "ConformanceReport", "run_conformance"]


@dataclass
class ConformanceReport:
    engine: EngineName
    device: int
    environment: dict[str, Any]
    models: BuiltModels
    results: list[ProbeResult] = field(default_factory=list)

    @property
    def simulator(self) -> bool:
        return self.engine == "acl-sim"

    def counts(self) -> dict[str, int]:
        return {o: sum(r.outcome == o for r in self.results) for o in ("pass", "fail", "skip")}

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "summary": self.counts(),
            "models": {name: built.to_json() for name, built in self.models.models.items()},
            "results": [r.to_json(self.simulator) for r in self.results],
        }

    def table(self) -> str:
        """One line per probe: ID, fidelity rows, outcome, and why (observed vs claimed, or the reason)."""
        width = max((len(r.id) for r in self.results), default=8)
        lines = [f"{'probe':{width}}  {'rows':14}  outcome  detail"]
        for result in self.results:
            rows = ",".join(result.rows)
            lines.append(
                f"{result.id:{width}}  {rows:14}  {result.outcome:7}  {result.summary(self.simulator)}".rstrip()
            )
        counts = self.counts()
        environment = self.environment
        lines.append(
            f"{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip on {environment['engine']} "
            f"({environment.get('soc')}, {environment.get('run_mode')}, pyACL {environment.get('pyacl_version')})"
        )
        return "\n".join(lines)


def run_conformance(
    acl: Any,
    engine: EngineName,
    workdir: Path,
    *,
    device: int = 0,
    atc: Path | None = None,
    exhaust: bool = False,
    host: HostView | None = None,
    probes: Sequence[Probe] | None = None,
) -> ConformanceReport:
    """Run ``probes`` (default: all) on the pyACL module ``acl`` in a process where nothing else
    initialised it. The models are compiled into ``workdir`` with ``atc`` (default: atc on PATH) or,
    on acl-sim, the simulator's ATC; the probes of ATC's own rules run ``atc`` when there is one, else
    on acl-sim the simulator's. With ``exhaust`` the probes that use up a device's streams or events
    for a moment run too."""
    workdir.mkdir(parents=True, exist_ok=True)
    selected = ordered(list(probes if probes is not None else PROBES))
    started = time.time()
    results = []
    built = BuiltModels()
    if atc is None and engine == "acl":
        found = shutil.which("atc")
        atc = Path(found) if found else None
    host_atc = Atc(atc) if atc is not None else None
    probe_atc = host_atc if host_atc is not None or engine == "acl" else Atc()

    def context() -> ProbeContext:
        return ProbeContext(acl, engine, device, built, workdir, exhaust, probe_atc)

    first = [p for p in selected if p.phase == "first"]
    results += [run_probe(p, context()) for p in first]
    ret = acl.init()  # 100002 after the init probes; 0 when none of them ran
    if ret not in (0, REPEAT_INITIALIZE):
        raise ConfigError(f"acl.init returned {describe_ret(ret)}: pyACL cannot be initialised for the probes")
    count, ret = acl.rt.get_device_count()
    if ret == 0 and not 0 <= device < count:  # every probe would fail on it: a usage error, not findings
        raise ConfigError(f"--device {device}: this host has {count} device(s), ids 0 to {count - 1}")
    soc = acl.get_soc_name() or ""
    model_atc = Atc() if engine == "acl-sim" else host_atc
    if model_atc is not None:
        built = build_models(workdir / "models", soc, model_atc)
    else:
        built = BuiltModels(unbuilt="no atc on PATH (give --atc, e.g. $ASCEND_HOME_PATH/bin/atc)")
    results += [run_probe(p, context()) for p in selected if p.phase != "first"]
    atcs = {"models": model_atc.name if model_atc else None, "probes": probe_atc.name if probe_atc else None}
    environment = _environment(acl, engine, device, soc, atcs, host or HostView(), time.time() - started)
    return ConformanceReport(engine, device, environment, built, results)


def _environment(
    acl: Any, engine: str, device: int, soc: str, atcs: dict[str, str | None], host: HostView, seconds: float
):
    try:
        major, minor, patch, ret = acl.get_version()
        version = f"{major}.{minor}.{patch}" if ret == 0 else f"unknown (ret {ret})"
    except Exception as exc:  # an old binding may lack it
        version = f"unknown ({exc!r})"
    try:
        mode, ret = acl.rt.get_run_mode()
        run_mode = {0: "ACL_DEVICE", 1: "ACL_HOST"}.get(int(mode), str(mode)) if ret == 0 else f"unknown (ret {ret})"
    except Exception as exc:
        run_mode = f"unknown ({exc!r})"
    return {
        "engine": engine,
        "device": device,
        "soc": soc,
        "run_mode": run_mode,
        "pyacl_version": version,
        "cann": cann_versions(host),
        "atc": atcs,
        "ge_python_backend": __version__,
        "seconds": round(seconds, 1),
    }
