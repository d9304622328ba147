"""`sdtk bench --compare`, run: both sides measured on the same workload, then compared.

Each side is a URL of a running server, a workdir of a detached deployment (`state.json`),
or a recipe (deployed here through `deploy_fn`, one side at a time, so both get a fresh
server and neither competes with the other for the machine). Both sides get the same
prompts in the same order with the same per-request seeds (measure_side). The comparison
itself is toolkit.bench.decide.compare's.

The order: by default each side runs all its levels, the baseline's first. With `interleave`,
level by level: the baseline at a level, then the speculative side at the same level, then the
next level (a recipe side is deployed once per level), so a machine whose speed drifts over
minutes moves both sides of a level alike instead of biasing every ratio one way. With `rounds`
K > 1, finer still: both sides stay deployed for the whole run, and each level's requests are
split into K consecutive rounds (requests 0..N/K-1, then the next N/K, ...), each round a closed
loop at the level's concurrency, run by both sides in turn: A B, then B A, then A B, ... A side's
level is its rounds' records joined (every request keeps its index and seed, so the pairs are the
same requests as without rounds); its duration is theirs summed. A drift over tens of seconds
then falls on both sides of a level alike. Each round drains at its end, so K rounds of N/K
requests load a server like K runs of `--requests N/K`: `sdtk plan --requests N/K` predicts them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

from toolkit.bench.decide import compare as compare_mod
from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure import replay as replay_mod
from toolkit.bench.measure.metrics import merged_counts
from toolkit.bench.measure.records import BenchResult, LevelResult
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import CompareOptions, RunOptions
from toolkit.bench.orchestrate.side import Load, live_side, measure_side
from toolkit.bench.results import ABResult
from toolkit.bench.targets import DeployFn, Side
from toolkit.errors import UsageError

# One measurement of the schedule: (side index, levels, requests [start, stop) or None: all).
Run = tuple[int, list[int], tuple[int, int] | None]


def run_compare(
    sides: Sequence[Side],
    wl: Workload,
    opts: RunOptions,
    options: CompareOptions,
    *,
    levels: list[int],
    deploy_fn: DeployFn | None,
) -> ABResult:
    """Run both sides on `wl` at `levels` (options.concurrency, checked) and compare them. A dead
    server raises BenchAborted whose `.partial` is the ABResult so far (reports are the caller's:
    toolkit.bench.api). `options.interleave`: level by level, both sides at each level before the
    next; `options.rounds` > 1: each level in that many rounds, the sides alternating (module
    docstring)."""
    resamples, confidence, interleave, rounds = (
        options.resamples,
        options.confidence,
        options.interleave,
        options.rounds,
    )
    check_rounds(rounds, opts, levels)
    settings = {
        "concurrency": levels,
        **opts.settings(),
        "resamples": resamples,
        "confidence": confidence,
        "allow_inexact": opts.allow_inexact,
        "order": order_label(interleave, rounds),
        "rounds": rounds,
    }
    ab = ABResult(sides[0].describe(), sides[1].describe(), wl.to_dict(), settings)
    runs: dict[str, BenchResult | None] = {}
    current = sides[0]
    with contextlib.ExitStack() as stack:
        measured = list(sides)
        if rounds > 1:  # both deployed for the whole run, the baseline first
            opts.steps("compare")(f"{rounds} rounds per level, the sides alternating: both stay deployed")
            measured = [
                stack.enter_context(
                    live_side(s, protocol=opts.protocol, deploy_fn=deploy_fn, workdir=opts.workdir)
                )
                for s in sides
            ]
        try:
            warmed: set[int] = set()
            for i, run_levels, part in schedule(levels, opts.requests, interleave, rounds):
                current = sides[i]
                # Live sides are warmed once; a side deployed per measurement, every time.
                run_opts = opts if rounds == 1 or i not in warmed else dataclasses.replace(opts, warmup=0)
                warmed.add(i)
                load = Load(concurrency=run_levels, part=part)
                got = measure_side(measured[i], wl, run_opts, load, deploy_fn=deploy_fn, label=sides[i].label)
                runs[current.label] = _added(runs.get(current.label), got, part)
        except BenchAborted as e:
            runs[current.label] = _added(runs.get(current.label), e.partial, part)
            compare_mod.finish(ab, runs, resamples, opts.seed, confidence)
            compare_mod.mark_partial(ab, current.label, e.cause or e.message)
            raise BenchAborted(
                f"comparison stopped: {ab.error}", partial=ab, cause=e.cause, hint=e.hint
            ) from None
    compare_mod.finish(ab, runs, resamples, opts.seed, confidence)
    if options.replay:
        ab.replayed = replay_side(sides[1], wl, opts, ab.speculative)
    return ab


def order_label(interleave: bool, rounds: int) -> str:
    if rounds > 1:
        return f"interleaved by level, {rounds} rounds per level (A B, B A, ...)"
    return "interleaved by level" if interleave else "side by side"


def check_rounds(rounds: int, opts: RunOptions, levels: Sequence[int]) -> None:
    """Each round is a closed loop at its level's concurrency: it needs as many requests as
    clients, and a fixed count of requests (not --duration)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise UsageError(f"rounds must be a positive integer, got {rounds!r}")
    if rounds == 1:
        return
    if opts.duration is not None:
        raise UsageError(
            "rounds split each level's requests; they do not combine with a duration per level",
            hint="drop --duration, or --rounds",
        )
    top = max(levels)
    if opts.requests // rounds < top:
        most = opts.requests // top
        raise UsageError(
            f"{rounds} rounds of {opts.requests} requests leave {opts.requests // rounds} per round, "
            f"fewer than the {top} clients at concurrency {top} (each round is a closed loop at its level)",
            hint=f"at most {most} rounds with --requests {opts.requests}, or --requests {rounds * top} or more"
            if most >= 1
            else f"--requests {rounds * top} or more",
        )


def schedule(levels: list[int], requests: int, interleave: bool, rounds: int) -> list[Run]:
    """The measurements in order: (side, levels, part). Side by side: each side's levels in one
    run; interleaved: both sides per level; rounds: per level, requests [k·N/K, (k+1)·N/K) by
    both sides, the order flipping every round (A B, B A, ...)."""
    if rounds > 1:
        bounds = [(k * requests // rounds, (k + 1) * requests // rounds) for k in range(rounds)]
        return [
            (i, [c], part)
            for c in levels
            for k, part in enumerate(bounds)
            for i in ((0, 1) if k % 2 == 0 else (1, 0))
        ]
    groups = [[c] for c in levels] if interleave else [list(levels)]
    return [(i, group, None) for group in groups for i in (0, 1)]


def _added(
    before: BenchResult | None, more: BenchResult | None, part: tuple[int, int] | None
) -> BenchResult | None:
    """A side's run so far with its next measurement: a later round of a level joins that level
    (its records, in index order, and its duration); anything else adds levels (_joined)."""
    if part is None or part[0] == 0 or before is None or more is None or not before.levels or not more.levels:
        return _joined(before, more)
    last, add = before.levels[-1], more.levels[0]
    level = LevelResult(
        last.concurrency,
        last.rate,
        sorted([*last.records, *add.records], key=lambda r: r.index),
        last.duration + add.duration,
        last.partial or add.partial,
        merged_counts(last.server_acceptance, add.server_acceptance),
    )
    return _joined(
        dataclasses.replace(before, levels=before.levels[:-1]), dataclasses.replace(more, levels=[level])
    )


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
    level = run.levels[0] if run is not None and run.levels else None
    prompts = wl.sample(opts.requests, opts.seed)
    replayed = replay_mod.replay_acceptance(rec, prompts, level.records if level is not None else None)
    counted = level.server_acceptance if level is not None else None
    if replayed.server_draft_tokens is None and counted and counted.get("requests") == len(prompts):
        # An OpenAI-API side: the workers' counters over the level's requests (all of them).
        replayed.server_accepted_draft_tokens = int(counted["accepted_draft_tokens"])
        replayed.server_draft_tokens = int(counted["draft_tokens"])
    return replayed
