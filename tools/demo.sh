#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, then build, generate, serve and query a demo model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/bootstrap.sh"
cd "$root"
exec .venv/bin/python tools/demo.py "$@"
