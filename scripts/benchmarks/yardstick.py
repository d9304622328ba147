#!/usr/bin/env python3
"""`sdtk bench` against an independent client on the same deployment; writes its section of
docs/benchmarks.md.

For each tiny recipe: deploy it (detached, free ports), then in rounds on the same prompts
(code workload, concurrency 1, greedy): `sdtk bench` over HTTP, the independent SSE client
(tests/bench/sse_client.py: http.client + the target tokenizer, imports nothing from toolkit),
`sdtk bench` over gRPC. Reports tokens per request (and whether they match request by request),
TTFT, token-level ITL, TPOT, the chunk interval and tokens per chunk, side by side. Optionally
(--compare) `sdtk bench --compare tiny-baseline tiny-eagle3` on 32 requests.

    python scripts/bench.py run yardstick [--recipes tiny-eagle3,tiny-medusa] [--rounds 2] [--no-compare]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks._harness import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RECIPES = (
    "tiny-baseline,tiny-draft-target,tiny-eagle3,tiny-medusa,tiny-lookahead,tiny-ngram,"
    "tiny-eagle3-llmapi,tiny-ngram-llmapi"
)
START, END = "<!-- bench_yardstick:start -->", "<!-- bench_yardstick:end -->"
LOAD_AT_START: list[float] = []


def _client_module():
    spec = importlib.util.spec_from_file_location("sse_client", ROOT / "tests" / "bench" / "sse_client.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sse_client"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def measure(name: str, rounds: int, n: int, max_tokens: int, tmp: Path, per_round: int = 3) -> list[dict]:
    """Tokens: one pass over `n` prompts per client. Timing: `rounds` rounds of `per_round`
    requests, bench HTTP / client / bench gRPC in turn, so load from other processes on a shared
    machine falls on all three alike."""
    from toolkit.bench.api import bench
    from toolkit.bench.measure.workloads import load_workload
    from toolkit.deploy import deployed

    sse = _client_module()
    prompts = load_workload("code", max_tokens=max_tokens, seed=0).sample(n, 0)
    timed = load_workload("code", max_tokens=max_tokens, seed=0).sample(per_round, 0)
    recs: dict[str, list] = {"http": [], "grpc": []}
    tokens: dict[str, list] = {}
    runs = []

    def run_bench(wd: Path, protocol: str, k: int, tag: str):
        r = bench(
            wd,
            protocol=protocol,
            workload="code",
            max_tokens=max_tokens,
            concurrency=[1],
            requests=k,
            warmup=0,
            report_dir=tmp / f"{name}-{tag}",
            progress=False,
        )
        assert r.token_counts_exact, r.warnings
        return r.levels[0]

    with deployed(name, workdir=tmp / name, progress=lambda m: None) as dep:
        client = sse.SSEClient(dep.http_url, dep.model, str(ROOT / "models" / "tiny" / "target"))
        client.run(prompts[0].text, 8)
        truth = [m.tokens for m in (client.run(p.text, p.max_tokens) for p in prompts)]
        for protocol in ("http", "grpc"):
            tokens[protocol] = [
                r.output_tokens for r in run_bench(dep.workdir, protocol, n, protocol).records
            ]
        for i in range(rounds):
            recs["http"].append(run_bench(dep.workdir, "http", per_round, f"http-{i}"))
            runs.append([client.run(p.text, p.max_tokens) for p in timed])
            recs["grpc"].append(run_bench(dep.workdir, "grpc", per_round, f"grpc-{i}"))
    rows = []
    for protocol, levels in recs.items():
        from toolkit.bench.measure.metrics import summarize

        s = summarize([r for lv in levels for r in lv.records], duration=sum(lv.duration for lv in levels))
        equal = tokens[protocol] == truth
        rows.append(
            {
                "recipe": name,
                "model": dep.model,
                "client": f"sdtk bench ({protocol})",
                "tokens": s["output_tokens_per_request"]["mean"],
                "equal": "yes" if equal else "NO",
                "source": s["token_count_source"],
                "ttft": s["ttft_s"]["mean"],
                "itl": s["itl_s"]["mean"],
                "tpot": s["tpot_s"]["mean"],
                "chunk": s["chunk_interval_s"]["mean"],
                "tpc": s["tokens_per_chunk"]["mean"],
            }
        )
    flat = [m for rnd in runs for m in rnd]
    su = sse.summary(flat)
    rows.insert(
        1,
        {
            "recipe": name,
            "model": dep.model,
            "client": "independent SSE client",
            "tokens": sum(truth) / len(truth),
            "equal": "yes",  # the reference: the tokenizer count of the text it received
            "source": "tokenizer",
            "ttft": su["ttft_mean_s"],
            "itl": su["itl_mean_s"],
            "tpot": su["tpot_mean_s"],
            "chunk": statistics.mean(
                b - a for m in flat for a, b in zip(m.event_times, m.event_times[1:], strict=False) if m.text
            ),
            "tpc": None,
        },
    )
    return rows


def compare_run(tmp: Path) -> dict:
    from toolkit.bench.api import compare
    from toolkit.deploy import deployed

    ab = compare(
        "tiny-baseline",
        "tiny-eagle3",
        workload="code",
        concurrency=[1],
        requests=32,
        deploy_fn=deployed,
        workdir=tmp / "ab",
        progress=False,
    )
    lc = ab.levels[0]
    return {
        "speedup": lc.speedup,
        "tpot_speedup": lc.tpot_speedup.point,
        "exact": ab.token_counts_exact,
        "tokens": (
            lc.baseline["output_tokens_per_request"]["mean"],
            lc.speculative["output_tokens_per_request"]["mean"],
        ),
        "tau": lc.speculative["acceptance"]["length"],
        "tpc": lc.speculative["tokens_per_chunk"]["mean"],
        "verdict": ab.verdict,
    }


def in_process_ratio() -> tuple[float, float] | None:
    """(mean, median per prompt) measured in process for tiny-eagle3 at γ = 3, from the
    plan-accuracy section of docs/lab/benchmarks-history.md (scripts/bench.py run plan_accuracy)."""
    text = (ROOT / "docs" / "lab" / "benchmarks-history.md").read_text()
    if "### tiny-eagle3" not in text:
        return None
    block = text.split("### tiny-eagle3", 1)[1].split("###", 1)[0]
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "3" and len(cells) >= 4:
            return float(cells[2].rstrip("×")), float(cells[3].rstrip("×"))
    return None


def shipped_ratio() -> tuple[float, str] | None:
    """(speedup, per-round range) of tiny-eagle3 against the target alone, in process, from the
    "Tiny recipes at their shipped settings" section (scripts/bench.py run recipes): the same recipe,
    the same workload, whole generations (prefill included, as bench's per-user tok/s)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    if "<!-- bench_recipes:start -->" not in text:
        return None
    block = text.split("<!-- bench_recipes:start -->", 1)[1].split("<!-- bench_recipes:end -->", 1)[0]
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "tiny-eagle3" and len(cells) >= 6:
            return float(cells[4].strip("*").rstrip("×")), cells[5]
    return None


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def write_section(rows: list[dict], ab: dict | None, cmd: str, rounds: int, n: int, max_tokens: int) -> None:
    load = os.getloadavg()
    load0 = LOAD_AT_START[0] if LOAD_AT_START else float("nan")
    lines = [
        START,
        "## sdtk bench vs an independent client (same deployment)",
        "",
        f"- machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores (shared with other "
        f"engineers' tests: load average {load0:.1f} at the start, {load[0]:.1f} at the end)",
        f"- command: `{cmd}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- method: `code` workload, max_tokens {max_tokens}, greedy, concurrency 1. Tokens: {n} prompts "
        "through each client; `tokens equal` = every request's count equals the tokenizer count of the "
        "text the independent client received (`tests/bench/sse_client.py`: raw HTTP generate_stream, "
        "SSE parsing, the target tokenizer on the whole text, the same request flags as bench, nothing "
        f"from toolkit). Timing: {rounds} rounds of 3 requests, `sdtk bench` HTTP / the independent "
        "client / `sdtk bench` gRPC in turn; means over all timed requests. ITL is token level "
        "(Σ(last − first token) ÷ Σ(N − 1)), the chunk interval chunk level (docs/metrics.md).",
        "",
        "| recipe (entry model) | client | tokens/request | tokens equal | counted by | TTFT ms | ITL ms | "
        "TPOT ms | chunk interval ms | tokens/chunk |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tpc = "-" if r["tpc"] is None else f"{r['tpc']:.2f}"
        lines.append(
            f"| {r['recipe']} ({r['model']}) | {r['client']} | {r['tokens']:.1f} | {r['equal']} | {r['source']} | "
            f"{ms(r['ttft'])} | {ms(r['itl'])} | {ms(r['tpot'])} | {ms(r['chunk'])} | {tpc} |"
        )
    if ab is not None:
        sp = ab["speedup"]
        anchor = in_process_ratio()
        if anchor is None:
            where = "(no in-process ratio for tiny-eagle3 γ = 3 in this file to compare with)"
        else:
            inside = [f"{v:.2f}×" for v in anchor if sp.lo <= v <= sp.hi]
            outside = [f"{v:.2f}×" for v in anchor if not sp.lo <= v <= sp.hi]
            where = (
                f"The in-process ratio of the plan-accuracy section (tiny-eagle3, γ = 3: mean {anchor[0]:.2f}×, "
                f"median per prompt {anchor[1]:.2f}×): "
                + (f"{', '.join(inside)} inside the interval" if inside else "")
                + ("; " if inside and outside else "")
                + (f"{', '.join(outside)} OUTSIDE it" if outside else "")
                + " (the two sides run one after the other, so load from other processes can fall on one side)."
            )
        shipped = shipped_ratio()
        if shipped is not None:
            v, rng = shipped
            where += (
                f" The in-process ratio at the recipe's shipped settings (section \"Tiny recipes at their "
                f"shipped settings\": whole generations, prefill included, like bench's per-user tok/s) is "
                f"{v:.2f}× (per round {rng}): "
                + ("inside" if sp.lo <= v <= sp.hi else "OUTSIDE")
                + " the interval."
            )
        lines += [
            "",
            "`sdtk bench --compare tiny-baseline tiny-eagle3 --workload code --concurrency 1 --requests 32` "
            f"(same machine and run): speedup **{sp.point:.2f}× [{sp.lo:.2f}, {sp.hi:.2f}]** (per-user tok/s, "
            f"paired bootstrap 95% CI), TPOT speedup {ab['tpot_speedup']:.2f}×, tokens/request "
            f"{ab['tokens'][0]:.1f} / {ab['tokens'][1]:.1f}, τ = {ab['tau']:.2f}, {ab['tpc']:.2f} tokens per "
            f"chunk, exact counts: {ab['exact']}. {where} Counting one token per chunk, as bench did "
            f"before, would have reported about {sp.point / ab['tpc']:.2f}×.",
        ]
    lines.append(END)
    from benchmarks import _harness

    _harness.write_section(ROOT / "docs" / "benchmarks.md", START, END, "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default=RECIPES)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--no-compare", action="store_true")
    args = ap.parse_args(argv)
    LOAD_AT_START.append(os.getloadavg()[0])
    rows = []
    with tempfile.TemporaryDirectory(prefix="sdtk-yardstick-") as d:
        for name in args.recipes.split(","):
            got = measure(name, args.rounds, args.requests, args.max_tokens, Path(d))
            for r in got:
                print(r, file=sys.stderr)
            rows += got
        ab = None if args.no_compare else compare_run(Path(d))
    write_section(rows, ab, "python " + " ".join(sys.argv), args.rounds, args.requests, args.max_tokens)
