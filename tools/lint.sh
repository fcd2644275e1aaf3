#!/usr/bin/env bash
# Lint and types: ruff (rules and format) on the package, tests and tools; mypy on the package;
# import-linter's contracts (the layers, pyproject.toml).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/bootstrap.sh"
cd "$root"
.venv/bin/ruff check ge_python_backend tests tools
.venv/bin/ruff format --check ge_python_backend tests tools
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
