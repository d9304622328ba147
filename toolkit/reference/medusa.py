"""Medusa (Cai et al. 2024): extra heads on the target's last hidden state, verified as a tree.

Layout (FasterDecoding/Medusa): config.json with medusa_num_heads and medusa_num_layers;
weights `{i}.{j}.linear.{weight,bias}` for ResBlock j of head i (x + SiLU(Linear(x))) and
`{i}.{num_layers}.weight` for the head's Linear(hidden → vocab). From the hidden state at
position t, head i predicts token t+2+i. Here the hidden state is the last cached position's,
whose own prediction is the root token, so head i proposes depth i+1 of the next tree.
Greedy only, as in TensorRT-LLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from toolkit.errors import GenerationError, ModelError
from toolkit.modes.medusa import INFO
from toolkit.reference.core import Context, Proposal, Verdict, prune, tree_from_choices
from toolkit.reference.models import Forward, inference, read_config, require_weights

WEIGHT_FILES = ("model.safetensors", "medusa_lm_head.safetensors")


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


class MedusaHeads(nn.ModuleList):
    """Head i is `Sequential(ResBlock × num_layers, Linear(hidden → vocab))`; indices match the file's keys."""

    def __init__(self, num_heads: int, num_layers: int, hidden: int, vocab: int, bias: bool):
        super().__init__(
            nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)], nn.Linear(hidden, vocab, bias=bias))
            for _ in range(num_heads)
        )

    def forward(self, hidden: torch.Tensor, n: int) -> torch.Tensor:
        """[n, vocab]: the first n heads on one hidden vector, in one module call."""
        # Iterating the ModuleList (not indexing it per head, which is slow) visits the same heads.
        return torch.stack([head(hidden) for head, _ in zip(self, range(n), strict=False)])

    @inference
    def logits(self, hidden: torch.Tensor, n: int) -> torch.Tensor:
        """[n, vocab]: the first n heads on one hidden vector."""
        out: torch.Tensor = self(hidden, n)
        return out


def load_medusa_heads(path: Path, target_config: Any) -> MedusaHeads:
    from safetensors.torch import load_file

    cfg = read_config(path, "Medusa heads")
    weights = require_weights(path, "Medusa heads", WEIGHT_FILES)
    try:
        num_heads = int(cfg["medusa_num_heads"])
        num_layers = int(cfg.get("medusa_num_layers", 1))
    except (KeyError, TypeError, ValueError):
        raise ModelError(
            f"{path}/config.json lacks medusa_num_heads", hint="export the heads in the FasterDecoding layout"
        ) from None
    state = load_file(weights)
    final = state.get(f"0.{num_layers}.weight")
    if final is None:
        raise ModelError(
            f"{weights} has no key 0.{num_layers}.weight (the first head's vocabulary projection)",
            hint="check medusa_num_layers in config.json against the weights",
        )
    vocab, hidden = final.shape
    for what, mine, theirs in (
        ("hidden_size", hidden, target_config.hidden_size),
        ("vocab_size", vocab, target_config.vocab_size),
    ):
        if mine != theirs:
            raise ModelError(
                f"Medusa heads' {what} {mine} does not fit the target's {theirs}",
                hint="use heads trained for this target",
            )
    heads = MedusaHeads(num_heads, num_layers, hidden, vocab, bias=f"0.{num_layers}.bias" in state)
    try:
        heads.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as e:
        raise ModelError(
            f"Medusa weights in {weights} do not match config.json: {e}", hint="re-export the heads"
        ) from None
    return heads.eval()


class MedusaSpeculator:
    needs_hidden = True
    needs_aux = False

    def __init__(self, heads: MedusaHeads, choices: list[list[int]], num_heads: int | None):
        self.heads = heads
        self.n = num_heads or len(heads)
        if self.n > len(heads):
            raise GenerationError(
                f"num_medusa_heads {self.n} exceeds the {len(heads)} heads in the checkpoint",
                hint="lower speculative.num_medusa_heads or drop it",
            )
        self.choices, self.parents = tree_from_choices(choices)
        depth = max(len(c) for c in self.choices)
        if depth > self.n:
            raise GenerationError(
                f"the Medusa tree is {depth} deep but only {self.n} heads are used",
                hint="use a shallower medusa_choices tree or more heads",
            )
        # How many top candidates each head must supply.
        self.top = [1 + max(c[-1] for c in self.choices if len(c) == d) for d in range(1, depth + 1)]
        self.kmax = max(self.top)
        self.head_logits: torch.Tensor | None = None
        # Per depth budget: the nodes the pruned tree keeps, as (head, rank) of each, and their parents.
        self._pruned: dict[int, tuple[list[tuple[int, int]], list[int]]] = {}

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.head_logits = None
        if fwd is not None:
            assert fwd.hidden is not None
            self.head_logits = self.heads.logits(fwd.hidden.select(0, -1), len(self.top))

    def propose(self, ctx: Context, budget: int) -> Proposal:
        if self.head_logits is None or budget <= 0:
            return Proposal()
        # One top-k over all the heads used (as many as the widest level needs): each level reads
        # its first k. Medusa verifies greedily, so the proposal can change no committed token.
        top = torch.topk(self.head_logits, self.kmax).indices.tolist()
        shape = self._pruned.get(budget)
        if shape is None:
            # The tree's shape under this budget is fixed: prune once, map tokens per step.
            picks = [(len(c) - 1, c[-1]) for c in self.choices]
            kept, parents = prune(list(range(len(picks))), self.parents, budget)
            shape = self._pruned[budget] = ([picks[i] for i in kept], parents)
        picks, parents = shape
        return Proposal(tokens=[top[d][r] for d, r in picks], parents=list(parents))

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        assert fwd.hidden is not None
        row = verdict.path[-1] + 1 if verdict.path else 0
        self.head_logits = self.heads.logits(fwd.hidden.select(0, row), len(self.top))


# ------------------------------------------------------------------ the proposer (proposers.py)


def load_weights(path: Path, target: Any, dtype: torch.dtype, spec: Any) -> MedusaHeads:
    return load_medusa_heads(Path(path), target.config).to(dtype)


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> MedusaSpeculator:
    heads = runtime.weights.get(INFO.source)
    if heads is None:
        raise GenerationError(
            "medusa needs Medusa heads", hint=f"load the runtime with weights={{{INFO.source!r}: <dir>}}"
        )
    if not sampling.greedy:
        raise GenerationError(
            "Medusa decoding is greedy-only (as in TensorRT-LLM)",
            hint="use temperature 0, or a mode that samples (draft_target, eagle3, ngram, lookahead)",
        )
    return MedusaSpeculator(heads, spec.choices, spec.num_medusa_heads)
