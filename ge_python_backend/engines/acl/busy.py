"""Device-busy seconds: the time a device spent running executions, counted once however many
instances (processes) run on it.

An execution's device interval is known from the timing events around it (execute starts after
its host-to-device copies; its end is the stream's end less the copy back) and the host's clock
at the wait that returned: on a device shared by several instances, a queued execution's
interval includes the time it waited for the one before it (a stream reaches the execute task,
then the task waits for the cores: Runtime_programming_model.md 150-163). Counting each
interval in full would count that wait twice, so every process of the scope (``hostshm``: a
tritonserver and its stubs) adds to one "covered until" time per device, and each execution
counts only what lies beyond it. Summed over the instances, the counts are the union of the
intervals: the seconds the device had an execution running, the busy fraction a user wants
(as GPU "utilization" is the time one or more kernels run).

Exact for executions that run one after the other (a model that keeps every core busy); for
executions that run side by side (core limits, gappy models) an interval that ends before an
earlier-counted one is dropped, an undercount. Intervals come from the host's clock after the
wait, so each idle period adds the wait's wake-up latency.
"""

from __future__ import annotations

import logging
import struct
import threading

from ge_python_backend.hostshm import SharedRegion, SharedStateError

LOG = logging.getLogger(__name__)
_COVERED = struct.Struct("<d")


class DeviceBusy:
    """The busy-time union of one device across the processes of the scope."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._covered = 0.0
        self._region: SharedRegion | None = None
        try:
            self._region = SharedRegion(f"busy-device{device_id}", _COVERED.size)
        except SharedStateError as exc:
            LOG.warning(
                "device %d: ge_device_busy_seconds_total counts this process's executions only (%s); where "
                "instances queue behind each other on the device their sum can exceed 1",
                device_id,
                exc,
            )

    def account(self, start: float, end: float) -> float:
        """Seconds of [start, end] (time.monotonic) not counted before on this device."""
        if end <= start:
            return 0.0
        if self._region is None:
            with self._lock:
                busy = max(0.0, end - max(start, self._covered))
                self._covered = max(self._covered, end)
            return busy
        with self._region.locked() as view:
            (covered,) = _COVERED.unpack_from(view, 0)
            busy = max(0.0, end - max(start, covered))
            if end > covered:
                _COVERED.pack_into(view, 0, end)
        return busy

    def close(self) -> None:
        if self._region is not None:
            self._region.close()
            self._region = None
