#!/usr/bin/env python3
"""Does the draft-target BLS serve concurrent requests side by side? (`bls_instance_count`)

The draft-target loop runs in tensorrt_llm_bls, which is not decoupled (as upstream's example), so
a BLS instance serves one request at a time. Upstream's docs/model_config.md: "set the number of
model instances to the maximum batch size supported by the TRT engine to allow concurrent request
execution". sdtk now does (serving.bls_instance_count defaults to the engine's max_batch_size);
before, one instance queued every request behind the others.

Both deployments are measured the same way: whole (non-streamed) requests, so the time to the first
token is the request's latency, at concurrency 1 and 4, by a separately written threaded HTTP client
(not sdtk bench). Compared: the baseline (tiny-baseline with serving.decoupled false, measured the
same way), tiny-draft-target as shipped (one BLS instance per batch slot) and tiny-draft-target
with bls_instance_count 1 (the old default). Several rounds; medians. Writes its section of
docs/lab/benchmarks-history.md.

    python scripts/bench.py run bls_concurrency [--rounds 3] [--requests 16] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from benchmarks import _harness  # noqa: E402
from benchmarks._harness import cpu_model, sdtk  # noqa: E402

START, END = "<!-- bench_bls_concurrency:start -->", "<!-- bench_bls_concurrency:end -->"
SIDES = {
    "tiny-baseline (ensemble, not decoupled)": ("tiny-baseline", ["serving.decoupled=false"]),
    "tiny-draft-target, BLS instances = max_batch_size (shipped)": ("tiny-draft-target", []),
    "tiny-draft-target, 1 BLS instance (the old default)": (
        "tiny-draft-target",
        ["serving.bls_instance_count=1"],
    ),
}


def latencies(url: str, model: str, prompts: list[str], concurrency: int, max_tokens: int) -> list[float]:
    import httpx

    def one(prompt: str) -> float:
        t = time.perf_counter()
        r = httpx.post(
            f"{url}/v2/models/{model}/generate",
            json={"text_input": prompt, "max_tokens": max_tokens},
            timeout=300,
        )
        r.raise_for_status()
        return time.perf_counter() - t

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, prompts))


def measure(recipe: str, sets: list[str], rounds: int, requests: int, max_tokens: int) -> dict:
    from toolkit.reference.prompts import PROMPTS

    prompts = (PROMPTS * 4)[:requests]
    out: dict[int, list[float]] = {1: [], 4: []}
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
            latencies(info["http_url"], info["model"], prompts[:2], 1, 8)  # warm-up
            for _ in range(rounds):
                for c in out:
                    out[c].append(
                        statistics.median(latencies(info["http_url"], info["model"], prompts, c, max_tokens))
                    )
        finally:
            sdtk("stop", "--workdir", info["workdir"])
    return {c: statistics.median(v) for c, v in out.items()} | {"rounds": out}


def write_section(rows: dict[str, dict], cmd: str, load: tuple, max_tokens: int, requests: int) -> None:
    base = next(iter(rows.values()))
    lines = [
        START,
        "## Draft-target BLS under concurrency (served, reference backend)",
        "",
        f"- machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores; load average {load[0][0]:.1f} "
        f"before, {load[1][0]:.1f} after",
        f"- command: `{cmd}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; {requests} requests per level, "
        f"max_tokens {max_tokens}, whole (non-streamed) requests over HTTP `/generate` from a threaded "
        "client (not sdtk bench): the first token arrives with the response, so TTFT = latency",
        "- what it shows: draft-target's BLS is not decoupled (upstream's example), so each instance "
        "serves one request at a time; with one instance (the old default) concurrent requests queue. "
        "Median over rounds of the per-round median latency; ratio = against the baseline at the same "
        "concurrency, measured the same way.",
        "",
        "| deployment | p50 latency c=1 (s) | p50 latency c=4 (s) | c=4 ÷ c=1 | c=4 ÷ baseline c=4 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(f"| {name} | {r[1]:.3f} | {r[4]:.3f} | {r[4] / r[1]:.2f}× | {r[4] / base[4]:.2f}× |")
    lines += ["", END]
    _harness.write_section(ROOT / "docs" / "lab" / "benchmarks-history.md", START, END, "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args(argv)
    before = os.getloadavg()
    rows = {
        name: measure(recipe, sets, a.rounds, a.requests, a.max_tokens)
        for name, (recipe, sets) in SIDES.items()
    }
    cmd = f"python scripts/bench.py run bls_concurrency --rounds {a.rounds} --requests {a.requests} --max-tokens {a.max_tokens}"
    write_section(rows, cmd, (before, os.getloadavg()), a.max_tokens, a.requests)
    for name, r in rows.items():
        print(f"{name}: c=1 {r[1]:.3f}s c=4 {r[4]:.3f}s")
