"""``acl-sim``: the acl engine's own code on this simulator, registered through the engine registry.

``pyproject.toml`` names ``ENGINE`` in the ``ge_python_backend.engines`` entry-point group; the
registry loads it, so nothing in ``engines/`` imports the simulator; it declares the simulated .om
format (``SIM_OM``) the same way. ``GE_ACL_SIMULATOR=1`` runs engine ``acl`` here on a machine
without pyACL (a test switch, refused where pyACL imports: ``registry.stand_in``).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ge_python_backend.engines.registry import EngineInfo, ModelFormat
from ge_python_backend.params import Parameter, parse_bool, parse_float
from ge_python_backend.sim.device import DEFAULT_COPY_GBPS
from ge_python_backend.sim.faults import FaultSchedule
from ge_python_backend.sim.simom import MAGIC

#: The simulated .om ``sim-compile`` writes (``sim/simom.py``): only this engine runs it.
SIM_OM = ModelFormat("sim-om", "simulated .om", "ge_python_backend.sim.simom:read_record", magic=MAGIC)


def _busy_share(raw: str) -> float:
    value = float(raw)
    if not 0.0 < value <= 1.0:
        raise ValueError("must be > 0 and <= 1")
    return value


def _launch_share(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value < 1.0:
        raise ValueError("must be >= 0 and < 1")
    return value


PARAMETERS = (
    Parameter(
        "acl_sim_faults",
        FaultSchedule.parse,
        None,
        "faults such as 'execute_async:3=507011, malloc:2, memcpy_async:9=lost' (FUNCTION:N[=RET|=lost])",
        "acl-sim only: fail the Nth call of a pyACL function, or lose the device",
    ),
    Parameter(
        "acl_sim_device_ms",
        parse_float(0.0),
        None,
        "milliseconds >= 0",
        "acl-sim only: modelled device time of every execution alone on its device with all the SoC's AI Cores; "
        "executions of every stream and instance on one device share its cores (docs/simulator.md)",
    ),
    Parameter(
        "acl_sim_row_ms",
        parse_float(0.0),
        None,
        "milliseconds >= 0",
        "acl-sim only: modelled device time per batch row, added to acl_sim_device_ms",
    ),
    Parameter(
        "acl_sim_core_busy",
        _busy_share,
        None,
        "a share in (0, 1]",
        "acl-sim only: share of an execution's device time its AI Cores are busy (default 1); the rest are gaps "
        "between kernels that other streams' executions fill",
    ),
    Parameter(
        "acl_sim_launch_share",
        _launch_share,
        None,
        "a share in [0, 1)",
        "acl-sim only: share of the busy time spent starting cores, which grows with the cores a model is compiled "
        "for (ATC --aicore_num; the rest shrinks with them; default 0)",
    ),
    Parameter(
        "acl_sim_copy_gbps",
        parse_float(0.0),
        None,
        "GB/s >= 0",
        f"acl-sim only: bandwidth of the device's host-to-device and device-to-host copy engines (default "
        f"{DEFAULT_COPY_GBPS:g}; 0: copies take no modelled time)",
    ),
    Parameter(
        "acl_sim_shared_device",
        parse_bool,
        None,
        "true or false",
        "acl-sim only: true (default): one modelled device per device id for every stream and instance; false: "
        "every stream a device of its own (to measure the host alone)",
    ),
)


def configure_from(options: Mapping[str, Any]) -> None:
    """Apply the simulator parameters a model config sets to the process-wide simulator."""
    given = {p.name: options[p.name] for p in PARAMETERS if options.get(p.name) is not None}
    if not given:
        return
    from ge_python_backend.sim import configure

    configure(
        faults=given.get("acl_sim_faults"),
        device_ms=given.get("acl_sim_device_ms"),
        row_ms=given.get("acl_sim_row_ms"),
        core_busy=given.get("acl_sim_core_busy"),
        launch_share=given.get("acl_sim_launch_share"),
        copy_gbps=given.get("acl_sim_copy_gbps"),
        shared_device=given.get("acl_sim_shared_device"),
    )


def atc_program() -> tuple[str, ...]:
    """How to run the simulator's ATC (``sim/atc.py``) with this interpreter (in Triton's Python
    stub ``sys.executable`` may name the stub; then the ``python3`` on PATH, the stub's own)."""
    python = sys.executable if Path(sys.executable).name.startswith("python") else shutil.which("python3")
    return (python or "python3", "-m", "ge_python_backend.sim.atc")


ENGINE = EngineInfo(
    name="acl-sim",
    module="ge_python_backend.engines.acl",
    model_format=SIM_OM,
    default_file="model.om",
    npu=True,
    summary="a simulated .om on the pyACL simulator (ONNX Runtime on the CPU)",
    pyacl="ge_python_backend.sim:get_acl",
    parameters=PARAMETERS,
    prepare=configure_from,
    exclusive_parameters=True,
    stands_in_for="acl",
    stand_in_env="GE_ACL_SIMULATOR",
    atc=atc_program(),
)
