#!/usr/bin/env python3
"""Plan against the served model's in-flight batcher, run in process: when plan and the served A/B
disagree, is it the cost model or the serving path?

For each RECIPE (default: tiny-eagle3-membound and tiny-ngram-membound):

1. `sdtk plan RECIPE --gamma-max <the recipe's draft length> --concurrency LEVELS` (the CLI, as
   scripts/bench_membound_served.py runs it) predicts the speedup at the recipe's own draft length.
2. The reference runtime loads the recipe and serves concurrent calls with the served model's
   in-flight batcher (`enable_batching` with the recipe's build.max_batch_size, one torch thread as
   a served instance: the very code the `tensorrt_llm` model runs, without Triton, the stub's
   threads and the responses). At each level a closed loop of c threads sends the same --requests
   workload prompts (--max-tokens new tokens each, the end id ignored), speculation off and then
   on, level by level, for --rounds rounds. Speedup = mean per-request output tok/s (output
   tokens ÷ end-to-end time) speculative ÷ plain: the CLI's definition.
3. Served beside them: with --live, tiny-baseline-membound and RECIPE deployed on the embedded
   Triton and the same closed loops sent over gRPC (the project's client), each right before its
   in-process twin at every level and round, so that both see the same machine; or, with
   --served DIR (what `bench_membound_served.py --keep DIR` kept: RECIPE.compare.json or
   RECIPE.N.compare.json), earlier `sdtk bench --compare` runs' per-level medians.

The section shows, per level: plan, the batched runtime in process and served (medians, each
round's or run's figure), and abs(a − b) ÷ b for plan against the batched runtime (the cost
model's own error), plan against served (the goal's measure) and served against the batched
runtime (what the serving path adds). Draft-target is not offered: served, its loop is the BLS's
(scripts/bench.py run bls_replay replays that in process), not the runtime's own.

    python scripts/bench.py run plan_batched [RECIPE ...] [--concurrency 1,2,4,8] [--requests 16]
        [--rounds 2] [--probe-prompts 16] [--live | --served DIR] [--keep DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench_membound_served import BASELINE, _plan  # the same plan invocation as the served check

from benchmarks._harness import cpu_model, publish, sdtk  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SECTION = "bench_plan_batched"
DEFAULT = ["tiny-eagle3-membound", "tiny-ngram-membound"]


def closed_loop(request: Callable[[int], int], count: int, concurrency: int) -> dict:
    """`concurrency` threads take the prompts 0..count-1 in turn (a closed loop, as `sdtk bench`
    keeps that many requests in flight); `request(i)` sends prompt i and returns its output
    tokens. Per request: output tokens ÷ end-to-end seconds."""
    todo = list(range(count))
    lock = threading.Lock()
    rates: dict[int, float] = {}
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                i = todo.pop(0)
            try:
                t0 = time.perf_counter()
                tokens = request(i)
                rates[i] = tokens / (time.perf_counter() - t0)
            except BaseException as e:  # re-raised below: a failed request fails the run
                errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"bench-{k}") for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {"mean_tok_s": statistics.fmean(rates.values()), "wall_s": time.perf_counter() - t0}


class Live:
    """--live: the baseline and RECIPE deployed detached on the embedded Triton (sdtk deploy),
    asked over gRPC streaming with the project's client, the same prompts as in process, the
    end id ignored; tokens: the server's own count (return_num_output_tokens)."""

    def __init__(self, recipe: str, work: Path):
        self.sides: dict[str, dict[str, Any]] = {}
        self.clients: dict[str, Any] = {}
        try:
            for side, name in (("plain", BASELINE), ("spec", recipe)):
                argv = ["deploy", name, "--workdir", str(work), "--detach", "--auto-ports", "--no-validate"]
                proc = sdtk(*argv, "--on-failure", "none", "--json")
                if proc.returncode != 0:
                    raise SystemExit(f"sdtk deploy {name} failed: {proc.stderr.strip()[-2000:]}")
                self.sides[side] = json.loads(proc.stdout)
        except BaseException:
            self.close()
            raise

    def request(self, side: str, text: str, new: int) -> Callable[[], int]:
        from toolkit.client import TritonClient

        dep = self.sides[side]
        if side not in self.clients:  # one per side: the client is thread-safe
            self.clients[side] = TritonClient(dep["grpc_url"], protocol="grpc", model=dep["model"])
        client = self.clients[side]

        def send() -> int:
            extra = {"return_num_output_tokens": True}
            with client.stream(text, new, end_id=-1, extra_inputs=extra) as st:
                tokens = st.response.output_tokens
            if tokens is None:
                raise SystemExit(f"{dep['recipe']}: the server did not count its output tokens")
            return tokens

        return send

    def close(self) -> None:
        for dep in self.sides.values():
            sdtk("stop", "--workdir", dep["workdir"])


def batched(recipe: str, args: argparse.Namespace, levels: list[int], work: Path) -> dict[int, list[dict]]:
    """Per level, one record per round: the plain and speculative closed loops in process (and,
    with --live, served, right before them) and their ratios."""
    import torch

    from toolkit.bench.measure.inprocess import encode, load_runtime
    from toolkit.bench.measure.workloads import load_workload
    from toolkit.recipe import load_recipe
    from toolkit.reference import PLAIN

    torch.set_num_threads(1)  # a served reference instance's (toolkit.generate.reference_threads)
    rec = load_recipe(recipe)
    rt = load_runtime(rec)
    # As the served model does (model_repo_templates/reference/tensorrt_llm/1/model.py initialize).
    rt.enable_batching(rec.build.max_batch_size, capacity=rec.build.max_seq_len + 72)
    budget = rt.max_context - args.max_tokens - 1
    texts = [p.text for p in load_workload(args.workload).sample(args.requests, 0)]
    prompts = [encode(rt, t)[-budget:] for t in texts]
    live = Live(recipe, work / recipe) if args.live else None
    try:
        rt.generate(prompts[0], 4, end_id=-1)  # warm-up
        sends = {}
        if live is not None:
            sends = {
                side: [live.request(side, t, args.max_tokens) for t in texts] for side in ("plain", "spec")
            }
            for side in sends:
                sends[side][0]()  # warm-up
        out: dict[int, list[dict]] = {c: [] for c in levels}
        for r in range(args.rounds):
            for c in levels:
                rec_ = {}
                for side in ("plain", "spec"):
                    if live is not None:
                        rec_[f"served_{side}"] = closed_loop(lambda i, s=side: sends[s][i](), len(texts), c)

                    def local(i: int, spec: bool = side == "spec") -> int:
                        res = rt.generate(prompts[i], args.max_tokens, spec=None if spec else PLAIN, end_id=-1)
                        return len(res.token_ids)

                    rec_[side] = closed_loop(local, len(prompts), c)
                rec_["speedup"] = rec_["spec"]["mean_tok_s"] / rec_["plain"]["mean_tok_s"]
                if live is not None:
                    rec_["served_speedup"] = (
                        rec_["served_spec"]["mean_tok_s"] / rec_["served_plain"]["mean_tok_s"]
                    )
                out[c].append(rec_)
                served = f", served {rec_['served_speedup']:.2f}×" if live is not None else ""
                print(
                    f"[batched] {recipe} round {r + 1} c={c}: {rec_['speedup']:.2f}×{served}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        rt.batcher.close()
        if live is not None:
            live.close()
    return out


def served_medians(directory: Path, recipe: str) -> dict[int, list[float]]:
    """Each kept `sdtk bench --compare` run's speedup per level (RECIPE.compare.json, RECIPE.N.compare.json)."""
    out: dict[int, list[float]] = {}
    for path in sorted(directory.glob(f"{recipe}*.compare.json")):
        rest = path.name[len(recipe) : -len(".compare.json")]
        if rest and not (rest.startswith(".") and rest[1:].isdigit()):
            continue  # another recipe whose name starts with this one's
        for lv in json.loads(path.read_text())["levels"]:
            out.setdefault(int(lv["concurrency"]), []).append(float(lv["speedup"]["point"]))
    return out


def _cell(each: list[float]) -> str:
    return f"{statistics.median(each):.2f}× (" + ", ".join(f"{x:.2f}" for x in each) + ")"


def _err(a: float | None, b: float | None) -> str:
    return f"{abs(a - b) / b:.2f}" if a and b else "n/a"


def rows(
    recipe: str, plan: dict[int, float] | None, runs: dict[int, list[dict]], served: dict[int, list[float]]
) -> list[str]:
    """One table row per level: plan; the batched runtime in process and served (medians, each
    round or run); plan's error against each; the serving path's share (served vs batched)."""
    lines = []
    for c, recs in runs.items():
        each = [x["speedup"] for x in recs]
        b = statistics.median(each)
        p = (plan or {}).get(c)
        s = served.get(c)
        sm = statistics.median(s) if s else None
        lines.append(
            f"| {recipe} | {c} | "
            + (f"{p:.2f}×" if p else "n/a")
            + f" | {_cell(each)} | "
            + (_cell(s) if s else "n/a")
            + f" | {_err(p, b)} | {_err(p, sm)} | {_err(sm, b)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", default=DEFAULT)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workload", default="code")
    ap.add_argument("--probe-prompts", type=int, default=16, help="sdtk plan --probe-prompts")
    ap.add_argument("--served", type=Path, help="bench_membound_served.py --keep DIR: the served A/B beside")
    ap.add_argument(
        "--live",
        action="store_true",
        help="also deploy the baseline and RECIPE and run the same closed loops served, right before the "
        "in-process ones at every level and round (instead of --served)",
    )
    ap.add_argument("--keep", type=Path, help="keep RECIPE.plan.json and RECIPE.batched.json here")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.live and args.served:
        ap.error("--live measures the served side itself: leave out --served")
    from toolkit.bench.decide.plan import bls_loop
    from toolkit.recipe import load_recipe

    for recipe in args.recipes:
        rec = load_recipe(recipe)
        if rec.speculative.mode == "none":
            ap.error(f"{recipe} does not speculate: name a speculative recipe")
        if bls_loop(rec, "reference"):  # plan's own test: it predicts that loop for such recipes
            ap.error(f"{recipe} is served through the BLS loop (scripts/bench.py run bls_replay), not here")
    load0 = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    table: list[str] = []
    for recipe in args.recipes:
        plan = _plan(recipe, args)
        with tempfile.TemporaryDirectory(prefix="sdtk-plan-batched-") as tmp:
            runs = batched(recipe, args, levels, Path(tmp))
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / f"{recipe}.batched.json").write_text(json.dumps(runs, indent=2))
        if args.live:
            served = {c: [x["served_speedup"] for x in recs] for c, recs in runs.items()}
        else:
            served = served_medians(args.served, recipe) if args.served else {}
        table += rows(recipe, plan, runs, served)
    load1 = os.getloadavg()[0]
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    section = "\n".join(
        [
            start,
            "## Plan against the in-flight batcher in process: the cost model's error apart from the serving path's",
            "",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores; load average {load0:.1f} before, {load1:.1f} after",
            f"- date: {started:%Y-%m-%d %H:%M} UTC",
            f"- command: `python scripts/bench.py run plan_batched {' '.join(sys.argv[1:])}`",
            f"- method: plan as `sdtk plan RECIPE --gamma-max <the recipe's draft length> --probe-prompts "
            f"{args.probe_prompts} --requests {args.requests}`; batched: the reference runtime with the served model's in-flight batcher, "
            f"in process, 1 torch thread, a closed loop of c threads over the same {args.requests} `{args.workload}` "
            f"prompts, {args.max_tokens} new tokens each, speculation off then on at each level, {args.rounds} "
            "round(s) (cell: the median, each round's figure in parentheses); speedup = mean per-request output "
            "tok/s ratio"
            + (
                f"; served: the `sdtk bench --compare` runs kept in `{args.served}` (median, each run's figure)"
                if args.served
                else "; served (`--live`): tiny-baseline-membound and RECIPE deployed on the embedded Triton, the "
                "same closed loops over gRPC streaming with the project's client (tokens: the server's own count), "
                "each right before its in-process twin at every level and round (median, each round's figure)"
                if args.live
                else ""
            )
            + ". The last three columns: abs(a − b) ÷ b for plan against the batched runtime (the cost "
            "model's own error), plan against served (the goal's measure) and served against the batched "
            "runtime (what the serving path adds).",
            "",
            "| recipe | c | plan | batched in process | served | plan vs batched | plan vs served | served vs batched |",
            "|---|---:|---:|---|---|---:|---:|---:|",
            *table,
            "",
            end,
        ]
    )
    publish(section, args.out, start, end, write=not args.no_write)
    return 0
