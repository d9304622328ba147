"""What every speculative mode shares: proposals, the generation context and verification.

A step feeds the last committed token (the root, not yet in the target's KV cache) plus
a proposal to the target in one forward. Candidate nodes whose tokens equal what the
target itself picks (argmax, or a sample for temperature > 0) are accepted along one
root-to-leaf path; the target's pick after that path is the step's own token.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from toolkit.reference.models import CachedLM, Forward, argmax_list
from toolkit.reference.sampling import SamplingParams, draw, probs, uniform


@dataclass(slots=True)
class Proposal:
    """Draft tokens as a tree under the root. Nodes [0, num_draft) are candidates; any
    nodes after them ride along in the same forward without being verified (lookahead's
    Jacobi branch). `parents[i]` < i, or -1 for a child of the root."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    num_draft: int = -1
    # draft_target sampling: the draft distribution each chain token was drawn from.
    q: list[torch.Tensor] | None = None
    # Whether `parents` is a chain (i-1 each), when known at construction (None: not checked yet).
    chained: bool | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_draft < 0:
            self.num_draft = len(self.tokens)

    @classmethod
    def chain(cls, tokens: list[int], q: list[torch.Tensor] | None = None) -> Proposal:
        n = len(tokens)
        parents = _CHAIN_PARENTS[:n] if n < len(_CHAIN_PARENTS) else list(range(-1, n - 1))
        return cls(tokens=tokens, parents=parents, q=q, chained=True)

    @property
    def is_chain(self) -> bool:
        """Every node's parent is the one before it (the root's child first): plain causal attention."""
        chained = self.chained
        if chained is None:
            chained = self.chained = _is_chain(self.parents)
        return chained

    def per_depth(self) -> list[int]:
        """Candidate nodes at depth 1, 2, ..."""
        if self.chained and self.num_draft == len(self.tokens):
            return [1] * self.num_draft
        return list(_per_depth(tuple(self.parents[: self.num_draft])))


# The parents of a chain of up to 256 nodes; a chain's are a slice (a new list) of it.
_CHAIN_PARENTS = list(range(-1, 255))


@functools.lru_cache(maxsize=1024)
def _per_depth(parents: tuple[int, ...]) -> tuple[int, ...]:
    """Nodes at depth 1, 2, ... of a tree shape (cached: a mode proposes a few shapes)."""
    depth: list[int] = []
    counts: list[int] = []
    for p in parents:
        d = 1 if p < 0 else depth[p] + 1
        depth.append(d)
        if d > len(counts):
            counts.append(0)
        counts[d - 1] += 1
    return tuple(counts)


@functools.lru_cache(maxsize=1024)
def _children(parents: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Each node's children (-1: the root's), in index order, per tree shape (cached). Shared:
    never modify it."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    return {p: tuple(c) for p, c in kids.items()}


@dataclass(slots=True)
class Verdict:
    path: list[int]  # accepted candidate nodes, root to leaf
    token: int  # the target's own token after the path
    # Greedy verification: the argmax of every row of the forward's logits (the verified rows
    # processed, the rest raw), for a speculator that needs them too (lookahead's window).
    argmax: list[int] | None = None


@dataclass
class Context:
    tokens: list[int]  # prompt + committed tokens; the last one is not in the target's cache
    target: CachedLM
    sampling: SamplingParams
    gen: torch.Generator | None


class Speculator(Protocol):
    needs_hidden: bool  # the target forward must return its final hidden states
    needs_aux: bool  # ... and the captured layers' outputs

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        """After the target ran the prompt without its last token (`fwd` None: a 1-token prompt)."""

    def propose(self, ctx: Context, budget: int) -> Proposal:
        """Draft at most `budget` tokens deep."""

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        """After the step; `ctx.tokens` already ends with the committed tokens."""


def verify_greedy(prop: Proposal, preds: list[int]) -> Verdict:
    """Greedy verification given the argmax of every row (`preds`, row 0 the root's): the longest
    path whose every node is its parent's argmax, then the argmax after it. verify's rule for
    greedy sampling, for a caller that has taken the argmaxes itself."""
    if prop.num_draft == len(prop.tokens) and prop.is_chain:
        # A greedy chain (or no proposal): the longest prefix equal to the target's argmaxes.
        k = 0
        tokens = prop.tokens
        n = prop.num_draft
        while k < n and tokens[k] == preds[k]:
            k += 1
        return Verdict(list(range(k)), preds[k], preds)
    return _walk(prop, preds.__getitem__, preds)


def verify(prop: Proposal, logits: torch.Tensor, sp: SamplingParams, gen: torch.Generator | None) -> Verdict:
    """Longest accepted path; `logits` row 0 is the root, row i+1 is node i."""
    if prop.q is not None and not sp.greedy:
        return speculative_sampling(prop.tokens, prop.q, logits, sp, gen)
    if sp.greedy:
        return verify_greedy(prop, argmax_list(logits))
    # Sample-and-match: each emitted token is a fresh draw from the target given its exact
    # prefix, so the output is distributed as the target's (lossless for any proposal).
    assert gen is not None
    return _walk(prop, lambda row: draw(probs(logits[row], sp), gen), None)


def _walk(prop: Proposal, pick: Callable[[int], int], argmax: list[int] | None) -> Verdict:
    """Down the tree from the root: `pick(row)` is the target's token after that row (row 0 the
    root, row i+1 node i); follow the child holding it while there is one."""
    kids = _children(tuple(prop.parents[: prop.num_draft]))
    tokens = prop.tokens
    node = -1
    path: list[int] = []
    while True:
        y = pick(node + 1)
        # Tokens are distinct among siblings in every tree we build; the first match wins if not.
        for c in kids.get(node, ()):
            if tokens[c] == y:
                break
        else:
            return Verdict(path, y, argmax)
        path.append(c)
        node = c


def _is_chain(parents: list[int]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


def speculative_sampling(
    tokens: list[int],
    q: list[torch.Tensor],
    logits: torch.Tensor,
    sp: SamplingParams,
    gen: torch.Generator | None,
) -> Verdict:
    """Leviathan et al. Algorithm 1 on a chain: accept x_i with probability min(1, p_i(x)/q_i(x));
    on the first rejection draw from norm(max(0, p_i - q_i)); if all pass, the bonus token from p_{k+1}."""
    assert gen is not None
    for i, x in enumerate(tokens):
        p = probs(logits[i], sp)
        if uniform(gen) * float(q[i][x]) < float(p[x]):
            continue
        residual = (p - q[i]).clamp_min(0)
        total = float(residual.sum())
        # A rejection implies p(x) < q(x), hence p ≠ q and the residual has mass; guard rounding anyway.
        return Verdict(list(range(i)), draw(residual / total if total > 0 else p, gen))
    return Verdict(list(range(len(tokens))), draw(probs(logits[len(tokens)], sp), gen))


def prune(tokens: list[int], parents: list[int], max_depth: int) -> tuple[list[int], list[int]]:
    """The tree without nodes deeper than `max_depth` (parents come before children)."""
    depth: list[int] = []
    new_index: list[int] = []
    out_tokens: list[int] = []
    out_parents: list[int] = []
    for tok, p in zip(tokens, parents, strict=True):
        d = 1 if p < 0 else depth[p] + 1
        depth.append(d)
        if d <= max_depth:
            new_index.append(len(out_tokens))
            out_tokens.append(tok)
            out_parents.append(-1 if p < 0 else new_index[p])
        else:
            new_index.append(-1)
    return out_tokens, out_parents


def tree_from_choices(choices: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Choices sorted so that parents come first (by depth, then path), and each one's parent index."""
    ordered = sorted((list(c) for c in choices), key=lambda c: (len(c), c))
    index = {tuple(c): i for i, c in enumerate(ordered)}
    parents = [index[tuple(c[:-1])] if len(c) > 1 else -1 for c in ordered]
    return ordered, parents
