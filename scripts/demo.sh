#!/usr/bin/env bash
# The CPU demo, on a fresh machine: set up .venv, then build and deploy a tiny speculative recipe
# on the embedded Triton server (reference backend), validate it (HTTP + gRPC, the correctness
# gate, acceptance), stream a few generations with acceptance statistics, then A/B it against
# target-only decoding (tiny-baseline) with `sdtk bench --compare` on the bundled `code` workload:
# speedup with its confidence interval per concurrency level, acceptance per draft position, the
# verdict and the PNG plots. About 2 minutes on 2 cores.
#
#   scripts/demo.sh [RECIPE]    default: recipes/tiny-ngram.yaml, the tiny recipe with the clearest
#                               win (docs/benchmarks.md, "Tiny recipes at their shipped settings")
# Environment: SDTK_DEMO_WORKDIR (default workdir/demo), SDTK_DEMO_REQUESTS (requests per level, 12),
# SDTK_DEMO_CONCURRENCY (1,2,4), SDTK_DEMO_MAX_TOKENS (64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH"

RECIPE="${1:-recipes/tiny-ngram.yaml}"
WORKDIR="${SDTK_DEMO_WORKDIR:-workdir/demo}"
name="$(basename "$RECIPE" .yaml)"
DEPLOYMENT="$WORKDIR/$name"
REPORTS="$WORKDIR/reports/compare-tiny-baseline-vs-$name"

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

# The A/B: tiny-baseline is deployed (and stopped again) by bench under the same workdir; the
# speculative side is the deployment above. Same prompts, same order, paired per request.
echo "== sdtk bench --compare tiny-baseline $name (code workload; is speculation worth it here?)" >&2
sdtk bench --compare recipes/tiny-baseline.yaml "$DEPLOYMENT" --workdir "$WORKDIR" \
  --workload code --concurrency "${SDTK_DEMO_CONCURRENCY:-1,2,4}" \
  --requests "${SDTK_DEMO_REQUESTS:-12}" --max-tokens "${SDTK_DEMO_MAX_TOKENS:-64}" --warmup 2 \
  --report-dir "$REPORTS"
