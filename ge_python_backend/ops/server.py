"""Find, start, wait for and stop a real ``tritonserver``.

The server comes from ``PATH`` or from the ``nvidia-pytriton`` wheel (tritonserver 2.51.0 with
the Python backend). Either way the server gets a backend directory prepared here: the Python
backend with the stub for the running interpreter (the wheel ships the stubs apart), plus the
``ge`` Python-based backend, so ``backend: "ge"`` configs work without per-model code.

    with TritonServer("repo") as server:
        client = tritonclient.http.InferenceServerClient(server.http_address)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Literal

from ge_python_backend.errors import GEError
from ge_python_backend.ops import ports, processes
from ge_python_backend.ops.access import Access, Api, random_value, restriction_args
from ge_python_backend.ops.bench.metrics import Scrape, fetch
from ge_python_backend.ops.processes import Stub, stubs_of
from ge_python_backend.repository.ge_backend import GE_BACKEND_NAME, NPU_GE_BACKEND_NAME, write_ge_backend
from ge_python_backend.triton.settings import RELOAD_PARAMETER

#: what the repository API does to a model
RepositoryAction = Literal["load", "unload"]
#: tritonserver's health checks (/v2/health/<check>)
HealthCheck = Literal["ready", "live"]


class ServerError(GEError):
    """tritonserver could not be found, started or reached."""


@dataclass(frozen=True)
class TritonInstall:
    """A tritonserver binary and the backends folder that comes with it."""

    binary: Path
    backends: Path
    library_path: Path | None  # extra LD_LIBRARY_PATH entry (the wheel's bundled libraries)


def find_tritonserver() -> TritonInstall:
    """tritonserver on PATH, else the one inside the installed nvidia-pytriton wheel. A tritonserver on
    PATH that lies in an nvidia-pytriton tree gets that tree's bundled libraries, which the Python
    stub copied out of the tree no longer finds through its relative RPATH."""
    on_path = shutil.which("tritonserver")
    if on_path:
        binary = Path(on_path).resolve()
        tree = binary.parent.parent  # <root>/pytriton/tritonserver/bin/tritonserver in a wheel's tree
        if (tree.name, tree.parent.name) == ("tritonserver", "pytriton") and (
            tree.parent.parent / "nvidia_pytriton.libs"
        ).is_dir():
            return pytriton_install(tree.parent.parent)
        return TritonInstall(binary, binary.parent.parent / "backends", binary.parent.parent / "lib")
    try:
        import pytriton
    except ImportError:
        raise ServerError(
            "no tritonserver on PATH and nvidia-pytriton is not installed: pip install 'ge-python-backend[server]'"
        ) from None
    return pytriton_install(Path(pytriton.__file__).parent.parent)


def pytriton_install(root: Path) -> TritonInstall:
    """The tritonserver inside an nvidia-pytriton wheel installed (or unpacked) in ``root``,
    e.g. 0.7.0: tritonserver 2.51.0 (Triton 24.10); 0.5.3: 2.43.0 (Triton 24.02)."""
    tree = Path(root) / "pytriton" / "tritonserver"
    binary = tree / "bin" / "tritonserver"
    if not binary.is_file():
        raise ServerError(f"no tritonserver from nvidia-pytriton in {root} ({binary} is missing)")
    return TritonInstall(binary, tree / "backends", Path(root) / "nvidia_pytriton.libs")


def _link(source: Path, target: Path) -> None:
    if target.is_symlink() or target.exists():
        if target.is_symlink() and Path(os.readlink(target)) == source:
            return
        target.unlink()
    target.symlink_to(source)


def _copy(source: Path, target: Path) -> None:
    if not (target.is_file() and target.stat().st_size == source.stat().st_size):
        shutil.copy2(source, target)


def prepare_backends(install: TritonInstall, workspace: Path) -> Path:
    """A backends folder for ``install``: its backends linked in, the Python stub for this
    interpreter next to the Python backend, the ``ge`` backend and, unless ``install`` has its
    own, the ``npu_ge`` one.

    The Python backend's files are copied, not linked: Triton refuses a backend library whose
    real path lies outside the backend directory (which Python-based backends such as ``ge``
    resolve through ``python/``)."""
    backends = workspace / "backends"
    backends.mkdir(parents=True, exist_ok=True)
    for entry in install.backends.iterdir():
        if entry.is_dir() and entry.name not in ("python", GE_BACKEND_NAME):
            _link(entry, backends / entry.name)
    python = backends / "python"
    python.mkdir(exist_ok=True)
    for entry in (install.backends / "python").iterdir():
        if entry.is_file():
            _copy(entry, python / entry.name)
    stub = python / "triton_python_backend_stub"
    if not stub.exists():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        bundled = install.binary.parent.parent / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not bundled.is_file():
            raise ServerError(f"no Python backend stub for Python {version} (looked for {bundled})")
        _copy(bundled, stub)
    write_ge_backend(backends)
    if not (install.backends / NPU_GE_BACKEND_NAME).exists():  # CANN's own C++ npu_ge backend wins
        write_ge_backend(backends, NPU_GE_BACKEND_NAME)
    return backends


def python_based_backends(install: TritonInstall) -> list[str]:
    """The backends served by the Python backend's library in a ``prepare_backends`` folder.

    Each gets its own ``shm-region-prefix-name`` per server: before python_backend r24.04 (commit
    4d42111) a stub's region in /dev/shm is ``<prefix><n>``, n counting the server's instances from
    1 (r24.02 ``src/stub_launcher.cc:81-86``), so two tritonservers 24.02 on one host with the
    default prefix open each other's regions (a stub that cannot initialize its region, a double
    free, a load that never ends). From r24.04 the region names end in a random UUID instead."""
    names = ["python", GE_BACKEND_NAME]
    if not (install.backends / NPU_GE_BACKEND_NAME).exists():
        names.append(NPU_GE_BACKEND_NAME)
    return names


SHM_DIR = Path("/dev/shm")
#: The largest TCP port.
MAX_PORT = 65535


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_LOG_PREFIX = re.compile(r"^[EWI]\d{4} [\d:.]+\s+\d+ [^\]]+\] ")
_LOG_RECORD = re.compile(r"^([EWI])\d{4} [\d:.]+\s+\d+ ([^\]]+)\] (.*)$")


@dataclass(frozen=True)
class LogRecord:
    """One message of tritonserver's log."""

    severity: str  # "E", "W" or "I"
    source: str  # file:line that logged it, e.g. "model.py:188"
    message: str  # as it was logged: unquoted, with its own line breaks


def log_records(text: str) -> list[LogRecord]:
    """tritonserver's log as messages, in either of its formats: 2.43 (Triton 24.02) writes a
    message as it is, a traceback going on over the next lines; 2.51 writes each message on one
    line, in quotes, with its line breaks and quotes escaped. Lines before the first message
    (and tables the server prints) are not messages."""
    records: list[LogRecord] = []
    for line in text.splitlines():
        found = _LOG_RECORD.match(line)
        if found:
            severity, source, message = found.groups()
            if len(message) >= 2 and message[0] == message[-1] == '"':
                with contextlib.suppress(ValueError):
                    message = json.loads(message)
            records.append(LogRecord(severity, source, message))
        elif records and not line.startswith(("+-", "| ")):
            last = records[-1]
            records[-1] = LogRecord(last.severity, last.source, f"{last.message}\n{line}")
    return records


#: error lines every start on a host without a GPU logs
_HARMLESS = ("CudaDriverHelper has not been initialized",)


def arguments_in_force(args: Sequence[str]) -> dict[str, list[str]]:
    """Each ``--name`` of a tritonserver command line with its values in order (``--name=value``
    or ``--name value``). tritonserver takes the last value of an option (lists such as
    ``--load-model`` take all)."""
    values: dict[str, list[str]] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--"):
            name, equals, value = arg[2:].partition("=")
            if not equals and index + 1 < len(args) and not args[index + 1].startswith("--"):
                index += 1
                value = args[index]
            values.setdefault(name, []).append(value)
        index += 1
    return values


def without_option(args: Sequence[str], name: str) -> list[str]:
    """``args`` without each ``--name`` and its value (``--name=value`` or ``--name value``)."""
    kept: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        option, equals, _ = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if option != name:
            kept.append(arg)
        elif not equals and index + 1 < len(args) and not args[index + 1].startswith("--"):
            index += 1  # its value
        index += 1
    return kept


def _true(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Endpoint:
    """One of tritonserver's listening endpoints, as the command line in force sets it."""

    name: str  # "HTTP", "gRPC", "metrics"
    option: str  # the option prefix: --http-port, --allow-http ...
    host: str
    port: int
    enabled: bool


@dataclass(frozen=True)
class ModelState:
    """One model version as tritonserver's repository index reports it."""

    name: str
    version: str
    state: str  # READY, UNAVAILABLE, LOADING, UNLOADING, or "" (not loaded, explicit mode)
    reason: str  # Triton's reason, first line (load errors carry the traceback after it)

    @property
    def ready(self) -> bool:
        return self.state == "READY"


class TritonServer:
    """One tritonserver process (loopback and free ports by default); always stopped on exit.

    ``extra_args`` are appended to the command line, so they win where they repeat an option
    (tritonserver takes the last value): ports, addresses, ``--exit-on-error`` and
    ``--model-control-mode`` are read back from the whole command line, and readiness is judged
    by what is in force.

    ``restricted_apis`` need ``api_key`` (random unless given) in header ``ge-triton-key`` on
    HTTP and gRPC (``ops.access``), except groups ``extra_args`` restrict themselves; the server's
    own calls (readiness, ``check --load``) carry whatever is in force (``http_headers``).
    ``http_inference`` None: on when the HTTP address in force is loopback, else off.

    ``front_metrics``: tritonserver's metrics endpoint moves to a free loopback port
    (``triton_metrics_url``) and the metrics address in force is left for the caller to answer
    (serve's ``ops.front``). ``log_echo``: a stream that gets a copy of every line tritonserver
    writes (its log file still gets them).
    """

    def __init__(
        self,
        model_repository: Path,
        *,
        address: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_control_mode: str = "none",
        load_models: Sequence[str] = (),
        exit_on_error: bool = True,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = 180.0,
        workspace: Path | None = None,
        install: TritonInstall | None = None,
        http_inference: bool | None = True,
        restricted_apis: Sequence[Api] = (),
        api_key: str | None = None,
        log_path: Path | None = None,
        stop_with_parent: bool = False,
        front_metrics: bool = False,
        log_echo: IO[str] | None = None,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.address = address
        self.load_models = tuple(load_models)
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.install = install
        self.stop_with_parent = stop_with_parent
        self.process: subprocess.Popen | None = None
        #: the Python backend's /dev/shm region names start with it (see ``python_based_backends``)
        self._shm_prefix = f"ge_triton_{random_value()[:12]}"
        #: the models and their states once the server is ready (``wait_ready``)
        self.models: list[ModelState] = []
        self._ready = False
        forced = arguments_in_force(self.extra_args)

        def last(name: str, default: str) -> str:
            return forced[name][-1] if forced.get(name) else default

        self.model_control_mode = last("model-control-mode", model_control_mode)
        if self.load_models and self.model_control_mode != "explicit":  # tritonserver exits at start on it
            raise ServerError(
                f"--load-model {self.load_models[0]}: models are loaded by name only in model control mode explicit "
                f"(in force: {self.model_control_mode}, in which every model loads at start)"
            )
        self.exit_on_error = _true(last("exit-on-error", str(exit_on_error)))
        given = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        chosen = {port for port in given.values() if port is not None}
        for option in given:  # free ports, distinct: two binds in a row may be given the same one
            while given[option] is None:
                port = free_port(address)
                if port not in chosen:
                    given[option] = port
                    chosen.add(port)
        self.endpoints = tuple(
            Endpoint(
                name,
                option,
                last(f"{option}-address", address),
                int(last(f"{option}-port", str(given[option]))),
                _true(last(f"allow-{option}", "true")),
            )
            for name, option in (("HTTP", "http"), ("gRPC", "grpc"), ("metrics", "metrics"))
        )
        self._http, self._grpc, self._metrics = self.endpoints
        self.http_port, self.grpc_port, self.metrics_port = (e.port for e in self.endpoints)
        #: where tritonserver's own metrics endpoint listens
        self.triton_metrics = (
            replace(self._metrics, host="127.0.0.1", port=free_port()) if front_metrics else self._metrics
        )
        self.front_metrics = front_metrics
        self.log_echo = log_echo
        if not self._http.enabled:
            raise ServerError(
                "--allow-http=false: the server's readiness is checked over HTTP; keep HTTP on and refuse "
                "HTTP inference instead (ge-triton serve --http-inference off)"
            )
        self.http_inference = ports.is_loopback(self._http.host) if http_inference is None else http_inference
        self.restricted_apis = tuple(restricted_apis)
        self.api_key = api_key or (random_value() if self.restricted_apis else "")
        taken = Access.of(forced.get("http-restricted-api", ()), forced.get("grpc-restricted-protocol", ()))
        self._restrictions = restriction_args(
            self.restricted_apis, self.api_key, http_inference=self.http_inference, taken=taken
        )
        ours = arguments_in_force(self._restrictions)
        #: what tritonserver restricts: ours and the extra arguments' restrictions
        self.access = Access.of(
            [*ours.get("http-restricted-api", ()), *forced.get("http-restricted-api", ())],
            [*ours.get("grpc-restricted-protocol", ()), *forced.get("grpc-restricted-protocol", ())],
        )
        # last: a refused command line leaves no folder behind
        self._own_workspace = workspace is None
        self.workspace = Path(workspace or tempfile.mkdtemp(prefix="ge-triton-"))
        self.log_path = Path(log_path) if log_path is not None else self.workspace / "tritonserver.log"

    @property
    def http_address(self) -> str:
        return f"{_connect_host(self._http.host)}:{self._http.port}"

    @property
    def grpc_address(self) -> str:
        return f"{_connect_host(self._grpc.host)}:{self._grpc.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{_connect_host(self._metrics.host)}:{self._metrics.port}/metrics"

    @property
    def shm_prefix(self) -> str:
        """What the names of this server's shared-memory regions in /dev/shm start with."""
        return self._shm_prefix

    @property
    def metrics_endpoint(self) -> Endpoint:
        """The metrics address and port in force (tritonserver's own, unless ``front_metrics``)."""
        return self._metrics

    @property
    def triton_metrics_url(self) -> str | None:
        """tritonserver's own metrics page (``metrics_url`` unless ``front_metrics``); None when off."""
        endpoint = self.triton_metrics
        return f"http://{_connect_host(endpoint.host)}:{endpoint.port}/metrics" if endpoint.enabled else None

    def command(self, install: TritonInstall, backends: Path, load_models: Sequence[str] | None = None) -> list[str]:
        """tritonserver's command line; ``load_models``: the models to load at start instead of
        ``load_models`` and any ``--load-model`` of the extra arguments (mode explicit)."""
        http, grpc, metrics = self.endpoints
        args = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.address}",
            f"--http-port={http.port}",
            f"--grpc-address={self.address}",
            f"--grpc-port={grpc.port}",
            f"--metrics-address={self.address}",
            f"--metrics-port={metrics.port}",
            f"--model-control-mode={self.model_control_mode}",
            f"--exit-on-error={'true' if self.exit_on_error else 'false'}",
            f"--log-verbose={self.log_verbose}",
            "--exit-timeout-secs=15",
            "--backend-config=python,shm-default-byte-size=16777216",
            "--backend-config=python,shm-growth-byte-size=16777216",
        ]
        args += [
            f"--backend-config={backend},shm-region-prefix-name={self._shm_prefix}_{backend}_"
            for backend in python_based_backends(install)
        ]
        args += self._restrictions
        if load_models is None:
            args += [f"--load-model={name}" for name in self.load_models]
            args += self.extra_args
        else:
            args += [f"--load-model={name}" for name in load_models]
            args += without_option(self.extra_args, "load-model")
        if self.front_metrics:  # last: it wins over the extra arguments
            args += [f"--metrics-address={self.triton_metrics.host}", f"--metrics-port={self.triton_metrics.port}"]
        return args

    def _environment(self, install: TritonInstall) -> dict[str, str]:
        env = dict(os.environ)
        # The Python stub takes its interpreter prefix from the python3 first on PATH.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        if install.library_path is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(install.library_path), env.get("LD_LIBRARY_PATH", "")) if p
            )
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        env.update(self.env)
        return env

    def check_ports(self) -> None:
        """ServerError naming the first enabled endpoint whose port is not a TCP port, is another
        endpoint's (tritonserver would print its usage and exit), or something already listens on."""
        enabled = [e for e in self.endpoints if e.enabled]
        for endpoint in enabled:
            if not 1 <= endpoint.port <= MAX_PORT:
                raise ServerError(f"--{endpoint.option}-port {endpoint.port}: expected a TCP port, 1 to {MAX_PORT}")
        for index, endpoint in enumerate(enabled):
            for other in enabled[:index]:
                if (other.host, other.port) == (endpoint.host, endpoint.port):
                    raise ServerError(
                        f"--{other.option}-port and --{endpoint.option}-port are both {endpoint.port} on "
                        f"{endpoint.host}: each endpoint needs a port of its own"
                    )
        for endpoint in enabled:
            if ports.in_use(endpoint.host, endpoint.port):
                held = ", ".join(ports.holders(endpoint.port))
                raise ServerError(
                    f"{endpoint.name} port {endpoint.port} on {endpoint.host} is in use"
                    + (f" by {held}" if held else "")
                    + f"; stop that server or choose another port (--{endpoint.option}-port)"
                )

    def start(self) -> TritonServer:
        """Start tritonserver and wait until it is ready (``wait_ready``); stopped on any failure."""
        if not self.model_repository.is_dir():
            raise ServerError(f"model repository {self.model_repository} is not a folder")
        if (self.model_repository / "config.pbtxt").is_file():  # tritonserver would serve nothing from it
            raise ServerError(
                f"{self.model_repository} is a model folder (it holds config.pbtxt), not a repository: give the "
                f"repository that holds it ({self.model_repository.parent})"
            )
        self.check_ports()
        return self._launch("wb")

    def restart(self, load_models: Sequence[str] | None = None) -> TritonServer:
        """Start again after tritonserver ended by itself: the same command line and ports (the
        caller's endpoint on the metrics port stays), its log goes on in the same file.
        ``load_models``: load only these at start (mode explicit; the caller loads the others
        through the repository API): tritonserver opens its endpoints once its start-up loads end."""
        if load_models is not None and self.model_control_mode != "explicit":
            raise ServerError(
                f"a restart with chosen models needs model control mode explicit, not {self.model_control_mode}"
            )
        self.stop(timeout=0)
        self._ready = False
        return self._launch("ab", load_models)

    def _launch(self, log_mode: Literal["wb", "ab"], load_models: Sequence[str] | None = None) -> TritonServer:
        #: where this run's lines start in the log file
        self.log_offset = self.log_path.stat().st_size if log_mode == "ab" and self.log_path.exists() else 0
        install = self.install or find_tritonserver()
        backends = prepare_backends(install, self.workspace)
        try:
            with self.log_path.open(log_mode) as log:
                self.process = subprocess.Popen(
                    self.command(install, backends, load_models),
                    stdout=log if self.log_echo is None else subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=self._environment(install),
                    cwd=self.workspace,
                    start_new_session=True,
                    preexec_fn=_terminate_with_parent if self.stop_with_parent else None,
                )
            if self.log_echo is not None:
                threading.Thread(target=self._copy_log, name="ge-triton-log", daemon=True).start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _copy_log(self) -> None:
        """tritonserver's output, line by line, into the log file and ``log_echo``."""
        process, echo = self.process, self.log_echo
        assert process is not None and process.stdout is not None and echo is not None
        with self.log_path.open("ab") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                with contextlib.suppress(OSError, ValueError):  # a closed echo stream stops the echo only
                    echo.write(line.decode(errors="replace"))
                    echo.flush()

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://{self.http_address}{path}", timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def wait_ready(self) -> list[ModelState]:
        """Wait until the server answers from its own sockets and no model is loading; return
        (and keep in ``models``) every model's state.

        tritonserver opens its endpoints after the start-up loads. With ``--exit-on-error=true``
        (its default) a model that fails to load makes it exit, which raises here with the
        reasons from its log; with ``false`` it serves the others, and ``models`` says which
        are up and why the others are not (/v2/health/ready stays 400 then).
        """
        process = self.process
        if process is None:
            raise ServerError("tritonserver is not running: wait_ready needs start() first")
        deadline = time.monotonic() + self.startup_timeout
        ours = False
        while time.monotonic() < deadline:
            if process.poll() is not None:
                code = process.returncode
                raise ServerError(f"tritonserver exited with code {code} while starting: {self.failures()}")
            if self._get("/v2/health/live") == 200:
                if not ours:
                    self._check_ours(process.pid)
                    ours = True
                states = self.model_states()
                if states is not None and not any(s.state in ("LOADING", "UNLOADING") for s in states):
                    self.models = states
                    self._ready = True
                    return states
            time.sleep(0.2)
        raise ServerError(f"tritonserver not ready after {self.startup_timeout:.0f} s: {self.failures()}")

    def _check_ours(self, pid: int) -> None:
        """ServerError when another process holds one of the enabled ports (it answered for us)."""
        for endpoint in (self._http, self._grpc, self.triton_metrics):
            sockets = ports.listening_sockets(endpoint.port) if endpoint.enabled else None
            if sockets is not None and not ports.holds(pid, sockets):
                held = ", ".join(ports.holders(endpoint.port)) or "another process"
                raise ServerError(
                    f"{endpoint.name} port {endpoint.port} answers, but {held} holds it, not this tritonserver "
                    f"(pid {pid}); choose another port (--{endpoint.option}-port)"
                )

    def running(self) -> bool:
        """Whether tritonserver runs. From /proc, not ``Popen.poll``: while another thread waits for
        the process (serve's main loop), poll answers "running" even after it died."""
        process = self.process
        return process is not None and process.returncode is None and processes.running(process.pid)

    def stub_running(self, pid: int) -> bool:
        """Whether stub process ``pid`` runs (a stub that ended, even unreaped, does not)."""
        return processes.running(pid)

    def health(self, check: HealthCheck) -> int:
        """The HTTP status of tritonserver's /v2/health/<check> (0: no answer)."""
        return self._get(f"/v2/health/{check}")

    def version(self) -> str | None:
        """tritonserver's version, e.g. "2.51.0" (its server metadata, GET /v2); None: no answer."""
        request = urllib.request.Request(f"http://{self.http_address}/v2", headers=self.http_headers(Api.METADATA))
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return str(json.loads(response.read()).get("version", "")) or None
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def version_ready(self, model: str, version: str) -> bool | None:
        """Whether tritonserver serves ``model`` version ``version`` (None: no answer)."""
        status = self._get(f"/v2/models/{model}/versions/{version}/ready")
        return None if status == 0 else status == 200

    def stubs(self) -> list[Stub]:
        """This server's Python backend stub processes (none when it is not running)."""
        process = self.process
        return stubs_of(process.pid) if process is not None else []

    def scrape(self) -> Scrape | None:
        """tritonserver's own metrics now; None when its endpoint is off or does not answer."""
        url = self.triton_metrics_url
        if url is None:
            return None
        try:
            return fetch(url)
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def repository_call(
        self, action: RepositoryAction, model: str, timeout: float, body: dict | None = None
    ) -> tuple[int, str]:
        """POST /v2/repository/models/<model>/<action> with the operator key when it needs one:
        (HTTP status, body); status 0 when the server did not answer (the body says why)."""
        request = urllib.request.Request(
            f"http://{self.http_address}/v2/repository/models/{model}/{action}",
            data=json.dumps(body or {}).encode(),
            method="POST",
            headers=self.http_headers(Api.MODEL_REPOSITORY),
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    def reload(self, model: str, note: str, timeout: float) -> tuple[int, str]:
        """Load ``model`` afresh, in place, with the config it is served with plus parameter
        RELOAD_PARAMETER = ``note``: (HTTP status, body) as ``repository_call``.

        A plain load of a loaded model whose files did not change does nothing, and one with the
        same config only updates its instance groups, keeping the instances it has, dead ones too
        (core r24.10 ``model_repository_manager.cc`` ``InitializeModelInfo``, ``model_lifecycle.cc``
        ``AsyncLoad`` with ``ConfigChangeRequiresReload``, which ignores ``instance_group`` and
        ``version_policy`` only). Another parameter value makes it a full load, in the background:
        the old instances serve until the new ones are ready, and stay if the load fails."""
        request = urllib.request.Request(
            f"http://{self.http_address}/v2/models/{model}/config", headers=self.http_headers(Api.MODEL_CONFIG)
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                config = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return 0, f"reading the config of {model}: {exc}"
        config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": note}
        return self.repository_call("load", model, timeout, {"parameters": {"config": json.dumps(config)}})

    def http_headers(self, api: Api) -> dict[str, str]:
        """The headers an HTTP call to ``api`` needs on this server (none when it is open)."""
        return self.access.http_headers(api)

    def model_states(self) -> list[ModelState] | None:
        """Every model of the repository index; None if the server does not answer."""
        request = urllib.request.Request(
            f"http://{self.http_address}/v2/repository/index",
            data=b"{}",
            method="POST",
            headers=self.http_headers(Api.MODEL_REPOSITORY),
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                index = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return [
            ModelState(
                entry.get("name", ""),
                entry.get("version", ""),
                entry.get("state", ""),
                entry.get("reason", "").split("\n")[0].strip(),
            )
            for entry in index
        ]

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def last_words(self) -> str:
        """What this run of tritonserver said as it died: the uncaught exception ("terminate called
        ...", "what(): ...") or the signal it caught ("Signal (11) received.")."""
        return last_words(self.log_text()[getattr(self, "log_offset", 0) :])

    def log_records(self) -> list[LogRecord]:
        """The messages of the server's log (``log_records``)."""
        return log_records(self.log_text())

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def failures(self) -> str:
        """tritonserver's error lines (one line each, tracebacks cut), else the log's last lines."""
        found: list[str] = []
        for line in self.log_text().splitlines():
            if not (line.startswith("E") and _LOG_PREFIX.match(line)) and not line.startswith("error:"):
                continue
            text = _LOG_PREFIX.sub("", line).strip().strip('"').split("\\n")[0].strip()
            if text and text not in found and not text.startswith(_HARMLESS):
                found.append(text)
        return "\n  " + "\n  ".join(found) if found else "\n" + self.log_tail(20)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the server (SIGINT, then SIGKILL of its process group); idempotent.

        A ready server gets ``timeout`` (default 30 s) to finish and unload; one still starting
        gets 3 s: tritonserver takes SIGINT only once its start-up loads are done, and has
        nothing to finish before that."""
        process, self.process = self.process, None
        if timeout is None:
            timeout = 30.0 if self._ready else 3.0
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self._remove_regions()

    def _remove_regions(self) -> None:
        """The shared memory this server's stubs left in /dev/shm (killed with the process group,
        they could not): its names start with this server's own prefix."""
        for entry in SHM_DIR.glob(f"{self._shm_prefix}*"):
            with contextlib.suppress(OSError):
                entry.unlink()

    def close(self) -> None:
        """Stop the server and remove the workspace it made (its log too, unless ``log_path``)."""
        self.stop()
        if self._own_workspace:
            shutil.rmtree(self.workspace, ignore_errors=True)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        if any(exc):  # keep the workspace (and the log) to look at
            self.stop()
        else:
            self.close()


def error_text(body: str) -> str:
    """The error of a repository API answer; a Python exception's traceback ("At: ...", added by the
    stub) is left out: the message says what is wrong, the server log has the rest."""
    try:
        text = str(json.loads(body).get("error", body))
    except (json.JSONDecodeError, AttributeError):
        text = body
    return text.split("\n\nAt:\n")[0].strip().rstrip(";").strip()


def last_words(log: str) -> str:
    """The lines of a dying tritonserver's log that say why (see ``TritonServer.last_words``)."""
    return " ".join(
        line.strip()
        for line in log.splitlines()
        if "terminate called" in line or "what():" in line or line.startswith("Signal (")
    )


def _connect_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}.get(host, host)


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, even by SIGKILL
    (Linux prctl PR_SET_PDEATHSIG; tritonserver shuts down cleanly on SIGTERM)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
