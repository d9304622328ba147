#!/usr/bin/env python
"""CPU showcase of `sdtk train-draft`: train the tiny family's draft for a workload the shipped one
does poorly on, then measure whether it helped.

For each RECIPE (default: tiny-eagle3 and tiny-draft-target) on --workload (default: chat, which the
stdlib-trained family has never seen):
1. `sdtk train-draft RECIPE --data WORKLOAD --out OUT/<recipe> --max-minutes M` (its own process);
2. hold-out acceptance per position and τ before and after, from its train_report.json (plan's code);
3. the in-process speedup on the hold-out prompts before and after: one reference runtime per side,
   interleaved per prompt with target-only decoding (baseline, shipped, trained) for --runs rounds;
   speedup = Σ baseline time ÷ Σ side time, median of the per-round ratios also given;
4. with --served, `sdtk bench --compare RECIPE OVERLAY` on the embedded Triton (reference backend),
   hold-out prompts, concurrency 1: the trained side's speedup over the shipped one with its 95% CI.
The machine's 1-minute load average is recorded at the start and end of every phase. Writes its
section of docs/benchmarks.md between the bench_train_draft markers.

    python scripts/bench.py run train_draft [RECIPE ...] [--workload chat] [--max-minutes 10] [--served]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from benchmarks._harness import cpu_model  # noqa: E402

START, END = "<!-- bench_train_draft:start -->", "<!-- bench_train_draft:end -->"
DEFAULT = ["tiny-eagle3", "tiny-draft-target"]


def sdtk(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    """This checkout's sdtk (python -m toolkit.cli from the repository root)."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipes", nargs="*", default=DEFAULT)
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--out", type=Path, default=REPO / "workdir" / "bench_train_draft")
    ap.add_argument("--max-minutes", type=float, default=10.0)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--from-shipped", action="store_true", help="fine-tune the shipped head/draft (--from)")
    ap.add_argument("--train-args", default="", help="extra train-draft arguments, space-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the in-process timing")
    ap.add_argument("--served", action="store_true", help="also sdtk bench --compare on the embedded Triton")
    ap.add_argument("--requests", type=int, default=36)
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for name in args.recipes:
        rows.append(run_one(name, args))
    section = render(args, rows)
    print(section)
    if not args.no_write:
        from benchmarks import _harness

        _harness.write_section(args.doc, START, END, section)
    return 0


def run_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from toolkit.recipe import load_recipe

    rec = load_recipe(name)
    out = args.out / name
    cmd = ["train-draft", name, "--data", args.workload, "--out", str(out), "--json"]
    cmd += ["--max-minutes", str(args.max_minutes), "--max-steps", str(args.max_steps)]
    if args.from_shipped:
        field = {"eagle3": "eagle_head", "draft_target": "draft", "medusa": "medusa_heads"}[
            rec.speculative.mode
        ]
        src = rec.local_path(getattr(rec.models, field))
        cmd += ["--from", os.path.relpath(src, REPO) if src.is_relative_to(REPO) else str(src)]
    cmd += args.train_args.split()
    l0, t0 = load1(), time.monotonic()
    print(f"[bench_train_draft] sdtk {' '.join(cmd)}", file=sys.stderr, flush=True)
    r = sdtk(*cmd)
    if r.returncode != 0:
        raise SystemExit(f"train-draft failed ({r.returncode}): {r.stderr[-3000:]}")
    report = json.loads((out / "train_report.json").read_text())
    row: dict[str, Any] = {
        "recipe": name,
        # as the docs show it: paths under the repository relative to it, no build machine's paths
        "command": "sdtk " + " ".join(cmd).replace(str(REPO) + os.sep, ""),
        "report": report,
        "wall_s": round(time.monotonic() - t0, 1),
        "load_train": (l0, load1()),
    }
    row["inprocess"] = inprocess(rec, Path(report["overlay"]), Path(report["data"]["holdout_file"]), args)
    if args.served:
        row["served"] = served(name, report, args)
    return row


def inprocess(rec: Any, overlay: Path, holdout: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from toolkit.recipe import load_recipe
    from toolkit.reference import PLAIN, ReferenceRuntime

    torch.set_num_threads(args.threads)
    l0 = load1()

    def runtime(r: Any) -> Any:
        m = r.models
        p = r.local_path
        return ReferenceRuntime.load(
            p(m.target),
            {
                "draft": p(m.draft) if m.draft else None,
                "medusa_heads": p(m.medusa_heads) if m.medusa_heads else None,
                "eagle_head": p(m.eagle_head) if m.eagle_head else None,
            },
        )

    new = load_recipe(overlay)
    rt_old, rt_new = runtime(rec), runtime(new)
    texts = [json.loads(x)["prompt"] for x in holdout.read_text().splitlines() if x.strip()]
    budget = rt_old.max_context - args.new_tokens - 1
    prompts = [rt_old.tokenizer(t)["input_ids"][-budget:] for t in texts]
    n = args.new_tokens
    for rt, r in ((rt_old, rec), (rt_new, new)):  # warm-up
        rt.generate(prompts[0], n, spec=PLAIN, end_id=-1)
        rt.generate(prompts[0], n, spec=r.speculative, end_id=-1)
    t_base, t_old, t_new = ([0.0] * args.runs for _ in range(3))
    for i in range(args.runs):
        for ids in prompts:  # interleaved per prompt: load falls on all three alike
            t = time.perf_counter()
            rt_old.generate(ids, n, spec=PLAIN, end_id=-1)
            t1 = time.perf_counter()
            rt_old.generate(ids, n, spec=rec.speculative, end_id=-1)
            t2 = time.perf_counter()
            rt_new.generate(ids, n, spec=new.speculative, end_id=-1)
            t3 = time.perf_counter()
            t_base[i] += t1 - t
            t_old[i] += t2 - t1
            t_new[i] += t3 - t2
        print(f"[bench_train_draft] in-process round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    return {
        "prompts": len(prompts),
        "new_tokens": n,
        "runs": args.runs,
        "speedup_shipped": sum(t_base) / sum(t_old),
        "speedup_trained": sum(t_base) / sum(t_new),
        "trained_over_shipped": sum(t_old) / sum(t_new),
        "median_round_trained_over_shipped": statistics.median(
            o / w for o, w in zip(t_old, t_new, strict=True)
        ),
        "load": (l0, load1()),
    }


def served(name: str, report: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    l0 = load1()
    wd = args.out / f"{name}-served"
    r = sdtk(
        "bench", "--compare", name, report["overlay"], "--prompts", report["data"]["holdout_file"],
        "--workdir", str(wd), "--concurrency", "1", "--requests", str(args.requests),
        "--max-tokens", str(args.new_tokens), "--json",
    )  # fmt: skip
    if r.returncode != 0:
        return {"error": r.stderr[-1500:], "load": (l0, load1())}
    d = json.loads(r.stdout)
    lvl = d["levels"][0]
    return {"speedup": lvl["speedup"], "pairs": lvl["pairs"], "load": (l0, load1())}


def render(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        START,
        "## `sdtk train-draft` on CPU: a workload the shipped tiny draft does poorly on",
        "",
        f"`python scripts/bench.py run train_draft {shlex.join(sys.argv[1:])}` ({now}; {cpu_model()}, "
        f"{os.cpu_count()} CPUs, shared with other jobs: 1-minute load averages below, start→end of each phase).",
        f"Workload `{args.workload}` (bundled); the hold-out split is never trained on. τ and acceptance per "
        "position: plan's probe on the hold-out prompts (greedy), from `train_report.json`. In-process: "
        f"{args.runs} rounds × hold-out prompts × {args.new_tokens} tokens, baseline / shipped / trained "
        "interleaved per prompt, speedup = Σ baseline time ÷ Σ side time.",
        "",
        "| recipe | trained | steps (stopped by) | train time | τ before → after (×) | per position before → after "
        "| plan-predicted speedup before → after | in-process speedup shipped → trained (trained ÷ shipped, median round) "
        "| load train / in-process |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rep, ip = r["report"], r["inprocess"]
        h, tr = rep["holdout"], rep["training"]
        b, a = h["before"], h["after"]
        pp = lambda m: "[" + ", ".join(f"{x:.2f}" for x in m["per_position_acceptance"]) + "]"  # noqa: E731
        out.append(
            f"| {r['recipe']} | {tr.get('init', '')} | {tr['steps']} ({tr['stopped']}) | {tr['seconds'] / 60:.1f} min "
            f"| {b['tau']:.2f} → {a['tau']:.2f} ({h['tau_ratio']:.2f}×) | {pp(b)} → {pp(a)} "
            f"| {b['predicted_speedup']:.2f}× → {a['predicted_speedup']:.2f}× "
            f"| {ip['speedup_shipped']:.2f}× → {ip['speedup_trained']:.2f}× ({ip['trained_over_shipped']:.2f}×, "
            f"{ip['median_round_trained_over_shipped']:.2f}×) "
            f"| {r['load_train'][0]}→{r['load_train'][1]} / {ip['load'][0]}→{ip['load'][1]} |"
        )
    served_rows = [r for r in rows if "served" in r]
    if served_rows:
        out += ["", "Served A/B (`sdtk bench --compare RECIPE OVERLAY`, embedded Triton, reference backend, "
                f"hold-out prompts, concurrency 1, {args.requests} requests):", ""]  # fmt: skip
        for r in served_rows:
            s = r["served"]
            if "error" in s:
                out.append(f"- {r['recipe']}: failed: `{s['error'].splitlines()[-1] if s['error'] else ''}`")
            else:
                sp = s["speedup"]
                out.append(
                    f"- {r['recipe']}: trained over shipped {sp['point']:.3f}× (95% CI {sp['lo']:.3f}–{sp['hi']:.3f}), "
                    f"{s['pairs']} pairs; load {s['load'][0]}→{s['load'][1]}"
                )
    out += ["", "Commands: " + "; ".join(f"`{r['command']}`" for r in rows), END]
    return "\n".join(out)
