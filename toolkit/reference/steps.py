"""The greedy decoding loops that skip the general step (toolkit/reference/runtime.py's
`_generate`) where nothing but the argmaxes is read, and the adaptive draft length of chain modes.

Each gives the same tokens, finish reason and SpecStats as the general loop's steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.reference.models import CachedLM
from toolkit.reference.processors import Processors, Trace
from toolkit.reference.sampling import SamplingParams
from toolkit.reference.stats import SpecStats


@dataclass(frozen=True)
class Request:
    """One generate() call, as the decoding loops read it."""

    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    spec: Any  # the recipe `speculative` section it decodes with
    eos: int | None  # the end id (None: none)
    on_tokens: Callable[[list[int]], None] | None = None
    processors: Processors | None = None
    trace: Trace | None = None


@dataclass
class GenerationResult:
    token_ids: list[int]  # generated tokens only; an EOS that stopped generation is included
    stats: SpecStats
    finish_reason: str  # "length" | "eos"


class Adaptive:
    """Per-request draft length for chain modes: shrink γ by one when the running acceptance
    (an exponential average of accepted/proposed per step) falls below `low`, grow it by one
    after a step that accepted every draft token; between 1 and max_draft_len."""

    def __init__(self, cfg: Any, low: float = 0.5, weight: float = 0.5):
        self.max = int(cfg.max_draft_len)
        self.draft_len = self.max
        self.low = low
        self.weight = weight
        self.rate = 1.0

    def update(self, proposed: int, accepted: int) -> None:
        self.rate = (1 - self.weight) * self.rate + self.weight * (accepted / proposed)
        if accepted == proposed:
            self.draft_len = min(self.max, self.draft_len + 1)
        elif self.rate < self.low:
            self.draft_len = max(1, self.draft_len - 1)


def plain_greedy(
    token: int,
    max_new_tokens: int,
    eos: int | None,
    on_tokens: Callable[[list[int]], None] | None,
    target: CachedLM,
    stats: SpecStats,
) -> GenerationResult:
    """Greedy decoding without speculation: one `greedy_next` per token (the output head on the
    step's one row and its argmax), the same tokens and SpecStats as the general loop's steps
    with an empty proposal, without a Proposal, Forward or Verdict per step."""
    out: list[int] = []
    finish = "length"
    greedy_next = target.greedy_next
    ids = [token]
    while len(out) < max_new_tokens:
        token = greedy_next(ids)
        ids = [token]
        out.append(token)
        if on_tokens is not None:
            on_tokens(ids)
        if token == eos:
            finish = "eos"
            break
    n = len(out)
    stats.steps += n
    stats.tokens += n
    return GenerationResult(token_ids=out, stats=stats, finish_reason=finish)


def chain_greedy(
    speculator: Any,
    tokens: list[int],
    req: Request,
    cap: int | None,
    adaptive: Adaptive | None,
    target: CachedLM,
    stats: SpecStats,
) -> GenerationResult:
    """Greedy decoding with a speculator that proposes chains (`propose_chain(tokens, budget)`,
    n-gram's): the general loop's steps for a chain and verify's greedy rule (the longest draft
    prefix equal to the target's argmaxes, then the argmax after it), the same tokens and
    SpecStats, without a Proposal, Forward or Verdict per step. The speculator's `update` is not
    called: a speculator offering `propose_chain` keeps its state in `propose_chain`."""
    max_new_tokens, eos, on_tokens = req.max_new_tokens, req.eos, req.on_tokens
    out: list[int] = []
    propose = speculator.propose_chain
    rows = target._rows
    # (proposed, committed) -> steps, recorded into `stats` when the loop ends (record_chains).
    counted: dict[tuple[int, int], int] = {}
    while len(out) < max_new_tokens:
        remaining = max_new_tokens - len(out)
        budget = remaining - 1
        if cap is not None and cap < budget:
            budget = cap
        if adaptive is not None and adaptive.draft_len < budget:
            budget = adaptive.draft_len
        draft = propose(tokens, budget)
        n = len(draft)
        start = target.length
        preds = rows([tokens[-1], *draft])
        k = 0
        while k < n and draft[k] == preds[k]:
            k += 1
        commit = draft[:k]
        commit.append(preds[k])
        target.crop(start + k + 1)
        tokens.extend(commit)
        take, ended = take_tokens(commit, remaining, eos)
        key = (n, len(take))
        counted[key] = counted.get(key, 0) + 1
        if adaptive is not None and n:
            adapt(adaptive, stats, n, k)
        out.extend(take)
        if on_tokens is not None:
            on_tokens(take)
        if ended:
            stats.record_chains(counted)
            return GenerationResult(token_ids=out, stats=stats, finish_reason="eos")
    stats.record_chains(counted)
    return GenerationResult(token_ids=out, stats=stats, finish_reason="length")


def take_tokens(commit: list[int], remaining: int, eos: int | None) -> tuple[list[int], bool]:
    """What the request gets of a step's committed tokens: at most `remaining`, up to and
    including the first end id; and whether it hit one."""
    take = commit[:remaining] if len(commit) > remaining else commit
    if eos is not None and eos in take:
        return take[: take.index(eos) + 1], True
    return take, False


def adapt(adaptive: Adaptive, stats: SpecStats, proposed: int, accepted: int) -> None:
    """The adaptive draft length after a step, and its histogram."""
    adaptive.update(proposed, accepted)
    stats.draft_len_histogram[adaptive.draft_len] = stats.draft_len_histogram.get(adaptive.draft_len, 0) + 1
