"""Prompt lookup / n-gram speculation (apoorvumang prompt-lookup-decoding; TRT-LLM NGram).

The last ≤ `max_matching_ngram_size` tokens are looked up in the context so far, longest
first; the tokens that followed the match are proposed. The proposal is a deterministic
function of the context (q is one-hot), so sample-and-match verification is lossless:
x is accepted with probability p(x), and a rejection emits a draw from p with x removed.
"""

from __future__ import annotations

from typing import Any

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward


class NGramSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, draft_len: int, max_matching_ngram_size: int, use_oldest: bool = True):
        self.draft_len = draft_len
        self.max_n = max_matching_ngram_size
        self.use_oldest = use_oldest
        # ends[ngram] = the end (exclusive) of its first occurrence (use_oldest) or of its latest
        # one, among the occurrences ending before the context's last token; n-grams of every
        # length share the dict (tuples of different lengths never collide). The suffix itself
        # is not indexed until the context grows past it: a lookup finds earlier occurrences only.
        self.ends: dict[tuple[int, ...], int] = {}
        self.indexed = 0  # the ends indexed so far are 1..indexed

    def _extend_index(self, tokens: list[int], upto: int) -> None:
        """Index the n-grams ending at indexed+1 .. upto."""
        max_n = self.max_n
        ends = self.ends
        put = ends.setdefault if self.use_oldest else ends.__setitem__
        for end in range(self.indexed + 1, upto + 1):
            for n in range(1, (end if end < max_n else max_n) + 1):
                put(tuple(tokens[end - n : end]), end)
        self.indexed = upto

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.ends = {}
        self.indexed = 0

    def propose(self, ctx: Context, budget: int) -> Proposal:
        chain = self.propose_chain(ctx.tokens, budget)
        return Proposal.chain(chain) if chain else Proposal()

    def propose_chain(self, tokens: list[int], budget: int) -> list[int]:
        """The proposal's tokens (a chain; empty: no match or no budget), for the generation
        loop's greedy chain path, which needs no Proposal."""
        k = self.draft_len if self.draft_len < budget else budget
        if k <= 0:
            return []
        size = len(tokens)
        if self.indexed < size - 1:
            self._extend_index(tokens, size - 1)
        get = self.ends.get
        for n in range(self.max_n if self.max_n < size else size, 0, -1):
            end = get(tuple(tokens[size - n :]))
            if end is not None:
                return tokens[end : end + k]
        return []

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        """The index catches up lazily in `propose`."""


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> NGramSpeculator:
    return NGramSpeculator(spec.max_draft_len, spec.max_matching_ngram_size, spec.is_use_oldest)
