#!/usr/bin/env python3
"""Dynamo scale-out on CPU: throughput of 2 workers against 1 behind Dynamo's frontend.

Deploys the recipe twice with `sdtk deploy --target dynamo` (one deployment with 1 worker, one
with 2; detached, free ports, both up for the whole run), then measures each at one concurrency
level over the OpenAI API (toolkit.bench's load generator, streamed /v1/completions, greedy,
output tokens counted with the recipe's tokenizer), alternating the two in each round (1 then 2,
then 2 then 1, ...) so that a machine whose speed drifts moves both alike. Reports the median
output tok/s of each, their ratio (goal >= 1.3x on 2 cores) and the per-round ratios; writes its
section of docs/benchmarks.md. Needs ai-dynamo in the running Python (scripts/setup_env.sh).

    python scripts/bench_dynamo.py [--recipe tiny-baseline] [--concurrency 8] [--rounds 3] [--pin]

Each worker runs torch on one thread (toolkit.generate.reference_threads); `--pin` also pins each
worker, every thread of it, to a core of its own, so that the two workers do not share one core
while the other idles. The table gives the load average after each measurement: on a machine
shared with other jobs the ratio says little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from _bench import cpu_model, publish  # scripts/_bench.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
START, END = "<!-- bench_dynamo:start -->", "<!-- bench_dynamo:end -->"
PINNED = "; each pinned with all its threads to a core of its own (worker-i: core i), the frontend not pinned"
OVERLOADED_PINNED = (
    " Pinned on an overloaded machine, one worker gets a share of one core and two workers a share of"
    " each: the ratio then measures those shares (it approaches 2×), not the scaling of an idle machine,"
    " where the frontend and the client also take their part of the two cores."
)


def sdtk(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m toolkit.cli ARGS` with this Python (the one that has Dynamo) and this tree."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )


def deploy(recipe: str, workers: int, workdir: Path) -> dict:
    r = sdtk(
        "deploy", recipe, "--target", "dynamo", "--workers", str(workers), "--detach", "--auto-ports",
        "--no-validate", "--workdir", str(workdir), "--json",
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"deploy --workers {workers} failed:\n{r.stderr[-3000:]}")
    return dict(json.loads(r.stdout))


def pin_workers(root: Path) -> dict[str, int]:
    """Pin each worker of the deployment in `root` (every thread of it: Dynamo's runtime and torch
    start theirs before this runs, and a thread keeps the affinity it was created with) to a core of
    its own, worker-i on core i mod the cores this process may use; the frontend is left to the
    scheduler. Returns worker → core."""
    cores = sorted(os.sched_getaffinity(0))
    procs = json.loads((root / "dynamo" / "processes.json").read_text())
    pinned = {}
    for name, p in sorted(procs.items()):
        if not name.startswith("worker-") or not p.get("pid"):
            continue
        core = cores[int(name.split("-")[1]) % len(cores)]
        for tid in os.listdir(f"/proc/{p['pid']}/task"):
            with contextlib.suppress(ProcessLookupError, PermissionError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), {core})
        pinned[name] = core
    return pinned


def measure(url: str, model: str, args: argparse.Namespace, tokenizer: str) -> dict:
    """One closed-loop level at args.concurrency: the load generator's summary."""
    from toolkit.bench.measure.loadgen import Sampling, run_load
    from toolkit.bench.measure.openai import OpenAIEndpoint
    from toolkit.bench.measure.tokens import TokenCounter
    from toolkit.bench.measure.workloads import load_workload

    async def go():
        ep = OpenAIEndpoint(url, model=model, timeout=300)
        try:
            return await run_load(
                ep,
                load_workload(args.workload, max_tokens=args.max_tokens),
                concurrency=[args.concurrency],
                requests=args.requests,
                warmup=args.warmup,
                seed=args.seed,
                sampling=Sampling(),
                timeout=300,
                progress=False,
                count_tokens=TokenCounter(tokenizer),
                tokenizer=tokenizer,
            )
        finally:
            await ep.close()

    result = asyncio.run(go())
    s = result.levels[0].summary()
    if s["errors"]:
        raise SystemExit(f"{s['errors']} request(s) failed at {url}: {s['error_kinds']}")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", default="tiny-baseline")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32, help="requests per measurement")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workload", default="code")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="pin each worker (all its threads) to a core of its own (worker-i: core i)",
    )
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs/benchmarks.md")
    args = ap.parse_args()
    from toolkit.bench.measure.tokens import recipe_tokenizer
    from toolkit.recipe import load_recipe

    tokenizer = recipe_tokenizer(load_recipe(args.recipe))
    assert tokenizer is not None
    load_before = os.getloadavg()
    started = datetime.now(timezone.utc)
    tok_s: dict[int, list[float]] = {1: [], 2: []}
    loads: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="sdtk-bench-dynamo-") as tmp:
        roots, ready = {}, {}
        try:
            for n in (1, 2):
                wd = Path(tmp) / f"w{n}"
                ready[n] = deploy(args.recipe, n, wd)
                roots[n] = Path(ready[n]["workdir"])
                if args.pin:
                    print(f"workers {n}: pinned {pin_workers(roots[n])}", file=sys.stderr)
            for rnd in range(args.rounds):
                for n in (1, 2) if rnd % 2 == 0 else (2, 1):
                    t0 = time.monotonic()
                    s = measure(ready[n]["http_url"], ready[n]["model"], args, tokenizer)
                    tok_s[n].append(float(s["output_tok_s"]))
                    loads[n].append(os.getloadavg()[0])  # the 1-minute average, at the end of it
                    print(
                        f"round {rnd + 1} workers {n}: {tok_s[n][-1]:.1f} output tok/s "
                        f"({s['ok']} requests, {time.monotonic() - t0:.1f} s, load average {loads[n][-1]:.1f})",
                        file=sys.stderr,
                    )
        finally:
            for root in roots.values():
                sdtk("stop", "--workdir", str(root))
    load_after = os.getloadavg()
    med = {n: statistics.median(v) for n, v in tok_s.items()}
    ratio = med[2] / med[1]
    per_round = [b / a for a, b in zip(tok_s[1], tok_s[2], strict=True)]
    command = "python scripts/bench_dynamo.py " + shlex.join(sys.argv[1:])
    section = "\n".join(
        [
            START,
            "## Dynamo scale-out: 2 workers against 1 behind one frontend (`scripts/bench_dynamo.py`, CPU)",
            "",
            f"- Date: {started:%Y-%m-%d %H:%M} UTC. Machine: {cpu_model()}, {os.cpu_count()} cores, shared with "
            f"other jobs (load average {load_before[0]:.1f} before, {load_after[0]:.1f} after).",
            f"- Command: `{command.strip()}`, with ai-dynamo 1.6.1 (frontend with file discovery, TCP request "
            "plane, round-robin router) and sdtk's reference-runtime workers (one torch thread each).",
            f"- Load: recipe `{args.recipe}`, workload `{args.workload}`, concurrency {args.concurrency}, "
            f"{args.requests} requests of {args.max_tokens} tokens per measurement (greedy, streamed "
            f"/v1/completions), {args.rounds} rounds alternating the two deployments (both up throughout; "
            "an idle 2-worker deployment was measured at 0.8% of one core).",
            f"- Workers: one torch thread each{PINNED if args.pin else ', not pinned to cores'}.",
            "",
            "| workers | output tok/s per round | median | load average after each round |",
            "|---|---|---|---|",
            *(
                f"| {n} | {', '.join(f'{v:.1f}' for v in tok_s[n])} | {med[n]:.1f} | "
                f"{', '.join(f'{v:.1f}' for v in loads[n])} |"
                for n in (1, 2)
            ),
            "",
            f"**2 workers / 1 worker: {ratio:.2f}×** (median over median; per round "
            f"{', '.join(f'{r:.2f}' for r in per_round)}; goal ≥ 1.3× on 2 cores).",
            *(
                [
                    "",
                    f"The load average ({load_before[0]:.1f} before, {load_after[0]:.1f} after) was above the "
                    f"{os.cpu_count()} cores: the two "
                    "workers, the frontend and the client shared them with other jobs, so this run does not "
                    "tell whether the goal is met on an otherwise idle machine."
                    + (OVERLOADED_PINNED if args.pin else ""),
                ]
                if max(load_before[0], load_after[0]) > (os.cpu_count() or 1)
                else []
            ),
            END,
        ]
    )
    publish(section, ROOT / "docs" / "benchmarks.md", START, END, write=not args.no_write)


if __name__ == "__main__":
    main()
