"""The one runner every scenario shares: arguments, the quiet-host method, the report format.

A scenario module defines ``SUMMARY`` (one line), ``add_arguments(parser)`` and
``run(bench) -> Report``. The runner parses ``python -m tools.bench SCENARIO [options]``, gives the
scenario a ``Bench`` (its arguments, its work folder, ``bench.quiet(what)``), and writes what it
returns: the tables and ratios printed, and under the work folder ``SCENARIO.json`` (every
measurement, the tables, the command line, date, commit, CPUs and the quiet-host log),
``SCENARIO.md`` (the summary table with the command that produced it, as BENCHMARKS.md shows it)
and ``SCENARIO.png`` (the scenario's own plot, else a bar chart of its summary).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

#: scenario -> module under tools.bench.scenarios
SCENARIOS: dict[str, str] = {
    "serving": "serving",
    "streams": "streams",
    "host-path": "host_path",
    "ab": "ab",
    "execute": "execute",
    "gather": "gather",
    "variants": "variants",
    "profile": "profile",
    "images": "images",
    "pipelines": "pipelines",
    "layouts": "layouts",
    "router": "router",
    "device": "device",
}

#: a host busier than this before a measurement is reported (the measurement runs anyway)
QUIET_BUSY = 0.15
#: a measurement during which other processes kept more CPUs busy than this measured them too:
#: repeated runs are summarised over the others when there are any
CONTAMINATED_CORES = 0.25


@dataclass(frozen=True)
class Table:
    """A titled table of strings; ``chart`` (column index, axis label) makes the runner's bar chart."""

    title: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    chart: tuple[int, str] | None = None

    def text(self) -> str:
        from ge_python_backend.ops.bench.report import format_rows

        return f"{self.title}\n{format_rows([list(self.header), *map(list, self.rows)])}"

    def markdown(self) -> str:
        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

        return "\n".join([line(self.header), "|" + "---|" * len(self.header), *map(line, self.rows)])

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "header": list(self.header), "rows": [list(r) for r in self.rows]}


@dataclass(frozen=True)
class Ratio:
    """A ratio measured once per repeat and its target: ``at_least`` (True: >=, False: <=)
    ``target``. The median decides whether the target is met."""

    name: str
    values: Sequence[float]
    target: float | None = None
    at_least: bool = True

    @property
    def value(self) -> float:
        return float(np.median(self.values))

    @property
    def met(self) -> str:
        if self.target is None or not np.isfinite(self.value):
            return ""
        return "yes" if (self.value >= self.target if self.at_least else self.value <= self.target) else "NO"

    def row(self) -> list[str]:
        target = "" if self.target is None else f"{'>=' if self.at_least else '<='} {self.target:g}"
        spread = f"{min(self.values):.2f}..{max(self.values):.2f}" if len(self.values) > 1 else ""
        return [self.name, f"{self.value:.2f}", spread, target, self.met]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "values": list(self.values),
            "median": self.value,
            "target": self.target,
            "at_least": self.at_least,
            "met": self.met,
        }


def ratio_table(ratios: Sequence[Ratio], title: str = "ratios (median over the repeats)") -> Table:
    return Table(title, ("ratio", "median", "range", "target", "met"), [r.row() for r in ratios], chart=(1, "ratio"))


@dataclass
class Report:
    """What a scenario measured: ``summary`` (the table BENCHMARKS.md shows), more ``tables``,
    ``data`` (every measurement, for the JSON) and optionally its own ``plot(path) -> path``."""

    summary: Table
    tables: list[Table] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    plot: Callable[[Path], Path] | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Bench:
    """A scenario's run: its arguments, its work folder and the quiet-host method."""

    scenario: str
    args: argparse.Namespace
    argv: Sequence[str]
    quiet_log: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def workdir(self) -> Path:
        return Path(self.args.workdir).resolve()

    def quiet(self, what: str, timeout: float | None = None) -> float | None:
        """Wait (at most ``--quiet-timeout`` s) until the host is less than 15 % busy for a second,
        before measuring ``what``; the busy share seen last is logged, and said when it stayed high."""
        from ge_python_backend.ops.bench.host import wait_quiet

        busy = wait_quiet(threshold=QUIET_BUSY, timeout=self.args.quiet_timeout if timeout is None else timeout)
        self.quiet_log.append({"before": what, "busy": busy, "at_s": round(time.monotonic() - self.started, 1)})
        if busy is not None and busy >= QUIET_BUSY:
            print(f"  warning: {busy:.0%} of the CPUs were busy before {what}", flush=True)
        return busy


def quiet_points(points: Sequence[Any]) -> list[Any]:
    """``ge-triton bench`` points measured while the rest of the host stayed nearly idle (all of
    them if none was)."""
    quiet = [p for p in points if p.cpu_ms_per_request.get("others_cores", 0.0) < CONTAMINATED_CORES]
    return quiet or list(points)


def commit() -> str:
    """This checkout's commit (``+dirty`` with uncommitted changes), or "unknown"."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


def _number(text: str) -> float:
    match = re.match(r"\s*(-?[\d.]+(?:e-?\d+)?)", str(text).replace(",", ""))
    return float(match.group(1)) if match else float("nan")


def bar_chart(table: Table, path: Path) -> Path:
    """A horizontal bar per row of ``table``: its first column against its ``chart`` column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    column, label = table.chart or (1, table.header[1])
    names = [str(row[0]) for row in table.rows]
    values = [_number(row[column]) for row in table.rows]
    figure, axes = plt.subplots(figsize=(8, 0.8 + 0.35 * len(names)), dpi=110)
    axes.barh(names, values, color="tab:blue")
    axes.invert_yaxis()
    axes.set_xlabel(label)
    axes.set_title(table.title, fontsize=9)
    axes.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def write(bench: Bench, report: Report) -> dict[str, Path]:
    """Print the report and write its JSON, markdown summary and PNG; returns their paths."""
    for table in report.tables:
        print("\n" + table.text())
    for note in report.notes:
        print("\n" + note)
    print("\n" + report.summary.text())
    command = "python -m tools.bench " + " ".join(shlex.quote(a) for a in [bench.scenario, *bench.argv])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    revision = commit()
    folder = bench.workdir
    folder.mkdir(parents=True, exist_ok=True)
    name = bench.scenario
    document = {
        "scenario": name,
        "command": command,
        "date": stamp,
        "commit": revision,
        "cpus": os.cpu_count(),
        "elapsed_s": round(time.monotonic() - bench.started, 1),
        "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(bench.args).items()},
        "quiet": bench.quiet_log,
        "summary": report.summary.to_dict(),
        "tables": [t.to_dict() for t in report.tables],
        "notes": report.notes,
        "data": report.data,
    }
    paths = {"json": folder / f"{name}.json", "md": folder / f"{name}.md", "png": folder / f"{name}.png"}
    paths["json"].write_text(json.dumps(document, indent=2, allow_nan=True, default=str) + "\n")
    paths["md"].write_text(
        f"`{command}` ({stamp}, commit `{revision}`, {os.cpu_count()} CPUs):\n\n{report.summary.markdown()}\n"
    )
    (report.plot or (lambda path: bar_chart(report.summary, path)))(paths["png"])
    print()
    for path in paths.values():
        print(f"wrote {path}")
    print(f"elapsed {document['elapsed_s']:.0f} s")
    return paths


def scenario_module(name: str) -> Any:
    return importlib.import_module(f"tools.bench.scenarios.{SCENARIOS[name]}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="Benchmark scenarios: each starts its own servers, measures against a baseline in the same run "
        "and writes SCENARIO.json, SCENARIO.md and SCENARIO.png under --workdir.",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    scenarios = parser.add_subparsers(dest="scenario", metavar="SCENARIO")
    for name in SCENARIOS:
        module = scenario_module(name)
        sub = scenarios.add_parser(name, help=module.SUMMARY, description=module.__doc__)
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.add_argument(
            "--workdir", type=Path, default=Path("out/bench") / name, help="where models, JSON, markdown and PNG go"
        )
        sub.add_argument(
            "--quiet-timeout",
            type=float,
            default=getattr(module, "QUIET_TIMEOUT", 15.0),
            help="wait at most this long for a quiet host before each measurement (seconds)",
        )
        module.add_arguments(sub)
    return parser


def use_checkout(argv: Sequence[str]) -> None:
    """``--code CHECKOUT`` (host-path, execute): that checkout's ge_python_backend runs in this
    process too, so it goes first on sys.path before anything imports the package."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--code", type=Path)
    known, _ = pre.parse_known_args(argv)
    if known.code is not None:
        if not (known.code / "ge_python_backend" / "__init__.py").is_file():
            raise SystemExit(f"tools.bench: --code {known.code} holds no ge_python_backend package")
        sys.path.insert(0, str(known.code.resolve()))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    use_checkout(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list or args.scenario is None:
        width = max(map(len, SCENARIOS))
        for name in SCENARIOS:
            print(f"{name:<{width}}  {scenario_module(name).SUMMARY}")
        return 0 if args.list else 2
    bench = Bench(args.scenario, args, argv[argv.index(args.scenario) + 1 :])
    report = scenario_module(args.scenario).run(bench)
    write(bench, report)
    return 0
