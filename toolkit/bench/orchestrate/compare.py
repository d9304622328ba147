"""`sdtk bench --compare`, run: both sides measured on the same workload, then compared.

Each side is a URL of a running server, a workdir of a detached deployment (`state.json`),
or a recipe (deployed here through `deploy_fn`, one side at a time, so both get a fresh
server and neither competes with the other for the machine). Both sides get the same
prompts in the same order with the same per-request seeds (measure_side). The comparison
itself is toolkit.bench.decide.compare's.

The order: by default each side runs all its levels, the baseline's first. With `interleave`,
level by level: the baseline at a level, then the speculative side at the same level, then the
next level (a recipe side is deployed once per level), so a machine whose speed drifts over
minutes moves both sides of a level alike instead of biasing every ratio one way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from toolkit.bench.decide import compare as compare_mod
from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure import replay as replay_mod
from toolkit.bench.measure.records import BenchResult
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import RunOptions
from toolkit.bench.orchestrate.side import Load, measure_side
from toolkit.bench.results import ABResult
from toolkit.bench.targets import DeployFn, Side


def run_compare(
    sides: Sequence[Side],
    wl: Workload,
    opts: RunOptions,
    *,
    levels: list[int],
    resamples: int,
    confidence: float,
    deploy_fn: DeployFn | None,
    replay: bool,
    interleave: bool = False,
) -> ABResult:
    """Run both sides on `wl` and compare them. A dead server raises BenchAborted whose
    `.partial` is the ABResult so far (reports are the caller's: toolkit.bench.api).
    `interleave`: level by level, both sides at each level before the next (module docstring)."""
    settings = {
        "concurrency": levels,
        **opts.settings(),
        "resamples": resamples,
        "confidence": confidence,
        "allow_inexact": opts.allow_inexact,
        "order": "interleaved by level" if interleave else "side by side",
    }
    ab = ABResult(sides[0].describe(), sides[1].describe(), wl.to_dict(), settings)
    runs: dict[str, BenchResult | None] = {}
    current = sides[0]
    rounds = [[c] for c in levels] if interleave else [list(levels)]
    try:
        for round_levels in rounds:
            for side in sides:
                current = side
                got = measure_side(side, wl, opts, Load(concurrency=round_levels), deploy_fn=deploy_fn)
                runs[side.label] = _joined(runs.get(side.label), got)
    except BenchAborted as e:
        runs[current.label] = _joined(runs.get(current.label), e.partial)
        compare_mod.finish(ab, runs, resamples, opts.seed, confidence)
        compare_mod.mark_partial(ab, current.label, e.cause or e.message)
        raise BenchAborted(
            f"comparison stopped: {ab.error}", partial=ab, cause=e.cause, hint=e.hint
        ) from None
    compare_mod.finish(ab, runs, resamples, opts.seed, confidence)
    if replay:
        ab.replayed = replay_side(sides[1], wl, opts, ab.speculative)
    return ab


def _joined(before: BenchResult | None, more: BenchResult | None) -> BenchResult | None:
    """One side's run so far with the levels of its next run after it (interleaved order): the
    first run's endpoint and workload, every run's levels and warnings, the levels run so far
    in `settings`, partial if any run was."""
    if before is None or more is None:
        return more if before is None else before
    levels = [*before.levels, *more.levels]
    return dataclasses.replace(
        before,
        levels=levels,
        settings={**before.settings, "concurrency": [lv.concurrency for lv in levels]},
        partial=before.partial or more.partial,
        error=more.error or before.error,
        warnings=[*before.warnings, *(w for w in more.warnings if w not in before.warnings)],
    )


def replay_side(
    side: Side, wl: Workload, opts: RunOptions, run: BenchResult | None
) -> replay_mod.ReplayedAcceptance | None:
    """Per-position acceptance of a greedy reference-backend speculative side (see measure.replay),
    from the recipe the side was resolved with."""
    rec = side.recipe
    if rec is None or not replay_mod.replayable(rec, opts.temperature):
        return None
    opts.steps("compare")("speculative: replaying the requests in process for acceptance per draft position")
    first = run.levels[0].records if run is not None and run.levels else None
    return replay_mod.replay_acceptance(rec, wl.sample(opts.requests, opts.seed), first)
