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
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.errors import GEError
from ge_python_backend.repository.ge_backend import GE_BACKEND_NAME, write_ge_backend


class ServerError(GEError):
    """tritonserver could not be found, started or reached."""


@dataclass(frozen=True)
class TritonInstall:
    """A tritonserver binary and the backends folder that comes with it."""

    binary: Path
    backends: Path
    library_path: Path | None  # extra LD_LIBRARY_PATH entry (the wheel's bundled libraries)


def find_tritonserver() -> TritonInstall:
    """tritonserver on PATH, else the one inside the installed nvidia-pytriton wheel."""
    on_path = shutil.which("tritonserver")
    if on_path:
        binary = Path(on_path).resolve()
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
    interpreter next to the Python backend, and the ``ge`` backend.

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
    return backends


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class TritonServer:
    """One tritonserver process on loopback with free ports; always stopped on exit."""

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
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.address = address
        self.http_port = http_port or free_port(address)
        self.grpc_port = grpc_port or free_port(address)
        self.metrics_port = metrics_port or free_port(address)
        self.model_control_mode = model_control_mode
        self.load_models = tuple(load_models)
        self.exit_on_error = exit_on_error
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.install = install
        self._own_workspace = workspace is None
        self.workspace = Path(workspace or tempfile.mkdtemp(prefix="ge-triton-"))
        self.log_path = self.workspace / "tritonserver.log"
        self.process: subprocess.Popen | None = None

    @property
    def http_address(self) -> str:
        return f"{self.address}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.address}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.metrics_port}/metrics"

    def command(self, install: TritonInstall, backends: Path) -> list[str]:
        args = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.address}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.address}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.address}",
            f"--metrics-port={self.metrics_port}",
            f"--model-control-mode={self.model_control_mode}",
            f"--exit-on-error={'true' if self.exit_on_error else 'false'}",
            f"--log-verbose={self.log_verbose}",
            "--exit-timeout-secs=15",
            "--backend-config=python,shm-default-byte-size=16777216",
            "--backend-config=python,shm-growth-byte-size=16777216",
        ]
        args += [f"--load-model={name}" for name in self.load_models]
        return args + list(self.extra_args)

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

    def start(self) -> TritonServer:
        if not self.model_repository.is_dir():
            raise ServerError(f"model repository {self.model_repository} is not a folder")
        install = self.install or find_tritonserver()
        backends = prepare_backends(install, self.workspace)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(install, backends),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._environment(install),
            cwd=self.workspace,
            start_new_session=True,
        )
        log.close()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://{self.http_address}{path}", timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def wait_ready(self) -> None:
        """Wait until the server is ready (every model loaded), or only live when it may run
        with models that failed (``exit_on_error=False``) or in explicit control mode."""
        process = self.process
        if process is None:
            raise ServerError("tritonserver is not running: wait_ready needs start() first")
        need_ready = self.exit_on_error and self.model_control_mode == "none"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServerError(
                    f"tritonserver exited with code {process.returncode} while starting:\n{self.log_tail()}"
                )
            status = self._get("/v2/health/ready" if need_ready else "/v2/health/live")
            if status == 200 and (need_ready or not self._models_loading()):
                return
            time.sleep(0.2)
        raise ServerError(f"tritonserver not ready after {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def _models_loading(self) -> bool:
        request = urllib.request.Request(f"http://{self.http_address}/v2/repository/index", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError):
            return True
        return '"LOADING"' in text or '"UNLOADING"' in text

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGINT, then SIGKILL of its process group); idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._own_workspace and not any(exc):
            shutil.rmtree(self.workspace, ignore_errors=True)
