#!/usr/bin/env python
"""The served draft-target BLS loop, run in process: a yardstick for `sdtk plan`'s BLS model.

The served draft-target path is upstream's `tensorrt_llm_bls` loop (decode.py): per iteration the
draft model is asked for γ tokens, then the target for γ+1 tokens with them as
`draft_input_ids`; the target verifies the draft and decodes plainly until it has γ+1 tokens. The
served plain target decodes by the same `verify_draft` steps without a draft. This script makes
exactly those `ReferenceRuntime.verify_draft` calls (the target with the recipe's
`reference.inflate`, the draft as its own plain runtime, as the served draft model is), with no
Triton, and reports:

- the A/B of that loop against the plain loop, as `sdtk bench --compare` reports it (the mean
  over requests of per-request tok/s, each request's time from its first call to its last token)
  and pooled (Σ time ÷ Σ time);
- τ, the tokens a verify step commits, twice: over the loop's iterations, and over the steps of
  the in-process speculative loop (`generate`, what plan's probe measures and prices the BLS
  loop with).

With `--concurrency 1,2,4,8` it also runs the loops as the served models do under load: both
runtimes with the served model's in-flight batcher (`enable_batching`, the recipe's build limits), one
thread per concurrent request, each model request held in the batch for its whole length
(`hold`); per level the same A/B (mean of per-request rates), and how many of the target's
batched forwards ran a single row while several loops were in flight: a loop that leaves the
batch to draft finds, when it comes back, the others' next step already running.

The BLS loop's tokens must equal the plain loop's (greedy speculation is lossless), or the
script stops. The timed A/B is repeated --runs times (each request plain then BLS, the requests in turn); the
table shows the median of the runs. Writes its section of docs/lab/benchmarks-history.md between the
bench_bls_replay markers.

    python scripts/bench.py run bls_replay [--recipe recipes/tiny-draft-target-membound.yaml]
        [--prompts 16] [--max-tokens 64] [--runs 3] [--threads 1] [--concurrency 1,2,4,8]
        [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from benchmarks._harness import cpu_model  # noqa: E402

START, END = "<!-- bench_bls_replay:start -->", "<!-- bench_bls_replay:end -->"


def plain_steps(rt: Any, toks: list[int], k: int) -> list[int]:
    """`k` tokens after `toks` by verify_draft steps without a draft: how a served model decodes
    plainly (the plain target, the draft model asked for k tokens, the target's fill steps)."""
    new: list[int] = []
    while len(new) < k:
        new += rt.verify_draft(toks + new, [], end_id=-1).new_tokens
    return new[:k]


def plain_loop(rt: Any, ids: list[int], n: int) -> tuple[float, list[int]]:
    """Seconds for `n` tokens by the served plain target, and the tokens. One served request:
    with a batcher the sequence stays in the batch for all its steps (`hold`, a no-op without)."""
    t = time.perf_counter()
    with rt.hold(ids):
        out = plain_steps(rt, ids, n)
    return time.perf_counter() - t, out


def bls_loop(rt: Any, drt: Any, ids: list[int], n: int, gamma: int) -> tuple[float, list[int], list[int]]:
    """Seconds for `n` tokens by the BLS loop, the tokens each iteration's verify step committed
    (accepted + 1), and the tokens. With batchers each model request is held in its batch: the
    draft's γ steps, then the target's verify and fill steps (one request of γ+1 tokens); between
    them the loop leaves both (`hold` is a no-op without a batcher)."""
    toks, got, taus = list(ids), 0, []
    t = time.perf_counter()
    while got < n:
        with drt.hold(toks):
            draft = plain_steps(drt, toks, min(gamma, n - got - 1))  # the draft model asked for k tokens
        with rt.hold(toks):
            new = rt.verify_draft(toks, draft, end_id=-1).new_tokens
            taus.append(len(new))
            # The target decodes plainly up to request_output_len = len(draft) + 1.
            new = (new + plain_steps(rt, toks + new, len(draft) + 1 - len(new)))[: n - got]
        toks += new
        got += len(new)
    return time.perf_counter() - t, taus, toks[len(ids) :]


def concurrent(
    rt: Any, drt: Any, build: Any, prompts: list[list[int]], n: int, gamma: int, levels: list[int], runs: int
) -> dict[int, dict[str, Any]]:
    """Per level: the BLS ÷ plain mean of per-request rates (median of `runs`), the target's
    batched forwards in a BLS run and the share of them that ran one row (first run)."""
    from concurrent.futures import ThreadPoolExecutor

    for runtime in (rt, drt):  # the served model's batcher (model.py: max_seq_len + 72 slots)
        runtime.enable_batching(build.max_batch_size, build.max_seq_len + 72)
    plain_loop(rt, prompts[0], 4)  # warm-up
    bls_loop(rt, drt, prompts[0], 4, gamma)
    out: dict[int, dict[str, Any]] = {}
    for c in levels:
        ratios, forwards, single = [], 0, 0
        for r in range(runs):
            with ThreadPoolExecutor(c) as pool:
                plain = list(pool.map(lambda ids: plain_loop(rt, ids, n), prompts))
                before = dict(rt.batcher.batch_sizes)
                spec = list(pool.map(lambda ids: bls_loop(rt, drt, ids, n, gamma), prompts))
            if any(s[2] != p[1] for s, p in zip(spec, plain, strict=True)):
                sys.exit(f"at concurrency {c} the BLS loop's tokens differ from the plain loop's")
            ratios.append(statistics.mean(n / s[0] for s in spec) / statistics.mean(n / p[0] for p in plain))
            if r == 0:
                grew = {k: v - before.get(k, 0) for k, v in rt.batcher.batch_sizes.items()}
                forwards, single = sum(grew.values()), grew.get(1, 0)
            print(f"[bls_replay] concurrency {c}, run {r + 1}/{runs}: {ratios[-1]:.3f}", file=sys.stderr)
        out[c] = {
            "speedup": statistics.median(ratios),
            "forwards": forwards,
            "single": single,
            "runs": ratios,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "tiny-draft-target-membound.yaml")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--concurrency",
        default="",
        help="also run the loops batched at these concurrency levels, e.g. 1,2,4,8 (default: none)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the workload sample's seed (plan's default)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from toolkit.bench.measure.inprocess import encode, load_runtime
    from toolkit.bench.measure.workloads import load_workload
    from toolkit.recipe.loader import load_recipe
    from toolkit.reference import ReferenceRuntime

    torch.set_num_threads(args.threads)
    rec = load_recipe(args.recipe)
    if rec.speculative.mode != "draft_target" or rec.models.draft is None:
        sys.exit(f"{args.recipe} is not a draft-target recipe")
    gamma = rec.speculative.max_draft_len
    rt = load_runtime(rec)
    draft_path = rec.local_path(rec.models.draft)
    assert draft_path is not None
    drt = ReferenceRuntime.load(draft_path, dtype=rec.dtype)
    n = args.max_tokens
    prompts = [
        encode(rt, p.text) for p in load_workload("code", max_tokens=n).sample(args.prompts, args.seed)
    ]
    load_before = os.getloadavg()[0]

    # τ of the in-process speculative loop (plan's probe): tokens ÷ steps over all prompts.
    steps = tokens = 0
    for ids in prompts:
        g = rt.generate(ids, n, spec=rec.speculative, end_id=-1)
        steps += g.stats.steps
        tokens += len(g.token_ids)
    tau_generate = tokens / steps

    plain_loop(rt, prompts[0], 4)  # warm-up
    bls_loop(rt, drt, prompts[0], 4, gamma)
    means, pooled, taus = [], [], []
    for r in range(args.runs):
        tp, tb = [], []
        for ids in prompts:
            t, plain = plain_loop(rt, ids, n)
            tp.append(t)
            t, tau, spec = bls_loop(rt, drt, ids, n, gamma)
            tb.append(t)
            if spec != plain:  # greedy speculation is lossless: a timing of a wrong loop means nothing
                sys.exit(f"the BLS loop's tokens differ from the plain loop's for prompt {len(tb) - 1}")
            if r == 0:
                taus += tau
        means.append(statistics.mean(n / t for t in tb) / statistics.mean(n / t for t in tp))
        pooled.append(sum(tp) / sum(tb))
        print(
            f"[bls_replay] run {r + 1}/{args.runs}: {means[-1]:.3f} (pooled {pooled[-1]:.3f})",
            file=sys.stderr,
        )
    tau_bls = statistics.mean(taus)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    batched = concurrent(rt, drt, rec.build, prompts, n, gamma, levels, args.runs) if levels else {}

    inflate = rec.reference.inflate
    lines = [
        START,
        "## The served draft-target BLS loop, run in process (a yardstick for plan's BLS model)",
        "",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({args.threads} thread(s)), Python {platform.python_version()}; load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- command: `python scripts/bench.py run bls_replay --recipe {os.path.relpath(args.recipe, REPO)} "
        f"--prompts {args.prompts} --max-tokens {n} --runs {args.runs} --threads {args.threads}"
        + (f" --concurrency {args.concurrency}`" if levels else "`"),
        f"- method: {args.prompts} prompts of the `code` workload (seed {args.seed}, as `sdtk plan` "
        f"samples them), {n} new tokens each, greedy; the target padded ×{inflate}"
        + (" (memory-bound twin)" if inflate > 1 else "")
        + f", γ = {gamma}. The BLS loop and the plain loop make the `verify_draft` calls the served "
        "models make (no Triton); speedup = the mean of per-request tok/s (bench --compare's "
        "statistic) and pooled (Σ plain time ÷ Σ BLS time), median of the runs",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| BLS loop ÷ plain loop, mean of per-request rates | **{statistics.median(means):.2f}×** "
        f"(runs: {', '.join(f'{m:.2f}' for m in means)}) |",
        f"| BLS loop ÷ plain loop, pooled | {statistics.median(pooled):.2f}× |",
        f"| τ per BLS iteration (its verify step's tokens) | {tau_bls:.2f} |",
        f"| τ per step of the in-process speculative loop (plan's probe) | {tau_generate:.2f} |",
        "",
    ]
    if batched:
        lines += [
            "Batched, as the served models run under load (one thread per concurrent request, the "
            "served batcher, each model request held in its batch):",
            "",
            "| concurrency | BLS loop ÷ plain loop, mean of per-request rates | target forwards (BLS) "
            "| of them one row |",
            "|---:|---:|---:|---:|",
        ]
        for c, m in batched.items():
            runs_text = ", ".join(f"{x:.2f}" for x in m["runs"])
            share = m["single"] / m["forwards"] if m["forwards"] else 0.0
            lines.append(
                f"| {c} | **{m['speedup']:.2f}×** (runs: {runs_text}) | {m['forwards']:.0f} "
                f"| {m['single']:.0f} ({share:.0%}) |"
            )
        lines.append("")
    lines.append(END)
    section = "\n".join(lines)
    print(section)
    if not args.no_write:
        from benchmarks import _harness

        _harness.write_section(args.out, START, END, section)
    return 0
