"""SpecStats invariants for every mode, including steps cut short by the budget or EOS."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.reference import SamplingParams

from .conftest import MODES


def check_invariants(result: Any, max_new: int) -> None:
    s = result.stats
    assert len(result.token_ids) == s.tokens <= max_new
    assert s.tokens == s.accepted_tokens + s.steps
    assert 0 <= s.accepted_tokens <= s.draft_tokens
    assert sum(s.per_position_proposed) == s.draft_tokens
    assert sum(s.per_position_accepted) == s.accepted_tokens
    assert len(s.per_position_accepted) <= len(s.per_position_proposed)
    for acc, prop in zip(s.per_position_accepted, s.per_position_proposed, strict=False):
        assert 0 <= acc <= prop
    assert s.acceptance_rate == (s.accepted_tokens / s.draft_tokens if s.draft_tokens else 0.0)
    assert s.acceptance_length == pytest.approx(s.tokens / s.steps)
    d = s.to_dict()
    assert d["steps"] == s.steps and d["acceptance_length"] == s.acceptance_length


@pytest.mark.parametrize("mode", MODES)
def test_invariants_hold_with_budget_and_eos_truncation(
    mode: str,
    runtime: Any,
    specs: dict[str, Any],
    prompt_ids: list[list[int]],
    greedy_reference: list[list[int]],
) -> None:
    for ids, ref in list(zip(prompt_ids, greedy_reference, strict=True))[:4]:
        for max_new in (1, 2, 5, 23):
            streamed: list[int] = []
            result = runtime.generate(ids, max_new, spec=specs[mode], end_id=-1, on_tokens=streamed.extend)
            check_invariants(result, max_new)
            assert streamed == result.token_ids
            assert result.finish_reason == "length" and len(result.token_ids) == max_new
        # Stop at a token that greedy decoding emits mid-way, usually inside an accepted run.
        stop = ref[len(ref) // 2]
        result = runtime.generate(ids, len(ref), spec=specs[mode], end_id=stop)
        check_invariants(result, len(ref))
        assert result.finish_reason == "eos"
        assert result.token_ids == ref[: ref.index(stop) + 1]


@pytest.mark.parametrize("mode", ["draft_target", "ngram", "lookahead", "eagle3_chain", "eagle3_tree"])
def test_invariants_hold_when_sampling(
    mode: str, runtime: Any, specs: dict[str, Any], prompt_ids: list[list[int]]
) -> None:
    for seed in range(3):
        sp = SamplingParams(temperature=0.8, top_k=50, top_p=0.95, seed=seed)
        result = runtime.generate(prompt_ids[seed], 40, spec=specs[mode], sampling=sp, end_id=-1)
        check_invariants(result, 40)


def test_record_chains_equals_record_chain_step_by_step() -> None:
    """The chain loop's stats, counted per (proposed, committed) and recorded once at its end,
    equal recording each step as it ran (steps cut short by EOS or the budget included)."""
    from toolkit.reference.stats import SpecStats

    steps = [(5, 3), (5, 1), (0, 1), (3, 4), (5, 6), (5, 3), (2, 2), (5, 1), (0, 1), (4, 2)]
    one, once = SpecStats(), SpecStats()
    counted: dict[tuple[int, int], int] = {}
    for proposed, committed in steps:
        one.record_chain(proposed, committed)
        counted[(proposed, committed)] = counted.get((proposed, committed), 0) + 1
    once.record_chains(counted)
    assert once == one
    assert once.to_dict() == one.to_dict()
    assert once.per_position_proposed == [8, 8, 7, 6, 5] and once.steps == len(steps)
