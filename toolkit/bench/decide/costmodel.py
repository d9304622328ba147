"""The speculative-decoding cost model: Leviathan et al. (arXiv 2211.17192 §3) plus what it leaves out.

Leviathan assumes i.i.d. acceptance α, a draft that costs c target steps per token, and a
verification of γ+1 tokens that costs exactly one target step, at batch 1. We keep those
formulas (tests pin them to the paper's Table 1) and extend them with

- per-position acceptance (non-i.i.d.): E = 1 + Σ_k Π_{i≤k} a_i, using measured marginals;
- a verification cost: a target step over n tokens costs t(n) = t0·(1 + κ·(n−1));
- a batch term: at concurrency B a step verifies B·n tokens; a `StepCost` says what that
  costs (measured on the reference runtime, or a GPU roofline in `sizing`), so speculation
  stops paying once the target step becomes compute-bound;
- shapes for trees (n = nodes+1 tokens verified) and lookahead ((W+G)(N−1) tokens);
- a serving cost per step: a served step pays o beyond its forwards (a response through the
  ensemble, detokenization, IPC per chunk) whether it commits 1 token or τ (`served_speedup`);
- draft-target through the BLS loop, whose target request decodes plainly up to γ+1 tokens
  after the verification (`bls_loop_speedup`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


def expected_tokens(alpha: float, draft_len: int) -> float:
    """Leviathan Eq. 1: E[#tokens per step] = (1 − α^{γ+1}) / (1 − α), capped geometric."""
    _check_alpha(alpha)
    _check_draft_len(draft_len)
    if alpha >= 1.0:
        return draft_len + 1.0
    return (1 - alpha ** (draft_len + 1)) / (1 - alpha)


def speedup(alpha: float, draft_len: int, c: float) -> float:
    """Leviathan Thm 3.8: walltime improvement (1 − α^{γ+1}) / ((1 − α)(γc + 1))."""
    if c < 0:
        raise ValueError(f"cost ratio c must be ≥ 0, got {c}")
    return expected_tokens(alpha, draft_len) / (draft_len * c + 1)


def ops_factor(alpha: float, draft_len: int, c_hat: float = 0.0) -> float:
    """Leviathan Thm 3.11: arithmetic operations grow by (1 − α)(γĉ + γ + 1)/(1 − α^{γ+1})."""
    return (draft_len * c_hat + draft_len + 1) / expected_tokens(alpha, draft_len)


def optimal_draft_len(alpha: float, c: float, draft_len_max: int = 64) -> tuple[int, float]:
    """argmax_γ S(α, γ, c) over 1..draft_len_max (Leviathan §3.5: found numerically)."""
    best = max(range(1, draft_len_max + 1), key=lambda g: (speedup(alpha, g, c), -g))
    return best, speedup(alpha, best, c)


def expected_tokens_from_marginals(marginals: Sequence[float], draft_len: int | None = None) -> float:
    """Non-i.i.d. E = 1 + Σ_{k<γ} m_k, where m_k = P(draft positions 1..k+1 all accepted).

    With conditional acceptances a_i, m_k = Π_{i≤k} a_i; measured chain statistics give m_k
    directly as accepted_k / proposed_k.
    """
    ms = list(marginals if draft_len is None else marginals[:draft_len])
    if draft_len is not None and draft_len > len(marginals):
        raise ValueError(f"only {len(marginals)} positions were measured, cannot evaluate γ={draft_len}")
    for m in ms:
        if not 0 <= m <= 1:
            raise ValueError(f"marginal acceptance {m} is outside [0, 1]")
    return 1.0 + sum(ms)


def marginals_from_conditionals(conditionals: Sequence[float]) -> list[float]:
    out, p = [], 1.0
    for a in conditionals:
        p *= a
        out.append(p)
    return out


def conditionals_from_marginals(marginals: Sequence[float]) -> list[float]:
    out, prev = [], 1.0
    for m in marginals:
        out.append(m / prev if prev > 0 else 0.0)
        prev = m
    return out


def iid_marginals(alpha: float, draft_len: int) -> list[float]:
    return [alpha ** (k + 1) for k in range(draft_len)]


def _check_alpha(alpha: float) -> None:
    if not 0 <= alpha <= 1:
        raise ValueError(f"acceptance rate α must lie in [0, 1], got {alpha}")


def _check_draft_len(draft_len: int) -> None:
    if draft_len < 0:
        raise ValueError(f"draft length γ must be ≥ 0, got {draft_len}")


# --------------------------------------------------------------------------- step costs


class StepCost(Protocol):
    """Time of one forward of a model over `batch` sequences with `tokens` new tokens each."""

    def time(self, batch: int, tokens: int) -> float: ...


@dataclass(frozen=True)
class LinearStepCost:
    """t(B, q) = t0 · (1 + κ·(B·q − 1)): one step of 1 token costs t0, each extra token κ·t0.

    κ≈0 is the memory-bound regime (extra tokens ride along for free); κ=1 is compute-bound
    (n tokens cost n steps). Measured on the reference runtime from forwards of 1 and n tokens.
    """

    t0: float
    kappa: float

    def time(self, batch: int, tokens: int) -> float:
        n = max(1, batch * tokens)
        return self.t0 * (1 + self.kappa * (n - 1))


@dataclass(frozen=True)
class MeasuredStepCost:
    """Piecewise-linear through measured (n_tokens, seconds) points; linear extrapolation beyond."""

    points: tuple[tuple[int, float], ...]

    def time(self, batch: int, tokens: int) -> float:
        n = max(1, batch * tokens)
        pts = sorted(self.points)
        if len(pts) == 1:
            return pts[0][1] * n
        for (n0, t0), (n1, t1) in zip(pts, pts[1:], strict=False):
            if n <= n1 or (n1, t1) == pts[-1]:
                if n < n0:
                    return t0
                return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
        return pts[-1][1]  # unreachable: the loop returns on the last segment


@dataclass(frozen=True)
class Shape:
    """What one speculative step does: draft forwards (each over 1 token per sequence) and the
    number of tokens per sequence the target verifies."""

    draft_forwards: int
    verify_tokens: int
    label: str = ""


def chain_shape(draft_len: int, *, draft_forwards: int | None = None) -> Shape:
    return Shape(
        draft_len if draft_forwards is None else draft_forwards, draft_len + 1, f"chain γ={draft_len}"
    )


def tree_shape(nodes: int, depth: int, *, draft_forwards: int | None = None) -> Shape:
    # The root (last committed token) is verified together with the tree nodes.
    return Shape(depth if draft_forwards is None else draft_forwards, nodes + 1, f"tree {nodes} nodes")


def lookahead_shape(window: int, ngram: int, verification_set: int) -> Shape:
    """Fu et al.: per-step cost ≈ (W+G)(N−1) tokens; no separate draft model."""
    return Shape(
        0,
        max(1, (window + verification_set) * (ngram - 1)),
        f"lookahead W={window} N={ngram} G={verification_set}",
    )


def step_speedup(
    expected: float,
    shape: Shape,
    target: StepCost,
    *,
    draft: StepCost | None = None,
    batch: int = 1,
) -> float:
    """Per-sequence output rate with speculation ÷ without, at concurrency `batch`.

    baseline step: target over B sequences × 1 token → 1 token per sequence;
    speculative step: `draft_forwards` draft forwards over B × 1 tokens plus one target forward
    over B × verify_tokens → `expected` tokens per sequence.
    """
    if batch < 1:
        raise ValueError(f"batch must be ≥ 1, got {batch}")
    base = target.time(batch, 1)
    spec = target.time(batch, shape.verify_tokens)
    if shape.draft_forwards:
        if draft is None:
            raise ValueError(f"{shape.label or 'this shape'} drafts with a model but no draft cost was given")
        spec += shape.draft_forwards * draft.time(batch, 1)
    return expected * base / spec


def served_speedup(expected: float, t_plain: float, t_spec: float, overhead: float = 0.0) -> float:
    """τ · (t_plain + o) / (t_spec + o): the speedup of a served deployment whose every step
    costs `overhead` seconds beyond its forwards, once per response, whether the step commits
    one token (plain) or τ (speculative). Speculation amortises o over τ tokens, so the served
    speedup lies between the in-process one (o = 0) and τ (o ≫ the step times)."""
    if overhead < 0:
        raise ValueError(f"serving overhead must be ≥ 0 seconds, got {overhead}")
    den = t_spec + overhead
    return expected * (t_plain + overhead) / den if den > 0 else 0.0


def bls_loop_speedup(
    expected: float,
    draft_len: int,
    t_plain: float,
    t_step: float,
    overhead: float = 0.0,
    t_fill: float | None = None,
) -> float:
    """Draft-target served through the `tensorrt_llm_bls` loop: each iteration asks the target
    for `request_output_len` = γ+1 tokens with the γ draft tokens (upstream's decode.py), so the
    target verifies the draft (τ tokens, the step of `t_step`) and then decodes plainly until it
    has γ+1: E[γ+1−τ] plain steps more, after which the next iteration drafts again. Per
    iteration γ+1 tokens for t_step + (γ+1−τ)·t_fill (+ the serving cost o once):
    (γ+1)(t_plain + o) / (t_step + (γ+1−τ)·t_fill + o). `t_fill`: what one of those plain steps
    costs, t_plain unless said otherwise (in a batch the loops drift apart, and a fill row
    rides in forwards padded to the rows that verify)."""
    fill = max(0.0, draft_len + 1 - expected)
    fill_step = t_plain if t_fill is None else t_fill
    return served_speedup(draft_len + 1.0, t_plain, t_step + fill * fill_step, overhead)


def request_mean_speedup(
    requests: Sequence[tuple[int, float]],
    speedup: Callable[[float], float],
    plain: float,
    overhead: float = 0.0,
    batch: int = 1,
    prefill: Sequence[float] = (),
) -> float:
    """`sdtk bench --compare`'s speedup predicted over a probe's requests: the mean per-request
    output tok/s with speculation ÷ the same without, a request's rate being its tokens ÷ its
    end-to-end time (measure.metrics' user_tok_s, compared by decide.compare).
    `requests`: (tokens n_i, tokens per step τ_i) per request; `speedup(τ)`: the per-step
    speedup of a request committing τ tokens a step at this concurrency, so that its seconds
    per token are `plain` (a plain step's, serving cost included) ÷ speedup(τ).

    Requests differ in τ, and a mean of rates weighs the fast ones as much as the slow: it lies
    above the pooled ratio (Σ tokens over Σ time). With `prefill` (seconds to the first token,
    per request) a request's time also holds its own prefill, the serving cost `overhead` of
    its first response and, at `batch` rows, the prefills of the batch − 1 requests that start
    beside it during its life (prompt steps run apart from decode steps and hold every row),
    the same on both sides: they dilute the speedup. Without, decode time only."""
    if not requests:
        return 0.0
    if prefill and len(prefill) != len(requests):
        raise ValueError(f"{len(prefill)} prefill times for {len(requests)} requests")
    others = (batch - 1) * sum(prefill) / len(prefill) if prefill else 0.0
    base = spec = 0.0
    for i, (n, tau) in enumerate(requests):
        x = speedup(tau)
        spec_s = plain / x if x > 0 else math.inf
        if prefill:
            first = prefill[i] + overhead + others
            decode = max(0, n - 1)
            base += n / (first + decode * plain)
            spec += n / (first + decode * spec_s)
        else:
            base += 1 / plain
            spec += 1 / spec_s
    return spec / base if base > 0 else 0.0


def leviathan_speedup_with_verify(
    expected: float, draft_len: int, c: float, kappa: float, verify_tokens: int
) -> float:
    """Batch-1 closed form of `step_speedup` with linear costs: E / (γc + 1 + κ(n − 1))."""
    return expected / (draft_len * c + 1 + kappa * (verify_tokens - 1))


def fmt_x(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}×"
