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
    touch "$stamp"
fi
