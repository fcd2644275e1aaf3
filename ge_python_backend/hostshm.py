"""Small state shared by the processes of one scope on this host: files under /dev/shm.

One NPU is shared by every process that uses it, so what models the device (the simulator's
cores and copy engines) and what measures it (the acl engine's device-busy accounting) must be
shared across a tritonserver's stub processes. A *scope* is the set of processes that share:
by default the process group (tritonserver and its stubs are one group: ``ops/server.py`` starts
the server in a session of its own, and the Python backend's stubs stay in its group), or any
processes that set ``GE_SHARED_DEVICE_SCOPE`` to the same name (several servers on one NPU).

Each region is a fixed-size file, mapped with ``mmap`` and changed only under an exclusive
``flock`` on it (and a thread lock in the process). Every process of a scope holds a shared
``flock`` on the scope's users file while it has a region open; the last one to close (at exit
at the latest) removes the scope's files. A process that finds itself the scope's only user
starts from fresh files, so a scope whose last user was killed leaves nothing that matters, and
such leftovers of other scopes are swept on the next open. The state is only ever timing and
accounting: losing it changes no answer.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import mmap
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ge_python_backend.errors import GEError

#: processes with the same value share their devices' state; unset: the process group
SCOPE_ENV = "GE_SHARED_DEVICE_SCOPE"
#: where the files live (default /dev/shm)
DIR_ENV = "GE_SHARED_STATE_DIR"
DEFAULT_DIR = "/dev/shm"
_PREFIX = "ge-shared"
_UNSAFE_SCOPE = re.compile(r"[^A-Za-z0-9_-]")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class SharedStateError(GEError):
    """The shared state cannot be created or opened (no writable folder, no mmap)."""


def scope_name() -> str:
    """The scope of this process: ``$GE_SHARED_DEVICE_SCOPE``, else its process group."""
    return os.environ.get(SCOPE_ENV) or f"pg{os.getpgid(0)}"


def state_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def _stem(directory: Path, scope: str) -> str:
    return str(directory / f"{_PREFIX}-{os.getuid()}-{_UNSAFE_SCOPE.sub('_', scope)}")


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _locked_open(path: str, exclusive_if_alone: bool = False) -> tuple[int, bool]:
    """``path`` opened (created) and flock'ed, retried until the lock is held on the file the path
    names (a last user may remove it between our open and our lock). Exclusive, or with
    ``exclusive_if_alone`` exclusive when nobody else holds it and shared otherwise; returns the
    descriptor and whether the lock is exclusive."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if exclusive_if_alone:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    exclusive = True
                except BlockingIOError:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    exclusive = False
            else:
                fcntl.flock(fd, fcntl.LOCK_EX)
                exclusive = True
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd, exclusive
        os.close(fd)


def _remove_scope_files(stem: str) -> None:
    directory, prefix = os.path.split(stem)
    for name in os.listdir(directory):
        if name.startswith(os.path.basename(prefix) + ".") and not name.endswith(".users"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def _sweep_stale(directory: Path, own: str) -> None:
    """Remove the files of scopes nobody uses any more (their last user was killed)."""
    prefix = f"{_PREFIX}-{os.getuid()}-"
    for name in os.listdir(directory):
        path = str(directory / name)
        if not (name.startswith(prefix) and name.endswith(".users")) or path == own + ".users":
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, path):
                _remove_scope_files(path[: -len(".users")])
                os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(fd)


class _Scope:
    """This process's membership of one scope: the shared lock on its users file."""

    def __init__(self, directory: Path, scope: str) -> None:
        self.stem = _stem(directory, scope)
        self.regions = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _sweep_stale(directory, self.stem)
            self.users, alone = _locked_open(self.stem + ".users", exclusive_if_alone=True)
        except OSError as exc:
            raise SharedStateError(
                f"cannot create shared state in {directory} ({exc.strerror or exc}): it must be a writable folder "
                f"on a RAM file system (set {DIR_ENV} to another one)"
            ) from None
        if alone:  # nobody else uses the scope: any file of it is a dead process's
            _remove_scope_files(self.stem)
            fcntl.flock(self.users, fcntl.LOCK_SH)

    def leave(self) -> None:
        """Drop the membership; the last member removes the scope's files."""
        try:
            fcntl.flock(self.users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.users)
            return
        if _same_file(self.users, self.stem + ".users"):
            _remove_scope_files(self.stem)
            os.unlink(self.stem + ".users")
        os.close(self.users)


_LOCK = threading.Lock()
_SCOPES: dict[tuple[str, str], _Scope] = {}
_PID = os.getpid()


def _join(directory: Path, scope: str) -> _Scope:
    global _PID
    with _LOCK:
        if os.getpid() != _PID:  # a forked child: the parent's locks are not ours to release
            _SCOPES.clear()
            _PID = os.getpid()
        key = (str(directory), scope)
        found = _SCOPES.get(key)
        if found is None:
            found = _SCOPES[key] = _Scope(directory, scope)
        found.regions += 1
        return found


def _part(scope: _Scope) -> None:
    with _LOCK:
        scope.regions -= 1
        if scope.regions == 0 and os.getpid() == _PID:
            for key, value in list(_SCOPES.items()):
                if value is scope:
                    del _SCOPES[key]
            scope.leave()


@atexit.register
def _leave_all() -> None:
    with _LOCK:
        if os.getpid() != _PID:
            return
        scopes = list(_SCOPES.values())
        _SCOPES.clear()
    for scope in scopes:
        scope.leave()


class SharedRegion:
    """``size`` bytes named ``name`` in this process's scope, zero-filled when the scope starts.

    ``with region.locked() as view:`` reads and writes them under the exclusive lock.
    """

    def __init__(self, name: str, size: int, scope: str | None = None, directory: Path | None = None) -> None:
        self.name = name
        self._scope = _join(directory or state_dir(), scope or scope_name())
        self.path = f"{self._scope.stem}.{_UNSAFE_NAME.sub('_', name)}"
        try:
            fd = _locked_open(self.path)[0]
            try:
                if os.fstat(fd).st_size < size:
                    os.ftruncate(fd, size)
                self._map = mmap.mmap(fd, size)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            _part(self._scope)
            raise SharedStateError(f"cannot map shared state {self.path}: {exc.strerror or exc}") from None
        self._fd = fd
        self._thread_lock = threading.Lock()
        self._closed = False

    @contextmanager
    def locked(self) -> Iterator[memoryview]:
        with self._thread_lock:
            if self._closed:
                raise SharedStateError(f"shared state {self.path} is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            view = memoryview(self._map)
            try:
                yield view
            finally:
                view.release()
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._thread_lock:
            if self._closed:
                return
            self._closed = True
            self._map.close()
            os.close(self._fd)
        _part(self._scope)
