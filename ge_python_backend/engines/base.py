"""The engine interface. Engines run batches of numpy tensors and know nothing of Triton.

An engine owns one or more *slots*. A slot is one execution context with its own input and
output memory (for acl: a model copy, a stream, device buffers and pinned host buffers), and
runs at most one batch at a time. The caller:

1. takes a free slot (the runner keeps the pool),
2. asks it for writable input arrays of the exact (padded) shapes to run
   (``slot.inputs(shapes)``) and gathers request tensors straight into them,
3. calls ``slot.run()`` on a thread where ``engine.bind_thread()`` has run,
4. reads the outputs, which stay valid until the slot's next ``inputs`` call.

So request data is copied once on the host, into memory the engine owns, and nothing is
allocated per call once a shape has been seen.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ge_python_backend.specs import ModelSpec

Shapes = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class CompileTarget:
    """Where a model compiled at load will run, as the device reports it."""

    soc_version: str
    #: the CANN (or simulator) version: a compiled model belongs to the toolkit that built it
    cann_version: str


class RequestSettings(Enum):
    """Which requests have engine settings of their own (``Engine.batch_settings``)."""

    #: none: the request path never asks
    NONE = "none"
    #: a request with parameters: the request path reads them and asks
    WITH_PARAMETERS = "with_parameters"
    #: every request (settings that default to values the engine keeps, e.g. an aipp_config file)
    ALWAYS = "always"


@dataclass
class PhaseTimes:
    """Seconds the last run spent in each engine phase (0.0 where a phase does not exist)."""

    host_to_device: float = 0.0
    execute: float = 0.0
    device_to_host: float = 0.0
    #: seconds the device spent running it that no other run on the device counted (an NPU engine's
    #: share of its device's busy time: engines/acl/busy.py); 0 for engines without a device
    device_busy: float = 0.0


class Slot(ABC):
    """One execution context of an engine."""

    index: int
    last_times: PhaseTimes

    @abstractmethod
    def inputs(self, shapes: Shapes, settings: Hashable = None) -> dict[str, np.ndarray]:
        """Writable C-contiguous arrays of exactly ``shapes`` (every model input) for the next run;
        ``settings`` are the batch's engine settings (``Engine.batch_settings``)."""

    @abstractmethod
    def run(self) -> dict[str, np.ndarray]:
        """Run the batch staged through ``inputs``; return every model output.

        Raises EngineError on failure. The arrays may alias slot memory: they are valid until
        the next ``inputs`` call on this slot.
        """


class Engine(ABC):
    """A loaded model with ``len(slots)`` execution contexts."""

    #: "onnxruntime", "acl" or "acl-sim".
    name: str
    spec: ModelSpec
    #: True when ``Slot.run`` returns views of slot memory that its next run overwrites
    #: (acl's pinned buffers); False when every run returns fresh arrays (ONNX Runtime).
    outputs_alias_slot_memory: bool = True
    #: True when the engine's string tensors hold UTF-8 text (ONNX Runtime): BYTES input elements
    #: that are not UTF-8 are refused per request before they reach a batch.
    utf8_strings: bool = False

    @property
    @abstractmethod
    def slots(self) -> tuple[Slot, ...]:
        """The execution contexts; at least one."""

    #: which requests ``batch_settings`` is asked about (an engine that overrides it says which)
    request_settings: RequestSettings = RequestSettings.NONE

    def batch_settings(self, parameters: Mapping[str, Any], shapes: Shapes, request_id: str = "") -> Hashable:
        """Engine settings a request asks for (e.g. dynamic-AIPP values from its parameters):
        requests whose settings differ never share a batch. InputError names a bad parameter;
        ``request_id`` (the client's, may be empty) is for the engine's log. Default: none."""
        return None

    def after_batch(self) -> None:  # noqa: B027 - optional: most engines keep no per-batch state
        """Called once after each batch runs (acl: counts batches of a profiling window)."""

    def device_memory(self) -> tuple[int, int] | None:
        """(free, total) bytes of the engine's device memory, or None when it has none to report."""
        return None

    def bind_thread(self) -> None:  # noqa: B027 - optional: most engines need no per-thread setup
        """Prepare the calling thread to run slots (acl: make the engine's context current)."""

    @abstractmethod
    def close(self) -> None:
        """Release everything the engine holds. Idempotent."""

    def describe(self) -> str:
        """One line for the log: engine, slots and memory cost."""
        return f"{self.name} engine, {len(self.slots)} slot(s)"
