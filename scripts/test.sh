#!/usr/bin/env bash
# The test command: set up .venv, lint, type-check, check the import layers, run the whole suite (unit + real Triton on CPU).
#
# The suite runs on 4 pytest-xdist workers (SDTK_TEST_WORKERS, default 4; 0: one process): most of its time is spent waiting
# on tritonserver start-ups and streamed responses, so 4 workers pay on 2 cores. `--dist loadgroup`
# keeps the tests that share a deployment or a module fixture on one worker (tests/conftest.py
# groups them and puts the slow modules first); the tests marked `alone` (CPU shares, measured
# speedups, timings that other servers' start-ups would break) run afterwards in one process.
# On the 2-core machine: 22 min 41 s against 35 min 41 s in one process.
# Each pass prints its slowest tests (--durations), the profile to cut the suite's time by.
# Arguments pass through to pytest:
#   bash scripts/test.sh tests/unit -q
#   SDTK_TEST_WORKERS=0 bash scripts/test.sh    # one process, one pass
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check toolkit
.venv/bin/mypy  # toolkit/, configured in pyproject.toml [tool.mypy]
.venv/bin/lint-imports  # the import contracts (bench's layers), pyproject.toml [tool.importlinter]
workers="${SDTK_TEST_WORKERS:-4}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# Both passes run; the command fails if either fails. pytest exits 5 when a pass selects no test
# (`tests/unit` has no `alone` test): not a failure unless neither pass selected any.
parallel=0
SDTK_TEST_PASS=parallel .venv/bin/python -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder --durations=40 "$@" || parallel=$?
alone=0
SDTK_TEST_PASS=alone .venv/bin/python -m pytest --durations=10 "$@" || alone=$?
for rc in "$parallel" "$alone"; do
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then
    exit "$rc"
  fi
done
if [ "$parallel" = 5 ] && [ "$alone" = 5 ]; then
  exit 5
fi
