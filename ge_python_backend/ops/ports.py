"""Who holds a TCP port: checked before tritonserver starts, and again once it answers.

Linux only (``/proc/net/tcp*`` and ``/proc/<pid>/fd``), like tritonserver itself. A server that
cannot bind a port logs "Socket ... already in use" and exits, but until it has exited another
process already listening there answers the health checks: so the answer only counts when the
listening socket belongs to our process.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from pathlib import Path

PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


def in_use(address: str, port: int) -> bool:
    """Whether something listens on ``port`` where ``address`` would bind (SO_REUSEADDR, as
    servers bind: a port left in TIME_WAIT by a stopped server is free)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return True
    return False


def listening_sockets(port: int) -> set[str] | None:
    """The inodes (as ``socket:[N]``) of sockets listening on ``port``; None if /proc cannot tell."""
    found: set[str] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(f"socket:[{fields[9]}]")
    return found if readable else None


def holds(pid: int, sockets: set[str]) -> bool:
    """Whether process ``pid`` has one of ``sockets`` open."""
    with contextlib.suppress(OSError):
        for fd in (PROC / str(pid) / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in sockets:
                    return True
    return False


def holders(port: int) -> list[str]:
    """'pid N (name)' of every process listening on ``port`` that this user may see."""
    sockets = listening_sockets(port) or set()
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and sockets and holds(int(entry.name), sockets):
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                name = "?"
            found.append(f"pid {entry.name} ({name})")
    return found


def is_loopback(host: str) -> bool:
    """Whether an address to bind to is loopback only (``localhost``, 127.0.0.0/8, ``::1``)."""
    address = host.strip("[]")
    try:
        return address == "localhost" or ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
