"""`sdtk bench --compare`: baseline vs speculative on the same workload, with a verdict.

Each side is a URL of a running server, a workdir of a detached deployment (`state.json`),
or a recipe (deployed here through `deploy_fn`, one side at a time, so both get a fresh
server and neither competes with the other for the machine). Both sides get the same
prompts in the same order with the same per-request seeds.

Speedup (per concurrency level) = mean over requests of the per-request output rate
(output tokens ÷ e2e latency) with speculation ÷ the same without: the Spec-Bench
definition, what one user experiences. Its 95% interval is a seeded paired bootstrap over
requests (request i carries the same prompt on both sides). TPOT speedup (mean TPOT
baseline ÷ speculative) and the aggregate throughput ratio are reported alongside.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure import replay as replay_mod
from toolkit.bench.measure.loadgen import BenchResult, Sampling, run_with
from toolkit.bench.measure.metrics import RequestRecord, ratio_of_means_ci, request_metrics
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import RunOptions
from toolkit.bench.results import ABResult, LevelComparison
from toolkit.bench.targets import DeployFn, Side, deployed_recipe, side_endpoint


def count_steps_from_chunks(result: Any) -> None:
    for level in getattr(result, "levels", []):
        for rec in level.records:
            if rec.ok and rec.steps is None and rec.draft_tokens is not None and rec.streamed:
                rec.steps = sum(1 for k in rec.chunk_tokens if k > 0)
                rec.steps_source = "streamed chunks (one per step)"


def _metric_pairs(
    base: list[RequestRecord], spec: list[RequestRecord], attr: str
) -> tuple[list[float], list[float], bool]:
    """Values of one per-request metric on both sides, paired by request index when possible."""
    bm = {r.index: getattr(request_metrics(r), attr) for r in base if r.ok}
    sm = {r.index: getattr(request_metrics(r), attr) for r in spec if r.ok}
    common = sorted(i for i in bm.keys() & sm.keys() if bm[i] is not None and sm[i] is not None)
    if len(common) >= 2:
        return [bm[i] for i in common], [sm[i] for i in common], True
    return [v for v in bm.values() if v is not None], [v for v in sm.values() if v is not None], False


def compare_levels(
    baseline: BenchResult,
    speculative: BenchResult,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[LevelComparison]:
    out = []
    for blv in baseline.levels:
        conc = blv.concurrency
        slv = speculative.level(conc) if conc is not None else None
        if conc is None or slv is None:
            continue
        b_tok, s_tok, paired = _metric_pairs(blv.records, slv.records, "user_tok_s")
        b_tpot, s_tpot, p2 = _metric_pairs(blv.records, slv.records, "tpot")
        b_ttft, s_ttft, p3 = _metric_pairs(blv.records, slv.records, "ttft")
        kw: dict[str, Any] = dict(resamples=resamples, seed=seed, confidence=confidence)
        bs, ss = blv.summary(), slv.summary()
        thr = (ss["output_tok_s"] / bs["output_tok_s"]) if bs["output_tok_s"] and ss["output_tok_s"] else None
        out.append(
            LevelComparison(
                concurrency=conc,
                speedup=ratio_of_means_ci(s_tok, b_tok, paired=paired, **kw),
                tpot_speedup=ratio_of_means_ci(b_tpot, s_tpot, paired=p2, **kw),
                ttft_ratio=ratio_of_means_ci(s_ttft, b_ttft, paired=p3, **kw),
                throughput_ratio=thr,
                pairs=len(b_tok) if paired else 0,
                paired=paired,
                baseline=bs,
                speculative=ss,
            )
        )
    return out


def verdict(levels: Sequence[LevelComparison]) -> tuple[str, int | None, str | None, int | None]:
    """(one-line verdict, break-even concurrency, its basis, adopt-for concurrency)."""
    lv = [lc for lc in levels if lc.speedup.point is not None]
    if not lv:
        return "no comparable measurements (every request failed on one side?)", None, None, None
    be, basis = None, None
    for lc in lv:
        if lc.speedup.hi is not None and lc.speedup.hi < 1:
            be, basis = lc.concurrency, "ci"
            break
    if be is None:
        for lc in lv:
            if lc.speedup.point is not None and lc.speedup.point < 1:
                be, basis = lc.concurrency, "point"
                break
    adopt = None
    for lc in lv:
        if lc.speedup.lo is not None and lc.speedup.lo > 1:
            adopt = lc.concurrency
        else:
            break
    first = lv[0]
    sp = first.speedup
    ci = f"[{sp.lo:.2f}, {sp.hi:.2f}]" if sp.lo is not None and sp.hi is not None else "[no CI]"
    if sp.lo is not None and sp.lo > 1:
        head = f"speculative is {sp.point:.2f}× faster {ci} at concurrency {first.concurrency}"
    elif sp.hi is not None and sp.hi < 1:
        head = f"speculative is slower: {sp.point:.2f}× {ci} at concurrency {first.concurrency}"
    else:
        head = f"no significant difference at concurrency {first.concurrency} ({sp.point:.2f}× {ci})"
    top = lv[-1].concurrency
    if be is not None:
        tail = f"break-even at {be}" + (" (point estimate)" if basis == "point" else "")
    else:
        tail = f"no break-even up to concurrency {top}"
    rec = f"adopt for ≤{adopt}" if adopt is not None else "do not adopt"
    return f"{head}; {tail}; {rec}", be, basis, adopt


def compare(
    sides: Sequence[Side],
    wl: Workload,
    opts: RunOptions,
    *,
    levels: list[int],
    resamples: int,
    confidence: float,
    deploy_fn: DeployFn | None,
    replay: bool,
) -> ABResult:
    """Run both sides on `wl` and compare them. A dead server raises BenchAborted whose
    `.partial` is the ABResult so far (reports are the caller's: toolkit.bench.api)."""
    settings = {
        "concurrency": levels,
        "requests": opts.requests,
        "duration": opts.duration,
        "warmup": opts.warmup,
        "seed": opts.seed,
        "protocol": opts.protocol,
        "temperature": opts.temperature,
        "timeout": opts.timeout,
        "resamples": resamples,
        "confidence": confidence,
        "allow_inexact": opts.allow_inexact,
    }
    ab = ABResult(sides[0].describe(), sides[1].describe(), wl.to_dict(), settings)
    sampling = Sampling(temperature=opts.temperature)
    runs: dict[str, BenchResult] = {}
    current = sides[0]
    try:
        for side in sides:
            current = side
            with side_endpoint(
                side, protocol=opts.protocol, deploy_fn=deploy_fn, timeout=opts.timeout, workdir=opts.workdir
            ) as ep:
                runs[side.label] = asyncio.run(
                    run_with(
                        ep,
                        wl,
                        opts,
                        concurrency=levels,
                        sampling=sampling,
                        label=side.label,
                        draft_len=side.draft_len,
                        tokenizer=opts.tokenizer or side.tokenizer,
                    )
                )
                runs[side.label].twin = side.twin
                if side.steps_from_chunks:
                    count_steps_from_chunks(runs[side.label])
    except BenchAborted as e:
        runs[current.label] = e.partial
        _finish(ab, runs, resamples, opts.seed, confidence)
        ab.partial, ab.error = True, f"{current.label}: {e.cause or e.message}"
        ab.verdict = "PARTIAL (server stopped): " + ab.verdict
        raise BenchAborted(
            f"comparison stopped: {ab.error}", partial=ab, cause=e.cause, hint=e.hint
        ) from None
    _finish(ab, runs, resamples, opts.seed, confidence)
    if replay:
        ab.replayed = _replay(sides[1], wl, opts, ab.speculative)
    return ab


def _replay(side: Side, wl: Workload, opts: RunOptions, run: Any) -> Any:
    """Per-position acceptance of a greedy reference-backend speculative side (see measure.replay)."""
    rec: Any
    if side.kind == "recipe" and side.recipe_path is not None:
        from toolkit.recipe import load_recipe

        rec = load_recipe(side.recipe_path)
    else:
        rec = deployed_recipe(side.workdir) if side.kind == "workdir" and side.workdir else None
    if not replay_mod.replayable(rec, opts.temperature):
        return None
    if opts.progress:
        print(
            "speculative: replaying the requests in process for acceptance per draft position",
            file=sys.stderr,
        )
    first = run.levels[0].records if run is not None and run.levels else None
    return replay_mod.replay_acceptance(rec, wl.sample(opts.requests, opts.seed), first)


def _finish(ab: ABResult, runs: dict[str, BenchResult], resamples: int, seed: int, confidence: float) -> None:
    ab.baseline, ab.speculative = runs.get("baseline"), runs.get("speculative")
    if ab.baseline is not None and ab.speculative is not None:
        ab.levels = compare_levels(
            ab.baseline, ab.speculative, resamples=resamples, seed=seed, confidence=confidence
        )
    ab.verdict, ab.break_even, ab.break_even_basis, ab.adopt_for = verdict(ab.levels)
    if not ab.token_counts_exact:
        ab.verdict = "INEXACT token counts: " + ab.verdict
