#!/usr/bin/env bash
# Creates ./.venv with everything the demo, the tests and the benchmarks need.
# Idempotent: a second run only re-checks the install.
#
# The tritonserver in nvidia-pytriton runs Python models in a stub that links the
# system libpython3.11 (Debian 12: 3.11.2). A venv made from that same interpreter
# avoids standard-library mismatches inside the stub, so it is preferred.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

pick_python() {
    for candidate in "${GE_PYTHON:-}" /usr/bin/python3.11 python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "bootstrap: no Python >= 3.10 with venv and ensurepip found" >&2
    return 1
}

if [ ! -x "$venv/bin/python" ]; then
    python="$(pick_python)"
    echo "bootstrap: creating $venv with $("$python" --version 2>&1) ($python)"
    "$python" -m venv "$venv"
fi

stamp="$venv/.ge-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
    echo "bootstrap: installing ge-python-backend[dev] into $venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e "$root[dev]"
    # PP-OCR's det/cls/rec ONNX models and the pipeline the OCR tests compare with; without its dependencies
    # (pyproject.toml's dev extra names the ones it needs; its opencv-python would clash with opencv-python-headless).
    "$venv/bin/python" -m pip install --quiet --no-deps "rapidocr-onnxruntime==1.4.4"
    touch "$stamp"
fi

# tritonserver 2.43.0 (Triton 24.02, the release CANN's own GE backend image runs) for the tests'
# 24.02 lane (tools/test.sh --tritonserver=24.02): the server files of the nvidia-pytriton 0.5.3 wheel
# (bin/, backends/, the Python stubs 3.8-3.11 and its bundled libraries), unpacked beside the 2.51
# one, not installed (it would replace it). TRITON_VERSION says its version, as in Triton's images.
# Never fatal: without it only the 24.02 lane cannot run, and it says so.
triton_2402="$venv/tritonserver-24.02"
if [ ! -f "$triton_2402/.complete" ]; then
    echo "bootstrap: unpacking tritonserver 2.43.0 (nvidia-pytriton 0.5.3) into $triton_2402"
    download="$(mktemp -d)"
    if "$venv/bin/python" -m pip download --quiet --no-deps --dest "$download" "nvidia-pytriton==0.5.3" &&
        "$venv/bin/python" - "$download" "$triton_2402" <<'PYTHON'
import shutil
import sys
import zipfile
from pathlib import Path

download, target = Path(sys.argv[1]), Path(sys.argv[2])
(wheel,) = download.glob("nvidia_pytriton-0.5.3-*.whl")
partial = target.with_name(target.name + ".partial")
shutil.rmtree(partial, ignore_errors=True)
with zipfile.ZipFile(wheel) as archive:
    for member in archive.infolist():
        if member.filename.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/")):
            path = Path(archive.extract(member, partial))
            if (member.external_attr >> 16) & 0o111:  # the server and the stubs (zipfile drops the mode)
                path.chmod(0o755)
(partial / "pytriton" / "tritonserver" / "TRITON_VERSION").write_text("2.43.0\n")
(partial / ".complete").write_text(wheel.name + "\n")
shutil.rmtree(target, ignore_errors=True)
partial.rename(target)
PYTHON
    then
        stubs="$triton_2402/pytriton/tritonserver/python_backend_stubs"
        version="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        if [ ! -x "$stubs/$version/triton_python_backend_stub" ]; then
            echo "bootstrap: tritonserver 2.43.0 has no Python backend stub for Python $version" \
                "(it has $(ls "$stubs" | tr '\n' ' ')); the Triton 24.02 lane cannot run with this .venv" >&2
        fi
    else
        echo "bootstrap: could not unpack nvidia-pytriton 0.5.3; the Triton 24.02 lane cannot run" >&2
    fi
    rm -rf "$download"
fi

# Debian packages some tests need, installed only when missing, with apt-get, as root; never fatal:
# without one, the tests that need it are skipped with the reason. A package's service is not
# started (a temporary policy-rc.d forbids it) when the image has none.
apt_updated=""
debian_package() {  # PACKAGE COMMAND WHAT-NEEDS-IT
    local package="$1" command="$2" needed_by="$3"
    if command -v "$command" >/dev/null 2>&1 || [ -x "/usr/sbin/$command" ] || [ -x "/usr/bin/$command" ]; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
        echo "bootstrap: $package is missing (install it as root: apt-get install $package); $needed_by will be skipped" >&2
        return 0
    fi
    echo "bootstrap: installing $package (apt-get) for $needed_by"
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && made_policy=1
    fi
    if [ -z "$apt_updated" ]; then
        apt-get update -qq >/dev/null 2>&1 && apt_updated=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null 2>&1; then
        echo "bootstrap: could not install $package; $needed_by will be skipped" >&2
    fi
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
}

# nginx: the load-balanced scale-out test (tests/e2e/test_scale_out.py).
debian_package nginx nginx "tests/e2e/test_scale_out.py"
# Headless Chromium: the documentation site renders its navigation (tests/unit/test_docs_site.py).
debian_package chromium chromium "tests/unit/test_docs_site.py"
