"""Lookahead decoding (Fu et al. 2024, arXiv 2402.02057; hao-ai-lab/LookaheadDecoding).

One target forward per step carries, after the root (the last committed token):
- the verification branch: up to G pooled n-gram continuations of the root, merged into a
  trie, each node attending to its trie ancestors;
- the lookahead branch: a Jacobi window of N-1 levels × W tokens. Token (l, i) sits at
  relative position 1+i+l and attends to level-0 tokens 0..i and to (1..l, i) above them,
  i.e. it is a tree whose parent of (0, i) is (0, i-1) and of (l, i) is (l-1, i).
The top level's outputs become the next level; once the window holds N-1 levels each column
plus its output is an N-gram for the pool, keyed by its first token, and the oldest level
is dropped. The pool starts with the prompt's n-grams (as TensorRT-LLM's does).
Verification is greedy argmax matching, or sample-and-match for temperature > 0: the
candidates are a deterministic function of the context, so both are lossless.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward

_NONE: OrderedDict[tuple[int, ...], None] = OrderedDict()  # no continuations (never written)


class LookaheadSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, window: int, ngram: int, verification_set: int):
        self.w = window
        self.n = ngram
        self.g = verification_set
        self.levels: list[list[int]] = []
        self.pool: dict[int, OrderedDict[tuple[int, ...], None]] = {}
        self._rel: dict[tuple[int, int], tuple[int, ...]] = {}

    def _remember(self, gram: tuple[int, ...]) -> None:
        """Add an n-gram; each key keeps its G most recent continuations (LRU)."""
        if self.g <= 0:
            return
        conts = self.pool.setdefault(gram[0], OrderedDict())
        conts[gram[1:]] = None
        conts.move_to_end(gram[1:])
        if len(conts) > self.g:
            conts.popitem(last=False)

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.pool = {}
        prompt = ctx.tokens
        if self.n < 2:
            self.levels = []
            return
        for i in range(len(prompt) - self.n + 1):
            self._remember(tuple(prompt[i : i + self.n]))
        # LADE seeds level 0 with random prompt tokens; the prompt's tail, cycled, is deterministic.
        self.levels = [[prompt[(len(prompt) - self.w + i) % len(prompt)] for i in range(self.w)]]

    def propose(self, ctx: Context, budget: int) -> Proposal:
        if self.n < 2:
            return Proposal()
        tokens: list[int] = []
        parents: list[int] = []
        node: dict[tuple[int, int], int] = {}
        conts = self.pool.get(ctx.tokens[-1], _NONE)
        if budget > 0 and conts:
            for cont in reversed(list(conts)):  # newest first
                parent = -1
                for tok in cont[:budget]:
                    key = (parent, tok)
                    if key not in node:
                        node[key] = len(tokens)
                        tokens.append(tok)
                        parents.append(parent)
                    parent = node[key]
        num_draft = len(tokens)
        # The window's parents depend only on its number of levels and where it starts.
        parents.extend(self._window_parents(len(self.levels), num_draft))
        for row in self.levels:
            tokens.extend(row)
        return Proposal(tokens=tokens, parents=parents, num_draft=num_draft)

    def _window_parents(self, levels: int, first: int) -> tuple[int, ...]:
        """Parent of each window node when the window starts at node `first` (-1: the root):
        (0, i) follows (0, i-1), and (l, i) sits under (l-1, i). Cached per (levels, first)."""
        key = (levels, first)
        parents = self._rel.get(key)
        if parents is None:
            w = self.w
            rel = [i - 1 if level == 0 else (level - 1) * w + i for level in range(levels) for i in range(w)]
            parents = self._rel[key] = tuple(-1 if r < 0 else first + r for r in rel)
        return parents

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        if not self.levels:
            return
        top = 1 + proposal.num_draft + (len(self.levels) - 1) * self.w
        if verdict.argmax is not None:
            # Greedy verification took every row's argmax; the window's rows are raw logits there.
            out = verdict.argmax[top : top + self.w]
        else:
            assert fwd.logits is not None
            out = fwd.logits[top : top + self.w].argmax(-1).tolist()
        if len(self.levels) < self.n - 1:
            self.levels.append(out)
            return
        # Column i of the window plus its output: zip yields exactly those tuples.
        for gram in zip(*self.levels, out, strict=True):
            self._remember(gram)
        self.levels = [*self.levels[1:], out]


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> LookaheadSpeculator:
    return LookaheadSpeculator(spec.window, spec.ngram, spec.verification_set)
