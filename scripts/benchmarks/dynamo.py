"""Dynamo scale-out on CPU: throughput of 2 workers against 1 behind Dynamo's frontend.

Deploys the recipe twice with `sdtk deploy --target dynamo` (one deployment with 1 worker, one
with 2; detached, free ports, both up for the whole run), warms each up once, then measures each
at one concurrency level over the OpenAI API (toolkit.bench's load generator, streamed
/v1/completions, greedy, output tokens counted with the recipe's tokenizer), alternating the two
in each round (1 then 2, then 2 then 1, ...) so that a machine whose speed drifts moves both
alike. Reports the median output tok/s of each, the median of the per-round ratios with its
bootstrap CI over rounds (goal >= 1.3x on 2 cores), and, per measurement, the requests each
worker served (its sdtk_spec_requests_total) and the CPU seconds of every process (frontend,
each worker, the client: this process), so that the table says which process bounds the
throughput. After the run it checks that `sdtk stop` left no process and no listening port.

    python scripts/bench.py run dynamo [--recipe tiny-baseline-membound] [--set build.max_batch_size=4]
                                       [--concurrency 8] [--rounds 3] [--no-pin] [--no-write]

The default recipe is the memory-bound twin of the tiny baseline (its target padded x32 when the
reference runtime loads it, so that a step costs tens of milliseconds): with the tiny target
itself (`--recipe tiny-baseline`) a step costs so little that the frontend and the client, not
the workers, bound the throughput. The workers batch in flight (up to the recipe's
build.max_batch_size each): at concurrency 8 one worker steps all 8 requests at once where each of
two steps 4, so the ratio also depends on how a step's cost grows with its batch (the section
gives the workers' CPU per output token for both). Each worker runs torch on one thread
(toolkit.generate.reference_threads) and, by default, is pinned with every thread of it to a core
of its own (worker-i: core i; `--no-pin` leaves them to the scheduler); the frontend and the
client are not pinned. The table gives the load average after each measurement: on a machine
shared with other jobs the ratio says little, the CPU seconds per token somewhat more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._harness import ROOT, cpu_model, publish, sdtk

START, END = "<!-- bench_dynamo:start -->", "<!-- bench_dynamo:end -->"
DEFAULT_RECIPE = "tiny-baseline-membound"
GOAL = 1.3
CLIENT = "client"  # this process: the load generator and its token counting


@dataclass
class Deployment:
    """One detached Dynamo deployment under measurement: its `sdtk deploy --json` answer and the
    processes its supervisor recorded (name → pid; worker → its /metrics URL)."""

    workers: int
    info: dict[str, Any]
    root: Path
    pids: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    pinned: dict[str, int] = field(default_factory=dict)
    supervisor: int = 0


def deploy(recipe: str, workers: int, workdir: Path, overrides: list[str]) -> Deployment:
    sets = [a for kv in overrides for a in ("--set", kv)]
    r = sdtk(
        "deploy", recipe, *sets, "--target", "dynamo", "--workers", str(workers), "--detach", "--auto-ports",
        "--no-validate", "--workdir", str(workdir), "--json",
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"deploy --workers {workers} failed:\n{r.stderr[-3000:]}")
    info = dict(json.loads(r.stdout))
    dep = Deployment(workers, info, Path(info["workdir"]), supervisor=int(info.get("pid") or 0))
    procs = json.loads((dep.root / "dynamo" / "processes.json").read_text())
    for name, p in sorted(procs.items()):
        if p.get("pid"):
            dep.pids[name] = int(p["pid"])
        if p.get("metrics_url"):
            dep.metrics[name] = str(p["metrics_url"])
    return dep


def pin_workers(dep: Deployment) -> None:
    """Pin each worker (every thread of it: Dynamo's runtime and torch start theirs before this
    runs, and a thread keeps the affinity it was created with) to a core of its own, worker-i on
    core i mod the cores this process may use; the frontend is left to the scheduler."""
    cores = sorted(os.sched_getaffinity(0))
    for name, pid in dep.pids.items():
        if not name.startswith("worker-"):
            continue
        core = cores[int(name.split("-")[1]) % len(cores)]
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError, PermissionError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), {core})
        dep.pinned[name] = core


def cpu_seconds(pid: int, system_only: bool = False) -> float:
    """User + system (or, `system_only`, system) CPU seconds of process `pid` so far, all its
    threads (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def served(dep: Deployment) -> dict[str, float]:
    """Requests each worker has finished: its sdtk_spec_requests_total, read as `sdtk bench` reads
    a Dynamo worker's counters (toolkit.bench.measure.openai.parse_spec_counters)."""
    import httpx

    from toolkit.bench.measure.openai import parse_spec_counters

    return {
        name: float(parse_spec_counters(httpx.get(url, timeout=5.0).text)["requests"])
        for name, url in dep.metrics.items()
    }


def snapshot(dep: Deployment) -> dict[str, Any]:
    cpu = {name: cpu_seconds(pid) for name, pid in dep.pids.items()}
    cpu["supervisor"] = cpu_seconds(dep.supervisor)
    cpu[CLIENT] = time.process_time()
    system = {name: cpu_seconds(pid, system_only=True) for name, pid in dep.pids.items()}
    return {"cpu": cpu, "system": system, "served": served(dep), "t": time.monotonic()}


@dataclass(frozen=True)
class Client:
    """The load generator's tokenizer: its name, and the counter loaded once (so that no
    measurement pays for loading it)."""

    tokenizer: str
    counter: Any


def load(url: str, model: str, args: argparse.Namespace, client: Client, requests: int) -> dict[str, Any]:
    """One closed-loop level at args.concurrency (no warm-up inside it): the load generator's summary."""
    from toolkit.bench.measure.loadgen import Sampling, run_load
    from toolkit.bench.measure.openai import OpenAIEndpoint
    from toolkit.bench.measure.workloads import load_workload

    async def go():  # noqa: ANN202
        ep = OpenAIEndpoint(url, model=model, timeout=600)
        try:
            return await run_load(
                ep,
                load_workload(args.workload, max_tokens=args.max_tokens),
                concurrency=[args.concurrency],
                requests=requests,
                warmup=0,
                seed=args.seed,
                sampling=Sampling(),
                timeout=600,
                progress=False,
                count_tokens=client.counter,
                tokenizer=client.tokenizer,
            )
        finally:
            await ep.close()

    s = asyncio.run(go()).levels[0].summary()
    if s["errors"]:
        raise SystemExit(f"{s['errors']} request(s) failed at {url}: {s['error_kinds']}")
    return dict(s)


def measure(dep: Deployment, args: argparse.Namespace, client: Client) -> dict[str, Any]:
    """One measurement of `dep`: output tok/s, and over it each process's CPU seconds and each
    worker's served requests (differences of snapshots taken just before and just after)."""
    before = snapshot(dep)
    s = load(dep.info["http_url"], dep.info["model"], args, client, args.requests)
    after = snapshot(dep)
    wall = after["t"] - before["t"]
    return {
        "tok_s": float(s["output_tok_s"]),
        "tokens": int(s["output_tokens"]),
        "ok": int(s["ok"]),
        "wall_s": wall,
        "cpu": {k: after["cpu"][k] - before["cpu"][k] for k in before["cpu"]},
        "system": {k: after["system"][k] - before["system"][k] for k in before["system"]},
        "served": {k: after["served"][k] - before["served"][k] for k in before["served"]},
        "load": os.getloadavg()[0],  # the 1-minute average, at the end of it
    }


def listening_ports() -> set[int]:
    """Every TCP port something listens on (/proc/net/tcp and tcp6, state LISTEN)."""
    ports = set()
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if len(f) > 3 and f[3] == "0A":
                    ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def deployment_ports(dep: Deployment) -> set[int]:
    """The TCP ports the deployment's processes listen on now (frontend, workers' request plane,
    metrics, event plane)."""
    from toolkit.dynamo.status import listeners

    found = listeners([dep.supervisor, *dep.pids.values()])
    return {int(a.rsplit(":", 1)[1]) for addrs in found.values() for a in addrs}


def stop_and_check(deps: list[Deployment], ports: set[int]) -> list[str]:
    """`sdtk stop` each deployment, then what is left: live processes of theirs, ports of theirs
    still listened on (empty: nothing)."""
    from toolkit.server import procs

    for dep in deps:
        r = sdtk("stop", "--workdir", str(dep.root))
        if r.returncode != 0:
            print(f"sdtk stop {dep.root}: {r.stderr.strip()[-500:]}", file=sys.stderr)
    left = []
    for dep in deps:
        for name, pid in {"supervisor": dep.supervisor, **dep.pids}.items():
            if pid and procs.alive(pid):
                left.append(f"{dep.workers}-worker {name} (pid {pid}) alive")
    still = sorted(ports & listening_ports())
    if still:
        left.append(f"port(s) {', '.join(map(str, still))} still listened on")
    return left


def run(args: argparse.Namespace, client: Client) -> dict[str, Any]:
    """Deploy both, warm them up, measure them alternately; stop them and check what is left."""
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    deps: dict[int, Deployment] = {}
    ports: set[int] = set()
    left: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sdtk-bench-dynamo-") as tmp:
        try:
            for n in (1, 2):
                deps[n] = deploy(args.recipe, n, Path(tmp) / f"w{n}", args.set)
                if args.pin:
                    pin_workers(deps[n])
                print(f"workers {n}: pids {deps[n].pids}, pinned {deps[n].pinned or 'no'}", file=sys.stderr)
                if args.warmup:  # once per deployment: the first requests load lazily built state
                    load(deps[n].info["http_url"], deps[n].info["model"], args, client, args.warmup)
            for rnd in range(args.rounds):
                for n in (1, 2) if rnd % 2 == 0 else (2, 1):
                    m = measure(deps[n], args, client)
                    runs[n].append(m)
                    print(f"round {rnd + 1} workers {n}: {fmt_measurement(m)}", file=sys.stderr)
        finally:
            for dep in deps.values():
                with contextlib.suppress(OSError):
                    ports |= deployment_ports(dep)
            left = stop_and_check(list(deps.values()), ports)
    return {"runs": runs, "deps": deps, "left": left, "ports": ports}


def fmt_measurement(m: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in m["cpu"].items())
    srv = ", ".join(f"{k} {v:.0f}" for k, v in m["served"].items())
    system = ", ".join(f"{k} {v:.1f}" for k, v in m.get("system", {}).items())
    return (
        f"{m['tok_s']:.1f} output tok/s ({m['ok']} requests, {m['tokens']} tokens, {m['wall_s']:.1f} s, "
        f"load average {m['load']:.1f}); served: {srv}; CPU s: {cpu}; of which system: {system}"
    )


def per_token_ms(runs: list[dict[str, Any]], name: str) -> float:
    """Median over the rounds of `name`'s CPU milliseconds per output token."""
    return statistics.median(1000 * m["cpu"].get(name, 0.0) / max(1, m["tokens"]) for m in runs)


def busy(runs: list[dict[str, Any]], name: str) -> float:
    """Median over the rounds of the share of one core that `name` used (CPU s / wall s)."""
    return statistics.median(m["cpu"].get(name, 0.0) / m["wall_s"] for m in runs)


def ceiling(runs: list[dict[str, Any]], workers: int, cores: int) -> float:
    """The output tok/s that the CPU costs measured allow on an otherwise idle machine of `cores`
    cores: each worker (pinned, one torch thread) gets at most one core, and all processes
    together at most `cores`. Costs per token are the measured medians."""
    per_worker = max(per_token_ms(runs, f"worker-{i}") for i in range(workers))
    total_ms = sum(per_token_ms(runs, k) for k in runs[0]["cpu"])
    by_worker = 1000 / per_worker if per_worker else float("inf")
    by_cores = 1000 * cores / total_ms if total_ms else float("inf")
    return min(by_worker, by_cores)


def summarize(runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    from toolkit.bench.measure.metrics import bootstrap_ci

    tok = {n: [m["tok_s"] for m in runs[n]] for n in (1, 2)}
    per_round = [b / a for a, b in zip(tok[1], tok[2], strict=True)]
    ci = bootstrap_ci(per_round, statistics.median, seed=0)
    return {
        "tok": tok,
        "median": {n: statistics.median(v) for n, v in tok.items()},
        "per_round": per_round,
        "ratio": ci,
    }


def process_rows(runs: dict[int, list[dict[str, Any]]]) -> list[str]:
    """The per-process table: CPU ms per output token and share of one core, medians over rounds."""
    names = sorted({k for n in (1, 2) for m in runs[n] for k in m["cpu"]}, key=_order)
    rows = [
        "| process | 1 worker: CPU ms / output token | 1 worker: share of a core | "
        "2 workers: CPU ms / output token | 2 workers: share of a core |",
        "|---|---|---|---|---|",
    ]
    for k in names:
        cells = []
        for n in (1, 2):
            present = any(k in m["cpu"] for m in runs[n])
            cells += [f"{per_token_ms(runs[n], k):.2f}", f"{busy(runs[n], k):.0%}"] if present else ["", ""]
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
        if k.startswith("worker-") and not any(n.startswith("worker-") and n > k for n in names):
            cells = []
            for n in (1, 2):
                workers = [f"worker-{i}" for i in range(n)]
                cells += [
                    f"{sum(per_token_ms(runs[n], w) for w in workers):.2f}",
                    f"{sum(busy(runs[n], w) for w in workers):.0%}",
                ]
            rows.append("| workers together | " + " | ".join(cells) + " |")
    return rows


def _order(name: str) -> tuple[int, str]:
    return ({"frontend": 0, CLIENT: 9, "supervisor": 8}.get(name, 1), name)


def section(args: argparse.Namespace, res: dict[str, Any], loads: tuple[float, float]) -> str:
    runs, s = res["runs"], summarize(res["runs"])
    cores = len(os.sched_getaffinity(0))
    ci = s["ratio"]
    served_cells = {
        n: "; ".join(", ".join(f"{int(v)}" for v in m["served"].values()) for m in runs[n]) for n in (1, 2)
    }
    overridden = " with " + ", ".join(f"`{kv}`" for kv in args.set) if args.set else ""
    load_cells = {n: ", ".join(f"{m['load']:.1f}" for m in runs[n]) for n in (1, 2)}
    ceil = {n: ceiling(runs[n], n, cores) for n in (1, 2)}
    work = {n: sum(per_token_ms(runs[n], f"worker-{i}") for i in range(n)) for n in (1, 2)}
    pin = (
        "each pinned with all its threads to a core of its own (worker-i: core i); the frontend and the "
        "client not pinned (the one-worker deployment thus computes on one core, as each worker of the "
        "two-worker one does; its frontend and client may use the other)"
        if args.pin
        else "not pinned to cores"
    )
    lines = [
        START,
        "## Dynamo scale-out: 2 workers against 1 behind one frontend (CPU)",
        "",
        f"- Machine: {cpu_model()}, {cores} cores, shared with other jobs (load average "
        f"{loads[0]:.1f} before, {loads[1]:.1f} after).",
        "- Deployments: ai-dynamo 1.6.1 (frontend with file discovery, TCP request plane, round-robin "
        "router) and sdtk's reference-runtime workers, both deployments up throughout.",
        f"- Load: recipe `{args.recipe}`{overridden}, workload `{args.workload}`, concurrency {args.concurrency}, "
        f"{args.requests} requests of {args.max_tokens} tokens per measurement (greedy, streamed "
        f"/v1/completions), after {args.warmup} warm-up requests per deployment; {args.rounds} round(s) "
        "alternating the two deployments.",
        f"- Workers: one torch thread each, in-flight batches of up to {res['max_batch']} requests each "
        f"(the recipe's build.max_batch_size), {pin}.",
        "",
        "| workers | output tok/s per round | median | requests served per worker, per round | "
        "load average after each round |",
        "|---|---|---|---|---|",
        *(
            f"| {n} | {', '.join(f'{v:.1f}' for v in s['tok'][n])} | {s['median'][n]:.1f} | "
            f"{served_cells[n]} | {load_cells[n]} |"
            for n in (1, 2)
        ),
        "",
        f"**2 workers / 1 worker: {ci.fmt()}** (median of the per-round ratios "
        f"{', '.join(f'{r:.2f}' for r in s['per_round'])}; 95% CI: percentile bootstrap over rounds; "
        f"median over median {s['median'][2] / s['median'][1]:.2f}×; goal ≥ {GOAL}× on {cores} cores).",
        "",
        "Where the CPU goes (medians over rounds; CPU seconds from /proc, so other jobs on the machine "
        "do not inflate them; the client is the load generator with its token counting):",
        "",
        *process_rows(runs),
        "",
        f"On an otherwise idle {cores}-core machine these costs allow at most {ceil[1]:.0f} output tok/s "
        f"with 1 worker and {ceil[2]:.0f} with 2 (each worker at most one core, all processes together "
        f"at most {cores}): a ceiling of {ceil[2] / ceil[1]:.2f}× for the ratio. The workers together spent "
        f"{work[1]:.2f} CPU ms per output token with 1 worker and {work[2]:.2f} with 2 ({work[2] / work[1]:.2f}×): "
        "at concurrency {c} one worker batches up to {b1} requests per step, each of two workers up to {b2}.".format(
            c=args.concurrency,
            b1=min(args.concurrency, res["max_batch"]),
            b2=min(-(-args.concurrency // 2), res["max_batch"]),
        ),
        "",
        "After `sdtk stop`: "
        + (
            "; ".join(res["left"])
            if res["left"]
            else f"no process of either deployment left, and none of their {len(res['ports'])} "
            "listening ports still listened on."
        ),
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--recipe",
        default=DEFAULT_RECIPE,
        help=f"recipe name or path (default {DEFAULT_RECIPE}; tiny-baseline shows the frontend-bound case)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field on both deployments, as `sdtk deploy --set` (e.g. build.max_batch_size=4)",
    )
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32, help="requests per measurement")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--warmup", type=int, default=8, help="warm-up requests per deployment, once, before the rounds"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workload", default="code")
    ap.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pin each worker (all its threads) to a core of its own (worker-i: core i); default on",
    )
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs/benchmarks.md")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import toolkit.bench.measure.loadgen  # noqa: F401 - imported here, not inside the first measurement
    import toolkit.bench.measure.openai  # noqa: F401
    from toolkit.bench.measure.tokens import TokenCounter, recipe_tokenizer
    from toolkit.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.set)
    tokenizer = recipe_tokenizer(recipe)
    assert tokenizer is not None
    client = Client(tokenizer, TokenCounter(tokenizer).load())
    load_before = os.getloadavg()[0]
    res = run(args, client)
    res["max_batch"] = recipe.build.max_batch_size
    text = section(args, res, (load_before, os.getloadavg()[0]))
    publish(text, ROOT / "docs" / "benchmarks.md", START, END, write=not args.no_write)
    return 1 if res["left"] else 0
