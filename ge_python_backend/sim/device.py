"""The modelled NPU: one per device id, shared by every stream of every process that uses it.

An Ascend device's AI Cores are one resource for all its streams and processes: the task
scheduler dispatches a kernel when its unit is idle and its core count is met, kernels of several
streams and contexts run at once on idle cores, nothing is preempted, and streams run in parallel
only "when the hardware suffices" (hicann/runtime docs/zh/quick_start/Runtime_programming_model.md
151-157, dev_guide/03-01_asynchronous_task_overview.md 25, dev_guide/03-02_stream_management.md 7).
Copies run on DMA engines beside the cores, host-to-device and device-to-host at once (03-01
31-37). This module models that, in modelled time on the host's monotonic clock (one clock for
every process on the host):

- **Cores.** A device has its SoC's AI Core count C (the platform ini's ``ai_core_cnt``,
  ``ascend/limits.py``). An execution asks for ``rate`` cores for ``seconds``: its work is
  ``rate * seconds`` core-seconds. Executions are booked first come, first served on a fluid
  profile of the cores in use over time: each takes, from its ready time on, as many of the cores
  it asks for as earlier bookings left free, and runs slower (or waits) while fewer are free. A
  booking never moves an earlier one, so a model that keeps all C cores busy serializes with
  every other execution on the device, and executions that each need fewer than C/2 run side by
  side. How ``rate`` and ``seconds`` follow from a model and its compiled core count is
  ``execution_demand`` (inferred; see there).
- **Copy engines.** One host-to-device and one device-to-host engine per device, each first come,
  first served, at ``copy_gbps``; they overlap each other and the cores.
- **Sharing.** ``SharedDevice`` keeps the profile in a ``hostshm.SharedRegion`` per device: every
  process of the scope (a tritonserver and its stubs, or ``GE_SHARED_DEVICE_SCOPE``) books on the
  same device. ``StreamDevice`` is the simulator before it: every caller a device of its own
  (``acl_sim_shared_device: false``, for measuring the host alone).
- **Usage.** The device counts the seconds any core was busy (``busy_seconds``), the core-seconds
  used and the executions, which tests and benchmarks read as the reference for measured device
  utilisation.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from abc import ABC, abstractmethod
from bisect import bisect_right
from dataclasses import dataclass
from typing import Literal

from ge_python_backend.hostshm import SharedRegion

#: the clock of modelled time: CLOCK_MONOTONIC, the same in every process of the host
clock = time.monotonic


def wait_until(moment: float) -> None:
    """Sleep (without the GIL) until ``moment`` of modelled time."""
    remaining = moment - clock()
    if remaining > 0:
        time.sleep(remaining)


Direction = Literal["h2d", "d2h"]
#: modelled bandwidth of each copy engine: PCIe 4.0 x16's raw rate per direction (inferred: no official
#: figure for an Atlas card's DMA was found; docs/fidelity.md)
DEFAULT_COPY_GBPS = 31.5
#: bookings are kept this long after their end (a ready time further back is taken as this far back)
HISTORY = 0.5
#: breakpoints of the core profile a device holds at most
MAX_BREAKPOINTS = 16384
_EPS = 1e-9


@dataclass(frozen=True)
class Demand:
    """What one execution asks of the cores: ``rate`` of them for ``seconds`` when it gets them
    all along (its work is ``rate * seconds`` core-seconds); ``capacity`` is the device's count."""

    seconds: float
    rate: float
    capacity: int


@dataclass(frozen=True)
class DeviceUsage:
    """What a device did so far: seconds with any core busy, core-seconds, executions, copy seconds."""

    busy_seconds: float = 0.0
    core_seconds: float = 0.0
    executions: int = 0
    h2d_seconds: float = 0.0
    d2h_seconds: float = 0.0


def execution_demand(
    seconds: float, capacity: int, model_cores: int | None, core_busy: float, launch_share: float
) -> Demand:
    """The demand of an execution that takes ``seconds`` alone on the device with all its
    ``capacity`` cores, for a model compiled to use ``model_cores`` (ATC ``--aicore_num``; None:
    all of them).

    The form is inferred and each part is a parameter: CANN's GE backend says a stream uses every
    core unless the model is compiled with a core limit, that starting a kernel costs more the
    more cores it starts, and that small models and shapes waste cores that a split lets other
    streams use (hicann/triton-inference-server-ge-backend docs/性能调优方法论.md 122-139,
    205-210). So ``seconds`` is split into gaps ``(1 - core_busy)`` in which the cores are idle
    (task dispatch, AI CPU operators, tails between kernels: other streams' kernels use them) and
    busy time ``core_busy``, of which ``launch_share`` grows with the cores started (in
    proportion) and the rest is compute that shrinks with them (in inverse proportion). On k of C
    cores: ``T(k) = seconds * ((1 - core_busy) + core_busy * (launch_share * k/C + (1 - launch_share) * C/k))``,
    with the k cores busy for the busy part of it.
    """
    if seconds <= 0:
        return Demand(0.0, 0.0, capacity)
    cores = capacity if model_cores is None else max(1, min(model_cores, capacity))
    share = cores / capacity
    busy = seconds * core_busy * (launch_share * share + (1.0 - launch_share) / share)
    total = seconds * (1.0 - core_busy) + busy
    return Demand(total, cores * busy / total, capacity)


class CoreProfile:
    """Cores in use over time: ``used[i]`` from ``times[i]`` to ``times[i + 1]``, 0 after the last."""

    def __init__(self, times: list[float] | None = None, used: list[float] | None = None) -> None:
        self.times = times or []
        self.used = used or []

    def _at(self, t: float) -> int:
        """Index of the breakpoint at ``t``, inserted if missing."""
        i = bisect_right(self.times, t) - 1
        if i >= 0 and self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.used.insert(i + 1, self.used[i] if i >= 0 else 0.0)
        return i + 1

    def book(self, ready: float, demand: Demand) -> tuple[float, float]:
        """Book ``demand`` from ``ready`` on, after every earlier booking: (first core, end)."""
        if demand.seconds <= 0 or demand.rate <= 0:
            return ready, ready + max(demand.seconds, 0.0)
        rate = min(demand.rate, demand.capacity)
        work = rate * demand.seconds
        times, used = self.times, self.used
        i = bisect_right(times, ready) - 1
        t, begin, end = ready, None, math.inf
        takes: list[tuple[float, float, float]] = []
        while True:
            seg_end = times[i + 1] if i + 1 < len(times) else math.inf
            take = min(rate, demand.capacity - (used[i] if i >= 0 else 0.0))
            if take > _EPS:
                begin = t if begin is None else begin
                if t + work / take <= seg_end + _EPS:  # done in this segment (rounding at its end included)
                    end = min(t + work / take, seg_end)
                    takes.append((t, end, take))
                    break
                takes.append((t, seg_end, take))
                work -= take * (seg_end - t)
            t, i = seg_end, i + 1
        for start, stop, take in takes:
            first, last = self._at(start), self._at(stop)
            for j in range(first, last):
                self.used[j] += take
        self._merge()
        assert begin is not None
        return begin, end

    def _merge(self) -> None:
        times: list[float] = []
        used: list[float] = []
        for t, u in zip(self.times, self.used):
            if used and abs(used[-1] - u) <= _EPS:
                continue
            times.append(t)
            used.append(u)
        self.times, self.used = times, used

    def busy_between(self, start: float, stop: float) -> tuple[float, float]:
        """(seconds with any core busy, core-seconds) between ``start`` and ``stop``."""
        busy = cores = 0.0
        for i, t in enumerate(self.times):
            seg_end = self.times[i + 1] if i + 1 < len(self.times) else math.inf
            a, b = max(t, start), min(seg_end, stop)
            if b > a and self.used[i] > _EPS:
                busy += b - a
                cores += self.used[i] * (b - a)
        return busy, cores

    def forget_before(self, t: float) -> None:
        """Drop what lies before ``t`` (the caller counted it)."""
        i = bisect_right(self.times, t) - 1
        if i > 0:
            del self.times[:i]
            del self.used[:i]
        if self.times and self.times[0] < t:
            self.times[0] = t


class Device(ABC):
    """A modelled device: cores and copy engines (the interface of both kinds)."""

    @abstractmethod
    def execute(self, ready: float, demand: Demand) -> tuple[float, float]:
        """Book an execution ready at ``ready``: (when its first core starts, when it ends)."""

    @abstractmethod
    def copy(self, ready: float, size: int, direction: Direction, gbps: float) -> float:
        """Book a copy of ``size`` bytes ready at ``ready``: when it ends."""

    @abstractmethod
    def usage(self) -> DeviceUsage:
        """What the device did so far."""

    def close(self) -> None:  # noqa: B027 - a device of one process holds nothing to let go of
        """Let go of shared state (the device is modelled on, by whoever still uses it)."""


def copy_seconds(size: int, gbps: float) -> float:
    return size / (gbps * 1e9) if gbps > 0 else 0.0


class StreamDevice(Device):
    """Every caller has the device to itself: no queueing for cores or copy engines (the simulator
    before the shared device; the host measured alone)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage = DeviceUsage()

    def execute(self, ready: float, demand: Demand) -> tuple[float, float]:
        with self._lock:
            u = self._usage
            self._usage = DeviceUsage(
                u.busy_seconds + demand.seconds,
                u.core_seconds + demand.rate * demand.seconds,
                u.executions + 1,
                u.h2d_seconds,
                u.d2h_seconds,
            )
        return ready, ready + demand.seconds

    def copy(self, ready: float, size: int, direction: Direction, gbps: float) -> float:
        return ready + copy_seconds(size, gbps)

    def usage(self) -> DeviceUsage:
        with self._lock:
            return self._usage


_MAGIC = b"GESIMDEV"
_VERSION = 1
#: magic, version, breakpoints, h2d free at, d2h free at, history start, busy and core-seconds
#: before it, h2d and d2h seconds, executions
_HEADER = struct.Struct("<8sIIdddddddQ")
_POINT = struct.Struct("<dd")
REGION_SIZE = _HEADER.size + MAX_BREAKPOINTS * _POINT.size


class DeviceFull(RuntimeError):
    """More bookings ahead than the shared profile holds."""


class SharedDevice(Device):
    """The device ``device_id`` of this process's scope, shared with every process in it."""

    def __init__(self, device_id: int, scope: str | None = None) -> None:
        self.device_id = device_id
        self._region = SharedRegion(f"sim-device{device_id}", REGION_SIZE, scope)

    def _load(self, view: memoryview) -> tuple[list, CoreProfile]:
        head = list(_HEADER.unpack_from(view, 0))
        if head[0] != _MAGIC or head[1] != _VERSION:
            head = [_MAGIC, _VERSION, 0, 0.0, 0.0, clock() - HISTORY, 0.0, 0.0, 0.0, 0.0, 0]
        count = head[2]
        flat = struct.unpack_from(f"<{2 * count}d", view, _HEADER.size) if count else ()
        return head, CoreProfile(list(flat[0::2]), list(flat[1::2]))

    def _store(self, view: memoryview, head: list, profile: CoreProfile) -> None:
        count = len(profile.times)
        if count > MAX_BREAKPOINTS:
            raise DeviceFull(f"device {self.device_id}: {count} breakpoints ahead, the model holds {MAX_BREAKPOINTS}")
        head[2] = count
        _HEADER.pack_into(view, 0, *head)
        flat = [v for pair in zip(profile.times, profile.used) for v in pair]
        struct.pack_into(f"<{2 * count}d", view, _HEADER.size, *flat)

    @staticmethod
    def _advance(head: list, profile: CoreProfile, now: float) -> None:
        """Move the history start to ``now - HISTORY``, counting what falls out of it."""
        start = now - HISTORY
        if start <= head[5]:
            return
        busy, cores = profile.busy_between(head[5], start)
        head[6] += busy
        head[7] += cores
        head[5] = start
        profile.forget_before(start)

    def execute(self, ready: float, demand: Demand) -> tuple[float, float]:
        if demand.seconds <= 0:  # no modelled device time: nothing to book
            return ready, ready
        with self._region.locked() as view:
            head, profile = self._load(view)
            self._advance(head, profile, clock())
            booked = profile.book(max(ready, head[5]), demand)
            head[10] += 1
            self._store(view, head, profile)
        return booked

    def copy(self, ready: float, size: int, direction: Direction, gbps: float) -> float:
        seconds = copy_seconds(size, gbps)
        if seconds <= 0:
            return ready
        free, total = (3, 8) if direction == "h2d" else (4, 9)
        with self._region.locked() as view:
            head, profile = self._load(view)
            end = max(ready, head[free]) + seconds
            head[free] = end
            head[total] += seconds
            self._store(view, head, profile)
        return end

    def usage(self) -> DeviceUsage:
        """What the device did until now (bookings ahead of now not yet counted)."""
        with self._region.locked() as view:
            head, profile = self._load(view)
        busy, cores = profile.busy_between(head[5], clock())
        return DeviceUsage(head[6] + busy, head[7] + cores, head[10], head[8], head[9])

    def close(self) -> None:
        self._region.close()
