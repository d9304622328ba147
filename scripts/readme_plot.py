#!/usr/bin/env python
"""Regenerate the README's A/B section and its plot (docs/demo_ab.png) from the demo's comparison.

Runs what `scripts/demo.sh` runs (`sdtk bench --compare tiny-baseline RECIPE` on the bundled
`code` workload, the same levels, requests and token budget), or reads a compare.json that
`sdtk bench --compare` already wrote, then writes docs/demo_ab.png (speedup with its 95% CI per
concurrency level; acceptance per draft position) and the table between the demo_ab markers
of README.md.

    python scripts/readme_plot.py [--recipe tiny-ngram] [--compare-json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
START, END = "<!-- demo_ab:start -->", "<!-- demo_ab:end -->"
PNG = REPO / "docs" / "demo_ab.png"


def run_compare(recipe: str, args: argparse.Namespace) -> dict[str, Any]:
    from toolkit.bench.api import compare
    from toolkit.bench.report import render
    from toolkit.deploy import deployed

    ab = compare(
        "tiny-baseline",
        recipe,
        workload="code",
        concurrency=[int(c) for c in args.concurrency.split(",")],
        requests=args.requests,
        max_tokens=args.max_tokens,
        warmup=2,
        deploy_fn=deployed,
        report_dir=args.report_dir,
        workdir=args.report_dir.parent,
    )
    print(render(ab), file=sys.stderr)
    return ab.to_dict()


def plot(d: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    levels = d["levels"]
    conc = [lv["concurrency"] for lv in levels]
    sp = [lv["speedup"] for lv in levels]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    ax.errorbar(
        conc,
        [s["point"] for s in sp],
        yerr=[[s["point"] - s["lo"] for s in sp], [s["hi"] - s["point"] for s in sp]],
        fmt="o-",
        capsize=4,
        label="speedup, 95% CI",
    )
    ax.plot(
        conc, [lv["throughput_ratio"] for lv in levels], "s--", alpha=0.6, label="aggregate throughput ratio"
    )
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("speculative ÷ baseline")
    ax.set_title(f"{_name(d['speculative'])} vs {_name(d['baseline'])} (served, CPU)")
    ax.legend(fontsize=8)
    ax = axes[1]
    rp = d.get("replayed_acceptance") or {}
    pp = rp.get("per_position") or []
    ax.bar(range(1, len(pp) + 1), pp)
    ax.set_ylim(0, 1)
    ax.set_xlabel("draft position k")
    ax.set_ylabel("P(positions 1..k accepted)")
    ax.set_title("acceptance per draft position")
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".incomplete.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    plt.close(fig)


def _name(label: str) -> str:
    return Path(label.split(" ")[0]).stem


def section(d: dict[str, Any], args: argparse.Namespace) -> str:
    s = d["settings"]
    lines = [
        START,
        f"`{_name(d['speculative'])}` against `{_name(d['baseline'])}`, served by the embedded Triton "
        f"(reference backend), bundled `code` workload, {s['requests']} requests per level, "
        f"max_tokens {args.max_tokens}; measured {datetime.date.today().isoformat()} on {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other engineers' jobs (the two sides run one after the other, so "
        "load can fall on one side; docs/benchmarks.md has paired in-process ratios). "
        + (f"From the compare.json of `{args.source}`. " if args.source else "")
        + "Regenerate with `python scripts/readme_plot.py`.",
        "",
        "| concurrency | speedup (per-user tok/s) | 95% CI | TPOT speedup | throughput ratio | accept rate | τ |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for lv in d["levels"]:
        sp, acc = lv["speedup"], lv["speculative"]["acceptance"]
        lines.append(
            f"| {lv['concurrency']} | **{sp['point']:.2f}×** | [{sp['lo']:.2f}, {sp['hi']:.2f}] | "
            f"{lv['tpot_speedup']['point']:.2f}× | {lv['throughput_ratio']:.2f}× | {acc['rate']:.2f} | "
            f"{acc['length']:.2f} |"
        )
    rp = d.get("replayed_acceptance")
    if rp and rp.get("per_position"):
        lines += [
            "",
            "Acceptance per draft position (in-process replay of the same requests): "
            + ", ".join(f"{x:.2f}" for x in rp["per_position"])
            + ".",
        ]
    lines += [
        "",
        f"Verdict: {d['verdict']}",
        "",
        "![A/B: speedup per concurrency and acceptance per position](docs/demo_ab.png)",
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="tiny-ngram")
    ap.add_argument("--compare-json", type=Path, help="use this compare.json instead of running the A/B")
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--report-dir", type=Path, default=REPO / "workdir" / "readme" / "reports")
    ap.add_argument("--readme", type=Path, default=REPO / "README.md")
    ap.add_argument("--source", default="", help="what wrote --compare-json, named in the README")
    args = ap.parse_args(argv)
    if args.compare_json:
        d = json.loads(args.compare_json.read_text())
        args.max_tokens = d["workload"].get("max_tokens", args.max_tokens)
    else:
        d = run_compare(args.recipe, args)
    plot(d, PNG)
    text = args.readme.read_text()
    sec = section(d, args)
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + sec + rest.split(END, 1)[1]
    else:
        raise SystemExit(f"{args.readme} has no {START} ... {END} markers")
    tmp = args.readme.with_suffix(".md.incomplete")
    tmp.write_text(text)
    tmp.replace(args.readme)
    print(f"wrote {PNG} and the demo_ab section of {args.readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
