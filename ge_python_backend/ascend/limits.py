"""Ascend SoCs: their short SoC version and NPU architecture, the streams and events one device
offers, and the streams a process holds before it creates any.

SoC names (what ``acl.get_soc_name`` answers) come from CANN's platform files: every
``hicann/runtime src/platform/platform_config/cann/*.ini`` and ``cann-dev/*.ini`` has, in its
``[version]`` section, ``SoC_version`` (line 5), ``Short_SoC_version`` (line 6) and ``NpuArch``
(lines 11-14). The runtime reads NpuArch from there (``rtGetSocSpec("version", "NpuArch")``,
hicann/ge api/acl/acl_model/model/model_common.cpp:545-552); set_input_aipp keys its rules by it.

Limits from hicann/runtime docs/zh/api_ref/06_stream_management.md 81-96 (aclrtCreateStream: "if
streams already exist, the default stream included, you can create only max - existing") and
07_event_management.md 81-107 (aclrtCreateEvent). Exceeding them fails with 207008
ACL_ERROR_RT_NO_STREAM_RESOURCE / 207007 ACL_ERROR_RT_NO_EVENT_RESOURCE. The docs name products
(Atlas A2, the Atlas inference series, ...), not SoCs: which short SoC version each product is
(``_FAMILIES``) is inferred from the product names; no mirrored file maps them.

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

#: Short_SoC_version -> NpuArch, as every platform ini of that short version gives it
NPU_ARCH: dict[str, int] = {
    "Ascend031": 3004,
    "Ascend035": 3505,
    "Ascend310B": 3002,
    "Ascend310P": 2002,
    "Ascend350": 3510,
    "Ascend910": 1001,
    "Ascend910B": 2201,
    "Ascend910_93": 2201,
    "Ascend950": 3510,
}

_SOCS_BY_SHORT: dict[str, tuple[str, ...]] = {
    "Ascend031": ("Ascend031",),
    "Ascend035": ("Ascend035", "Ascend035A", "Ascend035B"),
    "Ascend310B": ("Ascend310B1", "Ascend310B2", "Ascend310B3", "Ascend310B4"),
    "Ascend310P": ("Ascend310P1", "Ascend310P3", "Ascend310P5", "Ascend310P7"),
    "Ascend350": ("Ascend350_354f", "Ascend350_355e"),
    # Ascend910B.ini is SoC_version=Ascend910B, Short_SoC_version=Ascend910, NpuArch=1001
    "Ascend910": ("Ascend910A", "Ascend910B", "Ascend910PremiumA", "Ascend910ProA", "Ascend910ProB"),
    "Ascend910B": ("Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4", "Ascend910B4-1"),
    "Ascend910_93": tuple(f"Ascend910_93{n}" for n in ("62", "63", "72", "81", "82", "91", "92")),
    "Ascend950": tuple(
        f"Ascend950DT_{n}"
        for n in (
            "950x", "950y", "9571", "9572", "9573", "9574", "9575", "9576", "9577", "9578", "9581", "9581x",
            "9582", "9582x", "9583", "9584", "9585", "9586", "9587", "9588", "9591", "9592", "9595", "9596",
            "95A1", "95A2",
        )
    )
    + tuple(
        f"Ascend950PR_{n}" for n in ("950z", "9579", "957b", "957bx", "957c", "957d", "9589", "958b", "9599")
    ),
}  # fmt: skip
#: SoC_version -> Short_SoC_version of every platform ini in the mirror
SOC_VERSIONS: dict[str, str] = {soc: short for short, socs in _SOCS_BY_SHORT.items() for soc in socs}


def short_soc_version(soc_name: str | None) -> str | None:
    """The Short_SoC_version of ``soc_name``: from its platform ini; for a name no ini has, the
    longest short version it starts with (inferred: a newer SoC of a known family); else None."""
    if not soc_name:
        return None
    if soc_name in SOC_VERSIONS:
        return SOC_VERSIONS[soc_name]
    for short in sorted(NPU_ARCH, key=len, reverse=True):
        if soc_name.startswith(short):
            return short
    return None


def npu_arch(soc_name: str | None) -> int | None:
    """The NpuArch of ``soc_name`` (1001, 2002, 2201, 3002, 3510, ...), None when unknown."""
    short = short_soc_version(soc_name)
    return NPU_ARCH.get(short) if short is not None else None


def platform_npu_arch(soc_name: str | None) -> int | None:
    """The NpuArch the platform file named ``soc_name`` gives, None when no platform file has that
    name (no inference from a prefix: the runtime looks names up exactly)."""
    return NPU_ARCH.get(SOC_VERSIONS.get(soc_name or "", ""))


def arch_compatible(model_soc: str, device_soc: str) -> bool | None:
    """Whether a model compiled for ``model_soc`` (its ``--soc_version``) loads on a ``device_soc``
    device, as CANN decides it: the load checks the model's soc_version with
    aclrtCheckArchCompatibility (hicann/ge base/common/helper/om_file_helper.cc:259-287; an empty
    soc_version skips the check), which compares the NpuArch the platform file of each name gives
    and fails for a name no platform file has (hicann/runtime src/runtime/api/impl/api_impl.cc:6245-6269,
    src/runtime/core/src/common/soc_info.cc:58-75: GetSocSpec looks the name up exactly). None: the
    check is skipped (no soc_version); otherwise True only for two known names of one NpuArch."""
    if not model_soc:
        return None
    model_arch = platform_npu_arch(model_soc)
    return model_arch is not None and model_arch == platform_npu_arch(device_soc)


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


#: Short_SoC_version -> limits of the product the docs name (the mapping is inferred, see above)
_FAMILIES = {
    "Ascend910_93": DeviceLimits("Atlas A3", 1984, 65536),
    "Ascend910B": DeviceLimits("Atlas A2", 1984, 65536),
    "Ascend950": DeviceLimits("Ascend 950", 1984, 65536),
    "Ascend910": DeviceLimits("Atlas training series", 2048, 65535),
    "Ascend310P": DeviceLimits("Atlas inference series (310P)", 1024, 1023, ep_context_streams=2),
    "Ascend310B": DeviceLimits("Atlas 200I/500 A2", 512, 65536),
}


def device_limits(soc_name: str | None) -> DeviceLimits | None:
    """The limits of ``soc_name`` (acl.get_soc_name), None when the docs give none for it."""
    short = short_soc_version(soc_name)
    return _FAMILIES.get(short) if short is not None else None


_AI_CORES_BY_COUNT: dict[int, tuple[str, ...]] = {
    1: ("Ascend031", "Ascend035", "Ascend035A", "Ascend035B")
    + ("Ascend310B1", "Ascend310B2", "Ascend310B3", "Ascend310B4"),
    4: ("Ascend950PR_950z",),
    8: ("Ascend310P3", "Ascend310P5", "Ascend310P7", "Ascend950DT_950x", "Ascend950DT_950y"),
    10: ("Ascend310P1",),
    14: ("Ascend350_354f",),
    16: ("Ascend350_355e",),
    20: ("Ascend910B3", "Ascend910B4", "Ascend910B4-1", "Ascend910_9362", "Ascend910_9363", "Ascend910_9372"),
    24: ("Ascend910B1", "Ascend910B2", "Ascend910B2C")
    + ("Ascend910_9381", "Ascend910_9382", "Ascend910_9391", "Ascend910_9392"),
    28: tuple(f"Ascend950DT_957{n}" for n in "12345678")
    + tuple(f"Ascend950PR_{n}" for n in ("9579", "957b", "957bx", "957c", "957d")),
    30: ("Ascend910B", "Ascend910ProB"),
    32: ("Ascend910A", "Ascend910PremiumA", "Ascend910ProA", "Ascend950PR_9589", "Ascend950PR_958b")
    + tuple(f"Ascend950DT_958{n}" for n in ("1", "1x", "2", "2x", "3", "4", "5", "6", "7", "8")),
    36: ("Ascend950PR_9599",) + tuple(f"Ascend950DT_95{n}" for n in ("91", "92", "95", "96", "A1", "A2")),
}  # fmt: skip
#: SoC_version -> AI Cores (Cube Cores where the SoC splits them: 910B, A3, 950): ``ai_core_cnt`` in the
#: ``[SoCInfo]`` section of its platform ini (hicann/runtime src/platform/platform_config/cann/*.ini and
#: cann-dev/*.ini, lines 15-22; e.g. Ascend310P3.ini:16). What a model compiled without --aicore_num runs on.
AI_CORES: dict[str, int] = {soc: count for count, socs in _AI_CORES_BY_COUNT.items() for soc in socs}


def ai_cores(soc_name: str | None) -> int | None:
    """The AI Core count of ``soc_name`` (acl.get_soc_name), None for a SoC no platform ini names."""
    return AI_CORES.get(soc_name or "")
