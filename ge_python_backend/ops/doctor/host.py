"""Checks of the host: Python and packages, what the stub's interpreter imports, the CANN install,
npu-smi, the device nodes, tritonserver and /dev/shm. Each reads what is there and requires
nothing (no CANN, no npu-smi, no NPU); ``HostView`` says where to look, so tests point it at a
fake tree.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path

from ge_python_backend.ops.doctor.findings import Finding, Level, error, ok, warn
from ge_python_backend.version import __version__

MIB = 1 << 20
#: Docker's default /dev/shm; the Python backend needs a region per model instance
SMALL_SHM_BYTES = 256 * MIB
#: tritonserver of each nvidia-pytriton wheel (ops/server.py: pytriton_install)
PYTRITON_SERVERS = {"0.7.0": "2.51.0", "0.5.3": "2.43.0"}
#: server versions count months from 2.43.0 = release 24.02 (Triton's release notes pair them so)
_BASE_MINOR, _BASE_YEAR, _BASE_MONTH = 43, 24, 2
#: response senders for non-decoupled models arrived in r24.06 (triton/capabilities.py), a model's
#: own is_ready in r26.03 (python_backend 65529b0, pb_stub.cc 1618-1640)
SENDER_RELEASE, IS_READY_RELEASE = (24, 6), (26, 3)
#: hicann/runtime src/acl/aclrt_impl/acl.cpp 51-52, 66: where the driver and firmware are installed
ASCEND_INSTALL_INFO = "/etc/ascend_install.info"
#: what older CANN installs write (version=...), under the toolkit's or nnrt's latest folder
LEGACY_INSTALL_INFOS = ("ascend_toolkit_install.info", "ascend_nnrt_install.info")
LEGACY_ROOTS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/nnrt/latest")
DEVICE_GROUP = "HwHiAiUser"
#: the device nodes a CANN process opens besides /dev/davinciN (Ascend docker runtime's list)
SHARED_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


@dataclass(frozen=True)
class HostView:
    """Where the checks look: the environment, the file tree's root, PATH lookup."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    root: Path = Path("/")
    which: Callable[[str], str | None] = field(default=shutil.which)
    #: os.access (root may open anything, so tests give their own)
    access: Callable[[Path, int], bool] = field(default=os.access)
    statvfs: Callable[[Path], os.statvfs_result] = field(default=os.statvfs)
    timeout: float = 30.0
    #: the folder ``ge-triton serve`` puts first on PATH for tritonserver (ops/server.py): this
    #: command's own environment's bin
    serve_bin: Path = field(default_factory=lambda: Path(sys.executable).parent)

    def path(self, absolute: str | Path) -> Path:
        return self.root / str(absolute).lstrip("/")

    def run(self, arguments: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            arguments, capture_output=True, text=True, timeout=self.timeout, env=dict(self.environ), check=False
        )


# --- this package ---------------------------------------------------------------------------------


def python_packages() -> Finding:
    """This interpreter, this package and its dependencies (what pyproject.toml requires)."""
    versions = {"python": sys.version.split()[0], "ge-python-backend": __version__}
    missing = []
    for requirement in metadata.requires("ge-python-backend") or ():
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    listed = ", ".join(f"{k} {v}" for k, v in versions.items())
    if missing:
        return error("python", f"{listed}; missing: {', '.join(missing)}", "pip install ge-python-backend", **versions)
    return ok("python", listed, **versions)


# --- the stub's interpreter -------------------------------------------------------------------

#: run by the python3 on PATH with -E (the stub ignores PYTHONPATH): where acl and this package come from
_STUB_PROBE = r"""
import json, site, sys, importlib.util
found = {"version": sys.version.split()[0], "prefix": sys.prefix}
try:
    import ge_python_backend.version as v
    found["package"] = v.__version__
except Exception as exc:
    found["package_error"] = repr(exc)
spec = importlib.util.find_spec("acl")
if spec is not None and spec.origin:
    found["acl"] = spec.origin
    folder = spec.origin.rsplit("/", 1)[0]
    sites = site.getsitepackages() + [site.getusersitepackages()]
    if folder in sites:
        found["acl_how"] = "site-packages"
    else:
        import glob
        pth = [p for s in sites for p in glob.glob(s + "/*.pth") if folder in open(p).read().split()]
        found["acl_how"] = ("a .pth file: " + pth[0]) if pth else ("sys.path entry " + folder)
    try:
        import acl
        found["acl_imports"] = bool(hasattr(acl, "rt") and hasattr(acl, "mdl"))
    except Exception as exc:
        found["acl_error"] = repr(exc)
print(json.dumps(found))
"""


def _acl_on_pythonpath(host: HostView) -> str | None:
    """The PYTHONPATH entry that holds a module ``acl`` (the engine's fallback adds these entries)."""
    for entry in host.environ.get("PYTHONPATH", "").split(os.pathsep):
        folder = Path(entry) if entry else None
        if folder is None or not folder.is_dir():
            continue
        if (
            (folder / "acl").is_dir()
            or (folder / "acl.py").is_file()
            or any(folder.glob("acl.*.so"))
            or (folder / "acl.so").is_file()
        ):
            return entry
    return None


def stub_environment(host: HostView, needs_acl: bool) -> list[Finding]:
    """What the Python backend's stub will import, the way the server is started: the stub runs the
    ``python3`` first on tritonserver's PATH and ignores PYTHONPATH (an isolated interpreter
    config). ``ge-triton serve`` puts its own environment's bin first (``HostView.serve_bin``); a
    tritonserver started by hand from this shell gets the ``python3`` on PATH; the deploy image
    installs the package into the image's own Python. CANN's set_env.sh alone does not make ``import
    acl`` work there; ge_python_backend's engine falls back to PYTHONPATH's entries, which works when
    tritonserver inherits that environment (engines/acl/runtime.py: _import_acl)."""
    served = host.serve_bin / "python3"
    serve_python = str(served) if served.is_file() else sys.executable
    path_python = host.which("python3")
    same = path_python is not None and Path(path_python).resolve() == Path(serve_python).resolve()
    who = "ge-triton serve" + (" and a tritonserver started from this shell" if same else "")
    found, serve_finding = _stub_python(host, serve_python, "stub-python", who)
    findings = [serve_finding]
    if not same:
        findings.append(_plain_tritonserver(host, path_python, serve_python, serve_finding.level))
    if found is not None:
        findings.append(_stub_acl(host, found, needs_acl))
    return findings


def _stub_python(host: HostView, python3: str, check: str, who: str) -> tuple[dict | None, Finding]:
    """What ``python3 -E`` imports, as the stub of ``who`` gets it."""
    try:
        done = host.run([python3, "-E", "-c", _STUB_PROBE])
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return None, error(check, f"{who}: {python3} -E could not be asked what it imports: {exc}")
    where = f"{who}: the stub runs {python3} (Python {found['version']}, {found['prefix']})"
    if "package" not in found:
        return found, error(
            check,
            f"{where}, which cannot import ge_python_backend: {found.get('package_error')}",
            f"install ge-python-backend into {found['prefix']}, or put the environment that has it first on PATH",
            **found,
        )
    if found["package"] != __version__:
        return found, warn(
            check,
            f"{where}, which imports ge_python_backend {found['package']}; this command is {__version__}",
            "install the same version into both environments",
            **found,
        )
    return found, ok(check, f"{where}, which imports ge_python_backend {found['package']}", **found)


def _plain_tritonserver(host: HostView, python3: str | None, serve_python: str, serve_level: Level) -> Finding:
    """The stub of a tritonserver started by hand from this shell: a warning where ``ge-triton
    serve`` works and it would not."""
    who = "a tritonserver started from this shell"
    fix = f"start it with ge-triton serve, or put {Path(serve_python).parent} first on PATH"
    if python3 is None:
        level = warn if serve_level is Level.OK else error
        return level("stub-python-path", f"{who}: no python3 on PATH, so its stub has no interpreter", fix)
    _, finding = _stub_python(host, python3, "stub-python-path", who)
    if finding.level is Level.ERROR and serve_level is Level.OK:
        return warn(finding.check, f"{finding.message} (ge-triton serve's stub is fine)", fix, **finding.facts)
    return finding


def _stub_acl(host: HostView, found: Mapping[str, str], needs_acl: bool) -> Finding:
    fallback = _acl_on_pythonpath(host)
    if found.get("acl_imports"):
        return ok("stub-acl", f"import acl works in the stub's environment: {found['acl']} ({found['acl_how']})")
    if "acl" in found:
        return error(
            "stub-acl",
            f"the stub's environment finds acl at {found['acl']} but importing it fails: "
            f"{found.get('acl_error', 'it is not CANN pyACL (no acl.rt / acl.mdl)')}",
            "source CANN's set_env.sh (LD_LIBRARY_PATH) in the shell that starts tritonserver",
        )
    if fallback is not None:
        return warn(
            "stub-acl",
            f"acl is only on PYTHONPATH ({fallback}), which the stub ignores; the acl engine adds "
            "PYTHONPATH's entries itself, so it works while tritonserver is started from this environment",
            f"to not depend on it: echo {fallback} > <site-packages of python3>/cann-pyacl.pth",
            pythonpath=fallback,
        )
    level = error if needs_acl else warn
    return level(
        "stub-acl",
        "import acl fails in the stub's environment and PYTHONPATH has no acl (no CANN pyACL here)",
        "install the CANN toolkit or nnrt and source its set_env.sh (PyPI's 'pyacl' is unrelated); "
        "without an NPU use engine acl-sim",
    )


# --- CANN ------------------------------------------------------------------------------------


def _key_value(path: Path, key: str) -> str | None:
    """The value after ``key`` (e.g. "Version=") on the first line that has it."""
    try:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip().startswith(key):
                return line.strip()[len(key) :].strip()
    except OSError:
        return None
    return None


def cann_versions(host: HostView) -> dict[str, str]:
    """Package -> version of the CANN install, read where aclsysGetCANNVersion reads it:
    ``$ASCEND_HOME_PATH/share/info/<package>/version.info`` (``Version=``; hicann/runtime
    src/acl/aclrt_impl/acl.cpp 775-857), the driver and firmware from the paths in
    /etc/ascend_install.info (acl.cpp 51-52, 66, 746-770), and older installs'
    ``ascend_*_install.info`` (``version=``) under the toolkit's or nnrt's latest folder."""
    found: dict[str, str] = {}
    home = host.environ.get("ASCEND_HOME_PATH") or host.environ.get("ASCEND_TOOLKIT_HOME")
    if home:
        for info in sorted(host.path(home).glob("share/info/*/version.info")):
            version = _key_value(info, "Version=")
            if version:
                found[info.parent.name] = version
    roots = [host.path(home)] if home else []
    roots += [host.path(r) for r in LEGACY_ROOTS]
    for root in roots:
        for name in LEGACY_INSTALL_INFOS:
            for info in [root / name, *root.glob(f"*-linux/{name}")]:
                version = _key_value(info, "version=")
                if version:
                    found.setdefault(name.replace("_install.info", "").replace("ascend_", ""), version)
    install = host.path(ASCEND_INSTALL_INFO)
    for package, key in (("driver", "Driver_Install_Path_Param="), ("firmware", "Firmware_Install_Path_Param=")):
        folder = _key_value(install, key)
        version = _key_value(host.path(folder) / package / "version.info", "Version=") if folder else None
        if version:
            found[package] = version
    return found


def cann_install(host: HostView, needs_acl: bool) -> Finding:
    versions = cann_versions(host)
    if not versions:
        level = error if needs_acl else warn
        return level(
            "cann",
            "no CANN install found (ASCEND_HOME_PATH unset, no version.info, no /etc/ascend_install.info)",
            "install the CANN toolkit or nnrt and source its set_env.sh",
        )
    if "driver" not in versions:
        return warn(
            "cann",
            ", ".join(f"{k} {v}" for k, v in versions.items()) + "; no driver version (/etc/ascend_install.info)",
            "install the Ascend driver (npu-driver) on the host",
            **versions,
        )
    return ok("cann", ", ".join(f"{k} {v}" for k, v in versions.items()), **versions)


def npu_smi(host: HostView) -> Finding:
    """``npu-smi info`` when it is there: its first lines (version, devices); never required."""
    tool = host.which("npu-smi")
    if tool is None:
        return ok("npu-smi", "npu-smi is not on PATH (optional: it ships with the Ascend driver)")
    try:
        done = host.run([tool, "info"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return warn("npu-smi", f"{tool} info could not run: {exc}")
    text = (done.stdout or done.stderr).strip()
    if done.returncode != 0:
        return warn(
            "npu-smi",
            f"{tool} info exited with {done.returncode}: {text[:300]}",
            f"run {tool} info as the user that will serve; check the driver install",
        )
    version = re.search(r"npu-smi\s+([\w.]+)", text)
    head = " | ".join(line.strip(" |+-=") for line in text.splitlines()[:8] if line.strip(" |+-="))
    return ok("npu-smi", f"npu-smi {version.group(1) if version else '?'}: {head[:300]}", output=text)


def device_nodes(host: HostView, needs_npu: bool) -> Finding:
    """/dev/davinci* and the shared nodes: present and readable and writable for this user (the
    driver gives them to group HwHiAiUser)."""
    dev = host.path("/dev")
    chips = sorted(p for p in dev.glob("davinci*") if p.name[len("davinci") :].isdigit())
    if not chips:
        level = error if needs_npu else warn
        return level(
            "dev-davinci",
            f"no {dev}/davinci<N>: no NPU is visible here",
            "install the Ascend driver; in a container pass --device=/dev/davinci<N> and "
            + " ".join(f"--device=/dev/{n}" for n in SHARED_NODES),
        )
    nodes = chips + [dev / n for n in SHARED_NODES if (dev / n).exists()]
    closed = [p for p in nodes if not host.access(p, os.R_OK | os.W_OK)]
    names = ", ".join(p.name for p in chips)
    if closed:
        groups = sorted({_group_of(p) for p in closed})
        return error(
            "dev-davinci",
            f"{', '.join(p.name for p in closed)} cannot be opened by this user (group {', '.join(groups)})",
            f"add the user to group {DEVICE_GROUP} (usermod -aG {DEVICE_GROUP} $USER, then log in again) or run as "
            "a member of it",
            nodes=[p.name for p in nodes],
        )
    return ok("dev-davinci", f"{names} can be opened", nodes=[p.name for p in nodes])


def _group_of(path: Path) -> str:
    try:
        return grp.getgrgid(path.stat().st_gid).gr_name
    except (KeyError, OSError):
        return "?"


# --- tritonserver --------------------------------------------------------------------------------


def release_of(server_version: str) -> tuple[int, int] | None:
    """Triton release (year, month) of a tritonserver version (2.51.0 -> (24, 10))."""
    found = re.match(r"2\.(\d+)", server_version)
    if not found:
        return None
    months = _BASE_YEAR * 12 + _BASE_MONTH - 1 + int(found.group(1)) - _BASE_MINOR
    return months // 12, months % 12 + 1


def tritonserver(host: HostView) -> Finding:
    """Which tritonserver ``ge-triton serve`` would start (PATH, then the nvidia-pytriton wheel), its
    version and what its Python backend offers GEModel."""
    binary = host.which("tritonserver")
    version = host.environ.get("TRITON_SERVER_VERSION")
    if binary is not None:
        version = version or _key_value(Path(binary).resolve().parent.parent / "TRITON_VERSION", "")
    else:
        spec = util.find_spec("pytriton")
        if spec is None or not spec.origin:
            return warn(
                "tritonserver",
                "no tritonserver on PATH and nvidia-pytriton is not installed",
                "pip install 'ge-python-backend[server]' (tritonserver 2.51 in the nvidia-pytriton wheel)",
            )
        binary = str(Path(spec.origin).parent / "tritonserver" / "bin" / "tritonserver")
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = version or PYTRITON_SERVERS.get(metadata.version("nvidia-pytriton"))
    release = release_of(version) if version else None
    if release is None:
        return warn(
            "tritonserver",
            f"{binary}: its version is unknown",
            "set TRITON_SERVER_VERSION, or start it once (ge-triton serve) and read the version in its log",
            binary=binary,
        )
    senders = release >= SENDER_RELEASE
    ready = release >= IS_READY_RELEASE
    message = (
        f"{binary}: tritonserver {version} (Triton {release[0]}.{release[1]:02d}); response senders for "
        f"non-decoupled models {'yes' if senders else 'no (answers come from execute)'}; a model's is_ready "
        f"{'asked' if ready else 'not asked (a fatal failure shows as 503 and ge_engine_healthy 0)'}"
    )
    return ok("tritonserver", message, binary=binary, version=version, response_senders=senders, is_ready=ready)


def shared_memory(host: HostView, needed: int | None) -> Finding:
    """/dev/shm's size against what the repository's model instances need (Triton's Python backend
    gives each stub a region there: README.md 1144-1148, python_be.cc 2270-2271)."""
    path = host.path("/dev/shm")
    try:
        stats = host.statvfs(path)
    except OSError as exc:
        return error("shm", f"{path} cannot be read: {exc.strerror or exc}", "mount a tmpfs at /dev/shm")
    total = stats.f_frsize * stats.f_blocks
    free = stats.f_frsize * stats.f_bavail
    sizes = f"{path}: {total // MIB} MiB, {free // MIB} MiB free"
    if needed is not None and free < needed:
        return error(
            "shm",
            f"{sizes}; the repository's model instances need about {needed // MIB} MiB",
            f"give the container more shared memory (docker run --shm-size={needed // MIB + 1}m)",
            total=total,
            free=free,
            needed=needed,
        )
    if needed is None and total < SMALL_SHM_BYTES:
        return warn(
            "shm",
            f"{sizes}: small for serving (every model instance takes a region)",
            "docker run --shm-size=1g (or check with a repository: ge-triton doctor REPO)",
            total=total,
            free=free,
        )
    shown = f"; the model instances need about {needed // MIB} MiB" if needed is not None else ""
    return ok("shm", sizes + shown, total=total, free=free, needed=needed)
