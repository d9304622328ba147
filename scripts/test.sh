#!/usr/bin/env bash
# The test command: set up .venv, lint, run the whole suite (unit + real Triton on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check toolkit
exec .venv/bin/python -m pytest "$@"
