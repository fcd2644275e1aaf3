"""tritonserver killed with SIGKILL: every process it started (the models' stubs and their lifelines)
exits within seconds, idle and with requests in flight, for every engine, one slot or several
(``ge_python_backend/triton/lifeline.py`` says why a stub could outlive its server).

One tritonserver per case serves all the models; the case kills it once and watches the processes of
its process group, found through /proc before the kill.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.triton.lifeline import STUB_EXECUTABLE
from tests.support import reliability_repos as rr
from tests.support.versions import under_test

pytestmark = [pytest.mark.e2e, pytest.mark.contract]
#: every process of the killed server must be gone within this long
EXIT_WITHIN_S = 8.0
#: (model, parameters, generate options): both engines, one slot and two
MODELS = (
    ("ort_return", {}, {}),
    ("ort_two_slots", {}, {"streams": 2}),
    ("sim_return", {"acl_sim_device_ms": "5"}, {}),
    ("sim_two_slots", {"acl_sim_device_ms": "5"}, {"streams": 2, "instance_count": 1}),
)
CLIENTS_PER_MODEL = 3


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("server_crash")
    sources = rr.Sources(root / "sources")
    for name, parameters, options in MODELS:
        source = sources.linear_om if name.startswith("sim") else sources.linear
        rr.model(root / "repo", source, name, parameters, **options)
    return root / "repo"


def group(server_pid: int) -> dict[int, str]:
    """pid -> command of every live process in the server's process group, but the server."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == server_pid:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == server_pid:  # state, pgrp (the server leads its own)
            found[int(entry.name)] = command
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def infer(client: httpclient.InferenceServerClient, model: str, rows: int = 2) -> None:
    tensor = httpclient.InferInput("x", [rows, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, 4), np.float32))
    client.infer(model, [tensor])


class Clients:
    """CLIENTS_PER_MODEL threads per model sending requests until the server is gone."""

    def __init__(self, server: TritonServer) -> None:
        self.answered = {name: 0 for name, _, _ in MODELS}
        self.threads = [
            threading.Thread(target=self._run, args=(server.http_address, name), daemon=True)
            for name, _, _ in MODELS
            for _ in range(CLIENTS_PER_MODEL)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, address: str, model: str) -> None:
        client = httpclient.InferenceServerClient(address, network_timeout=30)
        try:
            while True:
                infer(client, model)
                self.answered[model] += 1
        except Exception:  # the server is gone
            pass
        finally:
            client.close()

    def wait_for_answers(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while min(self.answered.values()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert min(self.answered.values()) >= count, self.answered

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


@pytest.mark.parametrize("load", ["idle", "requests in flight"])
def test_every_process_of_a_killed_server_exits_within_seconds(repo, load):
    server = TritonServer(repo)
    try:
        server.start()
        assert server.process is not None
        client = httpclient.InferenceServerClient(server.http_address)
        try:
            for name, _, _ in MODELS:
                infer(client, name)
        finally:
            client.close()
        clients = Clients(server) if load != "idle" else None
        if clients is not None:
            clients.wait_for_answers(10)
        else:
            time.sleep(1.5)  # a heartbeat of every instance's metrics thread falls around the kill
        pid = server.process.pid
        started = group(pid)
        stubs = {p: c for p, c in started.items() if STUB_EXECUTABLE in c.split(" ", 1)[0]}
        lifelines = {p: c for p, c in started.items() if "lifeline.py" in c}
        assert len(stubs) == 5 and len(lifelines) == len(stubs), started  # 2 sim_return instances
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        server.process.wait()
        left = dict(started)
        exited = {}
        while left and time.monotonic() - killed < EXIT_WITHIN_S:
            for p in [p for p in left if not alive(p)]:
                exited[p] = time.monotonic() - killed
                del left[p]
            time.sleep(0.05)
        if clients is not None:
            clients.join()
        times = ", ".join(f"{exited[p]:.1f}" for p in sorted(stubs, key=lambda p: exited.get(p, 1e9)) if p in exited)
        print(f"{load}: stubs exited {times} s after the kill; {len(exited)} of {len(started)} processes gone")
        assert not left, f"still running {EXIT_WITHIN_S} s after tritonserver was killed: {left}"
    finally:
        server.stop()  # kills whatever is left of the process group
        server.close()


def test_on_24_02_a_stub_killed_under_load_ends_the_server_and_every_process(repo):
    """tritonserver 2.43's Python backend crashes the server when a stub dies with requests in
    flight (SIGSEGV in TRITONBACKEND_ModelInstanceExecute: docs/platforms.md); what must hold
    still: the server exits instead of hanging, and nothing it started outlives it. On 24.10
    the server survives (tests/e2e/test_stub_death.py)."""
    if under_test().survives_stub_death:
        pytest.skip(f"Triton {under_test().name} survives a stub's death (test_stub_death.py)")
    server = TritonServer(repo)
    try:
        server.start()
        assert server.process is not None
        clients = Clients(server)
        clients.wait_for_answers(10)
        pid = server.process.pid
        started = group(pid)
        (victim,) = [p for p, c in started.items() if STUB_EXECUTABLE in c.split(" ", 1)[0] and "/ort_return/" in c]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        server.process.wait(timeout=60)
        left = dict(started)
        while left and time.monotonic() - killed < 60 + EXIT_WITHIN_S:
            left = {p: c for p, c in left.items() if alive(p)}
            time.sleep(0.05)
        clients.join()
        assert server.process.returncode != 0, server.log_tail(20)  # it crashed: no clean shutdown
        assert not left, f"still running after tritonserver 2.43 crashed: {left}"
    finally:
        server.stop()
        server.close()
