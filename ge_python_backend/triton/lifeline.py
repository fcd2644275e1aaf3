"""A GEModel stub exits when its tritonserver dies, with its device resources released when it can.

Why a stub can outlive its server: the Python backend stub notices a dead parent on a thread of
its own (every 300 ms ``kill(parent, 0)``), then stops its stub-to-parent monitor, which takes the
mutex every message to the parent holds (python_backend r24.10 ``src/pb_stub.cc:2119-2150``,
``:1068-1078``; the same in r24.02 ``:1991-2026``, ``:976-986``, and in r26.07). A metric update
holds that mutex while it waits, with no timeout, for the parent's answer (``pb_stub.h:418-449``
``SendMessage``), and ``Metric.set`` keeps the GIL meanwhile (r24.10 ``src/metric.cc:188-203``;
on r24.02 every metric call does, ``:128-163``). So once the server is gone, GEModel's metrics
thread (one ``set`` a second for the heartbeat) waits forever holding both, the stub's exit path
waits for the mutex, and nothing in the process runs again: every thread in a futex wait. A log
line sent while the server dies does the same (the monitor thread holds the mutex while it waits
for the parent to take the line, ``pb_stub.cc:1090-1156``).

Two guards, so that neither a held GIL nor a held mutex can keep a stub alive:

- ``ServerWatch``, a daemon thread of the stub: every ``POLL_INTERVAL`` it compares the stub's
  parent with the server it started under. Once the server is gone, ``server_gone`` is set (the
  metrics thread and the log bridge send nothing more to it), the model's ``release`` runs on a
  thread of its own for at most ``RELEASE_TIMEOUT`` (batches in flight finish, the engine closes,
  pyACL finalizes: CANN asks for ``aclFinalize`` before a process exits, hicann/runtime
  ``docs/zh/api_ref/02_initialization_and_deinitialization.md:611``), then the process exits with
  ``os._exit(1)`` whether or not the release finished.
- the *lifeline*, a small child process (this file, run by the stub's Python with the standard
  library only): when the stub's parent is no longer the server it started under, it gives the
  stub ``LIFELINE_GRACE`` seconds to exit by itself, then kills it with SIGKILL. It needs neither
  the GIL nor any lock of the stub, so it also ends a stub whose threads are all stuck. It exits
  as soon as the stub does, and the stub ends it on ``finalize``.

The lifeline also removes the stub's shared-memory region (``/dev/shm/<name>``, the stub's third
argument) when the stub ends without finalizing, which nothing else does: tritonserver unlinks a
region when it destroys the model instance, and never destroys the instance of a stub that died
(24.10 keeps it) nor, when tritonserver itself died, anything. Measured before: 16 MiB
(``shm-default-byte-size``) of /dev/shm, which is memory, left for good per killed stub and per
stub of a killed server. It removes a region when the server is gone, or when the stub died under
a live server and the region's name is a UUID (python_backend r24.05 and later, #351): one no
server creates again. Python backend r24.02 names regions with a counter and, after a stub died,
starts its replacement on the same name from ``execute`` (python_be.cc:2433-2453), so there only
a dead server's regions go; a server started later counts from 1 again, and a region left under
its name makes its stub fail ("Unable to initialize shared memory key").
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

LOG = logging.getLogger(__name__)

#: how often the stub checks its server
POLL_INTERVAL = 0.25
#: longest the release may take once the server is gone; the stub exits after it regardless
RELEASE_TIMEOUT = 2.0
#: the lifeline's wait for the stub to exit by itself before it kills it
LIFELINE_GRACE = RELEASE_TIMEOUT + 1.0
#: how often the lifeline checks the stub and its server
LIFELINE_POLL = 0.5
STUB_EXECUTABLE = "triton_python_backend_stub"
SHM_DIR = Path("/dev/shm")
#: a stub's region: a file name in /dev/shm (the backend's prefix, e.g. triton_python_backend_shm_region_,
#: or what --backend-config=python,shm-region-prefix-name sets, then a counter or a UUID)
_REGION = re.compile(r"\w[\w.-]*")
_UUID_REGION = re.compile(r".*[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

#: set once the server this process was started under is gone: nothing may be sent to it any more
server_gone = threading.Event()
_server_pid = os.getppid()


def server_alive() -> bool:
    """Whether the server this process was started under still runs (its parent is still it)."""
    if server_gone.is_set():
        return False
    return os.getppid() == _server_pid


def in_stub() -> bool:
    """Whether this process is a Python backend stub (not a test process running a harness)."""
    try:
        return Path(os.readlink("/proc/self/exe")).name.startswith(STUB_EXECUTABLE)
    except OSError:
        return False


class ServerWatch:
    """Exits the process once its server is gone (see the module docstring). ``alive``, ``gone``
    and ``exit`` are the check, the flag and the exit of a real stub; tests give their own."""

    def __init__(
        self,
        release: Callable[[], None],
        *,
        alive: Callable[[], bool] = server_alive,
        gone: threading.Event = server_gone,
        exit: Callable[[int], None] = os._exit,
        poll_interval: float = POLL_INTERVAL,
        release_timeout: float = RELEASE_TIMEOUT,
    ) -> None:
        self._release = release
        self._alive = alive
        self._gone = gone
        self._exit = exit
        self._poll_interval = poll_interval
        self._release_timeout = release_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ge-server-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the model is finalized normally)."""
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_interval):
            if not self._alive():
                self._server_died()
                return

    def _server_died(self) -> None:
        self._gone.set()
        releasing = threading.Thread(target=self._release_quietly, name="ge-release", daemon=True)
        releasing.start()
        releasing.join(self._release_timeout)
        self._exit(1)

    def _release_quietly(self) -> None:
        with contextlib.suppress(BaseException):  # nobody is left to tell: the server and its log are gone
            self._release()


def own_region() -> str:
    """This stub's shared-memory region (its third argument); "" outside a stub."""
    if not in_stub():
        return ""
    try:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return os.fsdecode(argv[2]) if len(argv) > 2 else ""


def start_lifeline(
    grace: float = LIFELINE_GRACE, poll: float = LIFELINE_POLL, region: str | None = None
) -> subprocess.Popen | None:
    """Start this process's lifeline (see the module docstring); None, with a warning, when no
    Python interpreter is found to run it. ``region``: the shared-memory region it removes when
    the stub ends without finalizing (default: this stub's own)."""
    python = sys.executable or shutil.which("python3")
    if not python:
        LOG.warning("no Python interpreter to run the lifeline; if tritonserver dies, the stub may outlive it")
        return None
    region = own_region() if region is None else region
    command = [python, "-I", "-S", __file__, str(os.getpid()), str(_server_pid), str(grace), str(poll), region or "-"]
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True
        )
    except OSError as exc:
        LOG.warning("could not start the lifeline (%s); if tritonserver dies, the stub may outlive it", exc)
        return None


def stop_lifeline(process: subprocess.Popen | None) -> None:
    """End the lifeline of a stub that finalizes normally (and reap it)."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid`` (field 4 of /proc/<pid>/stat, after the command in parentheses);
    None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def lifeline(stub: int, server: int, grace: float, poll: float, region: str = "") -> None:
    """The lifeline's loop, in a child of ``stub``: return when the stub is gone; kill it when it
    outlives ``server`` by ``grace`` seconds; remove its shared-memory ``region`` when it ended
    without finalizing (a finalize ends the lifeline first), as the module docstring says.

    The stub is alive exactly while it is this process's parent (a dead process's children are
    reparented at once), so the kill never reaches a process that reused its pid; with a pidfd
    (Linux 5.3) it could not even in between."""
    handle = _pidfd(stub)  # opened before the check below, so it is the stub's if that passes
    while os.getppid() == stub and parent_of(stub) == server:
        time.sleep(poll)
    if os.getppid() != stub:  # the stub is gone: it died, or exited once its server was gone
        if _UUID_REGION.fullmatch(region) or not _running(server):
            remove_region(region)
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and os.getppid() == stub:
        time.sleep(min(poll, 0.1))
    if os.getppid() == stub:
        if handle is not None:
            signal.pidfd_send_signal(handle, signal.SIGKILL)
        else:
            os.kill(stub, signal.SIGKILL)
        while os.getppid() == stub:  # until the kernel has ended it
            time.sleep(0.01)
    remove_region(region)


def remove_region(region: str, folder: Path = SHM_DIR) -> None:
    """Unlink a stub's region by its name (a plain file name in ``folder``, nothing else)."""
    if _REGION.fullmatch(region):
        with contextlib.suppress(OSError):
            (folder / region).unlink()


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


if __name__ == "__main__":
    # Like the stub, ignore the terminal's and the service manager's stop signals: the lifeline ends
    # with its stub.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lifeline(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5].strip("-"))
