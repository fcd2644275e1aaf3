"""Two checkouts' host path in one tritonserver, interleaved: which code serves more.

Single runs of ``tools/bench_host.py`` on this host differ by up to 25 % for the same code, more
than most changes to the request path move. Here both codes serve side by side in one server:
each checkout gets its own copy of bench_host's folders (their model.py imports that checkout),
and every round measures, per configuration, the identity model and then the configuration
under A and under B (the order alternating between rounds), each point one perf_analyzer window
at concurrency 16 after a quiet-host wait. A round's B/A ratios compare neighbours measured
seconds apart; the report gives their median and range over the rounds, per configuration:
throughput, server CPU per request (tritonserver and its stubs) and the stubs' CPU per request.

    mkdir -p /tmp/base && git archive BASE ge_python_backend | tar -x -C /tmp/base
    .venv/bin/python tools/bench_ab.py --b /tmp/base [--a .] [--configs ort,default] [--rounds 8]

Configurations: ``ort`` (GEModel on onnxruntime) and bench_host's acl-sim folders at device time
0: ``default`` (what ``ge-triton generate`` writes for the .om) or ``MODE_sS_iI`` (e.g.
``return_s1_i1``).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import bench_host
from bench_common import save_json

from ge_python_backend.ops.bench.report import format_rows
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import format_config, read_config_file

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("a", "b")


def folder_of(label: str) -> str:
    return "ort" if label == "ort" else f"{label}_d0"


def build(workdir: Path, labels: list[str], configs: list[bench_host.Config], checkouts: dict[str, Path]) -> Path:
    """One repository: identity, and each configuration's folder once per side (``NAME_a``,
    ``NAME_b``), each importing its side's checkout."""
    repo = workdir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    for side, code in checkouts.items():
        built, _ = bench_host.build_repository(workdir / side, configs, [], code)
        if not (repo / "identity").exists():
            shutil.copytree(built / "identity", repo / "identity")
        for label in labels:
            target = repo / f"{folder_of(label)}_{side}"
            shutil.copytree(built / folder_of(label), target)
            config = read_config_file(target / "config.pbtxt")
            config.name = target.name
            (target / "config.pbtxt").write_text(format_config(config))
    return repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, default=ROOT, help="checkout A (default: this one)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (e.g. the code before a change)")
    parser.add_argument("--configs", default="ort,default", help="comma-separated: ort, default, MODE_sS_iI")
    parser.add_argument("--rounds", type=bench_host.positive_int, default=8)
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of load before each window")
    parser.add_argument("--quiet-timeout", type=float, default=15.0)
    parser.add_argument("--perf-analyzer", default="/tmp/perf_analyzer/perf_analyzer")
    parser.add_argument("--workdir", type=Path, default=Path("out/bench/ab"))
    args = parser.parse_args()
    checkouts = {"a": args.a.resolve(), "b": args.b.resolve()}
    for side, code in checkouts.items():
        if not (code / "ge_python_backend" / "__init__.py").is_file():
            raise SystemExit(f"bench_ab: --{side} {code} holds no ge_python_backend package")
    labels = [label for label in args.configs.split(",") if label]
    try:
        configs = [bench_host.config_named(label) for label in labels if label != "ort"]
    except ValueError as exc:
        parser.error(str(exc))
    analyzer = bench_host.perf_analyzer_binary(args.perf_analyzer)
    workdir = args.workdir.resolve()
    started = time.monotonic()
    repo = build(workdir, labels, configs, checkouts)
    names = ["identity"] + [f"{folder_of(label)}_{side}" for label in labels for side in SIDES]
    points: dict[str, list[dict]] = collections.defaultdict(list)
    print(f"A = {checkouts['a']}\nB = {checkouts['b']}\n{os.cpu_count()} CPUs; {args.rounds} rounds", flush=True)
    with TritonServer(repo, model_control_mode="explicit", load_models=tuple(names)) as server:

        def point(name: str) -> dict:
            result = bench_host.measure(
                server,
                analyzer,
                name,
                bench_host.HOST_CONCURRENCY,
                args.warmup,
                args.window,
                args.quiet_timeout,
                (server.process.pid,),
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
    report(labels, points)
    document = {"a": str(checkouts["a"]), "b": str(checkouts["b"]), "rounds": args.rounds, "points": points}
    print(f"\nwrote {save_json(workdir / 'ab.json', document)}; elapsed {time.monotonic() - started:.0f} s")
    return 0


def report(labels: list[str], points: dict[str, list[dict]]) -> None:
    """Per configuration: each side's median x identity, and B/A paired by round."""

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    rows = [["configuration", "A x identity", "B x identity", "B/A infer/s", "B/A server CPU/req", "B/A stubs CPU/req"]]
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
    identity = [p["infer_per_s"] for p in points["identity"]]
    print(f"\nidentity: median {statistics.median(identity):.0f} infer/s ({min(identity):.0f}-{max(identity):.0f})")
    print("medians (range) over the rounds; B/A < 1 in CPU and > 1 in infer/s: B is cheaper\n" + format_rows(rows))


if __name__ == "__main__":
    sys.exit(main())
