"""The acl engine: a CANN offline model (.om) on an Ascend NPU through pyACL (``import acl``).

The engine drives whatever pyACL module its registry entry names: CANN's own for ``acl``, the
simulator's for ``acl-sim`` (registered by ``ge_python_backend.sim``). pyACL is imported only
when an engine opens.

Each slot loads its own copy of the model (one model_id must never execute on two streams at
once) and owns a stream, device buffers of the largest gear, pinned host staging buffers,
prebuilt datasets and timing events; nothing is allocated on the execute path.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ge_python_backend.engines.acl.runtime import AclError, AclRuntime, check, log_failure
from ge_python_backend.engines.acl.slot import AclSlot
from ge_python_backend.engines.base import Engine, Slot
from ge_python_backend.engines.registry import EngineInfo
from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Parameter

#: Parameters of the acl engine family (acl and acl-sim).
PARAMETERS: tuple[Parameter, ...] = ()


class AclEngine(Engine):
    """An .om model on one device, with ``slots`` model copies that can run concurrently."""

    def __init__(self, model_path: str | Path, *, acl: Any, name: str = "acl", device_id: int = 0, slots: int = 1):
        if slots < 1:
            raise ConfigError(f"streams (slots) must be >= 1, got {slots}")
        self.name = name
        self._acl = acl
        self._device_id = device_id
        self._runtime = AclRuntime.of(acl)
        self._lock = threading.Lock()
        self._started = False
        self._context = 0
        self._slots: list[AclSlot] = []
        self._model_bytes = (0, 0)
        path = str(model_path)
        try:
            self._runtime.start(self, device_id)
            self._started = True
            context, ret = acl.rt.create_context(device_id)
            check(acl, ret, "acl.rt.create_context", f"opening device {device_id}")
            self._context = context
            work, weight, ret = acl.mdl.query_size(path)
            check(acl, ret, "acl.mdl.query_size", f"reading {path}")
            self._model_bytes = (work, weight)
            first = AclSlot(0, acl, path, None)
            self._slots.append(first)
            self._slots.extend(AclSlot(i, acl, path, first.plan) for i in range(1, slots))
        except BaseException:
            self.close()
            raise
        self.layout = first.plan.layout
        soc = acl.get_soc_name()
        self.spec = self.layout.spec("acl", {"engine": self.name, "device_id": str(device_id), "soc_name": soc or ""})

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(self._slots)

    def bind_thread(self) -> None:
        """Make this engine's context current in the calling thread (pyacl.md §8.2)."""
        acl = self._acl
        ret = acl.rt.set_context(self._context)
        check(acl, ret, "acl.rt.set_context", "binding a thread to the engine's context")

    def close(self) -> None:
        """Release slots, context and device (pyacl.md §10); safe from any thread, idempotent."""
        with self._lock:
            acl = self._acl
            if self._context:
                ret = acl.rt.set_context(self._context)
                log_failure(acl, ret, "acl.rt.set_context")
            for slot in reversed(self._slots):
                slot.release()
            self._slots = []
            if self._context:
                ret = acl.rt.destroy_context(self._context)
                log_failure(acl, ret, "acl.rt.destroy_context")
                self._context = 0
            if self._started:
                self._started = False
                self._runtime.stop(self, self._device_id)

    def describe(self) -> str:
        count = len(self._slots)
        if not count:
            return f"{self.name} engine (closed)"
        work, weight = self._model_bytes
        buffers = self._slots[0].device_bytes
        per_slot = work + weight + buffers
        return (
            f"{self.name} engine on device {self._device_id}: {count} slot(s), each a model copy with its own "
            f"stream; device memory {_size_text(per_slot * count)} = {count} x (work {_size_text(work)} + weights "
            f"{_size_text(weight)} + I/O buffers {_size_text(buffers)}); pinned host memory "
            f"{_size_text(self._slots[0].host_bytes * count)}"
        )


def _size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def open_engine(
    model_path: Path, *, info: EngineInfo, device_id: int, slots: int, options: Mapping[str, Any]
) -> AclEngine:
    """Open ``model_path`` with ``slots`` streams on ``device_id``, on the pyACL ``info`` names."""
    return AclEngine(model_path, acl=info.load_pyacl(), name=info.name, device_id=device_id, slots=slots)


def available(info: EngineInfo) -> tuple[bool, str]:
    """Whether ``info`` can run here (its pyACL imports and sees a device), and why (not)."""
    try:
        count = AclRuntime.of(info.load_pyacl()).device_count()
    except (ConfigError, AclError) as exc:
        return False, str(exc).split(". ")[0]
    if count < 1:
        return False, "pyACL sees no Ascend device"
    return True, f"{count} Ascend device(s) ({info.name})"
