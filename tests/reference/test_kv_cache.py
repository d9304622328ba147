"""The reference runtime's preallocated KV cache (part of the leaner speculative step) against transformers' own."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def test_preallocated_kv_cache_equals_concatenation(runtime: Any, prompt_ids: list[list[int]]) -> None:
    """The preallocated cache (entries written into a growing buffer) gives the forwards the same
    keys and values as transformers' concatenating DynamicCache, through growth, crops and keeps."""
    from transformers import DynamicCache

    from toolkit.reference.kvcache import PreallocLayer
    from toolkit.reference.models import CachedLM

    model = runtime.target.model
    ours, plain = CachedLM(model), CachedLM(model)
    plain.cache = DynamicCache(config=model.config)
    plain.reset = lambda: setattr(plain, "cache", DynamicCache(config=model.config))  # type: ignore[method-assign]
    assert all(isinstance(layer, PreallocLayer) for layer in ours.cache.layers)
    PreallocLayer.MIN_CAPACITY, before = 8, PreallocLayer.MIN_CAPACITY  # force a few regrowths
    try:
        ids = prompt_ids[2]
        assert len(ids) >= 20
        for lm in (ours, plain):
            lm.forward(ids[:20])
            lm.forward([5, 6, 7, 8], parents=[-1, 0, 0, 1])
            lm.keep(20, [0, 2])
            lm.crop(21)
        more = list(range(9, 19))
        a, b = ours.forward(more).logits, plain.forward(more).logits
        assert ours.length == plain.length == 31 and torch.equal(a, b)
        assert ours.cache.layers[0].kbuf.shape[-2] >= 31
    finally:
        PreallocLayer.MIN_CAPACITY = before


@pytest.mark.parametrize("rows", [[0], [1], [0, 1], [1, 2], [0, 2, 3], [2]])
def test_keep_any_row_set_equals_concatenation(
    runtime: Any, prompt_ids: list[list[int]], rows: list[int]
) -> None:
    """A tree step's keep moves any ascending row set (from row 0 or not, a prefix or not) the way
    transformers' DynamicCache gathers it: the next forward sees the same keys and values."""
    from transformers import DynamicCache

    from toolkit.reference.models import CachedLM

    model = runtime.target.model
    ours, plain = CachedLM(model), CachedLM(model)
    plain.cache = DynamicCache(config=model.config)
    ids = prompt_ids[0][:12]
    for lm in (ours, plain):
        lm.forward(ids)
        lm.forward([5, 6, 7, 8], parents=[-1, 0, 0, 1])
        lm.keep(len(ids), rows)
    a, b = ours.forward([9, 10]).logits, plain.forward([9, 10]).logits
    assert ours.length == plain.length == len(ids) + len(rows) + 2 and torch.equal(a, b)


def test_greedy_chain_equals_greedy_next(runtime: Any, prompt_ids: list[list[int]]) -> None:
    """greedy_chain (each argmax fed on as a tensor) drafts the tokens greedy_next does one by one,
    and leaves the same cache length."""
    from toolkit.reference.models import CachedLM

    model = runtime.target.model
    chain, single = CachedLM(model), CachedLM(model)
    ids = prompt_ids[1][:10]
    for lm in (chain, single):
        lm.forward(ids[:-2])
    got = chain.greedy_chain(ids[-2:], 4)
    want, feed = [], ids[-2:]
    for _ in range(4):
        feed = [single.greedy_next(feed)]
        want.append(feed[0])
    assert got == want and chain.length == single.length == len(ids) + 3


class _NoChainPath:
    """The wrapped speculator without `propose_chain`: the generation loop takes its general path."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.needs_hidden, self.needs_aux = inner.needs_hidden, inner.needs_aux
        self.prefill, self.propose, self.update = inner.prefill, inner.propose, inner.update


@pytest.mark.parametrize(
    "case",
    [
        {"n": 64},
        {"n": 7},  # a budget that cuts the last step's chain
        {"n": 64, "adaptive": True},
        {"n": 64, "eos_from_output": 20},  # an end id hit mid-chain
        {"n": 64, "lean": False},  # transformers' forward, not the lean one
        {"n": 64, "schedule": {1: 4, 2: 1}},  # a schedule: without a batcher, its batch-1 cap
    ],
)
def test_greedy_chain_path_equals_the_general_loop(
    runtime: Any, prompt_ids: list[list[int]], monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    """n-gram's greedy chain path (`propose_chain`, the argmaxes of every row, no Proposal,
    Forward or Verdict) gives the tokens, finish reason and SpecStats of the general loop, step
    for step, through budgets, end ids, adaptive draft lengths and a draft-length schedule."""
    from toolkit.modes.ngram import NGram
    from toolkit.reference import runtime as runtime_mod

    kw: dict[str, Any] = {}
    if case.get("adaptive"):
        kw["adaptive_draft_len"] = True
    if case.get("schedule"):
        kw["draft_len_schedule"] = case["schedule"]
    spec = NGram(mode="ngram", max_draft_len=4, max_matching_ngram_size=3, **kw)
    if case.get("lean") is False:
        monkeypatch.setattr(runtime.target, "lean", None)
    used: list[int] = []
    chain_path = runtime_mod.chain_greedy

    def counted(*args: Any, **kwargs: Any) -> Any:
        used.append(1)
        return chain_path(*args, **kwargs)

    monkeypatch.setattr(runtime_mod, "chain_greedy", counted)
    general = runtime._speculator
    accepted = 0
    for ids in prompt_ids[:6]:
        end_id = None
        if "eos_from_output" in case:
            end_id = runtime.generate(ids, 64, spec=spec).token_ids[case["eos_from_output"]]
        fast = runtime.generate(ids, case["n"], spec=spec, end_id=end_id)
        with monkeypatch.context() as m:
            m.setattr(runtime, "_speculator", lambda *a: _NoChainPath(general(*a)))
            slow = runtime.generate(ids, case["n"], spec=spec, end_id=end_id)
        assert fast.token_ids == slow.token_ids
        assert fast.finish_reason == slow.finish_reason
        assert fast.stats.to_dict() == slow.stats.to_dict()
        accepted += fast.stats.accepted_tokens
    assert len(used) >= 6  # the chain path ran (the general one when _speculator was wrapped)
    assert accepted > 0
