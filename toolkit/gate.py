"""The numerics-aware correctness gate (docs/correctness.md): speculative and baseline greedy token
ids must agree, except where they part at a near-tie of the target's own top choices.

In bf16/fp16 a verification forward over γ+1 tokens runs different GEMM shapes from a one-token
decode step, so where the target's two best logits are nearly equal the speculative path may
legitimately take the other one, and everything after it differs. The gate therefore compares
token ids up to the first divergence, asks the baseline's log-probs at that position, and passes
the prompt only when the margin log p(baseline token) - log p(served token) is within the serving
dtype's threshold (TIE_MARGIN); otherwise it fails naming the position, both tokens, the margin
and the prompt. `strict` keeps the exact rule (identical text).

No torch here: the margin comes from a `Scorer` (validate.py builds one from the target in
process or the baseline deployment's generation logits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# The largest log-prob margin between the baseline's token and the served one that still counts as
# a tie, per serving dtype, in logit units (a log-prob difference is a logit difference). Chosen
# as two units in the last place of the dtype at 16 ≤ |logit| < 32, where LLMs' top logits lie:
# rounding the logits alone (the fp32 accumulations of two GEMM shapes, summed in a different
# order, then stored in the dtype) moves a logit by up to one ulp, so two logits' difference by
# up to two: bf16 ulp(16) = 2^-3, fp16 ulp(16) = 2^-6. float32 (the CPU twin) gets a floor well
# above its reordering noise (batched vs unbatched forwards of the tiny models differ by < 1e-5).
TIE_MARGIN = {"bfloat16": 0.25, "float16": 0.03125, "float32": 1e-4}


@dataclass
class Divergence:
    """Where one prompt's served and baseline token ids part, and the baseline's verdict on it."""

    prompt: str
    position: int  # index among the generated tokens
    served_token: int
    baseline_token: int
    margin: float | None  # log p(baseline token) - log p(served token); None: no log-probs
    threshold: float
    source: str  # where the log-probs came from

    @property
    def tie(self) -> bool:
        # Symmetric: where the log-probs come from a computation in another dtype than the
        # baseline's (the float32 target for a bf16 deployment), the served token may even be
        # the more likely one; either way the two are within the threshold of each other.
        return self.margin is not None and abs(self.margin) <= self.threshold

    def describe(self, decode: Callable[[list[int]], str] | None = None) -> str:
        def tok(t: int) -> str:
            return f"{t} ({decode([t])!r})" if decode else str(t)

        margin = "unknown (no log-probs)" if self.margin is None else f"{self.margin:.4g}"
        return (
            f"prompt {self.prompt!r}: token {self.position} served {tok(self.served_token)} vs baseline "
            f"{tok(self.baseline_token)}, margin {margin} (tie threshold {self.threshold:g}, {self.source})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tie": self.tie}


def first_divergence(served: Sequence[int], baseline: Sequence[int]) -> int | None:
    """The first index where the two differ (a length difference counts), or None."""
    for i, (a, b) in enumerate(zip(served, baseline, strict=False)):
        if a != b:
            return i
    return None if len(served) == len(baseline) else min(len(served), len(baseline))


# (prompt ids + the common prefix of generated ids) -> the baseline's log-probs over the vocabulary
# at the next position (a sequence indexable by token id), or None when unavailable.
Scorer = Callable[[list[int]], Sequence[float] | None]


def judge(
    prompt: str,
    prompt_ids: list[int],
    served: list[int],
    baseline: list[int],
    scorer: Scorer | None,
    threshold: float,
    source: str,
) -> Divergence | None:
    """None when the ids agree; else the first divergence with its margin (a length difference
    where one side ended is judged against the end of the shorter one: no margin, no tie)."""
    j = first_divergence(served, baseline)
    if j is None:
        return None
    if j >= len(served) or j >= len(baseline):
        return Divergence(prompt, j, -1, -1, None, threshold, "one side ended earlier")
    margin = None
    logprobs = scorer(prompt_ids + baseline[:j]) if scorer is not None else None
    if logprobs is not None:
        margin = float(logprobs[baseline[j]]) - float(logprobs[served[j]])
    return Divergence(prompt, j, served[j], baseline[j], margin, threshold, source)
