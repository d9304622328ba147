"""Latency, throughput and acceptance metrics. Pure functions over per-request records.

Definitions (all times in seconds, on the client's monotonic clock):

- TTFT: request sent → first chunk that carries at least one token.
- e2e: request sent → final response received.
- ITL, *per token*: a chunk of k tokens arriving Δ after the previous token-carrying chunk
  contributes k gaps of Δ/k; the k−1 extra tokens of the first chunk arrive with the first
  token (k−1 gaps of 0). So a request with N tokens has exactly N−1 gaps that sum to
  (last token − first token), and multi-token chunks (speculative steps) are not counted
  as one long gap, the mistake ray-project/llmperf PR #99 and kubernetes-sigs/inference-perf PR #410 fix.
- chunk interval: the gap between consecutive token-carrying chunks, whatever they carry
  (chunk-level inter-arrival); the per-token ITL above divides it by the chunk's k.
- TPOT = (e2e − TTFT) / (N − 1); undefined for N ≤ 1.
- N comes from exact counts (the server's num_output_tokens, else the tokenizer over the
  cumulative text); docs/metrics.md has every definition and its peers in other tools.
- user tok/s = N / e2e: the per-request output rate (Spec-Bench's speedup numerator).
- acceptance rate = accepted draft tokens / draft tokens (server's return_perf_metrics).
- acceptance length τ = tokens committed per target step, bonus token included (τ ≥ 1).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.ops import spec_metrics

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    """What one streamed request produced, as the load generator saw it."""

    index: int  # position in the run's request list; same prompt ⇔ same index on both A/B sides
    start: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end: float | None = None
    category: str = ""
    concurrency: int | None = None
    error: str | None = None
    error_kind: str | None = None  # "timeout", "server", "connection", "cancelled"
    input_tokens: int | None = None
    max_tokens: int | None = None
    accepted_draft_tokens: int | None = None
    draft_tokens: int | None = None
    steps: int | None = None  # target forwards after prefill, when the server reports them
    steps_source: str | None = None  # where `steps` came from when not the server's own count
    draft_len: int | None = None  # γ the request ran with, when known (per-request num_draft_tokens)
    per_position_proposed: list[int] | None = None
    per_position_accepted: list[int] | None = None
    server_arrival_ns: int | None = None
    server_first_token_ns: int | None = None
    server_last_token_ns: int | None = None
    token_counts_exact: bool = True  # False when chunk token counts were estimated
    token_count_source: str | None = None  # server | tokenizer | estimate (loadgen.chunk_token_counts)
    chunk_texts: list[str] | None = None  # kept until a tokenizer has counted them; not reported
    streamed: bool = True  # False: the model is not decoupled; the response came whole, in one chunk

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def output_tokens(self) -> int:
        return sum(k for k in self.chunk_tokens if k > 0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("chunk_texts", None)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


# --------------------------------------------------------------------------- per request


def token_chunks(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> list[tuple[float, int]]:
    """(arrival, k) for the chunks that carry tokens, in arrival order."""
    if len(chunk_times) != len(chunk_tokens):
        raise ValueError(f"{len(chunk_times)} chunk times but {len(chunk_tokens)} token counts")
    if any(k < 0 for k in chunk_tokens):
        raise ValueError("a chunk cannot carry a negative number of tokens")
    if any(b < a for a, b in zip(chunk_times, chunk_times[1:], strict=False)):
        raise ValueError("chunk times must not decrease")
    return [(t, int(k)) for t, k in zip(chunk_times, chunk_tokens, strict=False) if k > 0]


def itl_gaps(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> list[float]:
    """Per-token inter-token latencies (see the module docstring): N−1 gaps for N tokens."""
    gaps: list[float] = []
    prev: float | None = None
    for t, k in token_chunks(chunk_times, chunk_tokens):
        if prev is None:
            gaps.extend([0.0] * (k - 1))
        else:
            gaps.extend([(t - prev) / k] * k)
        prev = t
    return gaps


def chunk_intervals(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> list[float]:
    """Chunk-level inter-arrival times: gaps between consecutive token-carrying chunks, whatever
    their token counts (C−1 gaps for C chunks). Equals the per-token ITL only when every chunk
    carries one token; speculative streams make it about τ times longer."""
    times = [t for t, _ in token_chunks(chunk_times, chunk_tokens)]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def ttft(start: float, chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> float | None:
    chunks = token_chunks(chunk_times, chunk_tokens)
    return chunks[0][0] - start if chunks else None


def tpot(e2e: float, ttft_s: float | None, output_tokens: int) -> float | None:
    if ttft_s is None or output_tokens < 2:
        return None
    return (e2e - ttft_s) / (output_tokens - 1)


def counted_steps(rec: RequestRecord) -> float | None:
    """A request's target steps as its τ counts them: the server's, else drafts ÷ γ (only with
    an accepted count to go with them); None when neither is known."""
    if rec.steps:
        return float(rec.steps)
    if rec.accepted_draft_tokens is None:
        return None
    return spec_metrics.estimated_steps(rec.draft_tokens, rec.draft_len)


def acceptance_length(rec: RequestRecord) -> tuple[float | None, str | None]:
    """τ for one request and where it came from.

    Preference: the server's step count; else γ and the draft-token count (each step proposes
    γ drafts, so steps = drafts/γ); else, only without draft statistics, tokens per streamed
    chunk after the first (valid when the server streams once per step, as the reference
    backend and TRT-LLM do, and some chunk carries several tokens).
    """
    steps = counted_steps(rec)
    if steps:
        source = (rec.steps_source or "server steps") if rec.steps else "draft tokens / draft_len"
        return spec_metrics.acceptance_length(rec.accepted_draft_tokens or 0, steps), source
    if rec.draft_tokens:
        # Draft statistics without γ: chunks need not be steps (a BLS loop streams whole
        # iterations), so they cannot stand in; τ is unknown.
        return None, None
    later = [k for _, k in token_chunks(rec.chunk_times, rec.chunk_tokens)[1:]]
    # One token per chunk and no draft statistics: nothing says speculation ran at all.
    if later and max(later) > 1:
        return sum(later) / len(later), "tokens per chunk"
    return None, None


@dataclass
class RequestMetrics:
    index: int
    ok: bool
    output_tokens: int
    e2e: float | None
    ttft: float | None
    tpot: float | None
    itl: list[float]
    chunk_intervals: list[float]
    tokens_per_chunk: float | None
    user_tok_s: float | None
    acceptance_rate: float | None
    acceptance_length: float | None
    acceptance_length_source: str | None
    server_ttft: float | None
    server_e2e: float | None


def request_metrics(rec: RequestRecord) -> RequestMetrics:
    n = rec.output_tokens
    end = rec.end if rec.end is not None else (rec.chunk_times[-1] if rec.chunk_times else None)
    e2e = end - rec.start if end is not None else None
    t1 = ttft(rec.start, rec.chunk_times, rec.chunk_tokens)
    if not rec.streamed:  # the first token reaches the client with the last: TTFT is the latency
        t1 = e2e
    rate = None
    if rec.draft_tokens and rec.accepted_draft_tokens is not None:
        rate = rec.accepted_draft_tokens / rec.draft_tokens
    tau, tau_src = acceptance_length(rec) if rec.ok else (None, None)
    s_ttft = s_e2e = None
    if rec.server_arrival_ns is not None and rec.server_first_token_ns is not None:
        s_ttft = (rec.server_first_token_ns - rec.server_arrival_ns) / 1e9
    if rec.server_arrival_ns is not None and rec.server_last_token_ns is not None:
        s_e2e = (rec.server_last_token_ns - rec.server_arrival_ns) / 1e9
    return RequestMetrics(
        index=rec.index,
        ok=rec.ok,
        output_tokens=n,
        e2e=e2e,
        ttft=t1,
        # No per-token timing for a response that came whole.
        tpot=tpot(e2e, t1, n) if e2e is not None and rec.streamed else None,
        itl=itl_gaps(rec.chunk_times, rec.chunk_tokens) if rec.streamed else [],
        chunk_intervals=chunk_intervals(rec.chunk_times, rec.chunk_tokens) if rec.streamed else [],
        tokens_per_chunk=_tokens_per_chunk(rec),
        user_tok_s=(n / e2e) if (e2e and e2e > 0 and n > 0) else None,
        acceptance_rate=rate,
        acceptance_length=tau,
        acceptance_length_source=tau_src,
        server_ttft=s_ttft,
        server_e2e=s_e2e,
    )


def _tokens_per_chunk(rec: RequestRecord) -> float | None:
    ks = [k for _, k in token_chunks(rec.chunk_times, rec.chunk_tokens)]
    return sum(ks) / len(ks) if ks else None


# --------------------------------------------------------------------------- aggregates


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default, "linear"); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def describe(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """n, mean, p50/p90/p99, min, max over the non-None values."""
    xs = [float(v) for v in values if v is not None]
    out: dict[str, float | int | None] = {"n": len(xs), "mean": (sum(xs) / len(xs)) if xs else None}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(xs, q)
    out["min"] = min(xs) if xs else None
    out["max"] = max(xs) if xs else None
    return out


def per_position_acceptance(proposed: Sequence[int], accepted: Sequence[int]) -> list[float]:
    """Marginal acceptance per draft position: P(positions 1..k all accepted) for a chain."""
    return [
        (a / p) if p else 0.0
        for p, a in zip(proposed, list(accepted) + [0] * (len(proposed) - len(accepted)), strict=False)
    ]


def summarize(records: Sequence[RequestRecord], *, duration: float | None = None) -> dict[str, Any]:
    """Aggregate metrics of one run (one concurrency level or rate)."""
    ok = [r for r in records if r.ok]
    mets = [request_metrics(r) for r in ok]
    errors = Counter(r.error_kind or "error" for r in records if not r.ok)
    if duration is None:
        starts = [r.start for r in records]
        ends = [r.end for r in ok if r.end is not None]
        duration = (max(ends) - min(starts)) if ends and starts else 0.0
    total_tokens = sum(m.output_tokens for m in mets)
    itl = [g for m in mets for g in m.itl]
    chunk_gaps = [g for m in mets for g in m.chunk_intervals]
    sources = Counter(r.token_count_source or ("server" if r.token_counts_exact else "estimate") for r in ok)

    acc = sum(r.accepted_draft_tokens or 0 for r in ok if r.draft_tokens)
    drafts = sum(r.draft_tokens or 0 for r in ok if r.draft_tokens)
    taus = [m.acceptance_length for m in mets if m.acceptance_length is not None]
    tau_src = Counter(m.acceptance_length_source for m in mets if m.acceptance_length_source)
    # τ pooled over the run (Σ committed ÷ Σ steps), what plan's probe and trtllm-bench report,
    # from the same step counts as each request's own τ (the server's, or drafts ÷ γ).
    counted = [(r.accepted_draft_tokens or 0, s) for r in ok if (s := counted_steps(r))]
    steps = sum(s for _, s in counted)
    pos_p: list[int] = []
    pos_a: list[int] = []
    for r in ok:
        if r.per_position_proposed:
            _add(pos_p, r.per_position_proposed)
            _add(pos_a, r.per_position_accepted or [])

    s_ttft = [(m.ttft, m.server_ttft) for m in mets if m.server_ttft is not None and m.ttft is not None]
    s_e2e = [(m.e2e, m.server_e2e) for m in mets if m.server_e2e is not None and m.e2e is not None]
    tol = 0.005  # 5 ms: clock granularity and response serialisation
    return {
        "requests": len(records),
        "ok": len(ok),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "duration_s": duration,
        "output_tokens": total_tokens,
        "output_tok_s": (total_tokens / duration) if duration > 0 else None,
        "req_s": (len(ok) / duration) if duration > 0 else None,
        "token_counts_exact": all(r.token_counts_exact for r in ok),
        # server | tokenizer | estimate, or "mixed" when requests differ
        "token_count_source": (next(iter(sources)) if len(sources) == 1 else ("mixed" if sources else None)),
        "ttft_s": describe([m.ttft for m in mets]),
        "tpot_s": describe([m.tpot for m in mets]),
        "itl_s": describe(itl),
        "chunk_interval_s": describe(chunk_gaps),
        "tokens_per_chunk": describe([m.tokens_per_chunk for m in mets]),
        "e2e_s": describe([m.e2e for m in mets]),
        "output_tokens_per_request": describe([m.output_tokens for m in mets]),
        "user_tok_s": describe([m.user_tok_s for m in mets]),
        "acceptance": {
            "rate": (acc / drafts) if drafts else None,
            "rate_per_request": describe([m.acceptance_rate for m in mets]),
            "accepted_draft_tokens": acc,
            "draft_tokens": drafts,
            "length": (
                spec_metrics.acceptance_length(sum(a for a, _ in counted), steps)
                if steps
                # only τ from streamed chunks (no step or draft counts): their mean
                else (sum(taus) / len(taus) if taus else None)
            ),
            "length_per_request": describe(taus),
            "length_source": tau_src.most_common(1)[0][0] if tau_src else None,
            "per_position": per_position_acceptance(pos_p, pos_a) if pos_p else None,
        },
        "server_check": {
            "n": len(s_e2e),
            "ttft_overhead_p50_s": percentile([c - s for c, s in s_ttft], 50),
            "e2e_overhead_p50_s": percentile([c - s for c, s in s_e2e], 50),
            # A server-side duration longer than the client's is impossible: a clock or parsing bug.
            "violations": sum(1 for c, s in s_e2e if s > c + tol),
        },
    }


def _add(total: list[int], counts: Sequence[int]) -> None:
    if len(total) < len(counts):
        total.extend([0] * (len(counts) - len(total)))
    for i, c in enumerate(counts):
        total[i] += c


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Interval:
    point: float | None
    lo: float | None
    hi: float | None
    confidence: float = 0.95
    resamples: int = 0
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fmt(self, digits: int = 2) -> str:
        if self.point is None:
            return "n/a"
        if self.lo is None or self.hi is None:
            return f"{self.point:.{digits}f}×"
        return f"{self.point:.{digits}f}× [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def _mean(x: Sequence[float]) -> float:
    return sum(x) / len(x)


def ratio_of_means_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    paired: bool = False,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """mean(numerator)/mean(denominator) with a seeded percentile-bootstrap interval over requests.

    paired=True resamples the same indices on both sides (the A/B requests share prompts by
    index), which removes prompt-to-prompt variance from the interval.
    """
    import numpy as np

    a = np.asarray([float(x) for x in numerator], dtype=float)
    b = np.asarray([float(x) for x in denominator], dtype=float)
    if len(a) == 0 or len(b) == 0 or b.mean() == 0:
        return Interval(None, None, None, confidence, 0, "none")
    point = float(a.mean() / b.mean())
    if len(a) < 2 or len(b) < 2 or resamples < 1:
        return Interval(point, None, None, confidence, 0, "none (too few requests)")
    if paired and len(a) != len(b):
        raise ValueError(f"paired bootstrap needs equal sizes, got {len(a)} and {len(b)}")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(resamples, len(a)))
    ib = ia if paired else rng.integers(0, len(b), size=(resamples, len(b)))
    num = a[ia].mean(axis=1)
    den = b[ib].mean(axis=1)
    ok = den > 0
    ratios = num[ok] / den[ok]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(ratios, [alpha, 1 - alpha])
    return Interval(
        point,
        float(lo),
        float(hi),
        confidence,
        resamples,
        "paired percentile bootstrap" if paired else "percentile bootstrap",
    )


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = _mean,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """A seeded percentile-bootstrap interval for any statistic of one sample."""
    import random

    xs = [float(v) for v in values]
    if not xs:
        return Interval(None, None, None, confidence, 0, "none")
    point = float(stat(xs))
    if len(xs) < 2:
        return Interval(point, None, None, confidence, 0, "none (too few values)")
    rng = random.Random(seed)
    n = len(xs)
    stats = sorted(stat([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    alpha = (1 - confidence) / 2
    return Interval(
        point,
        percentile(stats, 100 * alpha),
        percentile(stats, 100 * (1 - alpha)),
        confidence,
        resamples,
        "percentile bootstrap",
    )


def counted_acceptance(counts: dict[str, Any]) -> dict[str, Any]:
    """A level's `acceptance` summary from what the deployment's workers counted over it (their
    sdtk_spec_* counters: draft_tokens, accepted_draft_tokens, steps, per_position_proposed /
    _accepted): the same keys as `summarize`'s, pooled over the level (no per-request spread)."""
    drafts = int(counts.get("draft_tokens") or 0)
    acc = int(counts.get("accepted_draft_tokens") or 0)
    steps = int(counts.get("steps") or 0)
    proposed = list(counts.get("per_position_proposed") or [])
    return {
        "rate": (acc / drafts) if drafts else None,
        "rate_per_request": describe([]),
        "accepted_draft_tokens": acc,
        "draft_tokens": drafts,
        "length": spec_metrics.acceptance_length(acc, steps) if steps else None,
        "length_per_request": describe([]),
        "length_source": str(counts.get("source") or "the workers' counters") if steps else None,
        "per_position": (
            per_position_acceptance(proposed, list(counts.get("per_position_accepted") or []))
            if proposed
            else None
        ),
    }


def merged_counts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two parts' worker counts as one (a level run in rounds); unknown if either is."""
    if a is None or b is None:
        return None
    out = dict(a)
    for key in ("draft_tokens", "accepted_draft_tokens", "steps", "requests"):
        out[key] = int(a.get(key) or 0) + int(b.get(key) or 0)
    for key in ("per_position_proposed", "per_position_accepted"):
        x, y = list(a.get(key) or []), list(b.get(key) or [])
        n = max(len(x), len(y))
        out[key] = [(x[i] if i < len(x) else 0) + (y[i] if i < len(y) else 0) for i in range(n)]
    return out
