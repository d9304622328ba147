"""verify_draft: TRT-LLM's draft_tokens_external contract, as Triton's BLS draft-target loop uses it."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.reference import SamplingParams


def draft_greedy(runtime: Any, ids: list[int], k: int) -> list[int]:
    """k greedy tokens of the draft model alone (an external drafter)."""
    from toolkit.reference.models import CachedLM

    lm = CachedLM(runtime.draft.model)
    out: list[int] = []
    feed = ids
    for _ in range(k):
        logits = lm.forward(feed, logits_from=len(feed) - 1).logits
        out.append(int(logits[-1].argmax()))
        feed = out[-1:]
    return out


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_bls_loop_reproduces_greedy_and_reuses_the_cache(
    runtime: Any,
    prompt_ids: list[list[int]],
    greedy_reference: list[list[int]],
    end_id: int,
    monkeypatch: Any,
) -> None:
    fed: list[int] = []
    forward = runtime.target.forward
    monkeypatch.setattr(
        runtime.target, "forward", lambda ids, **kw: fed.append(len(ids)) or forward(ids, **kw)
    )
    for ids, ref in list(zip(prompt_ids, greedy_reference, strict=True))[:6]:
        seq = list(ids)
        accepted = proposed = calls = 0
        fed.clear()
        while len(seq) - len(ids) < len(ref):
            drafts = draft_greedy(runtime, seq, 4)
            result = runtime.verify_draft(seq, drafts, end_id=end_id)
            assert result.new_tokens[:-1] == drafts[: result.accepted]
            seq += result.new_tokens
            accepted += result.accepted
            proposed += len(drafts)
            calls += 1
            if result.new_tokens[-1] == end_id:
                break
        assert seq[len(ids) : len(ids) + len(ref)] == ref
        # Prefix reuse: after the first call (which may share a prefix with the previous request)
        # only the last token plus the drafts are fed.
        assert fed[0] <= len(ids) + 4
        assert all(n == 1 + 4 for n in fed[1:]), fed
        assert accepted > 0 and calls < len(ref)


def test_unrelated_sequence_resets_the_cache(runtime: Any, prompt_ids: list[list[int]]) -> None:
    a = runtime.verify_draft(prompt_ids[0], [1, 2, 3])
    b = runtime.verify_draft(prompt_ids[1], [])
    c = runtime.verify_draft(prompt_ids[0], [1, 2, 3])
    assert a == c
    assert b.accepted == 0 and len(b.new_tokens) == 1
    generated = runtime.generate(prompt_ids[1], 1, end_id=-1)
    assert b.new_tokens == generated.token_ids


def sampled_loop(runtime: Any, ids: list[int], seed: int) -> list[int]:
    seq = list(ids)
    while len(seq) - len(ids) < 24:
        result = runtime.verify_draft(
            seq, draft_greedy(runtime, seq, 3), sampling=SamplingParams(1.0, seed=seed), end_id=-1
        )
        assert 1 <= len(result.new_tokens) <= 4
        seq += result.new_tokens
    return seq[len(ids) :]


def test_sampled_requests_are_reproducible_per_seed(runtime: Any, prompt_ids: list[list[int]]) -> None:
    a = sampled_loop(runtime, prompt_ids[2], seed=11)
    runtime.verify_draft(prompt_ids[0], [])  # another request in between
    b = sampled_loop(runtime, prompt_ids[2], seed=11)
    c = sampled_loop(runtime, prompt_ids[2], seed=12)
    assert a == b
    assert a != c


def test_verify_draft_rejects_overflow(runtime: Any, prompt_ids: list[list[int]]) -> None:
    from toolkit.errors import GenerationError

    ids = prompt_ids[0]
    with pytest.raises(GenerationError, match="context"):
        runtime.verify_draft(ids, [0] * (runtime.max_context - len(ids) + 1))
