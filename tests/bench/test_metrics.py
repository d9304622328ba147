"""Per-token latency metrics on hand-computed streams, percentiles, aggregates and the bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.bench.measure.metrics import (
    RequestRecord,
    acceptance_length,
    bootstrap_ci,
    describe,
    itl_gaps,
    per_position_acceptance,
    percentile,
    ratio_of_means_ci,
    request_metrics,
    summarize,
    tpot,
    ttft,
)

from .conftest import record


def test_single_token_chunks_hand_computed():
    # Sent at 0; tokens at 0.10, 0.15, 0.25, 0.30; final response at 0.31.
    rec = RequestRecord(
        index=0, start=0.0, chunk_times=[0.10, 0.15, 0.25, 0.30], chunk_tokens=[1, 1, 1, 1], end=0.31
    )
    m = request_metrics(rec)
    assert m.output_tokens == 4
    assert m.ttft == pytest.approx(0.10)
    assert m.itl == pytest.approx([0.05, 0.10, 0.05])
    assert m.e2e == pytest.approx(0.31)
    assert m.tpot == pytest.approx((0.31 - 0.10) / 3)
    assert m.user_tok_s == pytest.approx(4 / 0.31)


def test_multi_token_chunks_split_the_gap_per_token():
    # First chunk 1 token at 0.2; then 3 tokens at 0.5 (gap 0.3 → 3 × 0.1); then 2 tokens at 0.6 (0.1 → 2 × 0.05).
    rec = RequestRecord(index=0, start=0.0, chunk_times=[0.2, 0.5, 0.6], chunk_tokens=[1, 3, 2], end=0.6)
    m = request_metrics(rec)
    assert m.output_tokens == 6
    assert m.ttft == pytest.approx(0.2)
    assert m.itl == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05])
    assert len(m.itl) == m.output_tokens - 1
    assert m.tpot == pytest.approx((0.6 - 0.2) / 5)
    # The naive per-chunk view would report gaps [0.3, 0.1]: 3× and 2× too long.
    assert max(m.itl) < 0.3


def test_multi_token_first_chunk_contributes_zero_gaps():
    rec = RequestRecord(index=0, start=1.0, chunk_times=[1.4, 1.6], chunk_tokens=[3, 2], end=1.6)
    m = request_metrics(rec)
    assert m.ttft == pytest.approx(0.4)
    assert m.itl == pytest.approx([0.0, 0.0, 0.1, 0.1])
    assert m.tpot == pytest.approx(0.2 / 4)
    assert sum(m.itl) / len(m.itl) == pytest.approx(m.tpot)


def test_chunks_without_tokens_are_skipped():
    # An empty chunk at 0.3 (e.g. a final flag) does not reset the gap clock.
    times, toks = [0.1, 0.3, 0.5], [1, 0, 2]
    assert ttft(0.0, times, toks) == pytest.approx(0.1)
    assert itl_gaps(times, toks) == pytest.approx([0.2, 0.2])
    assert ttft(0.0, [0.1], [0]) is None


def test_one_token_has_no_tpot_and_errors_have_no_latency():
    rec = RequestRecord(index=0, start=0.0, chunk_times=[0.1], chunk_tokens=[1], end=0.1)
    m = request_metrics(rec)
    assert m.tpot is None and m.itl == []
    assert tpot(1.0, None, 5) is None
    bad = record(1, error="boom")
    mb = request_metrics(bad)
    assert mb.ttft is None and mb.output_tokens == 0 and not mb.ok


def test_inconsistent_streams_raise():
    with pytest.raises(ValueError, match="chunk times"):
        itl_gaps([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="negative"):
        itl_gaps([0.1, 0.2], [1, -1])
    with pytest.raises(ValueError, match="decrease"):
        itl_gaps([0.2, 0.1], [1, 1])


@given(
    st.lists(st.tuples(st.floats(0.0, 1.0, allow_nan=False), st.integers(0, 6)), min_size=1, max_size=30),
    st.floats(0.0, 1.0, allow_nan=False),
)
@settings(max_examples=200, deadline=None)
def test_itl_invariants(steps, first):
    """N tokens give N−1 gaps summing to last−first; mean ITL equals TPOT when e2e ends at the last token."""
    times, toks, t = [], [], first
    for dt, k in steps:
        t += dt
        times.append(t)
        toks.append(k)
    n = sum(toks)
    gaps = itl_gaps(times, toks)
    assert len(gaps) == max(0, n - 1)
    token_times = [tt for tt, k in zip(times, toks, strict=True) if k > 0]
    if n >= 1:
        assert math.isclose(sum(gaps), token_times[-1] - token_times[0], abs_tol=1e-9)
    if n >= 2:
        rec = RequestRecord(index=0, start=0.0, chunk_times=times, chunk_tokens=toks, end=token_times[-1])
        m = request_metrics(rec)
        assert math.isclose(sum(gaps) / len(gaps), m.tpot, rel_tol=1e-9, abs_tol=1e-12)


def test_percentile_matches_numpy_linear():
    xs = [5.0, 1.0, 3.0, 9.0, 7.0, 2.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None
    assert percentile([4.0], 99) == 4.0
    with pytest.raises(ValueError):
        percentile(xs, 101)


def test_percentiles_hand_computed():
    xs = list(range(1, 11))  # 1..10
    assert percentile(xs, 50) == pytest.approx(5.5)
    assert percentile(xs, 90) == pytest.approx(9.1)
    assert percentile(xs, 99) == pytest.approx(9.91)
    d = describe([*xs, None])
    assert d["n"] == 10 and d["mean"] == pytest.approx(5.5) and d["min"] == 1 and d["max"] == 10


def test_acceptance_length_sources():
    r = RequestRecord(
        index=0,
        start=0,
        chunk_times=[1, 2, 3],
        chunk_tokens=[1, 3, 2],
        end=3,
        accepted_draft_tokens=6,
        draft_tokens=8,
        steps=4,
    )
    assert acceptance_length(r) == (pytest.approx(10 / 4), "server steps")
    r.steps, r.draft_len = None, 4  # 8 drafts / γ=4 = 2 steps → τ = 1 + 6/2
    assert acceptance_length(r) == (pytest.approx(4.0), "draft tokens / draft_len")
    r.draft_len = None  # draft counts without γ: chunks need not be steps (a BLS streams iterations)
    assert acceptance_length(r) == (None, None)
    r.accepted_draft_tokens = r.draft_tokens = None  # no draft counts: chunks after the first carry 3 and 2
    assert acceptance_length(r) == (pytest.approx(2.5), "tokens per chunk")
    r.chunk_tokens = [1, 1, 1]  # one token per chunk and no draft counts: nothing says speculation ran
    assert acceptance_length(r) == (None, None)


def test_summarize_aggregates():
    recs = [
        record(i, start=0.0, ttft=0.1, gaps=[0.05] * 4, tokens=[1, 2, 2, 2, 1], accepted=3, drafted=4)
        for i in range(4)
    ]
    recs.append(record(9, error="boom"))
    s = summarize(recs, duration=2.0)
    assert s["requests"] == 5 and s["ok"] == 4 and s["errors"] == 1 and s["error_kinds"] == {"server": 1}
    assert s["output_tokens"] == 32
    assert s["output_tok_s"] == pytest.approx(16.0)
    assert s["req_s"] == pytest.approx(2.0)
    assert s["ttft_s"]["p50"] == pytest.approx(0.1)
    # e2e = 0.1 + 4 × 0.05 = 0.3; TPOT = 0.2 / 7
    assert s["tpot_s"]["mean"] == pytest.approx(0.2 / 7)
    assert s["acceptance"]["rate"] == pytest.approx(0.75)
    assert s["acceptance"]["length"] is None  # draft counts, but γ unknown
    for r in recs:
        r.draft_len = 2  # 4 drafts at γ=2: 2 steps, 3 accepted → τ = 2.5
    s = summarize(recs, duration=2.0)
    assert s["acceptance"]["length"] == pytest.approx(2.5)
    assert s["acceptance"]["length_source"] == "draft tokens / draft_len"
    assert s["server_check"]["n"] == 0


def test_summarize_pools_tau_over_estimated_steps_as_over_server_steps():
    """The run's τ is Σ committed ÷ Σ steps whether the steps are the server's or drafts ÷ γ
    (EAGLE-3 served through the ensemble): not the mean of per-request τ, which lies above it
    when requests differ (the gap between served τ 2.34 and plan's probe 2.10, 2026-12-05)."""
    # A: 3 steps, all 6 drafts accepted (τ 3); B: 9 steps, none of 18 accepted (τ 1).
    a = record(0, start=0.0, ttft=0.1, gaps=[0.05] * 3, tokens=[1, 3, 3, 2], accepted=6, drafted=6)
    b = record(1, start=0.0, ttft=0.1, gaps=[0.05] * 8, tokens=[1] * 9, accepted=0, drafted=18)
    for r in (a, b):
        r.draft_len = 2
    s = summarize([a, b], duration=2.0)["acceptance"]
    assert s["length_source"] == "draft tokens / draft_len"
    assert s["length_per_request"]["mean"] == pytest.approx(2.0)
    assert s["length"] == pytest.approx((6 + 12) / 12)  # 18 tokens over 12 steps
    a.steps, b.steps = 3, 9  # the same counts from the server: the same pooled τ
    assert summarize([a, b], duration=2.0)["acceptance"]["length"] == pytest.approx(1.5)


def test_summarize_duration_from_records_and_server_cross_check():
    recs = [record(i, start=float(i), ttft=0.1, gaps=[0.1] * 3) for i in range(3)]
    for r in recs:
        r.server_arrival_ns = 0
        r.server_first_token_ns = int(0.08e9)
        r.server_last_token_ns = int(0.35e9)
    s = summarize(recs)
    assert s["duration_s"] == pytest.approx(2.4)  # from 0.0 to the last end 2.4
    assert s["server_check"]["n"] == 3
    assert s["server_check"]["ttft_overhead_p50_s"] == pytest.approx(0.02)
    assert s["server_check"]["e2e_overhead_p50_s"] == pytest.approx(0.05)
    assert s["server_check"]["violations"] == 0
    recs[0].server_last_token_ns = int(2e9)  # longer than the client saw: impossible
    assert summarize(recs)["server_check"]["violations"] == 1


def test_per_position_acceptance():
    assert per_position_acceptance([10, 10, 10], [8, 6]) == pytest.approx([0.8, 0.6, 0.0])
    recs = [record(0), record(1)]
    for r in recs:
        r.per_position_proposed, r.per_position_accepted = [4, 4], [3, 1]
    assert summarize(recs)["acceptance"]["per_position"] == pytest.approx([0.75, 0.25])


def test_bootstrap_is_seeded_and_deterministic():
    a = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 0.8]
    b = [2.0, 2.3, 1.9, 2.2, 2.1, 1.8, 2.6, 1.7]
    i1 = ratio_of_means_ci(b, a, paired=True, seed=3)
    i2 = ratio_of_means_ci(b, a, paired=True, seed=3)
    assert i1 == i2
    assert i1.point == pytest.approx(sum(b) / sum(a))
    assert i1.lo < i1.point < i1.hi
    assert ratio_of_means_ci(b, a, paired=True, seed=4) != i1
    unpaired = ratio_of_means_ci(b, a, paired=False, seed=3)
    # Pairing removes the shared per-prompt variation: the paired interval is narrower here.
    assert (i1.hi - i1.lo) < (unpaired.hi - unpaired.lo)
    c1 = bootstrap_ci(a, seed=1)
    assert c1 == bootstrap_ci(a, seed=1) and c1.lo <= c1.point <= c1.hi


def test_bootstrap_edge_cases():
    assert ratio_of_means_ci([], [1.0]).point is None
    one = ratio_of_means_ci([2.0], [1.0])
    assert one.point == 2.0 and one.lo is None and "too few" in one.method
    with pytest.raises(ValueError, match="equal sizes"):
        ratio_of_means_ci([1.0, 2.0], [1.0, 2.0, 3.0], paired=True)
    assert bootstrap_ci([]).point is None
    assert one.fmt() == "2.00×"
    assert ratio_of_means_ci([2.0, 2.1], [1.0, 1.0], seed=0).fmt().startswith("2.05× [")
