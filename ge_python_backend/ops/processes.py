"""A tritonserver's Python backend stub processes, and what a process holds, read from /proc.

tritonserver starts each model instance's stub as ``bash -c "exec <stub> <model_path> <shm region>
<shm default> <shm growth> <server pid> <python lib> <ipc handle> <instance name> <runtime dir>"``
(python_backend r24.02 and r24.10 ``src/stub_launcher.cc`` ``StubLauncher::Launch``), so the stub
is a child of tritonserver and its command line names it. ``model_path`` is the model folder, the
version and the model file (``default_model_filename``, else ``model.py``, whether or not it
exists: Python-based backends such as ``ge`` get it too; ``StubLauncher::Initialize``), and a
model's folder is named after the model (tritonserver refuses another name).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
STUB_BINARY = "triton_python_backend_stub"
#: argv positions of StubLauncher::Launch's command line
_MODEL_PATH, _INSTANCE = 1, 8


@dataclass(frozen=True)
class Stub:
    """One stub process: the model version and instance it runs, and when it started."""

    pid: int
    model: str
    version: str
    instance: str
    #: clock ticks after boot (/proc/PID/stat field 22): a reused pid, and which stub is newer
    started: int

    @property
    def key(self) -> tuple[str, str, str]:
        return self.model, self.version, self.instance

    def describe(self) -> str:
        return f"stub of instance {self.instance} (pid {self.pid})"


def _stat_fields(pid: int | str, proc: Path) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (field 3 first), None if the process is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def running(pid: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    fields = _stat_fields(pid, proc)
    return fields is not None and fields[0] != "Z"


def reap_adopted(keep: int | None, proc: Path = PROC) -> list[int]:
    """Reap this process's ended children except ``keep`` (whose status its owner waits for); the
    pids reaped. For a process that is PID 1 (serve in a container): the kernel hands it every
    orphan, e.g. the lifeline of a stub that died, and nothing else would reap them."""
    me = os.getpid()
    reaped = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == keep:
            continue
        fields = _stat_fields(entry.name, proc)
        if fields is not None and fields[0] == "Z" and int(fields[1]) == me:
            try:
                if os.waitpid(int(entry.name), os.WNOHANG)[0]:
                    reaped.append(int(entry.name))
            except ChildProcessError:
                continue
    return reaped


def stubs_of(server_pid: int, proc: Path = PROC) -> list[Stub]:
    """Every Python backend stub whose parent is ``server_pid``, by pid."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name, proc)
        if fields is None or int(fields[1]) != server_pid:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) <= _INSTANCE or not argv[0].endswith(STUB_BINARY.encode()):
            continue
        model_path = Path(os.fsdecode(argv[_MODEL_PATH]))
        found.append(
            Stub(
                pid=int(entry.name),
                model=model_path.parent.parent.name,
                version=model_path.parent.name,
                instance=os.fsdecode(argv[_INSTANCE]),
                started=int(fields[19]),
            )
        )
    return sorted(found, key=lambda stub: stub.pid)


@dataclass(frozen=True)
class Usage:
    """What one process holds: resident memory, open file descriptors, threads."""

    rss_bytes: int
    fds: int
    threads: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.rss_bytes + other.rss_bytes, self.fds + other.fds, self.threads + other.threads)


NOTHING = Usage(0, 0, 0)


def usage(pid: int, proc: Path = PROC) -> Usage | None:
    """The process's usage now; None if it is gone (or not ours to read)."""
    try:
        status = (proc / str(pid) / "status").read_text()
        fds = len(os.listdir(proc / str(pid) / "fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields.get("VmRSS", "0 kB").split()[0])
    return Usage(rss_kib * 1024, fds, int(fields["Threads"]))
