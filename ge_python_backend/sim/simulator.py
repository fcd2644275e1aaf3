"""The simulator: its state (``state.SimState``) with the ``acl`` module stand-in built over it.

``process_simulator()`` is the one simulator of a process, the one ``acl-sim`` drives.
"""

from __future__ import annotations

import atexit
import threading

from ge_python_backend.sim.api import TopApi, UtilApi
from ge_python_backend.sim.api_mdl import MdlApi
from ge_python_backend.sim.api_prof import ProfApi
from ge_python_backend.sim.api_rt import RtApi
from ge_python_backend.sim.state import SimConfig, SimState


class Simulator(SimState):
    """A functional stand-in for the CANN runtime behind ``import acl``; ``.acl`` is its module."""

    def __init__(self, config: SimConfig | None = None) -> None:
        super().__init__(config)
        self.acl = build_module(self)


def build_module(sim: SimState) -> TopApi:
    """The ``acl`` stand-in for ``sim``: ``acl.init``, ``acl.rt.malloc``, ``acl.mdl.execute``, ..."""
    module = TopApi(sim)
    module.rt = RtApi(sim)
    module.mdl = MdlApi(sim)
    module.prof = ProfApi(sim)
    module.util = UtilApi(sim)
    return module


_PROCESS_SIMULATOR: Simulator | None = None
_PROCESS_LOCK = threading.Lock()


def process_simulator() -> Simulator:
    """The one simulator of this process (created on first use)."""
    global _PROCESS_SIMULATOR
    with _PROCESS_LOCK:
        if _PROCESS_SIMULATOR is None:
            _PROCESS_SIMULATOR = Simulator()
            atexit.register(_PROCESS_SIMULATOR.at_exit)
        return _PROCESS_SIMULATOR
