#!/usr/bin/env python3
"""Plan against the served model's in-flight batcher, run in process: when plan and the served A/B
disagree, is it the cost model or the serving path?

For each RECIPE (default: tiny-eagle3-membound and tiny-ngram-membound):

1. `sdtk plan RECIPE --gamma-max <the recipe's draft length> --concurrency LEVELS` (the CLI, as
   scripts/bench_membound_served.py runs it) predicts the speedup at the recipe's own draft length.
2. The reference runtime loads the recipe and serves concurrent calls with the served model's
   in-flight batcher (`enable_batching` with the recipe's build.max_batch_size, one torch thread as
   a served instance: the very code the `tensorrt_llm` model runs, without Triton, the stub's
   threads and the responses). At each level a closed loop of c threads sends the same --requests
   workload prompts (--max-tokens new tokens each, the end id ignored), speculation off and then
   on, level by level, for --rounds rounds. Speedup = mean per-request output tok/s (output
   tokens ÷ end-to-end time) speculative ÷ plain: the CLI's definition.
3. With --served DIR (what `bench_membound_served.py --keep DIR` kept: RECIPE.compare.json or
   RECIPE.N.compare.json), the served A/B's per-level median beside them.

The section shows, per level: plan, the batched runtime in process (median over rounds, each
round's figure), |plan − batched| ÷ batched (the cost model's own error) and, with --served, the
served speedup and |served − batched| ÷ batched (what the serving path adds). Draft-target is not
offered: served, its loop is the BLS's (scripts/bench_bls_replay.py replays that in process), not
the runtime's own.

    python scripts/bench_plan_batched.py [RECIPE ...] [--concurrency 1,2,4,8] [--requests 16]
        [--rounds 2] [--probe-prompts 16] [--served DIR] [--keep DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _bench import cpu_model  # scripts/_bench.py
from bench_membound_served import _plan  # the same plan invocation as the served check

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SECTION = "bench_plan_batched"
DEFAULT = ["tiny-eagle3-membound", "tiny-ngram-membound"]


def closed_loop(rt: Any, prompts: list[list[int]], concurrency: int, speculative: bool, new: int) -> dict:
    """`concurrency` threads take the prompts in turn (a closed loop, as `sdtk bench` keeps that
    many requests in flight); per request: output tokens ÷ end-to-end seconds."""
    todo = list(range(len(prompts)))
    lock = threading.Lock()
    rates: dict[int, float] = {}
    errors: list[BaseException] = []
    iterations = rt.batcher.iterations

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                i = todo.pop(0)
            try:
                t0 = time.perf_counter()
                res = rt.generate(prompts[i], new, speculative=speculative, end_id=-1)
                rates[i] = len(res.token_ids) / (time.perf_counter() - t0)
            except BaseException as e:  # re-raised below: a failed request fails the run
                errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"bench-{k}") for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {
        "mean_tok_s": statistics.fmean(rates.values()),
        "wall_s": time.perf_counter() - t0,
        "iterations": rt.batcher.iterations - iterations,
    }


def batched(recipe: str, args: argparse.Namespace, levels: list[int]) -> dict[int, list[dict]]:
    """Per level, one record per round: the plain and speculative closed loops and their ratio."""
    import torch

    from toolkit.bench.measure.inprocess import encode, load_runtime
    from toolkit.bench.measure.workloads import load_workload
    from toolkit.recipe import load_recipe

    torch.set_num_threads(1)  # a served reference instance's (toolkit.generate.reference_threads)
    rec = load_recipe(recipe)
    rt = load_runtime(rec)
    # As the served model does (model_repo_templates/reference/tensorrt_llm/1/model.py initialize).
    rt.enable_batching(rec.build.max_batch_size, capacity=rec.build.max_seq_len + 72)
    budget = rt.max_context - args.max_tokens - 1
    prompts = [encode(rt, p.text)[-budget:] for p in load_workload(args.workload).sample(args.requests, 0)]
    rt.generate(prompts[0], 4, speculative=True, end_id=-1)  # warm-up
    out: dict[int, list[dict]] = {c: [] for c in levels}
    for r in range(args.rounds):
        for c in levels:
            plain = closed_loop(rt, prompts, c, False, args.max_tokens)
            spec = closed_loop(rt, prompts, c, True, args.max_tokens)
            out[c].append({"plain": plain, "spec": spec, "speedup": spec["mean_tok_s"] / plain["mean_tok_s"]})
            print(
                f"[batched] {recipe} round {r + 1} c={c}: {out[c][-1]['speedup']:.2f}× "
                f"({plain['wall_s']:.0f} s + {spec['wall_s']:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    rt.batcher.close()
    return out


def served_medians(directory: Path, recipe: str) -> dict[int, list[float]]:
    """Each kept `sdtk bench --compare` run's speedup per level (RECIPE.compare.json, RECIPE.N.compare.json)."""
    out: dict[int, list[float]] = {}
    for path in sorted(directory.glob(f"{recipe}*.compare.json")):
        rest = path.name[len(recipe) : -len(".compare.json")]
        if rest and not (rest.startswith(".") and rest[1:].isdigit()):
            continue  # another recipe whose name starts with this one's
        for lv in json.loads(path.read_text())["levels"]:
            out.setdefault(int(lv["concurrency"]), []).append(float(lv["speedup"]["point"]))
    return out


def rows(
    recipe: str, plan: dict[int, float] | None, runs: dict[int, list[dict]], served: dict[int, list[float]]
) -> list[str]:
    """One table row per level: plan, the batched runtime (median, each round), served (median, each run)."""
    lines = []
    for c, recs in runs.items():
        each = [x["speedup"] for x in recs]
        b = statistics.median(each)
        p = (plan or {}).get(c)
        row = f"| {recipe} | {c} | " + (f"{p:.2f}× | " if p else "n/a | ")
        row += f"**{b:.2f}×** (" + ", ".join(f"{x:.2f}" for x in each) + ") | "
        row += f"{abs(p - b) / b:.2f} |" if p else "n/a |"
        s = served.get(c)
        if s:
            sm = statistics.median(s)
            row += f" {sm:.2f}× (" + ", ".join(f"{x:.2f}" for x in s) + f") | {abs(sm - b) / b:.2f} |"
        else:
            row += " n/a | n/a |"
        lines.append(row)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", default=DEFAULT)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workload", default="code")
    ap.add_argument("--probe-prompts", type=int, default=16, help="sdtk plan --probe-prompts")
    ap.add_argument("--served", type=Path, help="bench_membound_served.py --keep DIR: the served A/B beside")
    ap.add_argument("--keep", type=Path, help="keep RECIPE.plan.json and RECIPE.batched.json here")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    from toolkit.recipe import load_recipe

    for recipe in args.recipes:
        mode = load_recipe(recipe).speculative.mode
        if mode not in ("eagle3", "ngram", "medusa", "lookahead"):
            ap.error(
                f"{recipe}: mode {mode} is served through the BLS loop (scripts/bench_bls_replay.py), not here"
            )
    load0 = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    table: list[str] = []
    for recipe in args.recipes:
        plan = _plan(recipe, args)
        runs = batched(recipe, args, levels)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / f"{recipe}.batched.json").write_text(json.dumps(runs, indent=2))
        table += rows(recipe, plan, runs, served_medians(args.served, recipe) if args.served else {})
    load1 = os.getloadavg()[0]
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    section = "\n".join(
        [
            start,
            "## Plan against the in-flight batcher in process: the cost model's error apart from the serving path's (issue 27)",
            "",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores; load average {load0:.1f} before, {load1:.1f} after",
            f"- date: {started:%Y-%m-%d %H:%M} UTC",
            f"- command: `python scripts/bench_plan_batched.py {' '.join(sys.argv[1:])}`",
            f"- method: plan as `sdtk plan RECIPE --gamma-max <the recipe's draft length> --probe-prompts "
            f"{args.probe_prompts}`; batched: the reference runtime with the served model's in-flight batcher, "
            f"in process, 1 torch thread, a closed loop of c threads over the same {args.requests} `{args.workload}` "
            f"prompts, {args.max_tokens} new tokens each, speculation off then on at each level, {args.rounds} "
            "round(s) (cell: the median, each round's figure in parentheses); speedup = mean per-request output "
            "tok/s ratio"
            + (
                f"; served: the `sdtk bench --compare` runs kept in `{args.served}` (median, each run's figure)"
                if args.served
                else ""
            )
            + ".",
            "",
            "| recipe | c | plan | batched in process | abs(plan − batched) ÷ batched | served | abs(served − batched) ÷ batched |",
            "|---|---:|---:|---|---:|---|---:|",
            *table,
            "",
            end,
        ]
    )
    print(section)
    if not args.no_write:
        from toolkit._fs import replace_section

        replace_section(args.out, start, end, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
