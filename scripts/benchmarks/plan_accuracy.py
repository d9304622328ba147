#!/usr/bin/env python
"""How well does `sdtk plan` predict speculative speedup? Predicted vs measured over γ = 1..8.

For each chain-mode tiny recipe (draft_target, eagle3, ngram):

1. `plan()` probes acceptance and costs on one half of the workload (one probe at γ=8, plus
   bare forward timings) and predicts the speedup for every γ.
2. The speedup is then *measured* in-process with the reference runtime on the other half of
   the workload: baseline and every γ run on the same prompts, interleaved per prompt so all
   configurations see the same machine load. Speedup = decode tokens/s with speculation ÷
   without (decode: everything after the first step, the same quantity plan predicts).
3. Reported: predicted and measured speedup per γ, the median absolute error, and the
   measured speedup at plan's recommended γ relative to the best measured γ.

The served path (Triton) is not used: this isolates the cost model from serving overheads.
The section between the bench_plan markers in docs/lab/benchmarks-history.md is replaced (the file is
created if missing); nothing else in it is touched.

    .venv/bin/python scripts/bench.py run plan_accuracy            # all three tiny recipes
    .venv/bin/python scripts/bench.py run plan_accuracy --recipes tiny-draft-target --no-docs
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

START, END = "<!-- bench_plan:start -->", "<!-- bench_plan:end -->"
DEFAULT_RECIPES = ("tiny-draft-target", "tiny-eagle3", "tiny-ngram")


def measure(rt, recipe, prompts, gammas, new_tokens, rounds):
    """Decode tokens/s per configuration (γ = 0 is the baseline), interleaved per prompt."""
    from toolkit.bench.measure.inprocess import generate_timed
    from toolkit.reference import PLAIN, SamplingParams

    sp = SamplingParams()
    spec = recipe.speculative
    configs = [0, *gammas]
    secs = {g: 0.0 for g in configs}
    toks = {g: 0 for g in configs}
    nsteps = {g: 0 for g in configs}
    per_prompt = {g: [] for g in gammas}
    for r in range(rounds):
        for i, ids in enumerate(prompts):
            order = configs[(i + r) % len(configs) :] + configs[: (i + r) % len(configs)]
            rate = {}
            for g in order:
                _, durs, counts, _ = generate_timed(
                    rt,
                    ids,
                    new_tokens,
                    sp,
                    spec=spec.model_copy(update={"max_draft_len": g}) if g else PLAIN,
                )
                # Tokens committed after the first step, over the time those steps took.
                secs[g] += sum(durs)
                toks[g] += sum(counts[1:])
                nsteps[g] += len(durs)
                rate[g] = sum(counts[1:]) / sum(durs) if durs else 0.0
            for g in gammas:
                if rate.get(0):
                    per_prompt[g].append(rate[g] / rate[0])
    base = toks[0] / secs[0]
    detail = {
        g: {"tokens_per_step": toks[g] / nsteps[g], "step_ms": 1e3 * secs[g] / nsteps[g]} for g in configs
    }
    return (
        {g: (toks[g] / secs[g]) / base for g in gammas},
        {g: statistics.median(v) for g, v in per_prompt.items() if v},
        base,
        detail,
    )


def run_recipe(name, args):
    from toolkit.bench.api import plan
    from toolkit.bench.measure.inprocess import encode, load_runtime
    from toolkit.bench.measure.workloads import load_workload
    from toolkit.bench.targets import load_recipe_any

    rec = load_recipe_any(name)
    wl = load_workload(args.workload)
    rt = load_runtime(rec)
    order = wl.sample(len(wl.prompts), args.seed)
    half = len(order) // 2
    probe_wl = type(wl)(name=wl.name + " (probe half)", source=wl.source, prompts=order[:half])
    held_out = order[half:][: args.measure_prompts]
    gammas = list(range(1, args.gamma_max + 1))
    t0 = time.perf_counter()
    pr = plan(
        rec,
        workload=probe_wl,
        probe_prompts=args.probe_prompts,
        probe_tokens=args.new_tokens,
        draft_len_max=args.gamma_max,
        concurrency=(1,),
        seed=args.seed,
        runtime=rt,
        progress=not args.quiet,
    )
    t_plan = time.perf_counter() - t0
    # In process, tokens over decode time pooled over prompts: plan's decode throughput ratio.
    pred = {p.draft_len: p.throughput[1] for p in pr.predictions}
    t_base = pr.probe.timing.t_base
    pred_detail = {
        p.draft_len: {
            "tokens_per_step": p.expected_tokens,
            "step_ms": 1e3 * p.expected_tokens * t_base / p.throughput[1],
        }
        for p in pr.predictions
    }
    pred_iid = {p.draft_len: (p.speedup_iid or {}).get(1) for p in pr.predictions}
    budget = rt.max_context - args.new_tokens - 1
    ids = [encode(rt, p.text)[-budget:] for p in held_out]
    if not args.quiet:
        print(
            f"[bench] measuring {name}: {len(ids)} held-out prompts × γ ∈ {gammas} × {args.rounds} round(s)",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    meas, meas_median, base_tps, detail = measure(rt, rec, ids, gammas, args.new_tokens, args.rounds)
    t_meas = time.perf_counter() - t0
    errors = [abs(pred[g] - meas[g]) for g in gammas if g in pred]
    rec_g = pr.recommendation.settings["max_draft_len"] if pr.recommendation else None
    best_g = max(gammas, key=lambda g: meas[g])
    return {
        "recipe": name,
        "mode": rec.mode,
        "plan_seconds": round(t_plan, 1),
        "measure_seconds": round(t_meas, 1),
        "probe_prompts": pr.probe.prompts,
        "measure_prompts": len(ids),
        "new_tokens": args.new_tokens,
        "baseline_decode_tok_s": base_tps,
        "c_forward": pr.probe.timing.c_forward,
        "kappa": pr.probe.timing.kappa,
        "alpha_greedy": pr.probe.alpha_greedy.point if pr.probe.alpha_greedy else None,
        "per_position": pr.probe.configs[0].per_position_acceptance,
        "predicted": pred,
        "predicted_iid": pred_iid,
        "measured": meas,
        "measured_median_per_prompt": meas_median,
        "predicted_detail": pred_detail,
        "measured_detail": detail,
        "probe_t_base_ms": 1e3 * t_base,
        "probe_steps": {
            c.label: {"t_step_ms": 1e3 * c.t_step, "tau": c.acceptance_length} for c in pr.probe.configs
        },
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "recommended_gamma": rec_g,
        "best_measured_gamma": best_g,
        "speedup_at_recommended": meas.get(rec_g) if rec_g else None,
        "best_measured_speedup": meas[best_g],
        "recommended_vs_best": (meas[rec_g] / meas[best_g]) if rec_g else None,
    }


def render(results, args, load=(0.0, 0.0)) -> str:
    lines = [
        START,
        "## Plan accuracy: predicted vs measured speedup (tiny recipes, CPU)",
        "",
        f"Generated by `scripts/bench.py run plan_accuracy` on {time.strftime('%Y-%m-%d', time.gmtime())} "
        f"({platform.processor() or platform.machine()}, {_cpus()} CPUs, {args.threads} torch thread(s), "
        f"Python {platform.python_version()}).",
        "",
        f"- Workload `{args.workload}`: plan probes one half of the prompts ({args.probe_prompts} prompts at "
        f"γ = {args.gamma_max}, {(args.gamma_max + 1) // 2} and 1); the speedup is measured on {args.measure_prompts} "
        f"held-out prompts of the other half, {args.new_tokens} new tokens each, greedy, {args.rounds} round(s). "
        f"Load average {load[0]:.1f} before, {load[1]:.1f} after (a shared 2-core machine: other processes ran).",
        "- **Measured in-process with the reference runtime** (not through Triton): decode tokens/s with speculation ÷ "
        "without, every configuration interleaved per prompt. Serving overheads (Triton, the BLS loop) are not in "
        "these numbers.",
        "- Prediction (`toolkit/bench/decide/predict.py`): tokens per step τ(γ) replayed from the accepted runs of the γ_max "
        "probe (every shorter chain is a truncation of it), step time interpolated between the probes' measured "
        "step times; speedup = τ(γ) × plain step time ÷ step time(γ). c and κ come from bare forwards and are "
        "reported for Leviathan's closed form, not used for these predictions.",
        "",
    ]
    for r in results:
        lines.append(f"### {r['recipe']} ({r['mode']})")
        lines.append("")
        extra = f", c (draft ÷ target forward) = {r['c_forward']:.3f}" if r["c_forward"] is not None else ""
        alpha = f"α (argmax agreement) = {r['alpha_greedy']:.3f}, " if r["alpha_greedy"] is not None else ""
        lines.append(
            f"{alpha}κ = {r['kappa']:.3f}{extra}; per-position acceptance "
            f"[{', '.join(f'{m:.2f}' for m in r['per_position'])}]; baseline {r['baseline_decode_tok_s']:.0f} decode tok/s."
        )
        lines.append("")
        lines.append(
            "| γ | predicted | measured | measured (median per prompt) | abs error | τ predicted | τ measured |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for g in sorted(r["measured"]):
            p = r["predicted"].get(g)
            m = r["measured"][g]
            mm = r["measured_median_per_prompt"].get(g)
            tp = r["predicted_detail"].get(g, {}).get("tokens_per_step")
            tm = r["measured_detail"][g]["tokens_per_step"]
            lines.append(
                f"| {g} | {p:.2f}× | {m:.2f}× | {mm:.2f}× | {abs(p - m):.2f} | {tp:.2f} | {tm:.2f} |"
                if p is not None
                else f"| {g} | - | {m:.2f}× | {mm:.2f}× | - | - | {tm:.2f} |"
            )
        lines.append("")
        lines.append(
            f"Median absolute error **{r['median_abs_error']:.2f}** (max {r['max_abs_error']:.2f}). Recommended "
            f"γ = {r['recommended_gamma']}: measured {r['speedup_at_recommended']:.2f}×; best measured γ = "
            f"{r['best_measured_gamma']}: {r['best_measured_speedup']:.2f}× → the recommendation reaches "
            f"**{100 * r['recommended_vs_best']:.0f}%** of the best. (plan {r['plan_seconds']}s, measurement "
            f"{r['measure_seconds']}s)"
        )
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def write_section(path: Path, section: str) -> bool:
    from benchmarks import _harness

    return _harness.write_section(path, START, END, section)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", nargs="+", default=list(DEFAULT_RECIPES))
    ap.add_argument("--workload", default="code")
    ap.add_argument("--probe-prompts", type=int, default=16)
    ap.add_argument("--measure-prompts", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gamma-max", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads for probe and measurement (default 1)"
    )
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.manual_seed(args.seed)
    # Probe and measurement share one thread count; 1 is fastest for the tiny models and steadiest
    # when other processes share the CPUs.
    torch.set_num_threads(args.threads)
    import os

    before = os.getloadavg()[0]
    results = [run_recipe(name, args) for name in args.recipes]
    section = render(results, args, (before, os.getloadavg()[0]))
    print(section)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if not args.no_docs:
        write_section(args.docs, section)
    return 0
