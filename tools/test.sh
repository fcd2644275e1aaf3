#!/usr/bin/env bash
# The test suite on a fresh machine: set up .venv, then run every test (unit and end-to-end).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/bootstrap.sh"
cd "$root"
exec .venv/bin/python -m pytest -q "$@"
