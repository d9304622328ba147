#!/usr/bin/env python
"""In-process speedup of recipes at their shipped settings against target-only decoding.

Each RECIPE (a path or bundled name, optionally followed by `:FIELD=VALUE[;FIELD=VALUE]`
overrides, e.g. `tiny-draft-target:speculative.max_draft_len=2`) runs in the reference runtime
on the fixed code prompts of `toolkit.reference.prompts`, interleaved with the baseline in the
same process: the baseline generates every prompt right before every recipe does (paired per
prompt), --runs rounds after a warm-up; speedup = Σ baseline time ÷ Σ recipe time. The numbers
stated in the tiny recipes' headers come from this script; it writes its section of docs/benchmarks.md between the bench_recipes markers.

    python scripts/bench.py run recipes [RECIPE ...] [--runs 5] [--new-tokens 96] [--threads 1]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from toolkit.recipe import load_recipe
from toolkit.reference import PLAIN, ReferenceRuntime
from toolkit.reference.prompts import PROMPTS

REPO = Path(__file__).resolve().parents[2]
START, END = "<!-- bench_recipes:start -->", "<!-- bench_recipes:end -->"
# Recipes on the memory-bound twin (reference.inflate > 1) get their own section.
TWIN_START, TWIN_END = "<!-- bench_recipes_membound:start -->", "<!-- bench_recipes_membound:end -->"
DEFAULT = ["tiny-ngram", "tiny-lookahead", "tiny-eagle3", "tiny-draft-target", "tiny-medusa"]


def _parse(ref: str) -> tuple[str, list[str]]:
    name, _, sets = ref.partition(":")
    return name, [s for s in sets.split(";") if s]


def _local(recipe: Any, role: str) -> Path | None:
    src = getattr(recipe.models, role)
    return recipe.local_path(src) if src is not None else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipes", nargs="*", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="first N of the code prompts")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs alone")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    recipes = {ref: load_recipe(*_parse(ref)) for ref in args.recipes}
    targets = {_local(r, "target") for r in recipes.values()}
    if len(targets) != 1:
        ap.error(f"the recipes must share one target, got {sorted(map(str, targets))}")
    inflates = {r.reference.inflate for r in recipes.values()}
    if len(inflates) != 1:
        ap.error(f"the recipes must share one reference.inflate, got {sorted(inflates)}")
    heads: dict[str, Path | None] = {"draft": None, "medusa_heads": None, "eagle_head": None}
    for r in recipes.values():
        for role in heads:
            path = _local(r, role)
            if path is not None and heads[role] not in (None, path):
                ap.error(f"the recipes must share one {role}, got {heads[role]} and {path}")
            heads[role] = heads[role] or path
    rt = ReferenceRuntime.load(
        targets.pop(),
        {"draft": heads["draft"], "medusa_heads": heads["medusa_heads"], "eagle_head": heads["eagle_head"]},
        inflate=inflates.pop(),
    )
    if rt.twin_label:
        print(f"[bench_recipes] {rt.twin_label}", file=sys.stderr)
    prompts = [rt.tokenizer(p)["input_ids"] for p in PROMPTS[: args.prompts]]
    n = args.new_tokens
    stats: dict[str, tuple[float, float]] = {}

    # Paired at the finest grain: for every round, prompt and recipe, the baseline generates the
    # prompt right before the recipe does, so load from other processes (a shared machine) falls
    # on both sides of each pair alike. Speedup = Σ baseline time ÷ Σ recipe time over all pairs
    # (both generate exactly n tokens per prompt).
    rt.generate(prompts[0], n, spec=PLAIN, end_id=-1)  # warm-up
    for r in recipes.values():
        rt.generate(prompts[0], n, spec=r.speculative, end_id=-1)
    base_t: dict[str, list[float]] = {ref: [0.0] * args.runs for ref in recipes}
    spec_t: dict[str, list[float]] = {ref: [0.0] * args.runs for ref in recipes}
    acc: dict[str, list[int]] = {ref: [0, 0, 0, 0] for ref in recipes}  # accepted, proposed, tokens, steps
    for i in range(args.runs):
        for ids in prompts:
            for ref, r in recipes.items():
                t = time.perf_counter()
                rt.generate(ids, n, spec=PLAIN, end_id=-1)
                t1 = time.perf_counter()
                g = rt.generate(ids, n, spec=r.speculative, end_id=-1)
                t2 = time.perf_counter()
                base_t[ref][i] += t1 - t
                spec_t[ref][i] += t2 - t1
                if i == 0:
                    a = acc[ref]
                    a[0] += g.stats.accepted_tokens
                    a[1] += g.stats.draft_tokens
                    a[2] += len(g.token_ids)
                    a[3] += g.stats.steps
        print(f"[bench_recipes] round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    total_tokens = n * len(prompts) * args.runs
    tps = {"baseline": total_tokens * len(recipes) / sum(sum(v) for v in base_t.values())}
    for ref in recipes:
        tps[ref] = total_tokens / sum(spec_t[ref])
        a = acc[ref]
        stats[ref] = (a[0] / a[1] if a[1] else 0.0, a[2] / max(a[3], 1))
    speedup = {ref: sum(base_t[ref]) / sum(spec_t[ref]) for ref in recipes}
    per_round = {ref: sorted(b / s for b, s in zip(base_t[ref], spec_t[ref], strict=True)) for ref in recipes}
    load = os.getloadavg()[0]
    section = _section(args, recipes, tps, speedup, stats, per_round, load, len(prompts), rt.twin_label)
    print(section)
    if not args.no_write:
        _write(args.out, section, twin=rt.twin_label is not None)
    return 0


def _settings(recipe: Any) -> str:
    s = recipe.speculative
    if s.mode == "lookahead":
        return f"(W,N,G) = ({s.window},{s.ngram},{s.verification_set})"
    if s.mode == "medusa":
        return f"tree {len(s.choices)} nodes"
    if s.mode == "eagle3" and s.eagle_choices:
        return f"tree {len(s.eagle_choices)} nodes"
    return f"γ = {s.max_draft_len}"


def _section(
    args: argparse.Namespace,
    recipes: dict[str, Any],
    tps: dict[str, float],
    speedup: dict[str, float],
    stats: dict[str, tuple[float, float]],
    per_round: dict[str, list[float]],
    load: float,
    prompts: int,
    twin: str | None = None,
) -> str:
    refs = " ".join(args.recipes)
    lines = [
        TWIN_START if twin else START,
        "## Tiny recipes at their shipped settings (in-process, CPU)"
        + (", on the memory-bound twin" if twin else ""),
        "",
        *([f"**{twin}** (toolkit.membound; the baseline is the padded target too).", ""] if twin else []),
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores **shared with other engineers' tests and benchmarks** (load average "
        f"{load:.1f} at the end), torch {torch.__version__} ({args.threads} thread(s)), float32, batch 1, greedy.",
        "",
        "```",
        f"python scripts/bench.py run recipes {refs} --runs {args.runs} --new-tokens {args.new_tokens}"
        + (f" --prompts {prompts}" if prompts != len(PROMPTS) else "")
        + f" --threads {args.threads}",
        "```",
        "",
        f"{prompts} code prompts × {args.new_tokens} new tokens (EOS ignored), {args.runs} rounds after a warm-up; "
        "in one process, the target-only baseline generates each prompt right before each recipe does (paired "
        "per prompt, so load from other processes falls on both alike); speedup = Σ baseline time ÷ Σ recipe "
        "time over all pairs, the range is the lowest and highest per-round ratio. Tokens/s are under that "
        "load (compare ratios, not absolute numbers). α = accepted ÷ proposed draft tokens (trees count every "
        "node), τ = tokens per target forward.",
        "",
        "| recipe | mode | settings | tokens/s | speedup | per-round range | α | τ |",
        "|---|---|---|---:|---:|---|---:|---:|",
        f"| target only (baseline) | none | – | {tps['baseline']:.1f} | 1.00× | – | – | 1.00 |",
    ]
    for ref, r in recipes.items():
        alpha, tau = stats[ref]
        lo, hi = per_round[ref][0], per_round[ref][-1]
        lines.append(
            f"| {ref} | {r.speculative.mode} | {_settings(r)} | {tps[ref]:.1f} | "
            f"**{speedup[ref]:.2f}×** | {lo:.2f}–{hi:.2f} | {alpha:.2f} | {tau:.2f} |"
        )
    lines += ["", TWIN_END if twin else END]
    return "\n".join(lines)


def _write(path: Path, section: str, twin: bool = False) -> None:
    from benchmarks import _harness

    _harness.write_section(path, *((TWIN_START, TWIN_END) if twin else (START, END)), section)
