#!/usr/bin/env python
"""In-process speedup of recipes at their shipped settings against target-only decoding.

Each RECIPE (a path or bundled name, optionally followed by `:FIELD=VALUE[;FIELD=VALUE]`
overrides, e.g. `tiny-draft-target:speculative.max_draft_len=2`) runs in the reference runtime
on the fixed code prompts of `toolkit.reference.prompts`, interleaved with the baseline in the
same process: one warm-up round, then --runs rounds of every contender; the speedup is the
median tokens/s ÷ the baseline's median. The numbers stated in the tiny recipes' headers come
from this script; it writes its section of docs/benchmarks.md between the bench_recipes markers.

    python scripts/bench_recipes.py [RECIPE ...] [--runs 5] [--new-tokens 96] [--threads 1]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from toolkit.recipe import load_recipe
from toolkit.reference import ReferenceRuntime
from toolkit.reference.prompts import PROMPTS

REPO = Path(__file__).resolve().parents[1]
START, END = "<!-- bench_recipes:start -->", "<!-- bench_recipes:end -->"
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
    heads: dict[str, Path | None] = {"draft": None, "medusa_heads": None, "eagle_head": None}
    for r in recipes.values():
        for role in heads:
            path = _local(r, role)
            if path is not None and heads[role] not in (None, path):
                ap.error(f"the recipes must share one {role}, got {heads[role]} and {path}")
            heads[role] = heads[role] or path
    rt = ReferenceRuntime.load(
        targets.pop(), draft=heads["draft"], medusa=heads["medusa_heads"], eagle3=heads["eagle_head"]
    )
    prompts = [rt.tokenizer(p)["input_ids"] for p in PROMPTS[: args.prompts]]
    n = args.new_tokens
    stats: dict[str, tuple[float, float]] = {}

    def contender(name: str, spec: Any, speculative: bool = True) -> Callable[[], int]:
        def run() -> int:
            total = accepted = proposed = steps = 0
            for ids in prompts:
                r = rt.generate(ids, n, spec=spec, speculative=speculative, end_id=-1)
                total += len(r.token_ids)
                accepted += r.stats.accepted_tokens
                proposed += r.stats.draft_tokens
                steps += r.stats.steps
            stats[name] = (accepted / proposed if proposed else 0.0, total / max(steps, 1))
            return total

        return run

    contenders = {"baseline": contender("baseline", None, speculative=False)}
    contenders.update({ref: contender(ref, r.speculative) for ref, r in recipes.items()})
    tokens = {name: fn() for name, fn in contenders.items()}  # warm-up round
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(args.runs):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        print(f"[bench_recipes] round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    tps = {name: tokens[name] / statistics.median(ts) for name, ts in times.items()}
    # Per round ratio against the baseline of the same round: its spread says how noisy the machine was.
    per_round = {
        name: sorted(times["baseline"][i] / ts[i] for i in range(args.runs)) for name, ts in times.items()
    }
    load = os.getloadavg()[0]
    section = _section(args, recipes, tps, stats, per_round, load, len(prompts))
    print(section)
    if not args.no_write:
        _write(args.out, section)
        print(f"wrote {args.out}", file=sys.stderr)
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
    stats: dict[str, tuple[float, float]],
    per_round: dict[str, list[float]],
    load: float,
    prompts: int,
) -> str:
    refs = " ".join(args.recipes)
    lines = [
        START,
        "## Tiny recipes at their shipped settings (in-process, CPU)",
        "",
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores **shared with other engineers' tests and benchmarks** (load average "
        f"{load:.1f} at the end), torch {torch.__version__} ({args.threads} thread(s)), float32, batch 1, greedy.",
        "",
        "```",
        f"python scripts/bench_recipes.py {refs} --runs {args.runs} --new-tokens {args.new_tokens}"
        + (f" --prompts {prompts}" if prompts != len(PROMPTS) else "")
        + f" --threads {args.threads}",
        "```",
        "",
        f"{prompts} code prompts × {args.new_tokens} new tokens (EOS ignored); every recipe interleaved with the "
        f"target-only baseline in one process, one warm-up round then {args.runs} rounds; speedup = median tokens/s "
        "÷ the baseline's median; the range is the lowest and highest per-round ratio (the baseline of the same "
        "round as the anchor). α = accepted ÷ proposed draft tokens, τ = tokens per target forward.",
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
            f"**{tps[ref] / tps['baseline']:.2f}×** | {lo:.2f}–{hi:.2f} | {alpha:.2f} | {tau:.2f} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def _write(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".incomplete")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
