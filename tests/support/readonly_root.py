"""Run a command as a pod with ``readOnlyRootFilesystem`` runs it: every filesystem it reads is
read-only, and only fresh tmpfs mounts (the pod's emptyDirs) and /dev/shm are writable.

    python readonly_root.py KEEP[,KEEP...] WRITABLE[,WRITABLE...] WORKDIR -- COMMAND...

In a private mount namespace (``unshare -m``, root only): the filesystems holding ``/``, this
Python and each KEEP are remounted read-only; a tmpfs is mounted on each WRITABLE folder (``/tmp``
among them, which hides what was there); each KEEP that a tmpfs hid is bound back at its path
read-only; the command runs in WORKDIR. Nothing outside the namespace changes. ``prefix`` keeps
the test's own files (typically under /tmp) and also this checkout and the Python environment
(``sys.prefix``) the command runs from, wherever they are: a checkout under /tmp stays visible.
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


#: the checkout the tests run from (the package is installed from it in editable mode)
CHECKOUT = Path(__file__).resolve().parents[2]


def prefix(keep: Path, writable: list[str], workdir: str) -> list[str]:
    """The command line that runs the rest of it inside such a namespace, with ``keep``, this
    checkout and the Python environment kept visible."""
    here = str(Path(__file__).resolve())
    kept = ",".join(str(p) for p in (keep, CHECKOUT, Path(sys.prefix)))
    return ["unshare", "-m", sys.executable, here, kept, ",".join(writable), workdir, "--"]


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
    kept = sorted({Path(p).resolve() for p in keep.split(",")}, key=lambda p: len(p.parts))
    _mount("--make-rprivate", "/")
    held = {path: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in kept}  # reachable under a tmpfs
    for point in sorted({_mount_point(Path(p)) for p in ("/", sys.prefix, sys.executable, *kept)}):
        _mount("-o", "remount,bind,ro", point)
    for folder in writable.split(","):
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", folder)
    for path, fd in held.items():
        if not path.exists():  # a tmpfs hid it (a parent of it is binding it back already otherwise)
            path.mkdir(parents=True)
            _mount("--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", str(path))
            _mount("-o", "remount,bind,ro", str(path))
        os.close(fd)
    for path in ("/", *map(str, kept)):
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
