"""Simulated device memory and real pinned host memory.

In host run mode (a PCIe card, ACL_HOST) device memory lives in Python bytearrays behind
addresses in a range the host cannot dereference (x86-64 non-canonical addresses: touching one
through ctypes faults at once), so only memcpy/memset/execute can move data in or out. Those
addresses are never reused, so a use after free is always recognised. In device run mode
(ACL_DEVICE: the application runs on the device, where "Host and Device are one",
11-02_host_memory_management.md 71-78) device memory is real, addressable memory; freed blocks
are held back like host blocks so a use after free is still recognised.

Host memory from ``malloc_host`` is real, 64-byte aligned memory (not aligned in device run mode)
whose address the caller may wrap with ctypes/numpy; freed blocks are held back from the
process for a while (``HOST_QUARANTINE`` bytes of the latest frees), so a copy from or into one
is recognised as a use after free instead of touching memory Python may have reused.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

from ge_python_backend.ascend.constants import ret_code
from ge_python_backend.sim.signature import AclFail

DEVICE_BASE = 0x4000_0000_0000_0000
DEVICE_SPAN = 1 << 60
_PAGE = 4096
HOST_ALIGN = 64
#: Bytes of freed malloc_host blocks kept reserved (oldest released first).
HOST_QUARANTINE = 64 << 20

INVALID_PARAM = ret_code("ACL_ERROR_INVALID_PARAM")


def is_device_address(addr: int) -> bool:
    return DEVICE_BASE <= addr < DEVICE_BASE + DEVICE_SPAN


@dataclass
class DeviceBlock:
    addr: int
    size: int
    device: int
    data: bytearray | memoryview
    #: device run mode: the ctypes memory behind ``data``
    raw: ctypes.Array | None = None


@dataclass
class HostBlock:
    addr: int
    size: int
    raw: ctypes.Array


class DeviceMemory:
    """Every device allocation ever made (live ones keep their bytes); ``addressable`` in device run
    mode. aclrtMalloc's start is 64-byte aligned (11-01_device_memory_malloc_and_free.md 53)."""

    def __init__(self, addressable: bool = False, quarantine: int = HOST_QUARANTINE) -> None:
        self.addressable = addressable
        self._next = DEVICE_BASE
        self._starts: list[int] = []
        self._sizes: list[int] = []
        self.live: dict[int, DeviceBlock] = {}
        self._held: dict[int, DeviceBlock] = {}
        self._held_bytes = 0
        self._quarantine = quarantine

    def allocate(self, size: int, device: int) -> DeviceBlock:
        if self.addressable:
            raw = (ctypes.c_char * (size + HOST_ALIGN))()
            addr = (ctypes.addressof(raw) + HOST_ALIGN - 1) // HOST_ALIGN * HOST_ALIGN
            offset = addr - ctypes.addressof(raw)
            data: bytearray | memoryview = memoryview(raw).cast("B")[offset : offset + size]
            data[:] = b"\xa5" * size
            block = DeviceBlock(addr, size, device, data, raw)
        else:
            addr = self._next
            self._next += (size + _PAGE - 1) // _PAGE * _PAGE + _PAGE  # a guard page between blocks
            # Fresh device memory holds garbage, not zeros: reading it before writing shows up.
            block = DeviceBlock(addr, size, device, bytearray(b"\xa5") * size)
        i = bisect.bisect_left(self._starts, addr)
        self._starts.insert(i, addr)
        self._sizes.insert(i, size)
        self.live[addr] = block
        return block

    def contains(self, addr: int) -> bool:
        """``addr`` is (or was, and is still held) device memory."""
        if not self.addressable:
            return is_device_address(addr)
        return self._history(addr) is not None

    def _history(self, addr: int) -> tuple[int, int] | None:
        """(start, size) of the allocation, live or freed, that contains ``addr``."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._starts[i] + max(self._sizes[i], 1):
            return self._starts[i], self._sizes[i]
        return None

    def free(self, addr: int) -> DeviceBlock:
        block = self.live.pop(addr, None)
        if block is not None:
            if self.addressable:
                self._hold(block)
            return block
        known = self._history(addr)
        if known and known[0] == addr:
            raise AclFail(INVALID_PARAM, f"double free of device address {addr:#x} ({known[1]} bytes)")
        if known:
            raise AclFail(INVALID_PARAM, f"{addr:#x} is inside the allocation at {known[0]:#x}, not its start")
        raise AclFail(INVALID_PARAM, f"{addr:#x} was never returned by acl.rt.malloc")

    def _hold(self, block: DeviceBlock) -> None:
        """Device run mode: keep a freed block's memory (and its history) until the quarantine is
        full; then release the oldest and forget its range, which the process may reuse."""
        self._held[block.addr] = block
        self._held_bytes += block.size
        while self._held_bytes > self._quarantine:
            oldest = self._held.pop(next(iter(self._held)))
            self._held_bytes -= oldest.size
            i = bisect.bisect_left(self._starts, oldest.addr)
            del self._starts[i], self._sizes[i]

    def locate(self, addr: int, count: int, what: str) -> tuple[DeviceBlock, int]:
        """The live block holding ``count`` bytes at ``addr`` and the offset into it."""
        known = self._history(addr)
        if known is None:
            raise AclFail(INVALID_PARAM, f"{what}: device address {addr:#x} is not in any allocation")
        start, size = known
        block = self.live.get(start)
        if block is None:
            raise AclFail(
                INVALID_PARAM,
                f"{what}: device address {addr:#x} is in the allocation at {start:#x}, "
                f"which was freed (use after free)",
            )
        offset = addr - start
        if offset + count > size:
            raise AclFail(
                INVALID_PARAM,
                f"{what}: {count} bytes at {addr:#x} run past the end of the "
                f"{size}-byte allocation at {start:#x} (offset {offset})",
            )
        return block, offset

    def used(self, device: int) -> int:
        return sum(b.size for b in self.live.values() if b.device == device)


class HostMemory:
    """Live ``malloc_host`` blocks (real memory), the addresses already freed, and the freed blocks
    still held in quarantine (in the order they were freed)."""

    def __init__(self, quarantine: int = HOST_QUARANTINE) -> None:
        self.live: dict[int, HostBlock] = {}
        self._freed: set[int] = set()
        self._quarantine = quarantine
        self._held: dict[int, HostBlock] = {}
        self._held_starts: list[int] = []
        self._held_bytes = 0

    def allocate(self, size: int, offset: int = 0) -> HostBlock:
        """``size`` bytes starting ``offset`` bytes past a 64-byte boundary."""
        raw = (ctypes.c_char * (size + 2 * HOST_ALIGN))()
        addr = (ctypes.addressof(raw) + HOST_ALIGN - 1) // HOST_ALIGN * HOST_ALIGN + offset
        block = HostBlock(addr, size, raw)
        self.live[addr] = block
        self._freed.discard(addr)
        return block

    def free(self, addr: int) -> None:
        block = self.live.pop(addr, None)
        if block is not None:
            self._freed.add(addr)
            self._hold(block)
            return
        if addr in self._freed:
            raise AclFail(INVALID_PARAM, f"double free of host address {addr:#x}")
        raise AclFail(INVALID_PARAM, f"{addr:#x} was never returned by acl.rt.malloc_host")

    def _hold(self, block: HostBlock) -> None:
        """Keep a freed block's memory reserved; release the oldest beyond the quarantine size."""
        self._held[block.addr] = block
        bisect.insort(self._held_starts, block.addr)
        self._held_bytes += block.size
        while self._held_bytes > self._quarantine:
            oldest = self._held.pop(next(iter(self._held)))
            del self._held_starts[bisect.bisect_left(self._held_starts, oldest.addr)]
            self._held_bytes -= oldest.size

    def freed_block(self, addr: int, count: int) -> HostBlock | None:
        """The freed (quarantined) block that ``count`` bytes at ``addr`` overlap, if any."""
        i = bisect.bisect_right(self._held_starts, addr + max(count, 1) - 1) - 1
        if i < 0:
            return None
        block = self._held[self._held_starts[i]]
        return block if addr < block.addr + block.size else None

    def check_not_freed(self, addr: int, count: int, what: str) -> None:
        block = self.freed_block(addr, count)
        if block is not None:
            raise AclFail(
                INVALID_PARAM,
                f"{what}: host range {addr:#x}+{count} is in the {block.size}-byte "
                f"malloc_host block at {block.addr:#x}, which was freed (use after free)",
            )

    def find(self, addr: int, count: int) -> HostBlock | None:
        """The live block holding ``count`` bytes at ``addr``."""
        for block in self.live.values():
            if block.addr <= addr and addr + count <= block.addr + block.size:
                return block
        return None

    def pinned(self, addr: int, count: int, what: str) -> bool:
        """Whether the host range is malloc_host memory; AclFail when it starts in a pinned block
        and runs past its end."""
        if self.find(addr, count) is not None:
            return True
        inside = next((b for b in self.live.values() if b.addr <= addr < b.addr + b.size), None)
        if inside is not None:
            raise AclFail(
                INVALID_PARAM,
                f"{what}: host range {addr:#x}+{count} runs past the end of the {inside.size}-byte pinned block "
                f"at {inside.addr:#x}",
            )
        return False


def read_host(addr: int, count: int) -> bytes:
    return ctypes.string_at(addr, count)


def write_host(addr: int, data: bytes) -> None:
    ctypes.memmove(addr, data, len(data))
