"""The cost model against Leviathan et al. (arXiv 2211.17192) and its extensions."""

from __future__ import annotations

import pytest

from toolkit.bench.decide import costmodel as cm

# Leviathan Table 1 (c = 0): α, γ → speed, ops.
TABLE_1 = [
    (0.6, 2, 1.96, 1.53),
    (0.7, 3, 2.53, 1.58),
    (0.8, 2, 2.44, 1.23),
    (0.8, 5, 3.69, 1.63),
    (0.9, 2, 2.71, 1.11),
    (0.9, 10, 6.86, 1.60),
]

# Optimal γ* (speedup): argmax over γ of Thm 3.8's S = (1−α^{γ+1}) / ((1−α)(γc+1)), Leviathan et al.,
# arXiv 2211.17192 §3.5 (found numerically there; these values are derived, not a table of the paper).
OPTIMAL = {
    0.01: [(7, 2.30), (9, 2.97), (14, 4.23), (24, 7.49)],
    0.05: [(4, 1.92), (6, 2.35), (8, 3.09), (13, 4.67)],
    0.1: [(3, 1.67), (4, 1.98), (6, 2.47), (10, 3.43)],
    0.2: [(2, 1.40), (3, 1.58), (4, 1.87), (7, 2.37)],
}


def test_headline_number():
    assert round(cm.speedup(0.8, 5, 0.0), 2) == 3.69


@pytest.mark.parametrize(("alpha", "gamma", "speed", "ops"), TABLE_1)
def test_table_1(alpha, gamma, speed, ops):
    assert round(cm.speedup(alpha, gamma, 0.0), 2) == speed
    assert round(cm.ops_factor(alpha, gamma, 0.0), 2) == ops


@pytest.mark.parametrize("c", sorted(OPTIMAL))
def test_optimal_draft_len_table(c):
    for alpha, (g, s) in zip((0.6, 0.7, 0.8, 0.9), OPTIMAL[c], strict=True):
        got_g, got_s = cm.optimal_draft_len(alpha, c)
        assert (got_g, round(got_s, 2)) == (g, s), (c, alpha)


def test_expected_tokens_edges():
    assert cm.expected_tokens(0.0, 5) == 1.0
    assert cm.expected_tokens(1.0, 5) == 6.0
    assert cm.expected_tokens(0.5, 0) == 1.0
    with pytest.raises(ValueError):
        cm.expected_tokens(1.5, 2)
    with pytest.raises(ValueError):
        cm.expected_tokens(0.5, -1)
    with pytest.raises(ValueError):
        cm.speedup(0.5, 2, -0.1)


def test_per_position_generalises_iid():
    for a in (0.3, 0.6, 0.9):
        for g in range(1, 9):
            assert cm.expected_tokens_from_marginals(cm.iid_marginals(a, g), g) == pytest.approx(
                cm.expected_tokens(a, g)
            )
    # Non-i.i.d.: conditional acceptance 0.9, 0.8, 0.5 → marginals 0.9, 0.72, 0.36 → E = 2.98.
    m = cm.marginals_from_conditionals([0.9, 0.8, 0.5])
    assert m == pytest.approx([0.9, 0.72, 0.36])
    assert cm.expected_tokens_from_marginals(m) == pytest.approx(2.98)
    assert cm.expected_tokens_from_marginals(m, 2) == pytest.approx(2.62)
    assert cm.conditionals_from_marginals(m) == pytest.approx([0.9, 0.8, 0.5])
    with pytest.raises(ValueError, match="only 3 positions"):
        cm.expected_tokens_from_marginals(m, 4)
    with pytest.raises(ValueError):
        cm.expected_tokens_from_marginals([1.2])


def test_verification_cost_and_batch_term():
    # κ = 0, batch 1: the general model is Leviathan's.
    t = cm.LinearStepCost(t0=1.0, kappa=0.0)
    d = cm.LinearStepCost(t0=0.1, kappa=0.0)
    e = cm.expected_tokens(0.8, 4)
    assert cm.step_speedup(e, cm.chain_shape(4), t, draft=d) == pytest.approx(cm.speedup(0.8, 4, 0.1))
    # κ > 0: verifying γ+1 tokens costs 1 + κγ steps.
    t2 = cm.LinearStepCost(t0=1.0, kappa=0.05)
    s = cm.step_speedup(e, cm.chain_shape(4), t2, draft=d)
    assert s == pytest.approx(cm.leviathan_speedup_with_verify(e, 4, 0.1, 0.05, 5))
    assert s == pytest.approx(e / (0.4 + 1 + 0.2))
    # The batch term: as concurrency grows the verify forward dominates and speedup falls below 1.
    sp = [
        cm.step_speedup(e, cm.chain_shape(4), t2, draft=cm.LinearStepCost(0.1, 0.05), batch=b)
        for b in (1, 4, 16, 64)
    ]
    assert sp == sorted(sp, reverse=True)
    assert sp[0] > 1 > sp[-1]
    with pytest.raises(ValueError):
        cm.step_speedup(e, cm.chain_shape(4), t2, batch=1)  # a drafting shape needs a draft cost
    with pytest.raises(ValueError):
        cm.step_speedup(e, cm.chain_shape(4), t2, draft=d, batch=0)


def test_shapes():
    assert cm.chain_shape(4) == cm.Shape(4, 5, "chain γ=4")
    assert cm.tree_shape(20, 4, draft_forwards=1).verify_tokens == 21
    # Fu et al.: (W+G)(N−1) tokens per step; (7,7,7) → 84.
    assert cm.lookahead_shape(7, 7, 7).verify_tokens == 84
    assert cm.lookahead_shape(4, 3, 4).draft_forwards == 0


def test_measured_step_cost_interpolates():
    f = cm.MeasuredStepCost(((1, 1.0), (3, 1.2), (9, 2.4)))
    assert f.time(1, 1) == 1.0
    assert f.time(1, 2) == pytest.approx(1.1)
    assert f.time(1, 6) == pytest.approx(1.8)
    assert f.time(2, 9) == pytest.approx(2.4 + 1.2 / 6 * 9)  # extrapolated along the last segment
    assert cm.fmt_x(1.234) == "1.23×" and cm.fmt_x(None) == "n/a"
