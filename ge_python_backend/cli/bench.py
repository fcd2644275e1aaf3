"""ge-triton bench: a concurrency sweep or fixed request rates against a served model."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import numpy as np

from ge_python_backend.ops.access import API_KEY_ENV
from ge_python_backend.ops.bench import BenchError, Sweep, Target, random_inputs, report, run_sweep
from ge_python_backend.ops.bench.npz import read_npz
from ge_python_backend.ops.bench.progress import Progress
from ge_python_backend.params import parse_int, parse_list

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


def _levels(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated numbers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers > 0")
    return values


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition(":")
    try:
        parsed = parse_list(parse_int(1))(dims)
    except ValueError:
        parsed = ()
    if not sep or not name or not parsed:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:D1,D2,... (dims without the batch axis)")
    return name, parsed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model name on the server")
    parser.add_argument("-u", "--url", help="server address HOST:PORT (default 127.0.0.1:8001 gRPC, :8000 HTTP)")
    parser.add_argument("-i", "--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--repository",
        type=Path,
        help="start a tritonserver on this model repository (loopback, free ports) for the run",
    )
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=_levels, help="requests kept in flight, e.g. 1,2,4,8,16,32 (the default)")
    load.add_argument("--rate", type=_levels, help="requests started per second, e.g. 50,100,150")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per level")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured load before each level")
    parser.add_argument("-b", "--batch-size", type=int, default=1, help="rows per request")
    parser.add_argument(
        "--shape",
        type=_shape,
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="dims (without the batch axis) of a variable-size input",
    )
    parser.add_argument("--data", type=Path, help=".npz file with one request's tensors (instead of random data)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV, ""),
        metavar="KEY",
        help="the operator key, where the server restricts model configs (ge-triton serve prints it; "
        f"default: ${API_KEY_ENV})",
    )
    parser.add_argument("--metrics-url", help="Prometheus endpoint (default: http://HOST:8002/metrics; 'none' to skip)")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG of throughput against p99 latency")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _checked(args: argparse.Namespace) -> dict[str, np.ndarray] | None:
    """Refuse what is wrong with the arguments before anything starts; the --data tensors."""
    if args.batch_size < 1:
        raise BenchError(f"--batch-size {args.batch_size}: expected an integer >= 1")
    if args.duration <= 0 or args.warmup < 0:
        raise BenchError(
            f"--duration {args.duration:g} --warmup {args.warmup:g}: expected a duration > 0, a warm-up >= 0"
        )
    if args.repository is not None:
        if args.url:
            raise BenchError("--url and --repository: --repository starts its own server; give one of them")
        if not args.repository.is_dir():
            raise BenchError(f"--repository {args.repository} is not a folder")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BenchError("--plot needs matplotlib: pip install 'ge-python-backend[bench]'") from None
    return read_npz(args.data) if args.data is not None else None


def _random_inputs(args: argparse.Namespace, url: str) -> dict[str, np.ndarray]:
    try:
        return random_inputs(
            url, args.protocol, args.model, batch_size=args.batch_size, shapes=dict(args.shape), api_key=args.api_key
        )
    except BenchError:
        raise
    except Exception as exc:  # tritonclient and grpc raise their own types
        raise BenchError(f"cannot read model {args.model!r} from {url} ({args.protocol}): {exc}") from None


def run(args: argparse.Namespace) -> int:
    data = _checked(args)
    sweep = Sweep(
        levels=args.rate or args.concurrency or (1, 2, 4, 8, 16, 32),
        mode="rate" if args.rate else "concurrency",
        duration_s=args.duration,
        warmup_s=args.warmup,
    )
    with contextlib.ExitStack() as stack:
        if args.repository is not None:
            from ge_python_backend.ops.server import TritonServer

            server = TritonServer(args.repository)
            stack.callback(server.close)  # on an early error too: no server nor folder left behind
            server.start()
            url = server.grpc_address if args.protocol == "grpc" else server.http_address
            metrics_url: str | None = server.metrics_url
            assert server.process is not None  # start() started it
            server_pid: int | None = server.process.pid
            print(f"started tritonserver on {args.repository}: {url} ({args.protocol}), metrics {metrics_url}")
        else:
            url = args.url or f"127.0.0.1:{DEFAULT_PORTS[args.protocol]}"
            metrics_url = f"http://{url.rsplit(':', 1)[0]}:8002/metrics"
            server_pid = None
        if args.metrics_url:
            metrics_url = None if args.metrics_url == "none" else args.metrics_url
        inputs = data if data is not None else _random_inputs(args, url)
        target = Target(url, args.model, inputs, args.protocol, metrics_url=metrics_url, server_pid=server_pid)
        shapes = ", ".join(f"{n} {list(a.shape)} {a.dtype}" for n, a in target.inputs.items())
        print(
            f"{sweep.mode} sweep {', '.join(f'{v:g}' for v in sweep.levels)} on {args.model} at {url}: "
            f"{sweep.warmup_s:g} s warm-up + {sweep.duration_s:g} s per level; request {shapes}"
        )
        progress = Progress(sweep.expected_s, enabled=not args.no_progress and sys.stderr.isatty())
        points = run_sweep(target, sweep, progress=progress)
    print(report.table(points))
    extra = report.model_metrics_table(points)
    if extra:
        print("model metrics over each window:\n" + extra)
    if not any(p.server for p in points):
        print(f"server metrics: not read ({metrics_url or 'disabled'})")
    for p in points:
        for sample in p.error_samples:
            print(f"error at {p.mode} {p.level:g}: {sample}")
    if args.json:
        print(f"wrote {report.write_json(args.json, report.document(target, sweep, points))}")
    if args.plot:
        print(f"wrote {report.plot({args.model: points}, args.plot, f'{args.model} ({args.protocol})')}")
    return 1 if any(p.requests == 0 for p in points) else 0
