#!/usr/bin/env python3
"""The batch dimension of `sdtk plan` against measurement, and `sdtk tune`'s draft_len_schedule
checked on a live server (reference backend, in-flight batching, CPU).

1. Plan: `sdtk plan`'s predicted speedup per concurrency for the speculative recipe's own setting
   (probe in process: acceptance, step times, batched forward times), beside the speedup
   `sdtk bench --compare` measured on the served deployments at the same levels.
2. Tune: `sdtk tune RECIPE --method redeploy` sweeps fixed draft lengths at each level, writes the
   best per level as a draft_len_schedule, deploys that schedule and measures it; the goal is
   >= 0.95 of the best fixed setting at every level.

Writes its section of docs/lab/benchmarks-history.md.

    python scripts/bench.py run schedule [--recipe tiny-eagle3] [--max-batch-size 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
START, END = "<!-- bench_schedule:start -->", "<!-- bench_schedule:end -->"
PNG = ROOT / "docs" / "schedule.png"
DOC = ROOT / "docs" / "lab" / "benchmarks-history.md"  # its section; PNG is linked as ../schedule.png


def _batching():
    """The batching benchmark (its recipe copies, A/B runner and machine facts)."""
    from benchmarks import batching

    return batching


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def predicted(recipe_path: Path, levels: list[int]) -> dict:
    from toolkit.bench.api import plan
    from toolkit.recipe import load_recipe

    rec = load_recipe(recipe_path)
    p = plan(rec, workload="code", probe_prompts=12, concurrency=levels, progress=False)
    g = rec.speculative.max_draft_len
    own = p.prediction_for(g)
    assert own is not None, f"plan made no prediction for max_draft_len={g}"
    return {"draft_len": g, "speedup": {c: own.speedup[c] for c in levels}, "notes": p.notes}


def tune_check(recipe_path: Path, levels: list[int], draft_lens: str, requests: int, tmp: str) -> dict:
    argv = [
        "tune", str(recipe_path), "--method", "redeploy", "--draft-lens", draft_lens,
        "--concurrency", ",".join(map(str, levels)), "--requests", str(requests),
        "--report-dir", str(Path(tmp) / "tune"), "--json",
    ]  # fmt: skip
    p = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sdtk"), *argv],
        cwd=tmp,  # tune deploys under ./workdir
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if p.returncode != 0:
        raise SystemExit(f"sdtk tune failed: {p.stderr.strip()[-2000:]}")
    out = json.loads(p.stdout)
    out["command"] = "sdtk " + " ".join(argv).replace(tmp, "<tmp>")
    return out


def plot(pred: dict, abr: dict, tune: dict) -> None:
    """docs/schedule.png: plan's predicted speedup beside the measured one (95% CI), and tune's
    fixed draft lengths beside the deployed schedule, per concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._harness import save_png, speedup_axes

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    cs = [int(c) for c in pred["speedup"]]
    left.plot(cs, list(pred["speedup"].values()), marker="s", ls="--", label="plan (predicted)")
    meas = {lv["concurrency"]: (lv.get("speedup") or {}) for lv in abr["levels"]}
    mc = [c for c in cs if meas.get(c)]
    pts = [meas[c]["point"] for c in mc]
    err = [
        [p - meas[c]["lo"] for p, c in zip(pts, mc, strict=True)],
        [meas[c]["hi"] - p for p, c in zip(pts, mc, strict=True)],
    ]
    left.errorbar(mc, pts, yerr=err, marker="o", capsize=3, label="bench --compare (measured, 95% CI)")
    speedup_axes(left, f"{abr['names'][1]} (γ = {pred['draft_len']}) ÷ {abr['names'][0]}", cs)
    left.set_ylabel("speedup")
    left.legend(fontsize=8)
    levels = sorted({cell["concurrency"] for cell in tune["cells"]})
    for label in dict.fromkeys(cell["label"] for cell in tune["cells"]):
        row = {
            cell["concurrency"]: cell["speedup"]["point"] for cell in tune["cells"] if cell["label"] == label
        }
        right.plot(
            levels, [row.get(c, float("nan")) for c in levels], marker=".", alpha=0.7, label=f"fixed {label}"
        )
    check = {int(c): v for c, v in (tune.get("schedule_check") or {}).items()}
    if check:
        sc = sorted(check)
        right.plot(
            sc, [check[c]["scheduled"] for c in sc], marker="o", lw=2.5, color="black", label="tuned schedule"
        )
    speedup_axes(right, "sdtk tune: fixed draft lengths and the deployed schedule", levels)
    right.set_ylabel("speedup over the baseline")
    right.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, PNG)
    plt.close(fig)


def write_section(
    pred: dict, abr: dict, tune: dict, cmd: str, load: tuple, mbs: int, date: str | None = None
) -> None:
    import torch

    bb = _batching()
    measured = {lv["concurrency"]: (lv.get("speedup") or {}) for lv in abr["levels"]}
    lines = [
        START,
        "## `sdtk plan`'s batch dimension and `sdtk tune`'s schedule, against measurement",
        "",
        f"- machine: {bb.cpu_model()}, {len(os.sched_getaffinity(0))} cores, torch {torch.__version__}; "
        f"load average {load[0][0]:.1f} before, {load[1][0]:.1f} after",
        f"- command: `{cmd}`",
        f"- date: {date or now()}; recipes = recipes/*.yaml with build.max_batch_size {mbs}",
        "",
        f"### Predicted (plan, in process) and measured (bench --compare, served) speedup of "
        f"{abr['names'][1]} (γ = {pred['draft_len']}) over {abr['names'][0]}",
        "",
        f"Measured: `{abr['command']}`.",
        "",
        "| concurrency | predicted | measured (95% CI) |",
        "|---|---|---|",
    ]
    for c, s in pred["speedup"].items():
        m = measured.get(c, {})
        lines.append(
            f"| {c} | {s:.2f}× | {m.get('point', float('nan')):.2f}× "
            f"[{m.get('lo', float('nan')):.2f}, {m.get('hi', float('nan')):.2f}] |"
        )
    lines += ["", *[f"- plan: {n}" for n in pred["notes"]]]
    lines += [
        "",
        "### The tuned draft_len_schedule on a live server",
        "",
        f"`{tune['command']}`: fixed draft lengths {tune['draft_lens']} at each level, then the schedule "
        f"{tune.get('schedule')} made valid for TensorRT-LLM (entry 1 = max_draft_len) and deployed.",
        "",
        "Each level's best fixed setting is deployed and measured again after the schedule, at the "
        "levels it won: its sweep cell won as the highest of several noisy ones, so it reads high; "
        "the ratio pairs the schedule with that fresh run over the same requests (a level whose "
        "fresh run failed falls back on the sweep cell, marked *sweep*).",
        "",
        "| concurrency | schedule | best fixed, in the sweep | best fixed, again | schedule ÷ best fixed [95% CI] |",
        "|---|---|---|---|---|",
    ]
    from toolkit.bench.report import schedule_ratio_source

    for c, v in sorted(tune.get("schedule_check", {}).items(), key=lambda kv: int(kv[0])):
        ratio, ci, again = v["ratio"], v.get("ratio_ci") or {}, v.get("best_fixed_again")
        paired = schedule_ratio_source(v) == "paired"
        lines.append(
            f"| {c} | {v['scheduled']:.2f}× | {v['best_fixed_label']} {v['best_fixed']:.2f}× | "
            + (f"{again:.2f}× | " if again is not None else "- | ")
            + (f"{ratio:.2f}" if ratio is not None else "-")
            + (
                f" [{ci['lo']:.2f}, {ci['hi']:.2f}]"
                if paired and None not in (ci.get("lo"), ci.get("hi"))
                else ""
            )
            + (" |" if paired else " (*sweep*) |")
        )
    holds = tune.get("schedule_holds")
    lines += [
        "",
        "Goal: the schedule reaches ≥ 0.95 of the best fixed setting at every level → "
        + (
            "**met**." if holds else "**not met**." if holds is False else "not measured (no valid schedule)."
        ),
        "",
        f"![plan against measurement, and the tuned schedule against fixed draft lengths](../{PNG.name})",
        END,
    ]
    plot(pred, abr, tune)
    from benchmarks import _harness

    _harness.write_section(DOC, START, END, "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="tiny-baseline")
    ap.add_argument("--recipe", default="tiny-eagle3")
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--max-batch-size", type=int, default=16)
    ap.add_argument("--requests", type=int, default=24, help="per level, A/B and tune")
    ap.add_argument("--draft-lens", default="1,2,3", help="tune's fixed draft lengths")
    ap.add_argument(
        "--render", type=Path, help="only rewrite the section and plot from a raw results file of a run"
    )
    args = ap.parse_args(argv)
    if args.render:
        raw = json.loads(args.render.read_text())
        pred = raw["plan"]
        pred["speedup"] = {int(c): v for c, v in pred["speedup"].items()}
        write_section(pred, raw["ab"], raw["tune"], raw["command"], raw["load"], raw["mbs"], raw["date"])
        return
    levels = [int(x) for x in args.levels.split(",")]
    bb = _batching()
    before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        spec = bb.recipe_copy(args.recipe, Path(tmp), args.max_batch_size)
        pred = predicted(spec, levels)
        print(json.dumps(pred), file=sys.stderr)
        abr = bb.ab(args.baseline, args.recipe, levels, args.requests, args.max_batch_size)
        tune = tune_check(spec, levels, args.draft_lens, args.requests, tmp)
    after = os.getloadavg()
    raw = Path(tempfile.gettempdir()) / "bench_schedule.json"
    cmd, date = "python " + " ".join(sys.argv), now()
    facts = {"command": cmd, "load": [before, after], "mbs": args.max_batch_size, "date": date}
    raw.write_text(json.dumps({"plan": pred, "ab": abr, "tune": tune, **facts}, default=str, indent=1))
    write_section(pred, abr, tune, cmd, (before, after), args.max_batch_size, date)
    print(f"raw results: {raw}", file=sys.stderr)
