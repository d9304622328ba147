"""A probe's step costs on this machine (StepTiming) and how a step grows with the rows of an
in-flight batch: the plain and speculative step at b rows (`growths`), served (`speedup_at`), through
the BLS loop (`bls_costs`) and through `bench`'s closed loop replayed in the batcher
(`replay_speedup`). Pure: no I/O, no torch (decide.predict builds its predictions on it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.bench.decide import costmodel as cm
from toolkit.bench.decide.inflight import IterationCosts, iteration_costs, simulate_closed_loop


@dataclass(frozen=True)
class ReplayStep:
    """The speculative step `StepTiming.replay_speedup` prices: `t_step` seconds at one row,
    `width` tokens through the target, the distribution of the widths when they vary (`widths`,
    for `growths`), each row's own work outside the target's forward (`t_own`), and per probed
    request the tokens each of its steps verifies (`step_widths`, replayed)."""

    t_step: float
    width: int
    widths: Sequence[float] | None = None
    t_own: float = 0.0
    step_widths: Sequence[Sequence[int]] | None = None


@dataclass
class StepTiming:
    """In-process costs on this machine (seconds)."""

    t_base: float  # one plain decoding step (1 token), from timed generation
    forward_points: list[tuple[int, float]]  # bare target forward time over n new tokens
    draft_forward: float | None = None  # bare draft forward, 1 token (draft_target)
    c_forward: float | None = None  # draft_forward / target forward(1): Leviathan's c
    kappa: float = 0.0  # slope of forward time in tokens, relative to forward(1)
    # Batched target forward time: tokens per row -> [(batch size, seconds)], the batch dimension
    # of the reference backend's in-flight batching (empty: not measured).
    batch_points: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    max_batch: int | None = None  # the engine's build.max_batch_size: concurrency beyond it queues
    # Seconds each served step costs beyond its forwards (a response, detokenization, IPC),
    # measured once per deployment (plan.add_serving_overhead); 0: in-process predictions.
    serving_overhead: float = 0.0
    serving_source: str | None = None  # how serving_overhead was measured
    # The same per concurrency level where it was measured there (every row of a batch gets its
    # own response each step, so it grows with the batch); other levels take serving_overhead.
    serving_by_concurrency: dict[int, float] = field(default_factory=dict)
    # Seconds of a plain step outside the target's forward (sampling, bookkeeping): each row of
    # an in-flight batch does its own in its own thread, one row after another (replay_speedup).
    t_own_base: float = 0.0

    def overhead_at(self, concurrency: int) -> float:
        """Seconds a served step costs beyond its forwards at this concurrency."""
        return self.serving_by_concurrency.get(concurrency, self.serving_overhead)

    def growths(self, width: int, batch: int, widths: Sequence[float] | None = None) -> tuple[float, float]:
        """How much longer a plain step and a step verifying `width` tokens per row take at
        `batch` rows than at one, (plain, speculative); (1.0, 1.0) when unmeasured.

        `widths`: P(a row verifies k + 1 tokens), k = 0, 1, ..., for a proposer that proposes
        fewer than its draft length now and then (n-gram): a batch is padded to its widest row,
        so `batch` rows cost the expected cost at the widest of `batch` draws, against the
        expected cost of one row alone. None: every row verifies `width`."""
        if not self.batch_points or batch <= 1:
            return 1.0, 1.0
        b = self.rows(batch)
        plain = self.batch_cost(1, b) / self.batch_cost(1, 1)
        if widths is None:
            return plain, self.batch_cost(width, b) / self.batch_cost(width, 1)
        one = sum(p * self.batch_cost(k + 1, 1) for k, p in enumerate(widths))
        many, below = 0.0, 0.0
        for k, p in enumerate(widths):  # P(widest of b rows = k + 1) = F(k)^b − F(k − 1)^b
            cdf = below + p
            many += (cdf**b - below**b) * self.batch_cost(k + 1, b)
            below = cdf
        return (plain, many / one) if one > 0 and many > 0 else (1.0, 1.0)

    def batch_scale(self, width: int, batch: int, widths: Sequence[float] | None = None) -> float:
        """The factor an in-process speedup at concurrency 1 is multiplied by at `batch` rows:
        the plain step's growth over the speculative step's (`growths`)."""
        plain, spec = self.growths(width, batch, widths)
        return plain / spec

    def speedup_at(
        self,
        expected: float,
        t_step: float,
        width: int,
        batch: int,
        *,
        widths: Sequence[float] | None = None,
    ) -> float:
        """The predicted speedup at concurrency `batch` of a configuration committing `expected`
        tokens per step of `t_step` seconds (in process, one row): the plain and the speculative
        step grow with the batch as `growths` says, and the serving cost at that concurrency
        (`overhead_at`) is added once per step to both (costmodel.served_speedup)."""
        plain, spec = self.growths(width, batch, widths)
        return cm.served_speedup(expected, self.t_base * plain, t_step * spec, self.overhead_at(batch))

    def replay_speedup(
        self,
        requests: Sequence[tuple[int, int]],
        prefill: Sequence[float],
        step: ReplayStep,
        *,
        batch: int,
        count: int | None = None,
    ) -> float:
        """`sdtk bench --compare`'s speedup at concurrency `batch`, its closed loop replayed
        through the in-flight batcher (inflight.simulate_closed_loop) on both sides: `requests`
        (tokens n_i, speculative steps s_i) each run plainly in n_i steps of t_base and
        speculatively in s_i steps of `t_step` after their prompt step. The prompt step emits no
        token (the runtime's first step does), so `prefill`, the probe's time to the first token
        of a plain generation, holds one plain step at one row: the prompt step alone is that
        less t_base (plus the serving cost of a response). An iteration over r rows costs the forward part of
        the plain or the speculative step grown from one row to r as `growths` says, r times the
        step's own work outside the target's forward (`t_own_base`, `t_own`: each row's thread
        does its own, and the batcher waits for every row's), plus the serving cost at this
        concurrency (`overhead_at`). Where `speedup_at` prices every step at `batch` rows, the
        replay lets requests that finish unevenly (a speculative request commits its tokens in
        fewer steps the easier its text) drain the batch, and the tail run with fewer rows.
        Speedup: the mean of each request's tokens ÷ its end-to-end seconds, speculative over
        plain.

        `count`: the requests the bench run sends per level, the probed ones in order and then
        over again (the bench's first requests are the probe's prompts: Workload.sample with the
        same seed), replayed from as many offsets as give every probed request the same weight
        (each side's mean rate averaged over them). The count matters beyond the noise: with more
        requests per client a smaller share of them runs in the draining tail, where the
        speculative side gains (at 8 clients on the memory-bound twin, 16 requests replay to
        1.19× and 24 to 1.13×). None: the probed requests, repeated when fewer than the clients
        so that every client has one.

        `step_widths`: per probed request, the tokens each of its s_i speculative steps verifies
        (the probe's, `ProbeConfig.step_widths`, replayed at this γ). Then a speculative
        iteration costs the forward part of `t_step` scaled from one row of the probe's mean
        width to its rows padded to the widest step among them (inflight.simulate_closed_loop's
        `widths`), so rows that step together with alike proposals are priced as they run.
        None: `growths`' widest of b independent draws from `widths`. (`t_step`, `width`,
        `widths`, `t_own`, `step_widths`: the fields of `step`, ReplayStep.)"""
        t_step, width, widths, t_own, step_widths = (
            step.t_step,
            step.width,
            step.widths,
            step.t_own,
            step.step_widths,
        )
        if not requests:
            raise ValueError("no requests to replay")
        if len(prefill) != len(requests):
            raise ValueError(f"{len(prefill)} prefill times for {len(requests)} requests")
        if step_widths is not None and [len(w) for w in step_widths] != [s for _, s in requests]:
            raise ValueError("step_widths must give one width per speculative step of every request")
        n = len(requests)
        if count is None:  # the probed ones; fewer than the clients: repeated, one for every client
            count = n if n >= batch else -(-batch // n) * n
        elif count < 1:
            raise ValueError(f"count must be ≥ 1, got {count}")
        # The probed requests in order and over again, from offsets that give each the same
        # weight: the extra requests beyond whole copies (r of them) start at 0, r, 2r, ...
        # (mod n), windows that cover every probed request equally often.
        r = count % n
        orders = [[(k * r + i) % n for i in range(count)] for k in range(n // math.gcd(n, r) if r else 1)]
        o = self.overhead_at(batch)
        first = [max(0.0, p - self.t_base) + o for p in prefill]

        own_p, own_s = min(self.t_own_base, self.t_base), min(t_own, t_step)

        # Per step widths: the forward part of t_step is one row at the probe's mean width.
        steps_w = [w for ws in step_widths or () for w in ws]
        one_row = sum(self.batch_cost(w, 1) for w in steps_w) / len(steps_w) if steps_w else 0.0
        by_width = bool(self.batch_points) and one_row > 0
        spec_widths = step_widths if by_width else None

        @functools.cache  # one price per (rows, widest step): the replay asks once per iteration
        def plain(r: int, _w: int) -> float:
            return (self.t_base - own_p) * self.growths(1, r)[0] + r * own_p + o

        @functools.cache
        def spec(r: int, w: int) -> float:
            grown = (
                self.batch_cost(w, self.rows(r)) / one_row if by_width else self.growths(width, r, widths)[1]
            )
            return (t_step - own_s) * grown + r * own_s + o

        def mean_rate(order: list[int], speculative: bool) -> float:
            seconds = simulate_closed_loop(
                [requests[i][1] if speculative else requests[i][0] for i in order],
                clients=batch,
                max_rows=self.max_batch,
                prefill=[first[i] for i in order],
                iteration=spec if speculative else plain,
                widths=[spec_widths[i] for i in order] if speculative and spec_widths else None,
            )
            return sum(
                requests[i][0] / s if s > 0 else 0.0 for i, s in zip(order, seconds, strict=True)
            ) / len(seconds)

        base = sum(mean_rate(order, False) for order in orders)
        return sum(mean_rate(order, True) for order in orders) / base if base > 0 else 0.0

    def bls_speedup_at(self, expected: float, draft_len: int, batch: int, costs: IterationCosts) -> float:
        """`speedup_at` through draft-target's BLS loop at draft length γ (costmodel.bls_loop_speedup),
        `expected` its τ per verify step, `costs` its iteration's at this concurrency (`bls_costs`)."""
        t_plain, o = self.t_base * self.growths(1, batch)[0], self.overhead_at(batch)
        return cm.bls_loop_speedup(expected, draft_len, t_plain, costs.step, o, t_fill=costs.fill)

    def bls_costs(
        self, draft_len: int, batch: int, t_step: float, requests: Sequence[Sequence[int]]
    ) -> IterationCosts:
        """A BLS iteration's costs at `batch` loops (at most max_batch_size, as `rows`) replayed
        over `requests` (the fill steps of each one's iterations, runs.bls_fills) with the batched
        forwards scaled to a step (t_base ÷ one row of one token) and the serving cost there
        (inflight.iteration_costs); one loop or no batched forwards: the closed form."""
        if not self.batch_points or batch <= 1 or not any(requests):
            return IterationCosts(t_step, self.t_base, None)
        scale = self.t_base / self.batch_cost(1, 1)
        return iteration_costs(
            requests,
            loops=self.rows(batch),
            draft_len=draft_len,
            t_step=t_step,
            serving=self.overhead_at(batch),
            forward=lambda width, rows: self.batch_cost(width, rows) * scale,
        )

    def rows(self, batch: int) -> int:
        """The rows a forward runs at concurrency `batch`: beyond max_batch_size requests queue."""
        return min(batch, self.max_batch) if self.max_batch else batch

    def batch_cost(self, width: float, batch: int) -> float:
        """Seconds of a batched forward over `batch` rows of `width` tokens, from the measured
        points: monotone in the batch size, linear between the measured widths around `width`
        (the nearest one beyond their ends)."""
        measured = sorted(self.batch_points)

        def at(w: int) -> float:
            return interpolate(isotonic(self.batch_points[w]), batch)

        lo = max((w for w in measured if w <= width), default=measured[0])
        hi = min((w for w in measured if w >= width), default=measured[-1])
        if lo == hi:
            return at(lo)
        f = (width - lo) / (hi - lo)
        return at(lo) * (1 - f) + at(hi) * f

    def delta(self, n: int) -> float:
        """Extra seconds to verify n tokens instead of 1 (from the monotone fit of the points)."""
        f = cm.MeasuredStepCost(tuple(isotonic(self.forward_points)))
        return max(0.0, f.time(1, n) - f.time(1, 1))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def isotonic(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Non-decreasing least-squares fit of (n, t) points (pool adjacent violators).

    A forward over more tokens never costs less; timing noise says otherwise now and then, and
    an unsmoothed curve would make γ=2 look dearer than γ=3.
    """
    pts = sorted(points)
    blocks: list[list[float]] = []  # [sum, count]
    for _, t in pts:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            a, b = blocks.pop(), blocks.pop()
            blocks.append([a[0] + b[0], a[1] + b[1]])
    out: list[tuple[int, float]] = []
    i = 0
    for total, count in blocks:
        for _ in range(int(count)):
            out.append((pts[i][0], total / count))
            i += 1
    return out


def fit_kappa(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares κ in t(n) = t(1)·(1 + κ(n−1)), through the measured t(1)."""
    t1 = dict(points).get(1) or min(t for _, t in points)
    num = sum((n - 1) * (t / t1 - 1) for n, t in points)
    den = sum((n - 1) ** 2 for n, _ in points)
    return max(0.0, num / den) if den else 0.0


def interpolate(points: Sequence[tuple[int, float]], x: int, *, monotone: bool = True) -> float:
    """Piecewise-linear through measured (γ, seconds) points, linear beyond the ends; `monotone`:
    through their non-decreasing fit (`isotonic`) instead of the points themselves."""
    pts = isotonic(points) if monotone else sorted(points)
    if len(pts) == 1:
        return pts[0][1]
    f = cm.MeasuredStepCost(tuple(pts))
    if x < pts[0][0]:
        (x0, y0), (x1, y1) = pts[0], pts[1]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return f.time(1, x)
