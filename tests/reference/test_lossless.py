"""Greedy speculative decoding must reproduce the target's own greedy output, token for token."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from .conftest import MODES, NEW_TOKENS

TIE = 1e-5


def divergence_problem(hf_target: Any, ids: list[int], got: list[int], ref: list[int]) -> str | None:
    """None if `got` equals `ref`, or first differs at a numerical tie of the target's top-2 logits."""
    if got == ref:
        return None
    j = next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), None)
    if j is None:
        return f"same tokens but lengths differ ({len(got)} vs {len(ref)})"
    with torch.inference_mode():
        logits = hf_target(torch.tensor([ids + ref[:j]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    gap = float(top[0] - top[1])
    if gap <= TIE and {got[j], ref[j]} <= set(torch.topk(logits, 2).indices.tolist()):
        return None
    return f"token {j}: got {got[j]}, transformers {ref[j]}; top-2 logit gap {gap:.3g} is no tie"


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
@pytest.mark.parametrize("mode", MODES)
def test_greedy_output_equals_transformers_generate(
    mode: str,
    runtime: Any,
    specs: dict[str, Any],
    prompt_ids: list[list[int]],
    greedy_reference: list[list[int]],
    hf_target: Any,
    end_id: int,
) -> None:
    assert len(prompt_ids) >= 20
    problems = []
    accepted = 0
    for ids, ref in zip(prompt_ids, greedy_reference, strict=True):
        result = runtime.generate(ids, NEW_TOKENS, spec=specs[mode], end_id=end_id)
        accepted += result.stats.accepted_tokens
        problem = divergence_problem(hf_target, ids, result.token_ids, ref)
        if problem:
            problems.append(f"prompt {ids[:8]}...: {problem}")
    assert not problems, "\n".join(problems)
    if mode != "none":
        # Losslessness is trivial when nothing is ever accepted: make sure drafts were.
        assert accepted > 0, f"{mode} accepted no draft token on any prompt"
