"""Configurations (and optionally two checkouts) in one tritonserver, interleaved, each paired
with the identity model measured in the same round: what the request path costs over the Python
backend's own floor, and which code or setting serves more.

Single runs of ``host-path`` on this host differ by up to 25 % for the same code, more than most
changes to the request path move. Here everything serves side by side in one server: every round
measures, per configuration, the identity model (tools/bench/baselines/identity_model.py) and
then the configuration (under A and under B, the order alternating between rounds, when ``--b``
is given), each point one perf_analyzer window at concurrency 16 after a quiet-host wait. A
round's ratios compare neighbours measured seconds apart; the report gives their median and
range over the rounds, per configuration: throughput / identity's, the stubs' CPU per request
and its ratio to identity's, server CPU per request (tritonserver and its stubs); with ``--b``
also B/A. The issue-25 targets are checked on checkout A's figures.

    .venv/bin/python -m tools.bench ab --configs ort,default,null,null+reject_nonfinite=true --rounds 8
    mkdir -p /tmp/base && git archive BASE ge_python_backend | tar -x -C /tmp/base
    .venv/bin/python -m tools.bench ab --b /tmp/base [--a .] [--configs ort,default] [--rounds 8]

Configurations (tools/bench/repos.py ``config_named``): ``ort`` (GEModel on onnxruntime),
host-path's acl-sim folders at device time 0: ``default`` (what ``ge-triton generate`` writes for
the .om) or ``MODE_sS_iI`` (e.g. ``return_s1_i1``), the same on engine acl over the null pyACL
(``null``, ``null_MODE_sS_iI``: the acl engine's host cost without the simulator's), each with
optional ``+key=value`` config parameters (``default+reject_nonfinite=true``).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
from pathlib import Path

from tools.bench.measure import perf_analyzer_arguments, perf_analyzer_binary, perf_window, positive_int
from tools.bench.repos import LABELS_HELP, Config, build_host_repository, config_named
from tools.bench.runner import ROOT, Bench, Ratio, Report, Table, ratio_table
from tools.bench.scenarios.host_path import HOST_CONCURRENCY

SUMMARY = "configurations (and two checkouts) in one server, paired interleaved rounds against the identity model"
SIDES = ("a", "b")


def configurations(text: str) -> list[str]:
    """``--configs``: comma-separated labels (repos.config_named)."""
    labels = [label for label in text.split(",") if label]
    for label in labels:
        try:
            config_named(label)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if len(set(labels)) != len(labels):
        raise argparse.ArgumentTypeError(f"a configuration is named twice in {text!r}")
    return labels


def checkout(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "ge_python_backend" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{path} holds no ge_python_backend package")
    return path


def add_arguments(parser) -> None:
    parser.add_argument("--a", type=checkout, default=ROOT, help="checkout A (default: this one)")
    parser.add_argument(
        "--b", type=checkout, help="checkout B (e.g. the code before a change); without it only A is measured"
    )
    parser.add_argument(
        "--configs", type=configurations, default=["ort", "default", "null"], help="comma-separated: " + LABELS_HELP
    )
    parser.add_argument("--rounds", type=positive_int, default=8)
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of load before each window")
    perf_analyzer_arguments(parser)


def folder_of(label: str) -> str:
    return config_named(label).folder(0.0)


def build(workdir: Path, labels: list[str], configs: list[Config], checkouts: dict[str, Path]) -> Path:
    """One repository: identity, and each configuration's folder once per side (``NAME_a``,
    ``NAME_b``), each importing its side's checkout."""
    from ge_python_backend.repository.config import format_config, read_config_file

    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    for side, code in checkouts.items():
        built, _ = build_host_repository(workdir / side, configs, [], code)
        if not (repo / "identity").exists():
            shutil.copytree(built / "identity", repo / "identity")
        for label in labels:
            target = repo / f"{folder_of(label)}_{side}"
            shutil.copytree(built / folder_of(label), target)
            config = read_config_file(target / "config.pbtxt")
            config.name = target.name
            (target / "config.pbtxt").write_text(format_config(config))
    return repo


def run(bench: Bench) -> Report:
    from ge_python_backend.ops.server import TritonServer

    args = bench.args
    checkouts = {"a": args.a, **({"b": args.b} if args.b is not None else {})}
    sides = tuple(checkouts)
    labels = args.configs
    configs = [config_named(label) for label in labels if label != "ort"]
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    repo = build(bench.workdir, labels, configs, checkouts)
    names = ["identity"] + [f"{folder_of(label)}_{side}" for label in labels for side in sides]
    points: dict[str, list[dict]] = collections.defaultdict(list)
    print(
        "".join(f"{side.upper()} = {code}\n" for side, code in checkouts.items()) + f"{args.rounds} rounds", flush=True
    )
    with TritonServer(repo, model_control_mode="explicit", load_models=tuple(names)) as server:

        def point(name: str) -> dict:
            result = perf_window(
                bench, server, analyzer, name, HOST_CONCURRENCY, args.warmup, args.window, (server.process.pid,)
            )
            result["stubs_cpu_ms"] = result["server_cpu_ms"] - result["pid_cpu_ms"][server.process.pid]
            print(
                f"  {name:>28} {result['infer_per_s']:7.0f} infer/s  server {result['server_cpu_ms']:.3f} ms/req  "
                f"stubs {result['stubs_cpu_ms']:.3f}  others {result['others_cores']:.2f}",
                flush=True,
            )
            if result["failures"]:
                print(f"  warning: {result['failures']:.0f} request(s) failed", flush=True)
            return result

        for round_number in range(args.rounds):
            print(f" round {round_number + 1}", flush=True)
            for label in labels:
                identity = point("identity")
                points["identity"].append(identity)
                for side in sides if round_number % 2 == 0 else sides[::-1]:
                    result = point(f"{folder_of(label)}_{side}")
                    result["identity"] = identity["infer_per_s"]
                    result["identity_stubs_cpu_ms"] = identity["stubs_cpu_ms"]
                    result["identity_server_cpu_ms"] = identity["server_cpu_ms"]
                    points[f"{label}_{side}"].append(result)
    identity = [p["infer_per_s"] for p in points["identity"]]
    note = f"identity: median {statistics.median(identity):.0f} infer/s ({min(identity):.0f}-{max(identity):.0f})"
    data = {**{side: str(code) for side, code in checkouts.items()}, "rounds": args.rounds, "points": points}
    tables = [against_identity(labels, sides, points)]
    if "b" in checkouts:
        tables.append(paired_table(labels, points))
    return Report(summary=targets(labels, points), tables=tables, data=data, notes=[note])


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def against_identity(labels: list[str], sides: tuple[str, ...], points: dict[str, list[dict]]) -> Table:
    """Per configuration and side: ratios to the identity model of the same round, and CPU per request."""
    rows = []
    for label in labels:
        for side in sides:
            found = points[f"{label}_{side}"]
            rows.append(
                [
                    label + (f" ({side.upper()})" if len(sides) > 1 else ""),
                    spread([p["infer_per_s"] / p["identity"] for p in found]),
                    spread([p["stubs_cpu_ms"] * 1000 for p in found], 0),
                    spread([p["stubs_cpu_ms"] / p["identity_stubs_cpu_ms"] for p in found], 2),
                    spread([p["server_cpu_ms"] * 1000 for p in found], 0),
                    spread([p["identity_stubs_cpu_ms"] * 1000 for p in found], 0),
                ]
            )
    header = (
        "configuration",
        "infer/s x identity",
        "stubs CPU us/req",
        "stubs CPU x identity's",
        "server CPU us/req",
        "identity stubs CPU us/req",
    )
    title = "against the identity model of the same round: medians (range) over the rounds"
    return Table(title, header, rows, chart=(1, "infer/s x identity (median over the rounds)"))


#: the issue-25 targets on checkout A: (configuration, what, target, at least)
TARGETS = (
    ("ort", "stubs", 1.5, False),
    ("null", "stubs", 1.5, False),
    ("default", "throughput", 0.85, True),
    ("null", "throughput", 0.85, True),
    ("ort", "throughput", 0.90, True),
)
TARGET_NAMES = {
    "ort": "onnxruntime",
    "null": "acl engine over the null pyACL (default NPU folder)",
    "default": "default NPU folder on acl-sim (the simulator's cost included)",
}


def targets(labels: list[str], points: dict[str, list[dict]]) -> Table:
    """The issue's targets at device time 0, concurrency 16, each ratio paired per round with the
    identity model (checkout A); configurations not measured are left out."""
    ratios = []
    for label, what, target, at_least in TARGETS:
        if label not in labels:
            continue
        found = points[f"{label}_a"]
        if what == "stubs":
            name = f"{TARGET_NAMES[label]}: stubs CPU per request / identity's"
            values = [p["stubs_cpu_ms"] / p["identity_stubs_cpu_ms"] for p in found]
        else:
            name = f"{TARGET_NAMES[label]}: infer/s / identity's (host ceiling, c={HOST_CONCURRENCY})"
            values = [p["infer_per_s"] / p["identity"] for p in found]
        ratios.append(Ratio(name, values, target, at_least))
    ratios += [
        Ratio(f"{label}: infer/s / identity's", [p["infer_per_s"] / p["identity"] for p in points[f"{label}_a"]])
        for label in labels
        if label not in TARGET_NAMES
    ]
    return ratio_table(ratios, "targets at device time 0 (checkout A; each ratio paired per round with identity)")


def paired_table(labels: list[str], points: dict[str, list[dict]]) -> Table:
    """Per configuration: each side's median x identity, and B/A paired by round."""
    rows = []
    for label in labels:
        a, b = points[f"{label}_a"], points[f"{label}_b"]
        rows.append(
            [
                label,
                spread([p["infer_per_s"] / p["identity"] for p in a]),
                spread([p["infer_per_s"] / p["identity"] for p in b]),
                spread([pb["infer_per_s"] / pa["infer_per_s"] for pa, pb in zip(a, b)]),
                spread([pb["server_cpu_ms"] / pa["server_cpu_ms"] for pa, pb in zip(a, b)]),
                spread([pb["stubs_cpu_ms"] / pa["stubs_cpu_ms"] for pa, pb in zip(a, b)]),
            ]
        )
    header = ("configuration", "A x identity", "B x identity", "B/A infer/s", "B/A server CPU/req", "B/A stubs CPU/req")
    title = "medians (range) over the rounds; B/A < 1 in CPU and > 1 in infer/s: B is cheaper"
    return Table(title, header, rows, chart=(3, "B/A infer/s (median over the rounds)"))
