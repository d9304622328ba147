"""`sdtk bench --compare`'s decision: baseline vs speculative, level by level, with a verdict.

Pure functions over the two sides' measurements (toolkit.bench.orchestrate.compare runs them:
both sides get the same prompts in the same order with the same per-request seeds).

Speedup (per concurrency level) = mean over requests of the per-request output rate
(output tokens ÷ e2e latency) with speculation ÷ the same without: the Spec-Bench
definition, what one user experiences. Its 95% interval is a seeded paired bootstrap over
requests (request i carries the same prompt on both sides). TPOT speedup (mean TPOT
baseline ÷ speculative) and the aggregate throughput ratio are reported alongside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.bench.measure.metrics import RequestRecord, ratio_of_means_ci, request_metrics, summarize
from toolkit.bench.measure.records import BenchResult, LevelResult
from toolkit.bench.results import ABResult, LevelComparison


def _metric_pairs(
    base: Sequence[list[RequestRecord]], spec: list[RequestRecord], attr: str
) -> tuple[list[float], list[float], bool]:
    """Values of one per-request metric on both sides, paired by request index when possible.

    `base`: the baseline's records from one run or several (each request's value is then its
    mean over the runs that measured it, so drift between runs cancels out of the ratio)."""
    runs = [{r.index: getattr(request_metrics(r), attr) for r in recs if r.ok} for recs in base]
    bm: dict[int, float] = {}
    for i in sorted({i for run in runs for i in run}):
        vals = [run[i] for run in runs if run.get(i) is not None]
        if vals:
            bm[i] = sum(vals) / len(vals)
    sm = {r.index: getattr(request_metrics(r), attr) for r in spec if r.ok}
    common = sorted(i for i in bm.keys() & sm.keys() if sm[i] is not None)
    if len(common) >= 2:
        return [bm[i] for i in common], [sm[i] for i in common], True
    return list(bm.values()), [v for v in sm.values() if v is not None], False


def compare_levels(
    baseline: BenchResult | Sequence[BenchResult],
    speculative: BenchResult,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[LevelComparison]:
    """Level by level, `speculative` against `baseline`: one run, or several of the same
    deployment (e.g. `tune`'s before and after a stretch of configurations), each request's
    baseline value then being its mean over them."""
    bases = [baseline] if isinstance(baseline, BenchResult) else list(baseline)
    out = []
    for blv in bases[0].levels if bases else []:
        conc = blv.concurrency
        slv = speculative.level(conc) if conc is not None else None
        if conc is None or slv is None:
            continue
        blvs = [lv for lv in (b.level(conc) for b in bases) if lv is not None]
        brecs = [lv.records for lv in blvs]
        b_tok, s_tok, paired = _metric_pairs(brecs, slv.records, "user_tok_s")
        b_tpot, s_tpot, p2 = _metric_pairs(brecs, slv.records, "tpot")
        b_ttft, s_ttft, p3 = _metric_pairs(brecs, slv.records, "ttft")
        kw: dict[str, Any] = dict(resamples=resamples, seed=seed, confidence=confidence)
        bs = blvs[0].summary() if len(blvs) == 1 else _pooled_summary(blvs)
        ss = slv.summary()
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


def _pooled_summary(levels: Sequence[LevelResult]) -> dict[str, Any]:
    """One summary over several runs of a level: their records together, over their summed
    durations (throughput = all tokens ÷ all the time spent)."""
    return summarize([r for lv in levels for r in lv.records], duration=sum(lv.duration for lv in levels))


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


def finish(
    ab: ABResult, runs: dict[str, BenchResult | None], resamples: int, seed: int, confidence: float
) -> None:
    """Fill `ab` from the runs measured (by side label): levels compared, and the verdict."""
    ab.baseline, ab.speculative = runs.get("baseline"), runs.get("speculative")
    if ab.baseline is not None and ab.speculative is not None:
        ab.levels = compare_levels(
            ab.baseline, ab.speculative, resamples=resamples, seed=seed, confidence=confidence
        )
    ab.verdict, ab.break_even, ab.break_even_basis, ab.adopt_for = verdict(ab.levels)
    if not ab.token_counts_exact:
        ab.verdict = "INEXACT token counts: " + ab.verdict


def mark_partial(ab: ABResult, label: str, error: str) -> None:
    """`ab` stopped while side `label` ran (its server died): partial, with the error named."""
    ab.partial, ab.error = True, f"{label}: {error}"
    ab.verdict = "PARTIAL (server stopped): " + ab.verdict
