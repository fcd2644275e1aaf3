"""Reading a tritonserver's stubs and a process's usage from /proc, and reaping adopted orphans:
against a /proc laid out as Linux lays it out, and against this machine's own processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ge_python_backend.ops.processes import running, stubs_of, usage

STUB = "/opt/tritonserver/backends/python/triton_python_backend_stub"


def fake_process(proc: Path, pid: int, parent: int, argv: list[str], state: str = "S", started: int = 100) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    # fields after the command: state, ppid, ... field 22 (starttime) is the 20th of these
    rest = [state, str(parent)] + ["0"] * 17 + [str(started)] + ["0"] * 10
    (folder / "stat").write_text(f"{pid} (weird) name) " + " ".join(rest) + "\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_the_stubs_of_a_server_are_its_children_running_the_stub_binary(tmp_path):
    proc = tmp_path / "proc"
    args = ["triton_python_backend_shm_region_1", "16777216", "16777216", "10", "/lib", "336"]
    fake_process(proc, 21, 10, [STUB, "/repo/resnet/3/model.py", *args, "resnet_0_1", ""], started=500)
    fake_process(proc, 22, 10, [STUB, "/repo/npu/1/my.onnx", *args, "npu_2", "/backends/npu_ge"])
    fake_process(proc, 23, 11, [STUB, "/repo/other/1/model.py", *args, "other_0", ""])  # another server's
    fake_process(proc, 24, 10, ["/usr/bin/python3", "lifeline.py"])
    fake_process(proc, 25, 10, [""], state="Z")  # a dead stub: a zombie has no command line
    (proc / "self").mkdir()
    found = stubs_of(10, proc)
    assert [(s.pid, s.model, s.version, s.instance, s.started) for s in found] == [
        (21, "resnet", "3", "resnet_0_1", 500),
        (22, "npu", "1", "npu_2", 100),
    ]
    assert found[0].describe() == "stub of instance resnet_0_1 (pid 21)"
    assert running(21, proc) and not running(25, proc) and not running(99, proc)


def test_usage_counts_this_processes_memory_descriptors_and_threads():
    mine = usage(os.getpid())
    assert mine is not None and mine.rss_bytes > 10 << 20 and mine.fds >= 3 and mine.threads >= 1
    assert usage(2**22 + 12345) is None


def test_orphans_adopted_by_a_subreaper_are_reaped_and_the_kept_child_is_left():
    """A stand-in for serve as a container's PID 1: a subreaper whose grandchild is orphaned."""
    script = textwrap.dedent(
        f"""
        import ctypes, os, subprocess, sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from ge_python_backend.ops.processes import reap_adopted
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
        kept = subprocess.Popen(["true"])
        subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"])  # the sleep is orphaned, then ends
        time.sleep(1.0)
        reaped = reap_adopted(keep=kept.pid)
        print(len(reaped), kept.wait())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["1", "0"], done.stderr
