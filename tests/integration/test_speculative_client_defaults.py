"""Upstream's e2e_grpc_speculative_decoding_client.py against the tiny draft-target twin deployed with
sdtk's defaults (no serving override): it prints the target's greedy text.

That client (tensorrtllm_backend v0.19.0, `inflight_batcher_llm/client/`) runs the draft/target loop
itself over ModelInfer on `tensorrt_llm_draft` and `tensorrt_llm`, never sends
`exclude_input_in_output`, and reads the draft tokens as `output_ids[len(input_ids):]`: it needs the
models to return the prompt with the completion, which is upstream's default for that parameter
(v0.19.0 docs/model_config.md line 117: "default=`false`"). tests/upstream_clients.py sends its
requests and reads its responses as it does.

TensorRT-LLM's defaults make the client's request greedy (temperature 1.0 but no top_k/top_p), so
transformers' greedy `generate` on the tiny target is the yardstick.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import upstream_clients as upstream
from triton_support import live_deployment

pytestmark = [pytest.mark.tritonserver]

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def fibonacci(n):"
TOKENS = 12


def _greedy_text() -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ROOT / "models" / "tiny" / "target"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok(PROMPT)["input_ids"]
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=TOKENS)
    gen = out[0, len(ids) :].tolist()
    n = gen.index(tok.eos_token_id) if tok.eos_token_id in gen else len(gen)
    # The client postprocesses prompt + completion; postprocessing skips special tokens.
    return tok.decode(ids + gen[:n], skip_special_tokens=True)


def test_speculative_client_prints_the_targets_greedy_text_with_sdtks_defaults(tmp_path: Path) -> None:
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(ROOT / "recipes" / "tiny-draft-target.yaml"), ["name=spec-client-defaults"])
    assert recipe.serving.exclude_input_in_output is False  # sdtk's default, not an override
    want = _greedy_text()
    assert len(want) > len(PROMPT)
    with live_deployment(recipe, tmp_path / "work") as result:
        grpc = result.grpc_url.removeprefix("grpc://")
        text = upstream.speculative(grpc, PROMPT, output_len=TOKENS, num_draft_tokens=2)
    assert text == want
