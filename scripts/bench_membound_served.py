#!/usr/bin/env python3
"""The memory-bound twin served: every mode's A/B against the padded baseline, and
optionally `sdtk plan`'s prediction for the same recipe beside it.

For each speculative RECIPE (default: the tiny-*-membound recipes): `sdtk bench --compare
tiny-baseline-membound RECIPE` on the embedded Triton (reference backend, both sides deployed by
sdtk, paired requests, 95% CI by paired bootstrap over requests: the CLI's own numbers), at the
given concurrency levels. With --plan, `sdtk plan RECIPE --concurrency LEVELS` (the in-process
probe) predicts the speedup at the recipe's own draft length, and the section shows
|plan − measured| ÷ measured per level. The section between the bench_membound_served markers in
docs/benchmarks.md (or --section NAME's) is replaced.

With --rounds K each level's requests run in K rounds, the two sides alternating (A B, B A, ...),
and plan predicts a closed loop of requests ÷ K (`sdtk bench --compare --rounds`).

With --repeat N the A/B (and plan) run N times per recipe, alternating, and each cell shows the
median of the runs and every run's figure: on a host whose speed drifts by 10-40% within an hour
(docs/benchmarks.md, the Zen 1 host class) one run's point estimate is not a yardstick to 10%.

    python scripts/bench_membound_served.py [RECIPE ...] [--concurrency 1] [--requests 16]
        [--max-tokens 64] [--plan] [--interleave] [--rounds K] [--repeat N] [--keep DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _bench import cpu_model, publish, sdtk  # scripts/_bench.py

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


def _keep_records(args: argparse.Namespace, name: str, ab: dict[str, Any]) -> None:
    """With --keep DIR: an A/B's per-request records (its report's requests.jsonl) as DIR/NAME,
    which its JSON summarises per level only (pooling several runs' pairs needs them)."""
    if args.keep is None:
        return
    for f in (Path(x) for x in ab.get("report_files") or []):
        if f.name == "requests.jsonl":
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, args.keep / name)


def _chance_miss(interval: dict[str, float], predicted: float, tol: float = 0.10) -> float:
    """The chance that a served point lands more than `tol` (relative to itself) from `predicted`
    when `predicted` is the true speedup and the point scatters as its own CI says (normal, the
    CI's width at its confidence): what the yardstick's width alone makes of an exact plan."""
    z = statistics.NormalDist().inv_cdf(0.5 + float(interval.get("confidence", 0.95)) / 2)
    se = (interval["hi"] - interval["lo"]) / (2 * z)
    if se <= 0:
        return 0.0 if abs(predicted - interval["point"]) <= tol * interval["point"] else 1.0
    # |predicted − S| ≤ tol·S  ⇔  predicted/(1 + tol) ≤ S ≤ predicted/(1 − tol)
    dist = statistics.NormalDist(predicted, se)
    return 1.0 - (dist.cdf(predicted / (1 - tol)) - dist.cdf(predicted / (1 + tol)))


def _compare_argv(recipe: str, args: argparse.Namespace, work: Path) -> list[str]:
    argv = ["bench", "--compare", BASELINE, recipe, "--workdir", str(work / recipe)]
    argv += ["--concurrency", args.concurrency, "--requests", str(args.requests)]
    argv += ["--max-tokens", str(args.max_tokens), "--workload", args.workload, "--json"]
    argv += ["--interleave"] if args.interleave else []
    argv += ["--rounds", str(args.rounds)] if args.rounds > 1 else []
    return argv


def _compare(recipe: str, args: argparse.Namespace, work: Path, tag: str = "") -> dict[str, Any]:
    argv = _compare_argv(recipe, args, work)
    proc = sdtk(*argv)
    _keep(args, f"{recipe}{tag}.compare.json", proc)
    ab = _json(proc, f"sdtk {' '.join(argv)}")
    _keep_records(args, f"{recipe}{tag}.requests.jsonl", ab)
    return ab


def _plan(recipe: str, args: argparse.Namespace, tag: str = "") -> dict[int, float] | None:
    from toolkit.recipe import load_recipe

    own = load_recipe(recipe).speculative.draft_len
    # Probe up to the recipe's own draft length only (the prediction compared is at that length):
    # on the padded target a probe up to γ = 8 over 24 prompts takes most of an hour.
    argv = ["plan", recipe, "--concurrency", args.concurrency, "--workload", args.workload, "--json"]
    argv += ["--gamma-max", str(max(1, own)), "--probe-prompts", str(args.probe_prompts)]
    # The A/B's closed loop, replayed with as many requests: with rounds, each round's.
    argv += ["--requests", str(args.requests // args.rounds)]
    proc = sdtk(*argv)
    _keep(args, f"{recipe}{tag}.plan.json", proc)
    data = _json(proc, f"sdtk {' '.join(argv)}")
    for p in data["predictions"]:
        if p["draft_len"] == own:
            return {int(c): float(s) for c, s in p["speedup"].items()}
    return None


def _rows(recipe: str, runs: list[tuple[dict[str, Any], dict[int, float] | None]], plan: bool) -> list[str]:
    """One table row per level: one run's figures with its CI, or, over several runs, the medians
    with each run's figure in run order (served; plan)."""
    rows = []
    for k, lv in enumerate(runs[0][0]["levels"]):
        c = int(lv["concurrency"])
        levels = [ab["levels"][k] for ab, _ in runs]
        served = [x["speedup"]["point"] for x in levels]
        point = statistics.median(served)
        if len(runs) == 1:
            s = lv["speedup"]
            cell = f"**{s['point']:.2f}×** [{s['lo']:.2f}, {s['hi']:.2f}]"
        else:
            cell = f"**{point:.2f}×** (" + ", ".join(f"{x:.2f}" for x in served) + ")"
        row = f"| {recipe} | {c} | {cell} | {sum(x['pairs'] for x in levels)} |"
        if plan:
            preds = [p[c] for _, p in runs if p is not None and c in p]
            if preds:
                pm = statistics.median(preds)
                each = "" if len(runs) == 1 else " (" + ", ".join(f"{x:.2f}" for x in preds) + ")"
                row += f" {pm:.2f}×{each} | {abs(pm - point) / point:.2f} |"
            else:
                row += " n/a | n/a |"
        rows.append(row + f" {runs[-1][0]['verdict']} |")
    return rows


def _yardstick(cells: list[tuple[dict[str, float], float]], tol: float = 0.10) -> list[str]:
    """A line on what the served measurement can resolve: how many cells an exact plan would miss
    by more than `tol` through the served CIs' own width, against how many this run's plan did."""
    if not cells:
        return []
    chance = sum(_chance_miss(iv, q, tol) for iv, q in cells)
    missed = sum(abs(q - iv["point"]) > tol * iv["point"] for iv, q in cells)
    return [
        f"- The yardstick's own width: were plan exact, the served CIs would put {chance:.1f} of these "
        f"{len(cells)} cells more than {tol:.0%} from it by chance (each point normal, its CI's width); "
        f"this run's plan misses {missed}.",
        "",
    ]


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
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="sdtk bench --compare --rounds K: each level's requests in K rounds, the sides alternating "
        "(A B, B A, ...); plan then predicts requests ÷ K per closed loop",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="run the A/B (and plan) this many times; cells show medians"
    )
    ap.add_argument(
        "--probe-prompts",
        type=int,
        default=8,
        help="sdtk plan --probe-prompts (with --plan); as many as --requests probes every request the A/B sends",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--section", default=SECTION, help="marker name of the section to replace")
    ap.add_argument(
        "--keep",
        type=Path,
        help="keep each command's JSON here (RECIPE.compare.json, RECIPE.plan.json) and each A/B's "
        "per-request records (RECIPE.requests.jsonl)",
    )
    args = ap.parse_args()
    if args.repeat < 1 or args.rounds < 1:
        ap.error("--repeat and --rounds must be at least 1")
    start, end = f"<!-- {args.section}:start -->", f"<!-- {args.section}:end -->"
    load0 = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    rows: list[str] = []
    cells: list[tuple[dict[str, float], float]] = []  # (served CI, plan) per cell, one run each
    with tempfile.TemporaryDirectory(prefix="sdtk-membound-") as tmp:
        for recipe in args.recipes:
            runs: list[tuple[dict[str, Any], dict[int, float] | None]] = []
            for i in range(args.repeat):
                tag = f".{i + 1}" if args.repeat > 1 else ""
                t0 = time.monotonic()
                ab = _compare(recipe, args, Path(tmp), tag)
                predicted = _plan(recipe, args, tag) if args.plan else None
                print(f"[membound] {recipe}{tag}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
                runs.append((ab, predicted))
            rows += _rows(recipe, runs, args.plan)
            ab, pred = runs[-1]
            if len(runs) == 1 and pred is not None:
                cells += [(lv["speedup"], pred[c]) for lv in ab["levels"] if (c := lv["concurrency"]) in pred]
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
            "## The memory-bound twin, served: every mode against the padded baseline"
            + (", and plan's prediction" if args.plan else ""),
            "",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores; load average {load0:.1f} before, "
            f"{load1:.1f} after",
            f"- date: {started:%Y-%m-%d %H:%M} UTC",
            f"- command: `{command}`",
            f"- method: `sdtk bench --compare {BASELINE} RECIPE` on the embedded Triton (reference "
            f"backend), workload `{args.workload}`, {args.requests} requests per level, "
            f"{args.max_tokens} new tokens each"
            + (", both sides level by level (`--interleave`)" if args.interleave and args.rounds == 1 else "")
            + (
                f", each level in {args.rounds} rounds of {args.requests // args.rounds} requests, the sides "
                "alternating A B, B A, ... and both deployed throughout (`--rounds`)"
                if args.rounds > 1
                else ""
            )
            + (
                f"; {args.repeat} runs per recipe (A/B then plan, in turn): each cell is the median "
                "of the runs, each run's figure in parentheses in run order, pairs summed, the verdict "
                "the last run's"
                if args.repeat > 1
                else ""
            )
            + "; speedup = the CLI's mean per-request output tok/s "
            "ratio, 95% CI by paired bootstrap over requests. Both sides run the target padded ×32 "
            "(memory-bound twin: 0.46 GB per step)."
            + (
                f" Plan: `sdtk plan RECIPE --gamma-max <the recipe's draft length> --probe-prompts "
                f"{args.probe_prompts} --requests {args.requests // args.rounds}`, in process, its prediction at the recipe's own draft length."
                if args.plan
                else ""
            ),
            "",
            head + " verdict |",
            rule + "---|",
            *rows,
            "",
            *_yardstick(cells),
            end,
        ]
    )
    publish(section, args.out, start, end, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
