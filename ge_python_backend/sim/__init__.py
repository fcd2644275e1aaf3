"""A functional simulator of CANN's pyACL (``import acl``), for tests and CI without an NPU.

``get_acl()`` returns this process's stand-in for the ``acl`` module: the same positional-only
functions, return tuples and ret codes as the pyACL binding and CANN's headers
(docs/fidelity.md), executing simulated .om files (made by
``sim_compile`` / ``ge-triton sim-compile``) on ONNX Runtime. It refuses the misuse the real
runtime refuses and keeps a ledger of live resources. It models no performance beyond an
optional fixed device time per execution.

    from ge_python_backend import sim
    acl = sim.get_acl()
    ...                      # use it exactly like `import acl`
    assert sim.live() == []  # nothing leaked

See docs/simulator.md.
"""

from __future__ import annotations

from ge_python_backend.sim.faults import DEVICE_CALLS, Fault, FaultSchedule
from ge_python_backend.sim.simom import MAGIC, SimOm, load_sim_om, read_sim_om, write_sim_om
from ge_python_backend.sim.simulator import Simulator, process_simulator
from ge_python_backend.sim.state import LEDGER_ENV, SimConfig


def get_simulator() -> Simulator:
    """The process-wide simulator (the one the acl-sim engine uses)."""
    return process_simulator()


def get_acl():
    """The process-wide ``acl`` module stand-in."""
    return process_simulator().acl


def live() -> list[str]:
    """Resources still held in the process-wide simulator (empty when nothing leaked)."""
    return process_simulator().live()


def configure(**settings) -> None:
    """``Simulator.configure`` on the process-wide simulator (faults, device_ms, row_ms, ...)."""
    process_simulator().configure(**settings)


def sim_compile(*args, **kwargs):
    """See ``ge_python_backend.sim.compile.sim_compile`` (imported lazily: it needs onnx)."""
    from ge_python_backend.sim.compile import sim_compile as compile_model

    return compile_model(*args, **kwargs)


__all__ = [
    "DEVICE_CALLS",
    "LEDGER_ENV",
    "MAGIC",
    "Fault",
    "FaultSchedule",
    "SimConfig",
    "SimOm",
    "Simulator",
    "configure",
    "get_acl",
    "get_simulator",
    "live",
    "load_sim_om",
    "read_sim_om",
    "sim_compile",
    "write_sim_om",
]
