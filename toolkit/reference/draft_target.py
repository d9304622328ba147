"""Draft-target speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A separate small LM drafts γ tokens autoregressively from its own KV cache; the target
verifies them in one forward. Greedy: a draft token is accepted iff it is the target's
argmax. Sampling: min(1, p/q) acceptance with residual resampling (core.speculative_sampling).
On rejection the draft cache is rolled back to the accepted prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from toolkit.errors import GenerationError, ModelError
from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET, EMBEDDING_KEYS, INFO
from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import (
    CachedLM,
    Forward,
    checkpoint_embedding,
    load_causal_lm,
    read_config,
    require_weights,
)
from toolkit.reference.sampling import draw, probs


class DraftTargetSpeculator:
    needs_hidden = False
    needs_aux = False

    def __init__(self, draft: CachedLM, draft_len: int):
        self.draft = draft
        self.draft_len = draft_len
        self._greedy_chain = getattr(draft, "greedy_chain", None)

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.draft.reset()
        if len(ctx.tokens) > 1:
            self.draft.forward(ctx.tokens[:-1], logits_from=len(ctx.tokens) - 1)

    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.draft_len, budget)
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


# ------------------------------------------------------------------ the proposer (proposers.py)


def embedding_from_target(path: Path) -> bool:
    """Whether the checkpoint at `path` is stored without its embedding (EMBEDDING_FROM_TARGET)."""
    return bool(read_config(Path(path), "draft").get(EMBEDDING_FROM_TARGET))


def load_draft_lm(path: Path, target: Any, dtype: torch.dtype = torch.float32) -> Any:
    """The draft at `path` as an HF causal LM in eval mode; one stored without its embedding gets
    a copy of the target's (checked: tied, the same shape, nothing else missing). `target`: the
    target model, or its checkpoint directory (only its embedding is read)."""
    path = Path(path)
    if not embedding_from_target(path):
        return load_causal_lm(path, "draft", dtype)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    require_weights(path, "draft")
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the embedding is missing on purpose: no "newly initialized" notice
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, output_loading_info=True)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelError(f"cannot load draft from {path}: {e}", hint="re-export the draft") from None
    finally:
        hf_logging.set_verbosity(level)
    model, info = loaded
    own = model.get_input_embeddings().weight
    theirs = (
        checkpoint_embedding(Path(target))
        if isinstance(target, (str, Path))
        else target.get_input_embeddings().weight
    )
    problems = []
    missing = set(info.get("missing_keys") or ()) - EMBEDDING_KEYS
    if missing:
        problems.append(f"weights missing besides the embedding: {sorted(missing)[:4]}")
    if model.get_output_embeddings().weight is not own:
        problems.append("its LM head is not tied to the embedding")
    if own.shape != theirs.shape:
        problems.append(f"embedding {tuple(own.shape)} != the target's {tuple(theirs.shape)}")
    if problems:
        raise ModelError(
            f"draft at {path} ({EMBEDDING_FROM_TARGET}) cannot take the target's embedding: {'; '.join(problems)}",
            hint="export the draft with its embedding, or from a target with the same hidden size and vocabulary",
        )
    with torch.no_grad():
        own.copy_(theirs.to(own.dtype))
    return model.eval()


def load_weights(path: Path, target: Any, dtype: torch.dtype, spec: Any) -> CachedLM:
    """The draft model at `path`, which must share the target's vocabulary."""
    draft = load_draft_lm(Path(path), target, dtype)
    dvocab, tvocab = draft.config.vocab_size, target.config.vocab_size
    if dvocab != tvocab:
        raise ModelError(
            f"draft vocab_size {dvocab} differs from the target's {tvocab}",
            hint="draft and target must share one tokenizer and vocabulary",
        )
    return CachedLM(draft)


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> DraftTargetSpeculator:
    if runtime.draft is None:
        raise GenerationError(
            "draft_target needs a draft model",
            hint=f"load the runtime with weights={{{INFO.source!r}: <dir>}}",
        )
    return DraftTargetSpeculator(draft if draft is not None else runtime.draft, spec.max_draft_len)
