#!/usr/bin/env python3
"""Served vs in-process speed of the reference backend, and time to READY.

For each tiny recipe: deploy it on the embedded Triton (detached, free ports), measure the
time from launch to READY, then generate 128 tokens per prompt over HTTP and in process with
the reference runtime (same prompts, greedy), several rounds each; report medians and the
served/in-process tok/s ratio (goal >= 0.85). Writes its section of docs/benchmarks.md.

    python scripts/bench.py run served [--recipes tiny-draft-target,tiny-eagle3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks._harness import cpu_model, sdtk  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "def fibonacci(n):",
    "import os\n\n\ndef read_lines(path):",
    "class Stack:\n    def __init__(self):",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
]
START, END = "<!-- bench_served:start -->", "<!-- bench_served:end -->"


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by a server's process group: tritonserver and
    its stubs. Unlike wall time, it does not grow when other work on a shared machine takes the
    cores, nor shrink when several server processes get a bigger share of them than one."""
    import os

    from toolkit.server import procs

    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in procs.group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def generate_local(recipe, prompt: str, max_tokens: int) -> dict:
    """Greedy, speculative, in process: the anchor the served numbers are compared with."""
    from toolkit.generate import run_generate

    return run_generate(
        recipe, prompt, max_tokens, no_speculation=False, temperature=0.0, top_k=0, top_p=1.0, seed=None
    )


def bench_recipe(name: str, rounds: int, max_tokens: int) -> dict:
    import json

    from toolkit.client import TritonClient
    from toolkit.recipe import load_recipe

    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    ready_s = []
    served_tps, local_tps, served_cpu, local_cpu = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        wd = Path(tmp)
        for i in range(rounds):
            t0 = time.monotonic()
            p = sdtk(
                "deploy",
                str(recipe.source_path),
                "--workdir",
                str(wd),
                "--detach",
                "--auto-ports",
                "--json",
                "--no-validate",
            )
            if p.returncode != 0:
                raise SystemExit(f"deploy {name} failed: {p.stderr.strip()[-2000:]}")
            info = json.loads(p.stdout)
            ready_s.append(info.get("ready_seconds") or (time.monotonic() - t0))
            if i == rounds - 1:
                with TritonClient(info["http_url"], protocol="http", model=info["model"]) as c:
                    c.generate(PROMPTS[0], 8, exclude_input_in_output=True)  # warm-up
                    generate_local(recipe, PROMPTS[0], 8)
                    # Served and in-process requests alternate, so that both see the same load on
                    # a shared machine.
                    for _ in range(rounds):
                        toks, secs, local_secs, cpu, lcpu = 0, 0.0, 0.0, 0.0, 0.0
                        for prompt in PROMPTS:
                            c0 = group_cpu_s(info["pid"])
                            r = c.generate(prompt, max_tokens, exclude_input_in_output=True)
                            cpu += group_cpu_s(info["pid"]) - c0
                            t, c0 = time.perf_counter(), time.process_time()
                            ref = generate_local(recipe, prompt, max_tokens)
                            local_secs += time.perf_counter() - t
                            lcpu += time.process_time() - c0
                            if r.text != ref["text"]:
                                raise SystemExit(
                                    f"{name}: served text differs from in-process text for {prompt!r}"
                                )
                            toks += len(ref["token_ids"])
                            secs += r.latency_s
                        served_tps.append(toks / secs)
                        local_tps.append(toks / local_secs)
                        served_cpu.append(toks / cpu)
                        local_cpu.append(toks / lcpu)
            sdtk("stop", "--workdir", str(wd / recipe.display_name))
    s, lo = statistics.median(served_tps), statistics.median(local_tps)
    cpu_ratio = statistics.median(served_cpu) / statistics.median(local_cpu)
    return {
        "recipe": name,
        "ready_s": statistics.median(ready_s),
        "ready_all": ready_s,
        "served_tps": s,
        "local_tps": lo,
        "ratio": s / lo,
        "cpu_ratio": cpu_ratio,
    }


def write_section(rows: list[dict], cmd: str, rounds: int, max_tokens: int) -> None:
    import torch

    lines = [
        START,
        "## Served vs in-process (reference backend on the embedded Triton)",
        "",
        f"- machine: {cpu_model()}, {len(__import__('os').sched_getaffinity(0))} cores, torch {torch.__version__}",
        f"- command: `{cmd}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; load average at the end "
        f"{__import__('os').getloadavg()[0]:.1f} on {len(__import__('os').sched_getaffinity(0))} cores "
        "(above the core count: the machine was shared with other work)",
        f"- method: {len(PROMPTS)} prompts x {max_tokens} tokens, greedy; median of {rounds} rounds; the anchor is "
        "the in-process reference runtime measured in the same process, each in-process request right after "
        "the served one; served = HTTP /generate latency "
        "(tokenization, ensemble, Python backend included). Time to READY = launch until server, ensemble "
        f"and every model are ready, median of {rounds} launches.",
        "",
        "| recipe | time to READY (s) | served tok/s | in-process tok/s | served / in-process | "
        "same, per CPU second |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['recipe']} | {r['ready_s']:.1f} | {r['served_tps']:.1f} | {r['local_tps']:.1f} | "
            f"{r['ratio']:.2f} | {r['cpu_ratio']:.2f} |"
        )
    lines += [
        "",
        "Goal: served / in-process >= 0.85. The last column divides tokens by CPU seconds (the server's "
        "whole process group against this process): on a machine shared with other work it is the "
        "steadier of the two, since wall time there depends on how the scheduler shares the cores.",
        END,
    ]
    from benchmarks import _harness

    _harness.write_section(ROOT / "docs" / "benchmarks.md", START, END, "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default="tiny-baseline,tiny-draft-target,tiny-eagle3,tiny-medusa")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    rows = []
    for name in args.recipes.split(","):
        row = bench_recipe(name, args.rounds, args.max_tokens)
        print(row, file=sys.stderr)
        rows.append(row)
    write_section(rows, "python " + " ".join(sys.argv), args.rounds, args.max_tokens)
