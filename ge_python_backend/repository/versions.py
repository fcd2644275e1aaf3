"""Model version folders as tritonserver 2.51 reads them.

CORE r24.10 ``src/model_repository_manager/model_lifecycle.cc:94-114`` (the same in r24.02 and
r26.06): a folder named ``warmup``, the initial-state folder or ``configs`` is no version; a
name longer than one character that starts with ``0`` is skipped ("contains leading zeros");
every other name goes through ``std::stoll``, which

- reads a leading number and ignores the rest (``7abc`` is version 7, ``1.5`` is version 1), and
  the version's files are then looked for in ``7/``: with the Python backend a missing
  ``7/model.py`` hangs the load in 24.10 (the stub exits before the untimed handshake; fixed in
  r25.08),
- throws ``std::invalid_argument`` when there is none (the folder is skipped with a warning),
- throws ``std::out_of_range`` beyond int64, which nothing catches: the server aborts
  (``terminate called after throwing an instance of 'std::out_of_range' what(): stoll``),
  observed with 2.51.0 on ``99999999999999999999/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

#: The largest version number Triton can read (int64).
MAX_VERSION = 2**63 - 1
#: Folders of a model folder that Triton never takes as versions (model_lifecycle.cc:94-100),
#: plus Python's bytecode cache.
NOT_VERSIONS = ("warmup", "initial_state", "configs", "__pycache__")
#: What std::stoll accepts: leading white space, a sign, then digits (base 10).
_STOLL = re.compile(r"^[ \t\n\v\f\r]*([+-]?[0-9]+)")


class FolderKind(Enum):
    VERSION = "version"  # a version folder
    MISREAD = "misread"  # Triton reads a version number from it but looks for the files elsewhere
    IGNORED = "ignored"  # Triton skips it (warning in its log)
    FATAL = "fatal"  # Triton aborts on it


@dataclass(frozen=True)
class VersionFolder:
    """How Triton reads one folder name: its kind, the version, and why (for messages)."""

    kind: FolderKind
    version: int | None = None
    reason: str = ""


def read_version_folder(name: str) -> VersionFolder:
    """How tritonserver 2.51 reads a folder ``name`` of a model folder (see the module docstring)."""
    if name in NOT_VERSIONS:
        return VersionFolder(FolderKind.IGNORED, reason="not a version folder")
    if len(name) > 1 and name.startswith("0"):
        return VersionFolder(FolderKind.IGNORED, reason="a version folder name with a leading zero")
    match = _STOLL.match(name)
    if match is None:
        return VersionFolder(FolderKind.IGNORED, reason="not a version folder (version folders are numeric)")
    version = int(match.group(1))
    if not -(2**63) <= version <= MAX_VERSION:
        return VersionFolder(
            FolderKind.FATAL,
            reason=f"beyond int64 (at most {MAX_VERSION}): tritonserver 2.51 aborts on it "
            "(std::out_of_range from stoll) and takes every other model down with it",
        )
    if match.group(0) != name:
        return VersionFolder(
            FolderKind.MISREAD,
            version,
            reason=f"Triton reads it as version {version} (std::stoll stops at the first non-digit) and looks for "
            f"that version's files in {version}/, not here (a missing {version}/model.py hangs the load in 2.51); "
            f"rename it to {version}, or to a name that does not start with a digit",
        )
    return VersionFolder(FolderKind.VERSION, version)
