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
from ge_python_backend.params import Parameter, parse_float
from ge_python_backend.sim.faults import FaultSchedule
from ge_python_backend.sim.simom import MAGIC

#: The simulated .om ``sim-compile`` writes (``sim/simom.py``): only this engine runs it.
SIM_OM = ModelFormat("sim-om", "simulated .om", "ge_python_backend.sim.simom:read_record", magic=MAGIC)

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
        "acl-sim only: modelled device time of every execution (the stream is busy that long)",
    ),
    Parameter(
        "acl_sim_row_ms",
        parse_float(0.0),
        None,
        "milliseconds >= 0",
        "acl-sim only: modelled device time per batch row, added to acl_sim_device_ms",
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
