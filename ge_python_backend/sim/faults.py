"""Fault injection for the simulator: fail the Nth call of a device function, or lose the device.

Compact form (the ``acl_sim_faults`` model parameter and ``Simulator.configure(faults=...)``)::

    FUNCTION:N            fail the Nth call of FUNCTION with its usual error code
    FUNCTION:N=RET        ... with RET (a number or a name such as ACL_ERROR_RT_MODEL_EXECUTE)
    FUNCTION:N=lost       the Nth call of FUNCTION loses the device: it and every later
                          device call fail with 507899 ACL_ERROR_RT_DRV_INTERNAL_ERROR

Entries are separated by commas, semicolons or spaces, e.g.
``"execute_async:3=507011, malloc:2, memcpy_async:40=lost"``. Calls are counted per function
name from the moment the schedule is installed. FUNCTION is one of ``DEVICE_CALLS``.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass

from ge_python_backend.ascend.constants import RET_CODES, ret_code

#: Functions that need the device: they can be targeted by faults and fail once the device is lost.
DEVICE_CALLS = frozenset(
    {
        "set_device",
        "create_context",
        "create_stream",
        "synchronize_stream",
        "synchronize_stream_with_timeout",
        "synchronize_device",
        "create_event",
        "record_event",
        "synchronize_event",
        "get_mem_info",
        "malloc",
        "malloc_host",
        "memcpy",
        "memcpy_async",
        "memset",
        "memset_async",
        "load_from_file",
        "load_from_file_with_mem",
        "load_from_mem",
        "execute",
        "execute_async",
        "set_dynamic_batch_size",
        "set_dynamic_hw_size",
        "set_input_dynamic_dims",
    }
)

#: The code a fault returns when the schedule does not give one.
DEFAULT_RETS = {
    "malloc": ret_code("ACL_ERROR_RT_MEMORY_ALLOCATION"),
    "malloc_host": ret_code("ACL_ERROR_BAD_ALLOC"),
    "execute": ret_code("ACL_ERROR_RT_MODEL_EXECUTE"),
    "execute_async": ret_code("ACL_ERROR_RT_MODEL_EXECUTE"),
    "load_from_file": ret_code("ACL_ERROR_GE_LOAD_MODEL"),
    "load_from_file_with_mem": ret_code("ACL_ERROR_GE_LOAD_MODEL"),
    "load_from_mem": ret_code("ACL_ERROR_GE_LOAD_MODEL"),
    "synchronize_stream": ret_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
}
OTHER_RET = ret_code("ACL_ERROR_RT_INTERNAL_ERROR")
DEVICE_LOST_RET = ret_code("ACL_ERROR_RT_DRV_INTERNAL_ERROR")

_ENTRY = re.compile(r"^(?P<fn>[a-z_]+):(?P<n>\d+)(?:=(?P<ret>[A-Za-z_0-9]+))?$")


@dataclass(frozen=True)
class Fault:
    """Fail call number ``call`` (1-based) of ``function`` with ``ret``, or lose the device."""

    function: str
    call: int
    ret: int | None = None
    lose_device: bool = False

    def __post_init__(self) -> None:
        if self.function not in DEVICE_CALLS:
            raise ValueError(f"{self.function!r} cannot be faulted; choose one of {', '.join(sorted(DEVICE_CALLS))}")
        if self.call < 1:
            raise ValueError(f"{self.function}: call number {self.call} must be >= 1")
        if self.ret is not None and self.ret not in RET_CODES:
            raise ValueError(
                f"{self.function}: ret {self.ret} is not a code in CANN's headers (ascend/constants.py RET_CODES)"
            )
        if self.ret == 0:
            raise ValueError(f"{self.function}: a fault cannot return success (0)")

    @property
    def code(self) -> int:
        if self.lose_device:
            return DEVICE_LOST_RET
        return self.ret if self.ret is not None else DEFAULT_RETS.get(self.function, OTHER_RET)

    def __str__(self) -> str:
        suffix = "=lost" if self.lose_device else ("" if self.ret is None else f"={self.ret}")
        return f"{self.function}:{self.call}{suffix}"


def _parse_entry(entry: str) -> Fault:
    match = _ENTRY.match(entry)
    if not match:
        raise ValueError(f"fault {entry!r} is not FUNCTION:N, FUNCTION:N=RET or FUNCTION:N=lost")
    raw_ret = match["ret"]
    if raw_ret == "lost":
        return Fault(match["fn"], int(match["n"]), lose_device=True)
    if raw_ret is None:
        ret = None
    elif raw_ret.isdigit():
        ret = int(raw_ret)
    else:
        try:
            ret = ret_code(raw_ret)
        except KeyError:
            raise ValueError(f"fault {entry!r}: {raw_ret!r} is not a ret code name in CANN's headers") from None
    return Fault(match["fn"], int(match["n"]), ret)


@dataclass(frozen=True)
class FaultSchedule:
    """A set of faults; ``FaultSchedule.parse`` reads the compact form."""

    faults: tuple[Fault, ...] = ()

    @classmethod
    def parse(cls, text: str) -> FaultSchedule:
        """Parse the compact form; ValueError names the bad entry and what is accepted."""
        entries = [e for e in re.split(r"[,;\s]+", text.strip()) if e]
        return cls(tuple(_parse_entry(e) for e in entries))

    def __str__(self) -> str:
        return ", ".join(str(f) for f in self.faults)


class FaultState:
    """An installed schedule with its call counters, and whether the device has been lost."""

    def __init__(self, schedule: FaultSchedule | None = None) -> None:
        self.schedule = schedule or FaultSchedule()
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.device_lost = ""

    def lose_device(self, reason: str) -> None:
        self.device_lost = self.device_lost or reason

    def check(self, function: str) -> Fault | None:
        """Count one call of a device function; the fault it triggers, if any."""
        with self._lock:
            self._counts[function] += 1
            number = self._counts[function]
        for fault in self.schedule.faults:
            if fault.function == function and fault.call == number:
                if fault.lose_device:
                    self.lose_device(f"lost at call {number} of {function} (injected fault {fault})")
                return fault
        return None
