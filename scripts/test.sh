#!/usr/bin/env bash
# The test command: set up .venv, lint, type-check, check the import layers, run the whole suite (unit + real Triton on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check toolkit
.venv/bin/mypy  # toolkit/, configured in pyproject.toml [tool.mypy]
.venv/bin/lint-imports  # the import contracts (bench's layers), pyproject.toml [tool.importlinter]
exec .venv/bin/python -m pytest "$@"
