#!/usr/bin/env bash
# The CPU demo, on a fresh machine: set up .venv, then build and deploy the tiny draft-target
# recipe on the embedded Triton server (reference backend), validate it (HTTP + gRPC, the
# correctness gate, acceptance), stream a few generations with acceptance statistics, stop.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH"

RECIPE="${1:-recipes/tiny-draft-target.yaml}"
WORKDIR="${SDTK_DEMO_WORKDIR:-workdir/demo}"
name="$(basename "$RECIPE" .yaml)"
DEPLOYMENT="$WORKDIR/$name"

echo "== sdtk deploy $RECIPE (build, render, launch, wait for READY, validate)" >&2
sdtk deploy "$RECIPE" --workdir "$WORKDIR" --detach --auto-ports
trap 'echo "== sdtk stop" >&2; sdtk stop --workdir "$DEPLOYMENT"' EXIT

echo "== sdtk status" >&2
sdtk status --workdir "$DEPLOYMENT"

for prompt in "def fibonacci(n):" "import json\n\n\ndef load(path):" "class Queue:\n    def __init__(self):"; do
  echo "== sdtk infer --stream: $prompt" >&2
  sdtk infer "$(printf '%b' "$prompt")" --workdir "$DEPLOYMENT" --stream --max-tokens 48
done

echo "== sdtk validate (the served output must equal the target's own greedy output)" >&2
sdtk validate --workdir "$DEPLOYMENT"
