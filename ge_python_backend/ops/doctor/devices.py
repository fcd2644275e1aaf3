"""What pyACL says about the devices: its version, the run mode, the device count and, per device,
the SoC, free and total memory, the SoC's stream and event limits and the streams still free.

The module object is whatever the engine's registry entry loads (CANN's pyACL for ``acl``, the
simulator's for ``acl-sim``); nothing is loaded onto a device. pyACL is initialised for the
queries (``initialised``) and finalized again unless something else in the process had initialised it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ge_python_backend.ascend.constants import ACL_DEVICE, ACL_HBM_MEM, ACL_SUCCESS, describe_ret
from ge_python_backend.ascend.limits import DeviceLimits, device_limits, platform_npu_arch
from ge_python_backend.engines.acl.engine import size_text
from ge_python_backend.engines.acl.runtime import REPEAT_INITIALIZE, log_failure
from ge_python_backend.ops.doctor.findings import Finding, error, ok, warn


@dataclass(frozen=True)
class DeviceFacts:
    device: int
    soc: str | None
    free: int | None
    total: int | None
    #: get_stream_available_num: streams still free on the device (None: not asked)
    streams_free: int | None
    limits: DeviceLimits | None


@dataclass(frozen=True)
class RuntimeFacts:
    """What pyACL answered: devices by id, the run mode (True: ACL_DEVICE)."""

    devices: dict[int, DeviceFacts]
    device_mode: bool


def _version(acl: Any) -> str:
    try:
        major, minor, patch, ret = acl.get_version()
    except Exception as exc:  # an old binding may lack it
        return f"unknown ({exc!r})"
    return f"{major}.{minor}.{patch}" if ret == ACL_SUCCESS else f"unknown ({describe_ret(ret)})"


@contextlib.contextmanager
def initialised(acl: Any) -> Iterator[Finding | None]:
    """pyACL initialised for the queries (None), or the finding that says why it is not; finalized
    again at exit unless something else in the process had initialised it."""
    ret = acl.init()
    if ret not in (ACL_SUCCESS, REPEAT_INITIALIZE):
        yield error("pyacl", f"acl.init returned {describe_ret(ret)}", "check the CANN install and the driver")
        return
    try:
        yield None
    finally:
        if ret == ACL_SUCCESS:
            log_failure(acl, acl.finalize(), "acl.finalize")


def pyacl_devices(acl: Any, engine: str, devices: Sequence[int] | None) -> tuple[list[Finding], RuntimeFacts | None]:
    """Findings about pyACL (initialised) and each device (``devices``: None for every device it sees)."""
    count, ret = acl.rt.get_device_count()
    if ret != ACL_SUCCESS:
        return [
            error(
                "pyacl",
                f"acl.rt.get_device_count returned {describe_ret(ret)}",
                "check the driver (npu-smi info) and the device nodes",
            )
        ], None
    mode, ret = acl.rt.get_run_mode()
    device_mode = ret == ACL_SUCCESS and int(mode) == ACL_DEVICE
    where = "on the device (ACL_DEVICE)" if device_mode else "on a host with a PCIe card (ACL_HOST)"
    findings = [
        ok(
            "pyacl",
            f"engine {engine}: pyACL {_version(acl)}, {count} device(s), the application runs {where}",
            devices=count,
            device_mode=device_mode,
        )
    ]
    wanted = list(devices) if devices is not None else list(range(count))
    found = {}
    for device in wanted:
        if device >= count:
            findings.append(
                error(
                    f"device-{device}",
                    f"pyACL sees {count} device(s), not device {device}",
                    "check parameter device_ids and ASCEND_VISIBLE_DEVICES",
                )
            )
            continue
        finding, facts = _device(acl, device)
        findings.append(finding)
        if facts is not None:
            found[device] = facts
    return findings, RuntimeFacts(found, device_mode)


def _device(acl: Any, device: int) -> tuple[Finding, DeviceFacts | None]:
    ret = acl.rt.set_device(device)
    if ret != ACL_SUCCESS:
        return error(
            f"device-{device}",
            f"acl.rt.set_device({device}) returned {describe_ret(ret)}",
            "another process may hold it exclusively; check npu-smi info",
        ), None
    try:
        soc = acl.get_soc_name()
        free, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
        memory = (int(free), int(total)) if ret == ACL_SUCCESS else (None, None)
        streams_free = None
        if hasattr(acl.rt, "get_stream_available_num"):
            available, ret = acl.rt.get_stream_available_num()
            streams_free = int(available) if ret == ACL_SUCCESS else None
    finally:
        log_failure(acl, acl.rt.reset_device(device), "acl.rt.reset_device")
    limits = device_limits(soc)
    facts = DeviceFacts(device, soc, memory[0], memory[1], streams_free, limits)
    arch = platform_npu_arch(soc)
    shown = {"soc": soc, "free": memory[0], "total": memory[1], "streams_free": streams_free}
    mib = (
        f"{size_text(memory[0])} free of {size_text(memory[1] or 0)}"
        if memory[0] is not None
        else "memory unknown (get_mem_info failed)"
    )
    if limits is None:
        return warn(
            f"device-{device}",
            f"{soc}: {mib}; no stream or event limits are known for this SoC",
            "the engine then checks none; report the SoC name",
            **shown,
        ), facts
    known = f"NpuArch {arch}" if arch is not None else "a SoC CANN's platform files of our tables do not name"
    message = (
        f"{soc} ({limits.family}, {known}): {mib}; {limits.streams} streams and {limits.events} events per "
        f"device" + (f", {streams_free} streams free" if streams_free is not None else "")
    )
    return ok(f"device-{device}", message, **shown), facts
