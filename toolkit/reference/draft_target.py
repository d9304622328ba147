"""Draft-target speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A separate small LM drafts γ tokens autoregressively from its own KV cache; the target
verifies them in one forward. Greedy: a draft token is accepted iff it is the target's
argmax. Sampling: min(1, p/q) acceptance with residual resampling (core.speculative_sampling).
On rejection the draft cache is rolled back to the accepted prefix.
"""

from __future__ import annotations

import torch

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import CachedLM, Forward
from toolkit.reference.sampling import draw, probs


class DraftTargetSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, draft: CachedLM, max_draft_len: int):
        self.draft = draft
        self.max_draft_len = max_draft_len
        self._greedy_chain = getattr(draft, "greedy_chain", None)

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.draft.reset()
        if len(ctx.tokens) > 1:
            self.draft.forward(ctx.tokens[:-1], logits_from=len(ctx.tokens) - 1)

    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.max_draft_len, budget)
        if k <= 0:
            return Proposal()
        # The draft may lag behind by more than the root (after a fully accepted step it never
        # saw the last draft token): feed everything it has not cached yet.
        feed = ctx.tokens[self.draft.length :]
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        sp = ctx.sampling
        # A CachedLM drafts greedily in one call (a batched draft has no greedy_chain).
        greedy_chain = self._greedy_chain if sp.greedy else None
        if greedy_chain is not None:
            return Proposal.chain(greedy_chain(feed, k))
        for _ in range(k):
            out = self.draft.forward(feed, logits_from=len(feed) - 1).logits
            assert out is not None  # logits_from is inside the fed tokens: one row
            if sp.greedy:
                # One row: its argmax is the flat one (no row view to make).
                x = int(out.argmax() if out.shape[0] == 1 else out[-1].argmax())
            else:
                logits = out[-1]
                assert ctx.gen is not None
                q = probs(logits, sp)
                x = draw(q, ctx.gen)
                qs.append(q)
            tokens.append(x)
            feed = [x]
        return Proposal.chain(tokens, q=qs or None)

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        before = len(ctx.tokens) - len(verdict.path) - 1
        # The draft cached the old context plus all but the last draft token; keep what was accepted.
        self.draft.crop(min(self.draft.length, before + len(verdict.path)))
