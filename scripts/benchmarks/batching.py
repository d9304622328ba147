#!/usr/bin/env python3
"""In-flight batching of the reference backend: served throughput against concurrency, and the
speculation trade-off it makes visible.

1. Throughput: deploy a recipe (default tiny-baseline) on the embedded Triton, then, for several
   rounds, send the same 16 prompts × N tokens at each concurrency level, the levels interleaved
   within every round (c=1, the anchor, first); throughput = output tokens (counted with the
   tokenizer on the returned text ids, checked against the server's own count) ÷ wall time.
   Reports median tok/s per level and the median of the per-round ratios against c=1.
2. A/B: runs `sdtk bench --compare BASELINE SPECULATIVE --concurrency ...` and tabulates its
   per-level speedup (with CI), throughput ratio and break-even.

Writes its section of docs/benchmarks.md.

    python scripts/bench.py run batching [--rounds 3] [--levels 1,2,4,8,16] [--max-tokens 64] [--no-ab]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from benchmarks._harness import concurrency_axis, cpu_model, save_png, sdtk, speedup_axes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

START, END = "<!-- bench_batching:start -->", "<!-- bench_batching:end -->"
PNG = ROOT / "docs" / "batching.png"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load() -> tuple[float, float, float]:
    return os.getloadavg()


def throughput(recipe: str, levels: list[int], rounds: int, max_tokens: int, sets: list[str]) -> dict:
    from toolkit.client import TritonClient
    from toolkit.reference.prompts import PROMPTS

    prompts = PROMPTS[:16]
    per_level: dict[int, list[float]] = {c: [] for c in levels}
    ratios: dict[int, list[float]] = {c: [] for c in levels}
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "deploy",
            str(ROOT / "recipes" / f"{recipe}.yaml"),
            "--workdir",
            tmp,
            "--detach",
            "--auto-ports",
        ]
        for s in sets:
            args += ["--set", s]
        p = sdtk(*args, "--json", "--no-validate")
        if p.returncode != 0:
            raise SystemExit(f"deploy {recipe} failed: {p.stderr.strip()[-2000:]}")
        info = json.loads(p.stdout)
        try:
            url, model = info["http_url"], info["model"]
            with TritonClient(url, protocol="http", model=model) as c:
                c.generate(prompts[0], 8, exclude_input_in_output=True)  # warm-up
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(ROOT / "models" / "tiny" / "target")
            reference: dict[str, str] = {}

            def one(prompt: str) -> int:
                with TritonClient(url, protocol="http", model=model) as c:
                    r = c.generate(prompt, max_tokens, exclude_input_in_output=True)
                # Same text at every concurrency: batching changed nothing but the speed.
                if reference.setdefault(prompt, r.text) != r.text:
                    raise SystemExit(f"{recipe}: text for {prompt!r} changed with the concurrency")
                # Counted by the tokenizer (independent of the server), identical at every level.
                return len(tok(r.text, add_special_tokens=False)["input_ids"])

            for _ in range(rounds):
                base = None
                for level in levels:
                    t = time.perf_counter()
                    with ThreadPoolExecutor(level) as pool:
                        tokens = sum(pool.map(one, prompts))
                    tps = tokens / (time.perf_counter() - t)
                    per_level[level].append(tps)
                    base = tps if base is None else base
                    ratios[level].append(tps / base)
        finally:
            sdtk("stop", "--workdir", str(Path(tmp) / info.get("name", recipe)))
    return {
        "recipe": recipe,
        "sets": sets,
        "tps": {c: statistics.median(v) for c, v in per_level.items()},
        "all": per_level,
        "ratio": {c: statistics.median(v) for c, v in ratios.items()},
    }


def recipe_copy(name: str, folder: Path, max_batch_size: int | None) -> Path:
    """recipes/<name>.yaml, with absolute model paths and, if given, build.max_batch_size."""
    import yaml

    src = ROOT / "recipes" / f"{name}.yaml"
    if max_batch_size is None:
        return src
    data = yaml.safe_load(src.read_text())
    for role, path in list(data["models"].items()):
        if isinstance(path, str) and path.startswith("."):
            data["models"][role] = str((src.parent / path).resolve())
    data["build"]["max_batch_size"] = max_batch_size
    out = folder / f"{name}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def ab(baseline: str, speculative: str, levels: list[int], requests: int, max_batch_size: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        base = recipe_copy(baseline, Path(tmp), max_batch_size)
        spec = recipe_copy(speculative, Path(tmp), max_batch_size)
        argv = [
            "bench", "--compare", str(base), str(spec),
            "--concurrency", ",".join(map(str, levels)), "--requests", str(requests), "--workdir", tmp, "--json",
        ]  # fmt: skip
        p = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "sdtk"), *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            raise SystemExit(f"sdtk bench --compare failed: {p.stderr.strip()[-2000:]}")
        out = json.loads(p.stdout)
        out["mbs"] = max_batch_size
        out["names"] = (baseline, speculative)
        out["command"] = "sdtk " + " ".join(argv).replace(str(ROOT) + "/", "").replace(tmp, "<tmp>")
        return out


def plot(tp: dict, abr: dict | None) -> None:
    """docs/batching.png: the baseline's throughput ÷ c=1 per round, and the A/B speedup with its CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if abr else 1, figsize=(10 if abr else 5, 3.6), squeeze=False)
    ax = axes[0][0]
    levels = sorted(tp["tps"])
    base = tp["all"][levels[0]]
    for r in range(len(base)):
        ax.plot(levels, [tp["all"][c][r] / base[r] for c in levels], color="tab:blue", alpha=0.3, marker=".")
    ax.plot(levels, [tp["ratio"][c] for c in levels], color="tab:blue", marker="o", label="median of rounds")
    ax.axhline(3.0, color="tab:red", lw=1, ls=":", label="goal at c=8: 3×")
    concurrency_axis(ax, levels)
    ax.set_ylabel(f"output tok/s ÷ c={levels[0]}")
    ax.set_title(f"{tp['recipe']} served throughput (in-flight batching)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if abr:
        ax = axes[0][1]
        cs = [lv["concurrency"] for lv in abr["levels"]]
        sp = [lv.get("speedup") or {} for lv in abr["levels"]]
        pts = [s.get("point", float("nan")) for s in sp]
        err = [
            [p - s.get("lo", p) for p, s in zip(pts, sp, strict=True)],
            [s.get("hi", p) - p for p, s in zip(pts, sp, strict=True)],
        ]
        ax.errorbar(cs, pts, yerr=err, marker="o", capsize=3, color="tab:orange", label="speedup, 95% CI")
        speedup_axes(ax, f"{abr['names'][1]} ÷ {abr['names'][0]} (sdtk bench --compare)", cs)
        ax.set_ylabel("per-request tok/s ratio")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, PNG)
    plt.close(fig)


def write_section(
    tp: dict, abr: dict | None, cmd: str, rounds: int, max_tokens: int, before, after, date: str | None = None
) -> None:
    import torch

    lines = [
        START,
        "## In-flight batching: served throughput and the speculation trade-off (reference backend, CPU)",
        "",
        f"- machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores, torch {torch.__version__}; "
        f"**shared with other engineers' test runs** (load average {before[0]:.1f} before, {after[0]:.1f} after): "
        "absolute tok/s are noisy, the ratios are the result",
        f"- command: `{cmd}`",
        f"- date: {date or now()}",
        "",
        f"### Served throughput against concurrency ({tp['recipe']}"
        + (f", {', '.join(tp['sets'])}" if tp["sets"] else "")
        + ")",
        "",
        f"16 held-out prompts × {max_tokens} tokens (greedy) per level; the levels interleaved in each of "
        f"{rounds} rounds, c=1 (the anchor) first; output tok/s = all requests' output tokens ÷ wall time; "
        "the text of every request is checked to be the same at every level.",
        "",
        "| concurrency | output tok/s (median) | ÷ c=1 (median of per-round ratios) | runs |",
        "|---|---|---|---|",
    ]
    for c in tp["tps"]:
        runs = ", ".join(f"{v:.0f}" for v in tp["all"][c])
        lines.append(f"| {c} | {tp['tps'][c]:.1f} | {tp['ratio'][c]:.2f}× | {runs} |")
    if 8 in tp["ratio"]:
        lines += ["", f"Goal: c=8 ≥ 3× c=1 → **{tp['ratio'][8]:.2f}×**."]
    if abr is not None:
        lines += [
            "",
            f"### A/B: {abr['names'][0]} vs {abr['names'][1]}",
            "",
            f"`{abr['command']}` (baseline side first, then the speculative side; each level "
            f"{abr['settings']['requests']} requests of the `code` workload"
            + (
                f"; <tmp> recipes = recipes/*.yaml with build.max_batch_size {mbs}"
                if (mbs := abr.get("mbs"))
                else ""
            )
            + ").",
            "",
            "| concurrency | speedup (95% CI) | output tok/s ratio | baseline output tok/s | speculative output tok/s |",
            "|---|---|---|---|---|",
        ]
        runs = abr["runs"]
        for lv in abr["levels"]:
            c = lv["concurrency"]
            b = next((x for x in runs["baseline"]["levels"] if x["concurrency"] == c), {})
            s = next((x for x in runs["speculative"]["levels"] if x["concurrency"] == c), {})
            sp = lv.get("speedup") or {}
            lines.append(
                f"| {c} | {sp.get('point', float('nan')):.2f}× [{sp.get('lo', float('nan')):.2f}, "
                f"{sp.get('hi', float('nan')):.2f}] | {lv.get('throughput_ratio') or float('nan'):.2f}× | "
                f"{b.get('summary', {}).get('output_tok_s') or float('nan'):.1f} | "
                f"{s.get('summary', {}).get('output_tok_s') or float('nan'):.1f} |"
            )
        base_tps = {x["concurrency"]: x["summary"]["output_tok_s"] for x in runs["baseline"]["levels"]}
        if 1 in base_tps and 8 in base_tps and base_tps[1]:
            lines += [
                "",
                f"Baseline throughput in this A/B (sdtk bench's gRPC load generator, server-counted tokens): "
                f"c=8 ÷ c=1 = **{base_tps[8] / base_tps[1]:.2f}×** (one run per level; an independent second "
                "measurement of the goal above).",
            ]
        lines += [
            "",
            f"speedup = {abr['definitions']['speedup']}; output tok/s ratio = "
            f"{abr['definitions']['throughput_ratio']}.",
            "",
            f"Verdict: {abr['verdict']}; break-even: {abr['break_even']} ({abr['break_even_basis']}).",
        ]
    lines += ["", f"![throughput and speedup against concurrency]({PNG.name})", END]
    plot(tp, abr)
    from benchmarks import _harness

    _harness.write_section(ROOT / "docs" / "benchmarks.md", START, END, "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="tiny-baseline")
    ap.add_argument(
        "--set", action="append", default=[], help="recipe override for the throughput deployment"
    )
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ab", default="tiny-baseline,tiny-eagle3")
    ap.add_argument("--ab-requests", type=int, default=32)
    ap.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="build.max_batch_size for every deployment (default: the recipe's)",
    )
    ap.add_argument("--no-ab", action="store_true")
    ap.add_argument("--render", type=Path, help="only rewrite the section from a raw results file of a run")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    if args.render:
        raw = json.loads(args.render.read_text())
        tp, abr = raw["throughput"], raw["ab"]
        tp["tps"] = {int(k): v for k, v in tp["tps"].items()}
        tp["all"] = {int(k): v for k, v in tp["all"].items()}
        tp["ratio"] = {int(k): v for k, v in tp["ratio"].items()}
        write_section(
            tp,
            abr,
            raw["command"],
            raw["rounds"],
            raw["max_tokens"],
            raw["load"][0],
            raw["load"][1],
            raw.get("date"),
        )
        return
    before = load()
    sets = list(args.set) + ([f"build.max_batch_size={args.max_batch_size}"] if args.max_batch_size else [])
    tp = throughput(args.recipe, levels, args.rounds, args.max_tokens, sets)
    print(json.dumps({k: v for k, v in tp.items() if k != "all"}), file=sys.stderr)
    abr = None
    if not args.no_ab:
        base, spec = args.ab.split(",")
        abr = ab(base, spec, levels, args.ab_requests, args.max_batch_size)
    raw = Path(tempfile.gettempdir()) / "bench_batching.json"  # everything measured, for a second look
    cmd = "python " + " ".join(sys.argv)
    after = load()
    raw.write_text(
        json.dumps(
            {
                "throughput": tp,
                "ab": abr,
                "command": cmd,
                "rounds": args.rounds,
                "max_tokens": args.max_tokens,
                "load": [before, after],
                "date": (date := now()),
            },
            default=str,
        )
    )
    print(f"raw results: {raw}", file=sys.stderr)
    write_section(tp, abr, cmd, args.rounds, args.max_tokens, before, after, date)
