"""The ATC a conformance run compiles its models with and holds to fidelity.md's ATC rows: the
host's ``atc`` (a process per run, stdout and stderr kept apart) or the simulator's
(``ge_python_backend.sim.atc``, the program ``python -m ge_python_backend.sim.atc`` runs, called in
this process so that a run costs no interpreter start). Each run's report names which one ran.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.ascend.atc import AtcCommand
from ge_python_backend.engines.compile import start_atc, stop_atc
from ge_python_backend.errors import GEError

#: ATC on a real host takes tens of seconds per model; one that hangs is stopped after this
ATC_TIMEOUT_S = 900.0
#: host ATC runs of one probe at a time (each is a process of its own that mostly waits on files)
PARALLEL_RUNS = 4
#: an error or warning code of ATC's error manager; real ATC may put its PID and the time first
_CODE = re.compile(r"\b([EW]\d{5})\b")
SIMULATOR_COMMAND = ("python", "-m", "ge_python_backend.sim.atc")


class CompileError(GEError):
    """ATC refused a model or could not run; ``command`` is what ran, ``run`` its output (None: it
    did not finish)."""

    def __init__(self, message: str, command: AtcCommand, run: AtcRun | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.run = run


@dataclass(frozen=True)
class AtcRun:
    """One ATC run: its command, exit code and output lines."""

    command: AtcCommand
    exit_code: int
    stdout: tuple[str, ...]
    stderr: tuple[str, ...]

    def codes(self) -> list[str]:
        """The error and warning codes ATC printed (``Ennnnn``, ``Wnnnnn``), in order."""
        return [m.group(1) for line in self.stdout for m in [_CODE.search(line)] if m]

    def error_lines(self) -> list[str]:
        """The lines that carry an error code (main_impl.cc:2202-2212)."""
        return [line for line in self.stdout if (m := _CODE.search(line)) and m.group(1).startswith("E")]

    def summary(self) -> str:
        """Why it failed, in a line: the error lines, else the last lines of both streams."""
        return " | ".join(self.error_lines() or [*self.stdout[-5:], *self.stderr[-5:]])


@dataclass(frozen=True)
class Atc:
    """An ATC: the host's at ``path``, or (None) the simulator's."""

    path: Path | None = None

    @property
    def simulator(self) -> bool:
        return self.path is None

    @property
    def name(self) -> str:
        return str(self.path) if self.path is not None else "the simulator's ATC (" + " ".join(SIMULATOR_COMMAND) + ")"

    def command(self, arguments: Sequence[str]) -> AtcCommand:
        program = (str(self.path),) if self.path is not None else SIMULATOR_COMMAND
        return AtcCommand((*program, *arguments), ())

    def run(self, arguments: Sequence[str], cwd: Path) -> AtcRun:
        """ATC with ``arguments`` in ``cwd``; CompileError when it cannot start or overruns ATC_TIMEOUT_S."""
        command = self.command(arguments)
        if self.path is None:
            return _run_simulator(command, list(arguments))
        try:
            process = start_atc(command.arguments, cwd, stderr=subprocess.PIPE)
        except OSError as exc:
            raise CompileError(f"cannot run {self.path} ({exc.strerror or exc})", command) from None
        try:
            out, err = process.communicate(timeout=ATC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_atc(process)
            raise CompileError(
                f"{self.path} did not finish within {ATC_TIMEOUT_S:g} s and was stopped", command
            ) from None
        return AtcRun(command, process.returncode, _lines(out), _lines(err))

    def run_all(self, runs: Sequence[Sequence[str]], cwd: Path) -> list[AtcRun]:
        """Several independent runs, in their order (the host's ATC a few at a time)."""
        if self.path is None:
            return [self.run(arguments, cwd) for arguments in runs]
        with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
            return list(pool.map(lambda arguments: self.run(arguments, cwd), runs))


def _run_simulator(command: AtcCommand, arguments: list[str]) -> AtcRun:
    from ge_python_backend.sim.atc import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(arguments)
    return AtcRun(command, code, _lines(out.getvalue()), _lines(err.getvalue()))


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.rstrip() for line in text.splitlines() if line.strip())
