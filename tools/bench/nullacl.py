"""A null pyACL: the simulator's ``acl`` module with its device-side work taken out.

A measuring instrument (not part of the package): it answers the model description, dataset,
buffer, memory, stream and event API exactly as the simulator does (``ge_python_backend.sim``),
so the acl engine's own code runs unchanged over it, but the calls a real pyACL makes into the
device on every batch return at once, as cheap C calls would:

- ``acl.mdl.execute_async`` / ``acl.mdl.execute`` run nothing (no ONNX Runtime: the model is
  loaded without a session, so a fall-back to the simulator's execute fails loudly);
- ``acl.rt.memcpy_async`` / ``acl.rt.memcpy`` copy nothing;
- ``acl.rt.synchronize_stream`` waits only for the modelled device time, if any
  (``device_ms``: each execute keeps every core of its device busy that long, booked on the
  simulator's shared device as ``acl_sim_device_ms`` is, so the instances of a server on one device
  take turns; ``shared_device=False``: each stream a device of its own);
- ``acl.rt.record_event`` / ``acl.rt.event_elapsed_time`` report the modelled timeline.

None of these check their arguments (the simulator's tests do that); the outputs hold whatever
the buffers held. So the host cost of the acl engine is what is left: the stub, GEModel, the
engine and its pyACL calls, without the simulator's ~0.1 ms per batch.

A served folder uses it with ``engine: acl``: its model.py calls ``install()`` before GEModel
opens, which puts the null module in ``sys.modules["acl"]`` (``tools/bench/repos.py``:
``null_prelude``). Only this file is loaded there (by path), so it imports nothing of tools/.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ge_python_backend.sim.api_mdl import MdlApi
from ge_python_backend.sim.api_rt import RtApi
from ge_python_backend.sim.signature import AclFail
from ge_python_backend.sim.simulator import Simulator
from ge_python_backend.sim.state import SimConfig

MARKER = "null pyACL (tools/bench/nullacl.py)"


class _Timeline:
    """Per stream: when its modelled device work ends; per event: its modelled time.

    The shared device's names are imported only when a device time is modelled: at device time 0
    the null pyACL also runs over a package from before the shared device (``tools.bench ab --b``
    with an older checkout, whose folders import that checkout's simulator)."""

    def __init__(self, device_ms: float) -> None:
        self.device_s = max(0.0, device_ms) / 1000.0
        self.clock: Callable[[], float] = time.monotonic  # the shared device's clock (sim/device.py)
        if self.device_s:
            from ge_python_backend.ascend.limits import ai_cores
            from ge_python_backend.sim.device import clock, execution_demand

            self.clock, self.ai_cores, self.execution_demand = clock, ai_cores, execution_demand
        self.free_at: dict[int, float] = {}
        self.events: dict[int, float] = {}
        self.lock = threading.Lock()
        self.executions = 0


class NullRt(RtApi):
    """``acl.rt`` of the simulator with copies, waits and events that do no device work."""

    _timeline: _Timeline

    def memcpy_async(self, dst, dest_max, src, count, kind, stream):
        return 0

    def memcpy(self, dst, dest_max, src, count, kind):
        return 0

    def synchronize_stream(self, stream):
        timeline = self._timeline
        if timeline.device_s:
            wait = timeline.free_at.get(stream, 0.0) - timeline.clock()
            if wait > 0:
                time.sleep(wait)
        return 0

    def record_event(self, event, stream):
        timeline = self._timeline
        timeline.events[event] = max(timeline.clock(), timeline.free_at.get(stream, 0.0))
        return 0

    def event_elapsed_time(self, start, end):
        events = self._timeline.events
        return (events.get(end, 0.0) - events.get(start, 0.0)) * 1000.0, 0


class NullMdl(MdlApi):
    """``acl.mdl`` of the simulator whose models load without ONNX Runtime and execute nothing."""

    _timeline: _Timeline

    def _session(self, om):
        return None  # no ONNX Runtime: the simulator's own execute cannot run on a null model

    def execute_async(self, model_id, input_dataset, output_dataset, stream):
        timeline = self._timeline
        timeline.executions += 1
        if timeline.device_s:
            sim = self._sim
            with timeline.lock:
                ready = max(timeline.clock(), timeline.free_at.get(stream, 0.0))
            capacity = timeline.ai_cores(sim.config.soc_name) or 1
            demand = timeline.execution_demand(
                timeline.device_s, capacity, None, sim.config.core_busy, sim.config.launch_share
            )
            _, end = sim.device_model(self._device()).execute(ready, demand)
            with timeline.lock:
                timeline.free_at[stream] = end
        return 0

    def _device(self) -> int:
        """The calling thread's device (0 without a context: the null pyACL checks nothing)."""
        try:
            return self._sim.current_context().device
        except AclFail:
            return 0

    def execute(self, model_id, input_dataset, output_dataset):
        self._timeline.executions += 1
        if self._timeline.device_s:
            time.sleep(self._timeline.device_s)
        return 0


class NullSimulator(Simulator):
    """A simulator whose ``.acl`` is the null pyACL; ``executions`` counts the null executes."""

    def __init__(self, device_ms: float = 0.0, config: SimConfig | None = None) -> None:
        super().__init__(config)
        self.timeline = _Timeline(device_ms)
        rt, mdl = NullRt(self), NullMdl(self)
        rt._timeline = mdl._timeline = self.timeline
        self.acl.rt, self.acl.mdl = rt, mdl
        self.acl.null_pyacl = MARKER  # what the module says it is (the engine never looks)

    @property
    def executions(self) -> int:
        return self.timeline.executions


def install(device_ms: float = 0.0, shared_device: bool = True) -> Any:
    """Make ``import acl`` in this process the null pyACL (before GEModel opens); returns it."""
    config = SimConfig(shared_device=shared_device) if device_ms else None  # no device model at 0 (_Timeline)
    module = NullSimulator(device_ms, config).acl
    sys.modules["acl"] = module
    return module
