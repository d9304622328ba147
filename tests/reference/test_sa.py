"""SA (suffix automaton) in the reference runtime beyond the per-mode suites (test_lossless,
test_batching, test_processors and test_chi2_modes run `sa` with every other mode): the global
pool's cross-request drafts, the fixed n-gram size, and the `sa_config` enhancer of EAGLE-3, all
holding the target's greedy output while their drafts are accepted."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.modes.sa import SAEnhancerConfig, SuffixAutomatonSpec
from toolkit.reference import PLAIN
from toolkit.reference.prompts import PROMPTS
from toolkit.reference.proposers import proposer
from toolkit.reference.sa import SAEnhanced, enhance

from .conftest import NEW_TOKENS

# Prompts whose continuation repeats itself little, so that what SA finds comes from elsewhere.
FEW = PROMPTS[:6]


@pytest.fixture(scope="module")
def plain(runtime: Any, prompt_ids: list[list[int]]) -> list[list[int]]:
    return [
        runtime.generate(ids, NEW_TOKENS, spec=PLAIN, end_id=-1).token_ids for ids in prompt_ids[:6]
    ]


@pytest.mark.slow  # over 5 s
def test_the_global_pool_drafts_from_other_requests_and_stays_lossless(
    runtime: Any, prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    """A request asked again finds its earlier run's output in the pool: drafts accepted far
    beyond what its own prompt offers, output unchanged."""
    own = SuffixAutomatonSpec(mode="sa", max_draft_len=8)
    pooled = SuffixAutomatonSpec(mode="sa", max_draft_len=8, enable_global_pool=True, global_pool_size=8)
    for ids, ref in zip(prompt_ids[:6], plain, strict=True):
        alone = runtime.generate(ids, NEW_TOKENS, spec=own, end_id=-1)
        first = runtime.generate(ids, NEW_TOKENS, spec=pooled, end_id=-1)  # joins the pool, then completes
        again = runtime.generate(ids, NEW_TOKENS, spec=pooled, end_id=-1)  # finds `first` in the pool
        assert alone.token_ids == first.token_ids == again.token_ids == ref
        assert again.stats.accepted_tokens > alone.stats.accepted_tokens
        assert again.stats.steps <= NEW_TOKENS // 4, again.stats.steps  # whole drafts of 8 accepted


def test_a_fixed_ngram_size_is_lossless(
    runtime: Any, prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    spec = SuffixAutomatonSpec(mode="sa", max_draft_len=5, max_matching_ngram_size=2)
    accepted = 0
    for ids, ref in zip(prompt_ids[:6], plain, strict=True):
        result = runtime.generate(ids, NEW_TOKENS, spec=spec, end_id=-1)
        assert result.token_ids == ref
        accepted += result.stats.accepted_tokens
    assert accepted > 0


def test_the_enhancer_replaces_eagle3_drafts_on_long_matches_losslessly(
    runtime: Any, specs: dict[str, Any], prompt_ids: list[list[int]], plain: list[list[int]], monkeypatch: Any
) -> None:
    """EAGLE-3 with an sa_config: where SA's match is >= threshold its chain is verified instead
    of the head's (all slots), else the head's; greedy output is the target's either way.
    (The recipe's `sa_config` field belongs to EAGLE-3's home; here the runtime gets the enhanced
    speculator through its factory seam.)"""
    eagle3 = specs["eagle3_chain"]
    made: list[SAEnhanced] = []

    def factory(cfg: Any, sampling: Any, draft: Any = None) -> Any:
        inner = proposer(cfg.mode).speculator(cfg, runtime, sampling, draft)
        made.append(enhance(inner, SAEnhancerConfig(threshold=2), cfg.max_draft_len, runtime))
        return made[-1]

    monkeypatch.setattr(runtime, "_speculator", factory)
    both = 0
    for ids, ref in zip(prompt_ids[:6], plain, strict=True):
        result = runtime.generate(ids, NEW_TOKENS, spec=eagle3, end_id=-1)
        assert result.token_ids == ref
        both += result.stats.accepted_tokens
    replaced = sum(m.replaced for m in made)
    assert replaced > 0 and both > 0
    # A threshold no match reaches leaves every proposal to the head: EAGLE-3's own steps.
    made.clear()
    monkeypatch.undo()
    alone = runtime.generate(prompt_ids[0], NEW_TOKENS, spec=eagle3, end_id=-1)
    monkeypatch.setattr(runtime, "_speculator", lambda cfg, sampling, draft=None: made.append(
        enhance(proposer(cfg.mode).speculator(cfg, runtime, sampling, draft),
                SAEnhancerConfig(threshold=10**6), cfg.max_draft_len, runtime)) or made[-1])  # fmt: skip
    never = runtime.generate(prompt_ids[0], NEW_TOKENS, spec=eagle3, end_id=-1)
    assert made[0].replaced == 0 and never.token_ids == alone.token_ids
    assert (
        never.stats.accepted_tokens == alone.stats.accepted_tokens and never.stats.steps == alone.stats.steps
    )


def test_the_recipe_field_sa_config_turns_the_enhancer_on(
    runtime: Any, specs: dict[str, Any], prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    """EAGLE-3's `speculative.sa_config` (the recipe field, as recipes/tiny-eagle3-sa.yaml sets it)
    gives the runtime the enhanced speculator, and greedy output stays the target's."""
    eagle3 = type(specs["eagle3_chain"]).model_validate(
        {**specs["eagle3_chain"].model_dump(exclude_unset=True), "sa_config": {"threshold": 2}}
    )
    assert isinstance(proposer("eagle3").speculator(eagle3, runtime, None, None), SAEnhanced)
    for ids, ref in zip(prompt_ids[:3], plain, strict=False):
        assert runtime.generate(ids, NEW_TOKENS, spec=eagle3, end_id=-1).token_ids == ref


@pytest.mark.slow  # over 5 s
def test_the_global_pool_under_in_flight_batching_stays_lossless(
    tiny: Any, prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    """Concurrent requests (the served model's in-flight batcher, one thread each) share the pool
    while they extend and search it: every output is still the target's."""
    from toolkit.reference import ReferenceRuntime

    from .test_batching import run_concurrently

    rt = ReferenceRuntime.load(tiny / "target")
    rt.enable_batching(max_batch_size=4, capacity=256)
    try:
        pooled = SuffixAutomatonSpec(mode="sa", max_draft_len=6, enable_global_pool=True)
        twice = prompt_ids[:6] * 2  # the second round can draft from the first's outputs
        results = run_concurrently(rt, twice, 4, spec=pooled, end_id=-1)
    finally:
        rt.batcher.close()
    assert [r.token_ids for r in results] == plain * 2
    first, second = results[:6], results[6:]
    assert sum(r.stats.accepted_tokens for r in second) > sum(r.stats.accepted_tokens for r in first)
