"""Prompt lookup / n-gram speculation (apoorvumang prompt-lookup-decoding; TRT-LLM NGram).

The last ≤ `max_matching_ngram_size` tokens are looked up in the context so far, longest
first; the tokens that followed the match are proposed. The proposal is a deterministic
function of the context (q is one-hot), so sample-and-match verification is lossless:
x is accepted with probability p(x), and a rejection emits a draw from p with x removed.
"""

from __future__ import annotations

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward


class NGramSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, max_draft_len: int, max_matching_ngram_size: int, use_oldest: bool = True):
        self.max_draft_len = max_draft_len
        self.max_n = max_matching_ngram_size
        self.use_oldest = use_oldest
        # index[n-1][ngram] = ends (exclusive) of its occurrences, ascending; with use_oldest only
        # the first one matters: first[n-1][ngram] = the end of its first occurrence.
        self.index: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(self.max_n)]
        self.first: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.max_n)]
        self.indexed = 0

    def _extend_index(self, tokens: list[int]) -> None:
        max_n = self.max_n
        if self.use_oldest:
            put = [d.setdefault for d in self.first]
            for end in range(self.indexed + 1, len(tokens) + 1):
                for n in range(1, (end if end < max_n else max_n) + 1):
                    put[n - 1](tuple(tokens[end - n : end]), end)
        else:
            for end in range(self.indexed + 1, len(tokens) + 1):
                for n in range(1, min(max_n, end) + 1):
                    self.index[n - 1].setdefault(tuple(tokens[end - n : end]), []).append(end)
        self.indexed = len(tokens)

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.index = [{} for _ in range(self.max_n)]
        self.first = [{} for _ in range(self.max_n)]
        self.indexed = 0

    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.max_draft_len, budget)
        tokens = ctx.tokens
        if k <= 0:
            return Proposal()
        self._extend_index(tokens)
        size = len(tokens)
        if self.use_oldest:
            # The suffix itself is an occurrence too, but nothing follows it yet: with no earlier
            # occurrence its first end is the context's end.
            first = self.first
            for n in range(min(self.max_n, size), 0, -1):
                end = first[n - 1].get(tuple(tokens[size - n :]), size)
                if end < size:
                    return Proposal.chain(tokens[end : end + k])
            return Proposal()
        for n in range(min(self.max_n, size), 0, -1):
            # Ends ascend and are distinct, so the suffix is the last one, if any (no scan of
            # every occurrence).
            ends = self.index[n - 1].get(tuple(tokens[size - n :]))
            if not ends:
                continue
            end = ends[-1] if ends[-1] < size else (ends[-2] if len(ends) > 1 else -1)
            if end >= 0:
                return Proposal.chain(tokens[end : end + k])
        return Proposal()

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        """The index catches up lazily in `propose`."""
