"""The stress traffic's plan: what each request asks for (toolkit.stress.plan)."""

from __future__ import annotations

from toolkit import stress


def test_a_cancelled_stream_asks_for_far_more_than_it_reads():
    """Its cancellation (after the first chunk) must land mid-generation, never as the stream
    ends: that meeting can crash Triton <= 24.12's gRPC stream handler (server PRs #7840, #8078),
    as it did once in CI with a 16-token stream (tests/server/test_crashsite.py)."""
    requests = stress.plan(30, seed=1)
    cancels = [r for r in requests if r[0] == "cancel"]
    assert len(cancels) == 5 and {r[2] for r in cancels} == {stress.CANCEL_TOKENS}
    assert 8 * max(16, 48) <= stress.CANCEL_TOKENS
    assert {r[2] for r in requests if r[0] != "cancel"} == {16, 48}


def test_the_other_requests_are_drawn_as_before():
    """The cancel budget replaces a draw, it does not take one: every other request of a seed is
    what the same seed gave without it (the stress tests' baselines are keyed by seed)."""
    with_budget = stress.plan(30, seed=7)
    without = stress.plan(30, seed=7, cancel_tokens=-1)
    for a, b in zip(with_budget, without, strict=True):
        assert a[:2] == b[:2]
        assert a[2] == b[2] or (a[0] == "cancel" and a[2] == stress.CANCEL_TOKENS and b[2] == -1)
    small = stress.plan(12, cancel_tokens=100)
    assert [r[2] for r in small if r[0] == "cancel"] == [100, 100]
