"""How busy the machine is: benchmarks on a shared host should start when it is quiet."""

from __future__ import annotations

import time
from pathlib import Path

_STAT = Path("/proc/stat")


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies over all CPUs; None where /proc/stat is missing."""
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [float(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_cpu_seconds() -> float | None:
    """CPU seconds all CPUs have been busy since boot (from /proc/stat); None if unknown."""
    times = _cpu_times()
    if times is None:
        return None
    import os

    return times[0] / os.sysconf("SC_CLK_TCK")


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction (0..1) of all CPUs busy over the next ``seconds``; None if unknown."""
    first = _cpu_times()
    time.sleep(seconds)
    second = _cpu_times()
    if first is None or second is None or second[1] <= first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1])


def wait_quiet(threshold: float = 0.15, timeout: float = 60.0, sample_s: float = 1.0) -> float | None:
    """Wait (at most ``timeout`` s) until less than ``threshold`` of the CPUs is busy; return
    the last busy fraction seen (a caller may warn when it is still above the threshold)."""
    deadline = time.monotonic() + timeout
    busy = cpu_busy(sample_s)
    while busy is not None and busy >= threshold and time.monotonic() < deadline:
        busy = cpu_busy(sample_s)
    return busy


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; None if ``pid`` is gone or /proc is missing."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # the name before ")" may hold spaces


def _parent(fields: list[str]) -> int:
    return int(fields[1])  # ppid


def _cpu_seconds(fields: list[str]) -> float:
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def parent_pid(pid: int) -> int | None:
    """The parent process id of ``pid``; None if ``pid`` is gone or /proc is missing."""
    fields = _stat_fields(pid)
    return None if fields is None else _parent(fields)


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by ``pid`` itself (not its children); None if
    ``pid`` is gone or /proc is missing."""
    fields = _stat_fields(pid)
    return None if fields is None else _cpu_seconds(fields)


def process_tree_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by ``pid`` and every live descendant; None if
    ``pid`` is gone or /proc is missing. Descendants that already exited are not counted."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        parents[int(entry.name)] = _parent(fields)
        used[int(entry.name)] = _cpu_seconds(fields)
    if pid not in used:
        return None
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(used[p] for p in tree)
