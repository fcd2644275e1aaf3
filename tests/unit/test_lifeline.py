"""The server watch and the lifeline, without tritonserver: a stand-in "server" process starts a
stand-in "stub" that starts its lifeline (the real one, ``triton/lifeline.py`` run as a script).
The end-to-end proof with the real tritonserver is ``tests/e2e/test_server_crash.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from ge_python_backend.triton import lifeline
from ge_python_backend.triton.lifeline import ServerWatch

# The stand-in stub starts its lifeline (grace 0.5 s), prints its pid and the lifeline's, then
# hangs the way a real stub does once its server is gone: on a lock, deaf to SIGINT and SIGTERM.
STUB = textwrap.dedent(
    """
    import signal, sys, threading
    from ge_python_backend.triton import lifeline
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    process = lifeline.start_lifeline(grace=0.5, poll=0.05, region=sys.argv[2])
    print(f"{__import__('os').getpid()} {process.pid}", flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)
    if sys.argv[1] == "finalize":
        lifeline.stop_lifeline(process)
        sys.exit(0)
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()
    """
)
SERVER = (
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', sys.argv[1], *sys.argv[2:]]); time.sleep(60)"
)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def start(mode: str, region: str = "-") -> tuple[subprocess.Popen, int, int]:
    env = dict(os.environ, PYTHONPATH=str(Path(lifeline.__file__).parents[2]))
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, STUB, mode, region], stdout=subprocess.PIPE, env=env, start_new_session=True
    )
    assert server.stdout is not None
    stub, line = (int(v) for v in server.stdout.readline().split())
    return server, stub, line


def test_the_lifeline_kills_a_hung_stub_once_its_server_is_killed():
    server, stub, line = start("hang")
    try:
        time.sleep(0.3)
        assert alive(stub) and alive(line)
        server.kill()
        server.wait()
        killed = time.monotonic()
        assert not wait_gone([stub, line], 5.0), "the stub or its lifeline outlived the server"
        assert time.monotonic() - killed >= 0.5  # the stub got its grace first
    finally:
        os.killpg(server.pid, signal.SIGKILL)


def test_the_lifeline_ends_with_its_stub_and_spares_the_server():
    server, stub, line = start("exit")
    try:
        assert not wait_gone([stub, line], 5.0)
        assert server.poll() is None
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_the_watch_releases_then_exits_once_the_server_is_gone():
    server_alive = threading.Event()
    server_alive.set()
    done = threading.Event()
    calls: list[str] = []
    gone = threading.Event()
    watch = ServerWatch(
        lambda: calls.append("release"),
        alive=server_alive.is_set,
        gone=gone,
        exit=lambda code: (calls.append(f"exit {code}"), done.set()),
        poll_interval=0.01,
    )
    time.sleep(0.05)
    assert calls == []
    server_alive.clear()
    assert done.wait(2)
    assert calls == ["release", "exit 1"] and gone.is_set()
    watch.stop()


def test_a_release_that_hangs_does_not_keep_the_process_alive():
    exited = threading.Event()
    never = threading.Event()
    ServerWatch(
        never.wait,
        alive=lambda: False,
        gone=threading.Event(),
        exit=lambda code: exited.set(),
        poll_interval=0.01,
        release_timeout=0.2,
    )
    started = time.monotonic()
    assert exited.wait(2)
    assert 0.2 <= time.monotonic() - started < 1.5
    never.set()


@pytest.fixture
def region():
    """A region file in /dev/shm named as python_backend r24.05+ names them (a UUID)."""
    made = []

    def make(name: str = "") -> Path:
        path = lifeline.SHM_DIR / (name or f"triton_python_backend_shm_region_{uuid.uuid4()}")
        path.write_bytes(b"\0" * 64)
        made.append(path)
        return path

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def wait_until(check, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


def test_a_stub_that_dies_under_its_server_leaves_no_uuid_named_region(region):
    path = region()
    server, stub, line = start("hang", path.name)
    try:
        os.kill(stub, signal.SIGKILL)
        assert wait_until(lambda: not path.exists()), "the dead stub's region stayed"
        assert not wait_gone([line], 5.0) and server.poll() is None
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_counter_named_region_of_a_stub_that_died_under_its_server_stays_for_its_replacement(region):
    path = region(f"triton_python_backend_shm_region_{os.getpid()}{time.monotonic_ns() % 1000}")
    server, stub, line = start("hang", path.name)
    try:
        os.kill(stub, signal.SIGKILL)
        assert not wait_gone([line], 5.0)
        assert path.exists()  # Triton 24.02 restarts the stub on the same name from execute
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_the_regions_of_a_dead_servers_stubs_go_with_them_whatever_their_names(region):
    path = region(f"triton_python_backend_shm_region_{os.getpid()}{time.monotonic_ns() % 1000}")
    server, stub, line = start("hang", path.name)
    try:
        server.kill()
        server.wait()
        assert not wait_gone([stub, line], 5.0)
        assert wait_until(lambda: not path.exists()), "the dead server's stub left its region"
    finally:
        os.killpg(server.pid, signal.SIGKILL)


def test_a_stub_that_finalizes_leaves_its_region_to_tritonserver(region):
    path = region()
    server, stub, line = start("finalize", path.name)
    try:
        assert not wait_gone([stub, line], 5.0)
        time.sleep(0.2)
        assert path.exists()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_only_a_plain_file_name_in_the_shm_folder_is_removed(tmp_path):
    (tmp_path / "shm").mkdir()
    outside = tmp_path / "important"
    outside.write_text("x")
    for name in ("../important", "", ".", "..", "/important"):
        lifeline.remove_region(name, tmp_path / "shm")
    assert outside.exists()
    named = tmp_path / "shm" / "ge_triton_1a2b_python_7"
    named.write_text("x")
    lifeline.remove_region(named.name, tmp_path / "shm")
    assert not named.exists()
