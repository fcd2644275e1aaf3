"""ge-triton serve: run tritonserver (PATH or bundled) on a model repository until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from ge_python_backend.ops.server import TritonServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", type=Path, help="model repository folder")
    parser.add_argument("--address", default="127.0.0.1", help="listen address (default: loopback only)")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--log-verbose", type=int, default=0)
    parser.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for readiness")
    parser.add_argument(
        "--server-arg",
        dest="server_args",
        action="append",
        default=[],
        metavar="ARG",
        help="one more tritonserver argument, e.g. --server-arg=--log-info=false (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    server = TritonServer(
        args.repository,
        address=args.address,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log_verbose=args.log_verbose,
        extra_args=args.server_args,
        startup_timeout=args.startup_timeout,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"starting tritonserver on {args.repository} (log: {server.log_path})", flush=True)
    server.start()
    process = server.process
    assert process is not None  # set by a start() that returned; cleared only by stop()
    try:
        print(f"ready  HTTP    http://{server.http_address}", flush=True)
        print(f"       gRPC    {server.grpc_address}", flush=True)
        print(f"       metrics {server.metrics_url}", flush=True)
        print("Ctrl-C stops the server.", flush=True)
        while not stop.wait(0.5):
            if process.poll() is not None:
                print(f"tritonserver exited with code {process.returncode}:\n{server.log_tail()}")
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping tritonserver", flush=True)
        server.stop()
    return 0
