"""Sampling parameters and the "standardised" distributions both sides of a verification use.

Leviathan et al. §2.2: temperature, top-k and top-p are applied to target and draft alike
before acceptance, so speculative sampling reproduces the *processed* target distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from toolkit.errors import GenerationError


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy (argmax); top_k 0 and top_p 1.0 disable those filters."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise GenerationError(
                f"temperature {self.temperature} is negative", hint="use 0 for greedy or a value > 0"
            )
        if self.top_k < 0:
            raise GenerationError(f"top_k {self.top_k} is negative", hint="use 0 to disable top-k")
        if not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p {self.top_p} is outside (0, 1]", hint="use 1.0 to disable top-p")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """Softmax of `logits` (last dim) after temperature, top-k and top-p, like HF's warpers."""
    x = logits.float() / sp.temperature
    if sp.top_k and sp.top_k < x.shape[-1]:
        kth = torch.topk(x, sp.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if sp.top_p < 1.0:
        # Drop the low tail whose cumulative mass is ≤ 1 - top_p (HF TopPLogitsWarper); the top token stays.
        sorted_x, order = torch.sort(x, dim=-1)
        cum = sorted_x.softmax(-1).cumsum(-1)
        drop = cum <= 1 - sp.top_p
        drop[..., -1] = False
        x = x.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return x.softmax(-1)


def generator(seed: int | None) -> torch.Generator:
    g = torch.Generator()
    if seed is None:
        g.seed()
    else:
        g.manual_seed(seed)
    return g


def draw(p: torch.Tensor, gen: torch.Generator) -> int:
    """One token from the distribution `p` (1-D)."""
    return int(torch.multinomial(p, 1, generator=gen))


def uniform(gen: torch.Generator) -> float:
    return float(torch.rand((), generator=gen))
