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

# nginx (Debian's package) for the load-balanced scale-out test (tests/e2e/test_scale_out.py).
# Installed only when missing, with apt-get, as root; never fatal: without it that test is skipped
# with the reason. Its service is not started (a temporary policy-rc.d forbids it) when the image
# has none.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "bootstrap: installing nginx (apt-get) for the scale-out test"
        policy=/usr/sbin/policy-rc.d
        made_policy=""
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && made_policy=1
        fi
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx; } \
            >/dev/null 2>&1; then
            echo "bootstrap: could not install nginx; tests/e2e/test_scale_out.py will be skipped" >&2
        fi
        if [ -n "$made_policy" ]; then rm -f "$policy"; fi
    else
        echo "bootstrap: nginx is missing (install it as root: apt-get install nginx); tests/e2e/test_scale_out.py will be skipped" >&2
    fi
fi
