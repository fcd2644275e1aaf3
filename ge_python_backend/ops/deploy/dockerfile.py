"""The image build context: a Dockerfile on a CANN base image with tritonserver and
ge_python_backend, for linux/amd64 and linux/arm64 alike.

- Base: an official CANN image (Ascend/cann-container-image, ``quay.io/ascend/cann``), a
  build argument. Its tags are manifest lists for both architectures; Ubuntu 22.04 tags have the
  glibc (2.35) the nvidia-pytriton wheels need.
- tritonserver 2.51 with the Python backend: the ``nvidia-pytriton`` wheel (manylinux_2_35 wheels
  for x86_64 and aarch64), prepared here as ``ge-triton serve`` prepares it: a backends folder
  with the stub for the image's Python and backend ``ge``.
- ge_python_backend: this installation's own package, copied into the context with a
  ``pyproject.toml`` written from its installed metadata (it needs no published wheel).
- CANN's ``set_env.sh`` is sourced by the entrypoint at run time (its paths differ between CANN
  versions); nothing sets ``ASCEND_VISIBLE_DEVICES`` (the device plugin does, per pod).
"""

from __future__ import annotations

import shutil
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.deploy.manifests import BACKENDS_DIR, MODELS_DIR
from ge_python_backend.ops.deploy.options import ModelSource
from ge_python_backend.ops.deploy.resolved import ResolvedDeployment

DISTRIBUTION = "ge-python-backend"
#: The extras the image needs: ONNX Runtime engines and check of .onnx files, PNG/JPEG inputs.
IMAGE_EXTRAS = ("onnx", "server", "images")
WORKSPACE = str(Path(BACKENDS_DIR).parent)
#: This installation's package folder (ops/deploy/dockerfile.py -> ge_python_backend/).
PACKAGE_DIR = Path(__file__).resolve().parents[2]
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def package_data() -> list[str]:
    """The package's files that are not Python modules (templates, py.typed), relative to it."""
    return sorted(
        p.relative_to(PACKAGE_DIR).as_posix()
        for p in PACKAGE_DIR.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )


ENTRYPOINT = """#!/bin/bash
# Written by ge-triton deploy. Sets up CANN's environment when the image has CANN, then runs the
# command (ge-triton serve ... from the pod's args).
for script in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
    if [ -f "$script" ]; then
        # shellcheck disable=SC1090
        source "$script"
    fi
done
exec "$@"
"""

PREPARE = '''"""Written by ge-triton deploy: make the nvidia-pytriton tritonserver usable in this image."""

import argparse
import sysconfig
from pathlib import Path

from ge_python_backend.ops.server import find_tritonserver, prepare_backends

parser = argparse.ArgumentParser()
parser.add_argument("workspace", type=Path)
parser.add_argument("--bin-dir", type=Path, default=Path("/usr/local/bin"))
parser.add_argument("--ld-conf", type=Path, default=Path("/etc/ld.so.conf.d/ge-triton.conf"))
args = parser.parse_args()
install = find_tritonserver()
backends = prepare_backends(install, args.workspace)  # Python backend + stub for this Python, backend ge
(args.bin_dir / "tritonserver").symlink_to(install.binary)
# The stub copied into the backends folder loses its relative RPATH: it needs the wheel's bundled
# libraries and this Python's libpython (CANN images build Python with --enable-shared).
libraries = [str(install.library_path)] if install.library_path else []
libraries.append(sysconfig.get_config_var("LIBDIR"))
args.ld_conf.write_text("\\n".join(libraries) + "\\n")
print(f"tritonserver {install.binary}, backends {backends}")
'''


def pytriton_version() -> str:
    """The nvidia-pytriton version installed here (the one this package is tested with)."""
    try:
        return distribution("nvidia-pytriton").version
    except PackageNotFoundError:
        return "0.7.0"


def dockerfile(resolved: ResolvedDeployment) -> str:
    options = resolved.options
    if options.model_source is ModelSource.IMAGE:
        models = f"# The model repository, baked in.\nCOPY model_repository {MODELS_DIR}\n"
    else:
        models = f"# The model repository comes from a volume mounted here.\nRUN mkdir -p {MODELS_DIR}\n"
    return f"""# syntax=docker/dockerfile:1
# Written by ge-triton deploy: tritonserver 2.51 (nvidia-pytriton) with ge_python_backend on a CANN
# base image. Nothing here is architecture-specific; build both with
#   docker buildx build --platform linux/amd64,linux/arm64 -t {options.image} --push .
# The base image must match the NPU (its CANN kernels are per chip) and be Ubuntu 22.04 or newer.
ARG CANN_IMAGE={resolved.base_image}
FROM ${{CANN_IMAGE}}

ARG PYTRITON_VERSION={pytriton_version()}
ENV PYTHONDONTWRITEBYTECODE=1 \\
    PYTHONUNBUFFERED=1 \\
    PIP_NO_CACHE_DIR=1 \\
    PIP_DISABLE_PIP_VERSION_CHECK=1

# ge_python_backend (with ONNX Runtime) and tritonserver from the nvidia-pytriton wheel.
COPY ge-python-backend /opt/ge-python-backend/src
RUN python3 -m pip install "/opt/ge-python-backend/src" "nvidia-pytriton==${{PYTRITON_VERSION}}"

# Backends for this image's Python (the Python backend's stub, backend "ge"), tritonserver on PATH.
COPY prepare.py /opt/ge-python-backend/prepare.py
RUN python3 /opt/ge-python-backend/prepare.py {WORKSPACE} && ldconfig \\
    && ! ldd /usr/local/bin/tritonserver {BACKENDS_DIR}/python/triton_python_backend_stub | grep "not found"

COPY entrypoint.sh /usr/local/bin/ge-triton-entrypoint
RUN chmod 0755 /usr/local/bin/ge-triton-entrypoint \\
    && (getent passwd 1000 >/dev/null || useradd --uid 1000 --user-group --no-create-home --home-dir /tmp triton)

{models}
WORKDIR /tmp
EXPOSE {options.http_port} {options.grpc_port} {options.metrics_port}
ENTRYPOINT ["/usr/local/bin/ge-triton-entrypoint"]
CMD ["ge-triton", "serve", "{MODELS_DIR}", "--address=0.0.0.0", "--log-file=-", \\
     "--server-arg=--backend-directory={BACKENDS_DIR}"]
"""


def package_pyproject() -> str:
    """A pyproject.toml for the copied package, from this installation's metadata."""
    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        raise ConfigError(
            f"the {DISTRIBUTION} distribution is not installed (pip install -e . in a checkout), so its "
            "dependencies cannot be written into the image context"
        ) from None
    requirements = []
    for requirement in dist.requires or ():
        spec, _, marker = requirement.partition(";")
        extra = marker.split("extra ==")[-1].strip().strip("\"'") if "extra ==" in marker else ""
        if not marker.strip() or extra in IMAGE_EXTRAS:
            requirements.append(spec.strip())
    scripts = [p for p in dist.entry_points if p.group == "console_scripts"]
    engines = [p for p in dist.entry_points if p.group == "ge_python_backend.engines"]
    lines = [
        "# Written by ge-triton deploy from the installed distribution's metadata.",
        "[build-system]",
        'requires = ["setuptools>=68"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f'name = "{DISTRIBUTION}"',
        f'version = "{dist.version}"',
        'requires-python = ">=3.10"',
        "dependencies = [" + ", ".join(f'"{r}"' for r in requirements) + "]",
        "",
        "[project.scripts]",
        *(f'{p.name} = "{p.value}"' for p in scripts),
        "",
        '[project.entry-points."ge_python_backend.engines"]',
        *(f'{p.name} = "{p.value}"' for p in engines),
        "",
        "[tool.setuptools.packages.find]",
        'include = ["ge_python_backend*"]',
        "",
        "[tool.setuptools.package-data]",
        "ge_python_backend = [" + ", ".join(f'"{name}"' for name in package_data()) + "]",
    ]
    return "\n".join(lines) + "\n"


def write_context(resolved: ResolvedDeployment, folder: Path) -> list[Path]:
    """Write the build context into ``folder``; returns the files written at its top."""
    folder.mkdir(parents=True)
    written = []
    for name, text in (
        ("Dockerfile", dockerfile(resolved)),
        ("entrypoint.sh", ENTRYPOINT),
        ("prepare.py", PREPARE),
    ):
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    (folder / "entrypoint.sh").chmod(0o755)
    source = folder / "ge-python-backend"
    shutil.copytree(PACKAGE_DIR, source / "ge_python_backend", ignore=_IGNORED)
    (source / "pyproject.toml").write_text(package_pyproject(), encoding="utf-8")
    written.append(source)
    if resolved.options.model_source is ModelSource.IMAGE:
        shutil.copytree(resolved.facts.path, folder / "model_repository", ignore=shutil.ignore_patterns("__pycache__"))
        written.append(folder / "model_repository")
    return written
