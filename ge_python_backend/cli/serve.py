"""ge-triton serve: run tritonserver (PATH or bundled) on a model repository until a signal stops it,
with a supervisor that reloads a model whose instance died, hangs or lost its device, and serve's
own endpoint on the metrics port (tritonserver's metrics, the supervisor's, health for probes)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.access import (
    API_KEY_ENV,
    API_KEY_HEADER,
    GRPC_HEADER_PREFIX,
    OPERATOR_APIS,
    command_lines_hidden,
    operator_key,
    parse_apis,
)
from ge_python_backend.ops.server import TritonServer, arguments_in_force
from ge_python_backend.ops.supervised import SupervisedServer
from ge_python_backend.ops.supervisor import RecoveryPolicy
from ge_python_backend.triton.npu_ge import OUTPUT_DIR_ENV

#: tritonserver's --model-control-mode values
MODEL_CONTROL_MODES = ("none", "poll", "explicit")
#: Each ends serve, and with it tritonserver and the temporary folder.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived (BaseException: no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", type=Path, help="model repository folder")
    parser.add_argument(
        "--address", default="127.0.0.1", help="listen address of every endpoint (default: 127.0.0.1, loopback only)"
    )
    parser.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        default=8000,
        help="HTTP/REST port: inference, health, metadata, model control (default: 8000)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        metavar="PORT",
        default=8001,
        help="gRPC port: inference, health, metadata, model control (default: 8001)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        default=8002,
        help="Prometheus metrics port, path /metrics: Triton's nv_* and GEModel's ge_* series (default: 8002)",
    )
    parser.add_argument(
        "--log-verbose",
        type=int,
        metavar="LEVEL",
        default=0,
        help="tritonserver's verbose log level; 1 or more also shows GEModel's verbose lines (config parameter "
        "log_verbosity) (default: 0, off)",
    )
    parser.add_argument(
        "--http-inference",
        choices=("on", "off"),
        help="HTTP inference (infer, generate). tritonserver 2.51 aborts on one small JSON request that declares a "
        "huge shape, so the default is on when the HTTP address in force (--address, or --http-address given "
        "through --server-arg) is loopback and off otherwise; off answers 403 and keeps health and metadata on "
        "HTTP. gRPC is not affected",
    )
    parser.add_argument(
        "--restricted-apis",
        type=_apis,
        default=OPERATOR_APIS,
        metavar="GROUPS",
        help="tritonserver API groups that need the operator key (header "
        f"{API_KEY_HEADER}, on HTTP and gRPC; ${API_KEY_ENV} sets it, else it is random and printed), "
        "comma-separated, or 'none' to open them all (default: " + ",".join(OPERATOR_APIS) + ": model load and "
        "unload, model configs, shared memory, trace and log settings; docs/security.md)",
    )
    parser.add_argument(
        "--log-file",
        type=Path,
        help="keep tritonserver's log here, or '-': copy it to serve's standard output (a container's log) "
        "(default: in the temporary folder, removed at exit)",
    )
    parser.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for readiness")
    parser.add_argument(
        "--model-control-mode",
        choices=MODEL_CONTROL_MODES,
        help="tritonserver's model control: none loads every model at start; poll also reloads the ones whose "
        "files change; explicit loads only --load-model's at start, and the others through the model repository "
        "API (an operator API: it needs the key). Models are recovered in explicit mode only (tritonserver "
        "refuses reloads in the others) (default: explicit, with every model loaded at start)",
    )
    parser.add_argument(
        "--load-model",
        dest="load_models",
        action="append",
        default=[],
        metavar="NAME",
        help="with --model-control-mode explicit: a model to load at start, or '*' for every model (repeatable)",
    )
    defaults = RecoveryPolicy()
    parser.add_argument(
        "--recovery",
        choices=("on", "off"),
        default="on",
        help="reload a model whose stub process died or hangs, or whose engine failed fatally (device lost), "
        "through the repository API; off: only report it (/health, ge_model_healthy) (default: on)",
    )
    parser.add_argument(
        "--recovery-attempts",
        type=int,
        metavar="N",
        default=defaults.attempts,
        help=f"recoveries in a row, each followed by a new failure within {defaults.settle_s:g} s, before the model is "
        f"unloaded and left so (backoff {defaults.backoff_s:g} s, doubling) (default: {defaults.attempts})",
    )
    parser.add_argument(
        "--dead-stub-budget",
        type=int,
        metavar="N",
        default=defaults.dead_stub_budget,
        help="stub processes tritonserver may lose before serve restarts it instead of reloading the model: the "
        "Python backend keeps each dead stub's model instance, threads and memory, until the server exits "
        f"(default: {defaults.dead_stub_budget})",
    )
    parser.add_argument(
        "--hang-timeout",
        type=float,
        metavar="SECONDS",
        default=defaults.hang_s,
        help="a stub whose GEModel heartbeat (every second) is older than this hangs: it is killed and its model "
        f"reloaded (default: {defaults.hang_s:g})",
    )
    parser.add_argument(
        "--server-arg",
        dest="server_args",
        action="append",
        default=[],
        metavar="ARG",
        help="one more tritonserver argument, e.g. --server-arg=--exit-on-error=true (repeatable; it wins over "
        "serve's own)",
    )


def run(args: argparse.Namespace) -> int:
    handlers = {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS}
    served: SupervisedServer | None = None
    echo = args.log_file == Path("-")
    _log_to(sys.stdout)
    try:
        server = TritonServer(
            args.repository,
            address=args.address,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            model_control_mode=args.model_control_mode or "explicit",
            load_models=args.load_models or _every_model_by_default(args),
            exit_on_error=False,  # the models that load are served; the others are listed with the reason
            log_verbose=args.log_verbose,
            extra_args=args.server_args,
            startup_timeout=args.startup_timeout,
            http_inference=None if args.http_inference is None else args.http_inference == "on",
            restricted_apis=args.restricted_apis,
            api_key=operator_key() if args.restricted_apis else None,
            log_path=None if echo else args.log_file,
            log_echo=sys.stdout if echo else None,
            stop_with_parent=True,
            front_metrics=True,
            # tritonserver runs in serve's temporary folder: outputs of GE backend folders go where serve started
            env={OUTPUT_DIR_ENV: os.environ.get(OUTPUT_DIR_ENV) or os.getcwd()},
        )
        policy = RecoveryPolicy(
            attempts=args.recovery_attempts, hang_s=args.hang_timeout, dead_stub_budget=args.dead_stub_budget
        )
        served = SupervisedServer(server, policy, recover=args.recovery == "on")
        where = "serve's standard output" if echo else server.log_path
        print(f"starting tritonserver on {args.repository} (log: {where})", flush=True)
        served.start()
        _print_ready(served)
        code = served.wait()  # restarts a tritonserver that dies, within the recovery policy
        print(f"tritonserver exited with code {code}: {server.failures()}", flush=True)
        return 1
    except Stopped as stop:
        print(f"stopping tritonserver ({stop.name})", flush=True)
        return 0
    finally:
        if served is not None:
            served.close()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _every_model_by_default(args: argparse.Namespace) -> list[str]:
    """'*' when serve chose explicit mode itself (and no --server-arg chose another)."""
    forced = arguments_in_force(args.server_args).get("model-control-mode")
    return ["*"] if args.model_control_mode is None and not forced else []


def _log_to(stream) -> None:
    """The supervisor's lines (stdlib logging) on serve's output, each with its time."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    handler.formatter.converter = time.gmtime  # type: ignore[union-attr]
    logger = logging.getLogger("ge_python_backend.ops")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _stop(signum: int, frame: FrameType | None) -> None:
    for each in STOP_SIGNALS:  # one stop at a time: the cleanup must not be cut short
        signal.signal(each, signal.SIG_IGN)
    raise Stopped(signum)


def _apis(text: str):
    try:
        return parse_apis(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--restricted-apis {text!r}: ")) from None


def _print_ready(served: SupervisedServer) -> None:
    server = served.server
    print(f"ready  HTTP    http://{server.http_address}", flush=True)
    print(f"       gRPC    {server.grpc_address}", flush=True)
    if served.front is not None:
        base = served.front_url
        print(f"       metrics {server.metrics_url} (tritonserver's and serve's series)", flush=True)
        print(f"       health  {base}/health/ready, {base}/health/live, {base}/health", flush=True)
    off = served.supervisor.recovery_off
    print(f"       recovery {'off: ' + off if off else 'on'}", flush=True)
    if not server.http_inference:
        print("       HTTP inference is off (--http-inference): send inference over gRPC", flush=True)
    if server.restricted_apis:
        # a key the operator gave in the environment is theirs already: it stays out of logs
        key = f"the key in ${API_KEY_ENV}" if os.environ.get(API_KEY_ENV) else server.api_key
        print(
            f"       {', '.join(server.restricted_apis)} need header {API_KEY_HEADER}: {key} "
            f"(gRPC metadata {GRPC_HEADER_PREFIX}{API_KEY_HEADER}; --restricted-apis none opens them)",
            flush=True,
        )
        if not command_lines_hidden():
            print(
                "       the key is on tritonserver's command line, which every local user can read in /proc "
                "(mount /proc with hidepid=2 on a shared host)",
                flush=True,
            )
    states = {"READY": "ready", "UNAVAILABLE": "FAILED"}
    for model in server.models:
        if model.state:
            label = states.get(model.state, model.state)
            reason = f": {model.reason}" if model.reason and not model.ready else ""
            print(f"model  {label:7} {model.name} (version {model.version}){reason}", flush=True)
    unloaded = sorted(model.name for model in server.models if not model.state)
    if unloaded and server.model_control_mode == "explicit":
        print(
            f"model  -       not loaded: {', '.join(unloaded)} (explicit mode: POST /v2/repository/models/NAME/load "
            "loads one)",
            flush=True,
        )
    print("Ctrl-C stops the server.", flush=True)
