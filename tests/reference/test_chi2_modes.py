"""Sampling keeps the target's distribution in every mode: Pearson χ² of the first two emitted
tokens against transformers' own distribution (temperature 1, and 0.7 with top-p 0.9).

Kept to about a second per case: the mode's real proposal after prefill and the target's real
logits for it are computed once, then the runtime's verification (`core.verify`, sample-and-match
for EAGLE-3, n-gram and lookahead; Leviathan's rule for draft-target) runs with many independent
draws. Position 1 is what the step emits first (an accepted draft or the target's own draw);
position 2 is tested given the most common accepted draft token, where it comes from the same
step. Medusa is greedy-only here (its typical acceptance is lossy, docs/correctness.md): what it
promises is tested instead, exact greedy output (test_lossless.py) and a refusal of sampling.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from toolkit.errors import GenerationError
from toolkit.reference import PLAIN, SamplingParams
from toolkit.reference.core import Context, Proposal, speculative_sampling, verify
from toolkit.reference.prompts import PROMPTS
from toolkit.reference.sampling import generator, probs

from .test_sampling import chi2_pvalue

DRAWS = 1500
SETTINGS = {"t1": SamplingParams(temperature=1.0), "t07_p09": SamplingParams(temperature=0.7, top_p=0.9)}
# The prompt's last token recurs in it, so that n-gram and lookahead propose from the first step
# and every drafter's first token is accepted often; draft-target gets one whose first token is
# uncertain even at temperature 0.7 (its acceptance does not depend on matching a draw).
REPEATING = "for i in range(10):\n    for j in range(10):\n        for k in range"
UNCERTAIN = PROMPTS[2]


def hf_dist(hf_target: Any, ids: list[int], sp: SamplingParams) -> torch.Tensor:
    """transformers: the next-token distribution after its temperature and top-p warpers."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    chain = LogitsProcessorList([TemperatureLogitsWarper(sp.temperature)])
    if sp.top_p < 1.0:
        chain.append(TopPLogitsWarper(sp.top_p))
    with torch.inference_mode():
        logits = hf_target(torch.tensor([ids])).logits[:, -1].float()
    return chain(torch.tensor([ids]), logits)[0].softmax(-1)


def first_step(runtime: Any, ids: list[int], cfg: Any, sp: SamplingParams) -> tuple[Proposal, torch.Tensor]:
    """The runtime's first step up to verification (ReferenceRuntime._generate): prefill, the
    mode's proposal, the target's forward over root + proposal."""
    with torch.inference_mode():
        return _first_step(runtime, ids, cfg, sp)


def _first_step(runtime: Any, ids: list[int], cfg: Any, sp: SamplingParams) -> tuple[Proposal, torch.Tensor]:
    spec = runtime._speculator(cfg, sp)
    target = runtime.target
    target.reset()
    ctx = Context(tokens=list(ids), target=target, sampling=sp, gen=generator(0))
    pre = target.forward(ids[:-1], logits_from=len(ids) - 1, hidden=spec.needs_hidden, aux=spec.needs_aux)
    spec.prefill(ctx, pre)
    prop = spec.propose(ctx, 8)
    fwd = target.forward(
        [ids[-1], *prop.tokens],
        parents=[-1, *(p + 1 for p in prop.parents)],
        hidden=spec.needs_hidden,
        aux=spec.needs_aux,
    )
    return prop, fwd.logits


def pvalue(counts: Counter[int], p: torch.Tensor, n: int) -> float:
    """χ² p-value; where the distribution is one token (top-p can leave one), 1.0 if every draw
    is that token, else 0.0."""
    if float(p.max()) > 1 - 1e-6:
        return 1.0 if set(counts) == {int(p.argmax())} else 0.0
    return chi2_pvalue(counts, p, n)


def check(
    hf_target: Any, ids: list[int], sp: SamplingParams, draws: list[list[int]], accepted: int
) -> tuple[float, float]:
    """p-values of position 1 and of position 2 given the most common first token that came with
    a second one; asserts the drafts were accepted often enough to matter."""
    assert accepted >= len(draws) // 10, f"drafts accepted in only {accepted} of {len(draws)} steps"
    first = Counter(d[0] for d in draws)
    p1 = pvalue(first, hf_dist(hf_target, ids, sp), len(draws))
    with_second = Counter(d[0] for d in draws if len(d) > 1)
    a, n = with_second.most_common(1)[0]
    second = Counter(d[1] for d in draws if len(d) > 1 and d[0] == a)
    p2 = pvalue(second, hf_dist(hf_target, ids + [a], sp), n)
    return p1, p2


def sample_and_match(
    hf_target: Any, ids: list[int], prop: Proposal, logits: torch.Tensor, sp: SamplingParams
) -> tuple[float, float]:
    """`check`'s p-values over DRAWS sample-and-match verdicts on one proposal (seeded)."""
    gen = generator(1234)
    draws, accepted = [], 0
    for _ in range(DRAWS):
        verdict = verify(prop, logits, sp, gen)
        draws.append([prop.tokens[i] for i in verdict.path] + [verdict.token])
        accepted += bool(verdict.path)
    return check(hf_target, ids, sp, draws, accepted)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("mode", ["eagle3_chain", "eagle3_tree", "ngram", "sa", "lookahead"])
def test_sample_and_match_keeps_the_target_distribution(
    mode: str, setting: str, runtime: Any, specs: dict[str, Any], hf_target: Any
) -> None:
    sp = SETTINGS[setting]
    ids = runtime.tokenizer(REPEATING)["input_ids"]
    prop, logits = first_step(runtime, ids, specs[mode], sp)
    assert prop.num_draft > 0, f"{mode} proposed nothing"
    p1, p2 = sample_and_match(hf_target, ids, prop, logits, sp)
    assert p1 > 1e-3 and p2 > 1e-3, f"{mode} {setting}: p-values {p1:.2g}, {p2:.2g}"


@pytest.mark.parametrize("setting", SETTINGS)
def test_draft_target_speculative_sampling_keeps_the_target_distribution(
    setting: str, runtime: Any, hf_target: Any
) -> None:
    """Leviathan's rule with the tiny draft's real q: one draft token drawn from q per step, the
    target's logits for it, accept with min(1, p/q) or draw from the residual."""
    sp = SETTINGS[setting]
    ids = runtime.tokenizer(UNCERTAIN)["input_ids"]
    with torch.inference_mode():
        q = probs(runtime.draft.model(torch.tensor([ids])).logits[0, -1], sp)
        drafts = torch.multinomial(q, DRAWS, replacement=True, generator=generator(0)).tolist()
        distinct = sorted(set(drafts))  # the target's logits for each, in one batched forward
        rows = runtime.target.model(torch.tensor([ids + [d] for d in distinct])).logits[:, -2:]
        logits_for = dict(zip(distinct, rows, strict=True))
    gen = generator(1)
    draws, accepted = [], 0
    for d in drafts:
        verdict = speculative_sampling([d], [q], logits_for[d], sp, gen)
        draws.append([d] * len(verdict.path) + [verdict.token])
        accepted += bool(verdict.path)
    p1, p2 = check(hf_target, ids, sp, draws, accepted)
    assert p1 > 1e-3 and p2 > 1e-3, f"draft_target {setting}: p-values {p1:.2g}, {p2:.2g}"


def test_medusa_refuses_sampling(runtime: Any, specs: dict[str, Any]) -> None:
    """Medusa's typical acceptance (the Medusa paper's rule for temperature > 0) does not keep the
    target's distribution; the runtime offers Medusa greedy-only, which is exact (test_lossless)."""
    ids = runtime.tokenizer(UNCERTAIN)["input_ids"]
    with pytest.raises(GenerationError, match="greedy-only"):
        runtime.generate(ids, 4, spec=specs["medusa"], sampling=SamplingParams(temperature=0.7, seed=1))
    greedy = runtime.generate(ids, 8, spec=specs["medusa"], end_id=-1)
    assert greedy.token_ids == runtime.generate(ids, 8, spec=PLAIN, end_id=-1).token_ids
