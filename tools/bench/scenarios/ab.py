"""Two checkouts' host path in one tritonserver, interleaved: which code serves more.

Single runs of ``host-path`` on this host differ by up to 25 % for the same code, more than most
changes to the request path move. Here both codes serve side by side in one server: each checkout
gets its own copy of host-path's folders (their model.py imports that checkout), and every round
measures, per configuration, the identity model and then the configuration under A and under B
(the order alternating between rounds), each point one perf_analyzer window at concurrency 16
after a quiet-host wait. A round's B/A ratios compare neighbours measured seconds apart; the
report gives their median and range over the rounds, per configuration: throughput, server CPU
per request (tritonserver and its stubs) and the stubs' CPU per request.

    mkdir -p /tmp/base && git archive BASE ge_python_backend | tar -x -C /tmp/base
    .venv/bin/python -m tools.bench ab --b /tmp/base [--a .] [--configs ort,default] [--rounds 8]

Configurations: ``ort`` (GEModel on onnxruntime) and host-path's acl-sim folders at device time
0: ``default`` (what ``ge-triton generate`` writes for the .om) or ``MODE_sS_iI`` (e.g.
``return_s1_i1``).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
from pathlib import Path

from tools.bench.measure import perf_analyzer_arguments, perf_analyzer_binary, perf_window, positive_int
from tools.bench.repos import Config, build_host_repository, config_named
from tools.bench.runner import ROOT, Bench, Report, Table
from tools.bench.scenarios.host_path import HOST_CONCURRENCY

SUMMARY = "two checkouts side by side in one server, paired interleaved rounds against the identity model"
SIDES = ("a", "b")


def configurations(text: str) -> list[str]:
    """``--configs``: comma-separated labels, each ``ort``, ``default`` or ``MODE_sS_iI``."""
    labels = [label for label in text.split(",") if label]
    for label in labels:
        if label != "ort":
            try:
                config_named(label)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
    return labels


def checkout(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "ge_python_backend" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{path} holds no ge_python_backend package")
    return path


def add_arguments(parser) -> None:
    parser.add_argument("--a", type=checkout, default=ROOT, help="checkout A (default: this one)")
    parser.add_argument("--b", type=checkout, required=True, help="checkout B (e.g. the code before a change)")
    parser.add_argument(
        "--configs", type=configurations, default=["ort", "default"], help="comma-separated: ort, default, MODE_sS_iI"
    )
    parser.add_argument("--rounds", type=positive_int, default=8)
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of load before each window")
    perf_analyzer_arguments(parser)


def folder_of(label: str) -> str:
    return "ort" if label == "ort" else f"{label}_d0"


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
    checkouts = {"a": args.a, "b": args.b}
    labels = args.configs
    configs = [config_named(label) for label in labels if label != "ort"]
    analyzer = perf_analyzer_binary(args.perf_analyzer)
    repo = build(bench.workdir, labels, configs, checkouts)
    names = ["identity"] + [f"{folder_of(label)}_{side}" for label in labels for side in SIDES]
    points: dict[str, list[dict]] = collections.defaultdict(list)
    print(f"A = {checkouts['a']}\nB = {checkouts['b']}\n{args.rounds} rounds", flush=True)
    with TritonServer(repo, model_control_mode="explicit", load_models=tuple(names)) as server:

        def point(name: str) -> dict:
            result = perf_window(
                bench, server, analyzer, name, HOST_CONCURRENCY, args.warmup, args.window, (server.process.pid,)
            )
            result["stubs_cpu_ms"] = result["server_cpu_ms"] - result["pid_cpu_ms"][server.process.pid]
            print(
                f"  {name:>20} {result['infer_per_s']:7.0f} infer/s  server {result['server_cpu_ms']:.3f} ms/req  "
                f"stubs {result['stubs_cpu_ms']:.3f}  others {result['others_cores']:.2f}",
                flush=True,
            )
            return result

        for round_number in range(args.rounds):
            print(f" round {round_number + 1}", flush=True)
            for label in labels:
                identity = point("identity")
                points["identity"].append(identity)
                for side in SIDES if round_number % 2 == 0 else SIDES[::-1]:
                    result = point(f"{folder_of(label)}_{side}")
                    result["identity"] = identity["infer_per_s"]
                    points[f"{label}_{side}"].append(result)
    identity = [p["infer_per_s"] for p in points["identity"]]
    note = f"identity: median {statistics.median(identity):.0f} infer/s ({min(identity):.0f}-{max(identity):.0f})"
    data = {"a": str(checkouts["a"]), "b": str(checkouts["b"]), "rounds": args.rounds, "points": points}
    return Report(summary=paired_table(labels, points), data=data, notes=[note])


def paired_table(labels: list[str], points: dict[str, list[dict]]) -> Table:
    """Per configuration: each side's median x identity, and B/A paired by round."""

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

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
