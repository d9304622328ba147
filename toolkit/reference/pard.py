"""PARD (parallel draft; arXiv 2504.18583): the draft reads the context plus k-1 copies of one mask
token and proposes k tokens in one forward; the target verifies them as a chain.

As in AMD-AGI/PARD pard/pard_infer.py @8a0d2bd: the draft input is the tokens it has not cached
yet, then k-1 mask tokens; the argmax of the last k logits rows is the draft (the last real token's
row predicts the next token, mask j's row the token j+1 ahead). The masks' KV is dropped after the
forward, so the next step feeds the tokens committed in between. Drafting is greedy (argmax), as
upstream; with temperature > 0 the runtime verifies by sample-and-match (core.verify), which is
lossless for any proposal.

TensorRT-LLM's PARDWorker (tensorrt_llm/_torch/speculative/pard.py @051edeb) gives the draft a
fixed 2k slots per step ([accepted tokens, masks...]) for CUDA-graph sizing; the tokens it drafts
from are the same (docs/methods.md, "PARD").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from toolkit.errors import GenerationError, ModelError
from toolkit.modes.pard import INFO
from toolkit.reference import draft_target
from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import CachedLM, Forward, argmax_list


def mask_token(config: Any) -> int:
    """The draft's mask token id: config.json `pard_token` (what PARD's training writes), else
    `mask_token_id` (the other name TensorRT-LLM reads)."""
    for key in ("pard_token", "mask_token_id"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ModelError(
        "the draft's config.json has no pard_token (nor mask_token_id): it is not a PARD draft",
        hint="train one with `sdtk train-draft` on a pard recipe, or set speculative.mask_token_id",
    )


class PardSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, draft: CachedLM, draft_len: int, mask_id: int):
        vocab = int(draft.config.vocab_size)
        if not 0 <= mask_id < vocab:
            raise ModelError(
                f"PARD mask token {mask_id} is outside the draft's vocabulary of {vocab}",
                hint="fix speculative.mask_token_id or the draft's pard_token",
            )
        self.draft = draft
        self.draft_len = draft_len
        self.mask_id = mask_id

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.draft.reset()

    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.draft_len, budget)
        if k <= 0:
            return Proposal()
        feed = ctx.tokens[self.draft.length :]
        out = self.draft.forward([*feed, *[self.mask_id] * (k - 1)], logits_from=len(feed) - 1).logits
        assert out is not None and out.shape[0] == k
        # The masks' KV never stays: the next step feeds what was committed instead.
        self.draft.crop(self.draft.length - (k - 1))
        return Proposal.chain([int(t) for t in argmax_list(out)])

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        before = len(ctx.tokens) - len(verdict.path) - 1
        self.draft.crop(min(self.draft.length, before))


# ------------------------------------------------------------------ the proposer (proposers.py)


def load_weights(path: Path, target: Any, dtype: torch.dtype, spec: Any) -> CachedLM:
    """The PARD draft at `path`: a causal LM sharing the target's vocabulary, as a draft-target draft."""
    return draft_target.load_weights(path, target, dtype, spec)


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> PardSpeculator:
    if runtime.draft is None:
        raise GenerationError(
            "pard needs a PARD draft model", hint=f"load the runtime with weights={{{INFO.source!r}: <dir>}}"
        )
    mask = spec.mask_token_id if spec.mask_token_id is not None else mask_token(runtime.draft.config)
    return PardSpeculator(draft if draft is not None else runtime.draft, spec.max_draft_len, mask)
