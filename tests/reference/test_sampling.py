"""Sampling must leave the target's distribution unchanged (speculative sampling is lossless)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from toolkit.errors import GenerationError
from toolkit.reference import SamplingParams
from toolkit.reference.sampling import probs

# 1000 draws: the χ² test (α = 0.01, 13 degrees of freedom after pooling) has power > 0.9999 against
# each broken rule for this prompt's real p and q (noncentrality λ: first token from q, always
# accepted 268; residual from p instead of max(0, p - q) 126; acceptance min(1, q/p) 231; residual
# max(0, q - p) 268; critical value 27.7), and 0.997 even against a 10% temperature error (λ 50).
SAMPLES = 1000


def chi2_pvalue(counts: Counter[int], p: torch.Tensor, n: int) -> float:
    """Pearson χ² of `counts` against `p`; tokens expected < 5 times share one bucket."""
    expected = (p.double() * n).tolist()
    big = [t for t, e in enumerate(expected) if e >= 5]
    obs = [counts.get(t, 0) for t in big]
    exp = [expected[t] for t in big]
    if n - sum(exp) > 1e-9:
        obs.append(n - sum(obs))
        exp.append(n - sum(exp))
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    dof = len(obs) - 1
    # χ² survival function = regularised upper incomplete gamma Q(dof/2, stat/2); no scipy needed.
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def test_probs_applies_temperature_top_k_top_p() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert torch.allclose(probs(logits, SamplingParams(temperature=1.0)), logits.softmax(-1))
    p = probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert p[2] == 0 and p[3] == 0 and torch.isclose(p.sum(), torch.tensor(1.0))
    p = probs(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert p[0] == 1.0
    p = probs(logits, SamplingParams(temperature=0.5))
    assert torch.allclose(p, (logits / 0.5).softmax(-1))


def test_bad_sampling_params_are_rejected() -> None:
    for kwargs in ({"temperature": -1.0}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(GenerationError):
            SamplingParams(**kwargs)


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_draft_target_first_token_distribution_matches_target(
    runtime: Any, specs: dict[str, Any], hf_target: Any, prompt_ids: list[list[int]]
) -> None:
    """The first token is an accepted draft (min(1, p/q)) or a residual draw; either way it must follow p."""
    ids = prompt_ids[1]
    sp = SamplingParams(temperature=1.0)
    with torch.inference_mode():
        p = probs(hf_target(torch.tensor([ids])).logits[0, -1], sp)
    n = SAMPLES
    counts: Counter[int] = Counter()
    drafted = 0
    for seed in range(n):
        # Two tokens: the first may be an accepted draft or a residual draw; drafting happens.
        result = runtime.generate(
            ids, 2, spec=specs["draft_target"], sampling=SamplingParams(temperature=1.0, seed=seed), end_id=-1
        )
        counts[result.token_ids[0]] += 1
        drafted += result.stats.draft_tokens
    assert drafted >= n
    pvalue = chi2_pvalue(counts, p, n)
    assert pvalue > 0.01, f"first-token distribution differs from the target's (p={pvalue:.2g})"


def test_same_seed_same_output(runtime: Any, specs: dict[str, Any], prompt_ids: list[list[int]]) -> None:
    sp = SamplingParams(temperature=0.9, seed=7)
    a = runtime.generate(prompt_ids[0], 30, spec=specs["draft_target"], sampling=sp, end_id=-1)
    b = runtime.generate(prompt_ids[0], 30, spec=specs["draft_target"], sampling=sp, end_id=-1)
    assert a.token_ids == b.token_ids


def test_medusa_is_greedy_only(runtime: Any, specs: dict[str, Any], prompt_ids: list[list[int]]) -> None:
    with pytest.raises(GenerationError, match="greedy-only") as info:
        runtime.generate(prompt_ids[0], 8, spec=specs["medusa"], sampling=SamplingParams(temperature=0.7))
    assert info.value.hint
