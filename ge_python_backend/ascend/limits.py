"""Streams and events one Ascend device offers, by SoC family, and the streams a process holds
before it creates any.

From hicann/runtime docs/zh/api_ref/06_stream_management.md 81-96 (aclrtCreateStream: "if streams
already exist, the default stream included, you can create only max - existing") and
07_event_management.md 81-107 (aclrtCreateEvent). Exceeding them fails with 207008
ACL_ERROR_RT_NO_STREAM_RESOURCE / 207007 ACL_ERROR_RT_NO_EVENT_RESOURCE.

Streams nobody creates explicitly (05_context_management.md 67-78, 04_device_management.md 86):
aclrtSetDevice binds one default stream to the device in each process (its default context), and
every aclrtCreateContext context holds a default stream of its own; on the Atlas inference series
(310P) in EP form (a PCIe card in a host: run mode ACL_HOST) it holds two, the default stream and
one for internal synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the stream aclrtSetDevice binds to a device, per process (04_device_management.md 86)
DEVICE_DEFAULT_STREAMS = 1


@dataclass(frozen=True)
class DeviceLimits:
    family: str
    streams: int
    events: int
    #: streams an aclrtCreateContext context holds in EP form (host run mode); 1 in device run mode
    ep_context_streams: int = 1

    def context_streams(self, device_mode: bool) -> int:
        """Streams one created context holds (05_context_management.md 69-73)."""
        return 1 if device_mode else self.ep_context_streams


#: SoC name prefix -> limits (longest prefix first)
_FAMILIES = (
    ("Ascend910_93", DeviceLimits("Atlas A3", 1984, 65536)),
    ("Ascend910B", DeviceLimits("Atlas A2", 1984, 65536)),
    ("Ascend950", DeviceLimits("Ascend 950", 1984, 65536)),
    ("Ascend910", DeviceLimits("Atlas training series", 2048, 65535)),
    ("Ascend310P", DeviceLimits("Atlas inference series (310P)", 1024, 1023, ep_context_streams=2)),
    ("Ascend310B", DeviceLimits("Atlas 200I/500 A2", 512, 65536)),
)


def device_limits(soc_name: str | None) -> DeviceLimits | None:
    """The limits of ``soc_name`` (acl.get_soc_name), None when the docs give none for it."""
    for prefix, limits in _FAMILIES:
        if soc_name and soc_name.startswith(prefix):
            return limits
    return None
