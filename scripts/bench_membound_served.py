#!/usr/bin/env python3
"""The memory-bound twin served: every mode's A/B against the padded baseline (issue 27), and
optionally `sdtk plan`'s prediction for the same recipe beside it.

For each speculative RECIPE (default: the tiny-*-membound recipes): `sdtk bench --compare
tiny-baseline-membound RECIPE` on the embedded Triton (reference backend, both sides deployed by
sdtk, paired requests, 95% CI by paired bootstrap over requests: the CLI's own numbers), at the
given concurrency levels. With --plan, `sdtk plan RECIPE --concurrency LEVELS` (the in-process
probe) predicts the speedup at the recipe's own draft length, and the section shows
|plan − measured| ÷ measured per level. The section between the bench_membound_served markers in
docs/benchmarks.md (or --section NAME's) is replaced.

    python scripts/bench_membound_served.py [RECIPE ...] [--concurrency 1] [--requests 16]
        [--max-tokens 64] [--plan] [--interleave] [--keep DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _bench import cpu_model, sdtk  # scripts/_bench.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SECTION = "bench_membound_served"  # --section names another marked section (e.g. a --plan run)
BASELINE = "tiny-baseline-membound"
DEFAULT = [
    "tiny-ngram-membound",
    "tiny-lookahead-membound",
    "tiny-eagle3-membound",
    "tiny-eagle3-tree-membound",
    "tiny-draft-target-membound",
    "tiny-medusa-membound",
]


def _json(proc: Any, what: str) -> dict[str, Any]:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def _keep(args: argparse.Namespace, name: str, proc: Any) -> None:
    """With --keep DIR: the command's JSON as DIR/NAME, for a later look at the same run."""
    if args.keep is not None and proc.returncode == 0:
        args.keep.mkdir(parents=True, exist_ok=True)
        (args.keep / name).write_text(proc.stdout)


def _compare(recipe: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    argv = ["bench", "--compare", BASELINE, recipe, "--workdir", str(work / recipe)]
    argv += ["--concurrency", args.concurrency, "--requests", str(args.requests)]
    argv += ["--max-tokens", str(args.max_tokens), "--workload", args.workload, "--json"]
    argv += ["--interleave"] if args.interleave else []
    proc = sdtk(*argv)
    _keep(args, f"{recipe}.compare.json", proc)
    return _json(proc, f"sdtk {' '.join(argv)}")


def _plan(recipe: str, args: argparse.Namespace) -> dict[int, float] | None:
    from toolkit.recipe import load_recipe

    own = load_recipe(recipe).speculative.draft_len
    # Probe up to the recipe's own draft length only (the prediction compared is at that length):
    # on the padded target a probe up to γ = 8 over 24 prompts takes most of an hour.
    argv = ["plan", recipe, "--concurrency", args.concurrency, "--workload", args.workload, "--json"]
    argv += ["--gamma-max", str(max(1, own)), "--probe-prompts", str(args.probe_prompts)]
    proc = sdtk(*argv)
    _keep(args, f"{recipe}.plan.json", proc)
    data = _json(proc, f"sdtk {' '.join(argv)}")
    for p in data["predictions"]:
        if p["draft_len"] == own:
            return {int(c): float(s) for c, s in p["speedup"].items()}
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", default=DEFAULT)
    ap.add_argument("--concurrency", default="1")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--workload", default="code")
    ap.add_argument("--plan", action="store_true", help="also run sdtk plan and show its error")
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="sdtk bench --compare --interleave: both sides level by level",
    )
    ap.add_argument("--probe-prompts", type=int, default=8, help="sdtk plan --probe-prompts (with --plan)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--section", default=SECTION, help="marker name of the section to replace")
    ap.add_argument(
        "--keep", type=Path, help="keep each command's JSON here (RECIPE.compare.json, RECIPE.plan.json)"
    )
    args = ap.parse_args()
    start, end = f"<!-- {args.section}:start -->", f"<!-- {args.section}:end -->"
    load0 = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sdtk-membound-") as tmp:
        for recipe in args.recipes:
            t0 = time.monotonic()
            ab = _compare(recipe, args, Path(tmp))
            predicted = _plan(recipe, args) if args.plan else None
            print(f"[membound] {recipe}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
            for lv in ab["levels"]:
                s = lv["speedup"]
                c = int(lv["concurrency"])
                row = f"| {recipe} | {c} | **{s['point']:.2f}×** [{s['lo']:.2f}, {s['hi']:.2f}] | {lv['pairs']} |"
                if args.plan:
                    p = (predicted or {}).get(c)
                    err = f"{abs(p - s['point']) / s['point']:.2f}" if p is not None else "n/a"
                    row += f" {p:.2f}× | {err} |" if p is not None else " n/a | n/a |"
                rows.append(row + f" {ab['verdict']} |")
    load1 = os.getloadavg()[0]
    command = "python scripts/bench_membound_served.py " + " ".join(sys.argv[1:])
    head = "| recipe | concurrency | served speedup [95% CI] | pairs |"
    rule = "|---|---:|---|---:|"
    if args.plan:
        head += " plan predicts | abs(plan − measured) ÷ measured |"
        rule += "---:|---:|"
    section = "\n".join(
        [
            start,
            "## The memory-bound twin, served: every mode against the padded baseline (issue 27)"
            + (", and plan's prediction" if args.plan else ""),
            "",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores; load average {load0:.1f} before, "
            f"{load1:.1f} after",
            f"- date: {started:%Y-%m-%d %H:%M} UTC",
            f"- command: `{command}`",
            f"- method: `sdtk bench --compare {BASELINE} RECIPE` on the embedded Triton (reference "
            f"backend), workload `{args.workload}`, {args.requests} requests per level, "
            f"{args.max_tokens} new tokens each"
            + (", both sides level by level (`--interleave`)" if args.interleave else "")
            + "; speedup = the CLI's mean per-request output tok/s "
            "ratio, 95% CI by paired bootstrap over requests. Both sides run the target padded ×32 "
            "(memory-bound twin: 0.46 GB per step)."
            + (
                f" Plan: `sdtk plan RECIPE --gamma-max <the recipe's draft length> --probe-prompts "
                f"{args.probe_prompts}`, in process, its prediction at the recipe's own draft length."
                if args.plan
                else ""
            ),
            "",
            head + " verdict |",
            rule + "---|",
            *rows,
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
