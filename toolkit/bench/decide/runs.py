"""Accepted runs replayed: how many drafts a chain proposer gets right from every position of a
probed generation, and the tokens per step that gives at another draft length, or through the
draft-target BLS loop. Pure functions, no I/O (decide.predict uses them)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def run_lengths(step_tokens: Sequence[int], draft_len_max: int, p_tail: float) -> list[float]:
    """How many drafts the proposer would get right from every root position of one generation.

    A step run at γ_max that accepted a < γ_max drafts from root p tells R_p = a exactly, and
    also R_{p+k} = a − k inside the run: the proposer is a function of the context, and its
    proposal from p+1 is the rest of its proposal from p (exact for greedy draft-target,
    close for n-gram and EAGLE). A fully accepted step only bounds R from below; beyond the
    bound the proposer continues with probability `p_tail` per token.
    """
    out: list[float] = []
    r_next = 0.0
    for c in reversed(step_tokens):
        a = c - 1
        if a < draft_len_max:
            run = [float(a - k) for k in range(a + 1)]
        else:
            tail = p_tail * (1 + r_next)
            run = [draft_len_max - k + tail for k in range(a + 1)]
        out[:0] = run
        r_next = run[0]
    return out


def _steps(run: Sequence[float], draft_len: int, bls: bool) -> Iterator[tuple[int, int, int]]:
    """(tokens a step from root p commits, tokens the loop advances, p) for each step of one
    generation replayed at draft length γ (see simulate_tau)."""
    p, n = 0, len(run)
    while p < n:
        a = min(run[p], draft_len)
        lo = int(a)
        c = min(lo + 1 + (1 if (a - lo) >= 0.5 else 0), n - p)
        advance = min(draft_len + 1, n - p) if bls else c
        yield c, advance, p
        p += advance


def proposals(step_tokens: Sequence[int], step_widths: Sequence[int]) -> list[int]:
    """How many drafts the proposer offers from every position of one probed generation (the
    probe's steps: the tokens each committed and the tokens its forward verified, a proposal and
    one more). A step's root is exact; the positions its accepted run covers take its proposal
    too, as the proposer's proposal from inside the run continues the one from its root (n-gram's
    match goes on; a draft model or head proposes its full length anyway)."""
    if len(step_tokens) != len(step_widths):
        raise ValueError(f"{len(step_widths)} step widths for {len(step_tokens)} steps")
    return [max(0, w - 1) for c, w in zip(step_tokens, step_widths, strict=True) for _ in range(c)]


def step_widths(run: Sequence[float], offered: Sequence[int], draft_len: int) -> list[int]:
    """The tokens each step of one generation verifies at draft length γ (its proposal, at most
    γ and at most the tokens left after the next one, and one more), replaying its run lengths:
    the same steps as `step_count`. `offered`: the drafts offered from every position
    (`proposals`)."""
    n = len(run)
    if len(offered) != n:
        raise ValueError(f"{len(offered)} proposals for a generation of {n} tokens")
    return [min(offered[p], draft_len, n - p - 1) + 1 for _, _, p in _steps(run, draft_len, False)]


def simulate_tau(runs: Sequence[Sequence[float]], draft_len: int, *, bls: bool = False) -> float:
    """Tokens per step at draft length γ, replaying the run lengths: each step from root p
    commits min(R_p, γ) + 1 tokens (fractional R: the expectation of the rounding).

    `bls`: the draft-target BLS loop's verify steps instead (upstream's decode.py): an iteration
    from root p verifies the draft there (the same min(R_p, γ) + 1 tokens), then the target
    decodes plainly up to γ + 1 tokens, so the next iteration drafts from p + γ + 1, not from
    where the rejection fell. It steps over the position after a rejection, where the drafts of
    a hard stretch cluster, and so commits more per verify step than the speculative loop."""
    steps = tokens = 0
    for r in runs:
        for c, _, _ in _steps(r, draft_len, bls):
            steps += 1
            tokens += c
    return tokens / steps if steps else 1.0


def step_count(run: Sequence[float], draft_len: int) -> int:
    """The steps one generation takes at draft length γ, replaying its run lengths (simulate_tau's
    steps). The prompt step emits no token; the first of these steps commits the first tokens."""
    return sum(1 for _ in _steps(run, draft_len, False))


def bls_fills(run: Sequence[float], draft_len: int) -> list[int]:
    """The plain fill steps of each BLS iteration of one generation replayed at draft length γ:
    the target decodes up to γ + 1 tokens per iteration (fewer at the end), the first τ of them
    from the verify step (simulate_tau's `bls`)."""
    return [advance - c for c, advance, _ in _steps(run, draft_len, True)]
