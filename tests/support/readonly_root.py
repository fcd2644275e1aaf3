"""Run a command as a pod with ``readOnlyRootFilesystem`` runs it: every filesystem it reads is
read-only, and only fresh tmpfs mounts (the pod's emptyDirs) and /dev/shm are writable.

    python readonly_root.py KEEP WRITABLE[,WRITABLE...] WORKDIR -- COMMAND...

In a private mount namespace (``unshare -m``, root only): the filesystems holding ``/``, this
Python and ``KEEP`` are remounted read-only; a tmpfs is mounted on each WRITABLE folder (``/tmp``
among them, which hides what was there); KEEP (the test's own files, typically under /tmp) is bound
back at its path read-only; the command runs in WORKDIR. Nothing outside the namespace changes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path


def available() -> bool:
    """Whether this machine can do it: root with util-linux's unshare and mount."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("mount")):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def prefix(keep: Path, writable: list[str], workdir: str) -> list[str]:
    """The command line that runs the rest of it inside such a namespace."""
    here = str(Path(__file__).resolve())
    return ["unshare", "-m", sys.executable, here, str(keep), ",".join(writable), workdir, "--"]


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _mount_point(path: Path) -> str:
    """The mount point that holds ``path`` (the longest matching target in mountinfo)."""
    targets = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    path_text = str(path.resolve())
    return max((t for t in targets if path_text == t or path_text.startswith(t.rstrip("/") + "/")), key=len)


def main(argv: list[str]) -> None:
    keep, writable, workdir, separator, *command = argv
    assert separator == "--" and command, __doc__
    keep_path = Path(keep).resolve()
    _mount("--make-rprivate", "/")
    held = os.open(keep_path, os.O_RDONLY | os.O_DIRECTORY)  # KEEP stays reachable under the tmpfs
    for point in sorted({_mount_point(Path(p)) for p in ("/", sys.prefix, sys.executable, keep_path)}):
        _mount("-o", "remount,bind,ro", point)
    for folder in writable.split(","):
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", folder)
    if not keep_path.exists():
        keep_path.mkdir(parents=True)
        _mount("--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{held}", str(keep_path))
        _mount("-o", "remount,bind,ro", str(keep_path))
    os.close(held)
    for path in ("/", str(keep_path)):
        probe = Path(path) / ".readonly-probe"
        try:
            probe.write_text("")
        except OSError as exc:
            assert exc.errno == errno.EROFS, exc
        else:
            raise SystemExit(f"readonly_root: {path} is still writable")
    os.chdir(workdir)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
