"""τ for n-gram on the reference backend: steps counted from the stream, not drafts / γ (n-gram
proposes up to γ tokens per step, often fewer, so drafts / γ undercounts the steps)."""

from __future__ import annotations

from types import SimpleNamespace

from toolkit.bench.measure.metrics import RequestRecord, acceptance_length
from toolkit.bench.measure.records import count_steps_from_chunks as _count_steps_from_chunks
from toolkit.bench.targets import _chain_draft_len, steps_from_chunks
from toolkit.recipe import load_recipe


def test_ngram_reference_counts_steps_from_chunks():
    rec = load_recipe("tiny-ngram")
    assert steps_from_chunks(rec) and _chain_draft_len(rec) is None
    assert steps_from_chunks(load_recipe("tiny-ngram-llmapi"))  # the reference runtime behind it too
    gpu = load_recipe("llama-3.1-8b-ngram")  # TensorRT-LLM: chunks need not be steps; drafts / γ
    assert not steps_from_chunks(gpu) and _chain_draft_len(gpu) == gpu.speculative.max_draft_len
    dt = load_recipe("tiny-draft-target")
    assert not steps_from_chunks(dt) and _chain_draft_len(dt) == dt.speculative.max_draft_len


def test_steps_from_chunks_give_tau():
    # 4 steps committed 3, 1, 2 and 1 tokens (3 drafts accepted of 6 proposed); a closing empty chunk.
    r = RequestRecord(index=0, start=0.0, chunk_times=[1, 2, 3, 4, 5], chunk_tokens=[3, 1, 2, 1, 0])
    r.end, r.accepted_draft_tokens, r.draft_tokens = 6.0, 3, 6
    failed = RequestRecord(index=1, start=0.0, error="boom")
    _count_steps_from_chunks(SimpleNamespace(levels=[SimpleNamespace(records=[r, failed])]))
    assert r.steps == 4 and failed.steps is None
    tau, source = acceptance_length(r)
    assert tau == (3 + 4) / 4 == r.output_tokens / r.steps
    assert source == "streamed chunks (one per step)"
