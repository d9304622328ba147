#!/usr/bin/env python
"""The reference runtime's own cost per speculative step: wall time minus the forwards' time.

Every model forward (target and draft decoders and output heads, the EAGLE-3 head's layers,
the Medusa heads) is timed by forward hooks on the outermost module calls (a decoder the lean
forward runs, toolkit.reference.lean, by a wrapper around LeanDecoder.run, which stands where
the decoder call stood: the ids tensor is made outside either; a chain's positions and mask,
made inside transformers' call, are looked up outside run(), a few µs counted as the runtime's;
an output head a greedy step runs as a matmul into a buffer, CachedLM._head_rows, by a wrapper
around that method, the argmax after it counted as the runtime's); what is left of a
generation's wall time is the runtime's own work: proposing, tree and mask building, KV-cache
bookkeeping, verification, copies. What the measuring itself adds outside the forwards (hook
dispatch and the CPU clock's reads, a system call each) is calibrated per round and subtracted
per hooked call (the `clock` column; add it back for the raw figure). Reported per mode as milliseconds per target step (median of
--runs rounds, each over the same prompts). Times are this thread's CPU time (torch runs on this
one thread, --threads 1): on a machine shared with other work, wall time also counts the time
the scheduler gave the core to someone else, CPU time does not.

With --tree PATH (repeatable), each tree (a checkout of this repository, e.g. a `git worktree`
of an older commit) is measured in its own worker process, the trees taking turns round by
round, so that load from other processes falls on all alike; the first tree is the anchor and
the others are reported as ratios against it. Writes its section of docs/lab/benchmarks-history.md between
the bench_overhead markers.

    python scripts/bench.py run overhead [--tree OLD --tree .] [--runs 5] [--prompts 8] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
START, END = "<!-- bench_overhead:start -->", "<!-- bench_overhead:end -->"
MODES = ["none", "draft_target", "ngram", "lookahead", "medusa", "eagle3_chain", "eagle3_tree"]


class ForwardClock:
    """Seconds spent inside the outermost calls of the hooked modules, and how many there were."""

    def __init__(self) -> None:
        self.depth = 0
        self.start = 0.0
        self.total = 0.0
        self.calls = 0

    def _pre(self, *_: Any) -> None:
        if self.depth == 0:
            self.calls += 1
            self.start = time.thread_time()
        self.depth += 1

    def _post(self, *_: Any) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.total += time.thread_time() - self.start

    def hook(self, module: Any) -> None:
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def wrap(self, obj: Any, name: str) -> None:
        """Time calls of obj.name (a method that runs a forward without calling a module)."""
        fn = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            self._pre()
            try:
                return fn(*args, **kwargs)
            finally:
                self._post()

        setattr(obj, name, timed)


def clock_cost(n: int = 300) -> float:
    """CPU seconds the clock itself adds outside the forwards, per outermost hooked call: torch's
    hook dispatch and about half of each clock read (reading a thread's CPU clock is a system
    call, microseconds on a virtual machine). Measured as the runtime meets it, right after work
    that streams megabytes through the caches (as a forward does): a no-op module, hooked against
    not hooked, the median of `n` paired calls. The no-op forward counts on both sides."""
    import torch

    class Noop(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x

    x = torch.zeros(1)
    plain, hooked = Noop(), Noop()
    clock = ForwardClock()
    clock.hook(hooked)
    flush = torch.zeros(4 << 20)  # 16 MB, about the tiny target's weights
    diffs = []
    for _ in range(n):
        flush.add_(1.0)
        t = time.thread_time()
        plain(x)
        base = time.thread_time() - t
        flush.add_(1.0)
        clock.total = 0.0
        t = time.thread_time()
        hooked(x)
        diffs.append(time.thread_time() - t - clock.total - base)
    return max(0.0, statistics.median(diffs))


def _specs(rt: Any) -> dict[str, Any]:
    from toolkit.recipe import DraftTarget, Eagle3, Lookahead, Medusa, NGram, NoSpeculation

    return {
        "none": NoSpeculation(),
        "draft_target": DraftTarget(mode="draft_target", max_draft_len=3),
        "ngram": NGram(mode="ngram", max_draft_len=5, max_matching_ngram_size=3),
        "lookahead": Lookahead(mode="lookahead", window=4, ngram=3, verification_set=4),
        "medusa": Medusa(mode="medusa", medusa_choices=[[0], [1], [0, 0]]),
        "eagle3_chain": Eagle3(mode="eagle3", max_draft_len=3),
        "eagle3_tree": Eagle3(
            mode="eagle3", max_draft_len=3, eagle_choices=[[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
        ),
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One round in this process: per mode, wall and forward seconds and target steps."""
    import torch

    from toolkit.reference import ReferenceRuntime
    from toolkit.reference.prompts import PROMPTS

    torch.set_num_threads(args.threads)
    m = args.models
    rt = ReferenceRuntime.load(
        m / "target", {"draft": m / "draft", "medusa_heads": m / "medusa", "eagle_head": m / "eagle3"}
    )
    clock = ForwardClock()
    for lm in (rt.target, rt.draft):
        if getattr(lm, "lean", None) is not None:
            # The lean forward (toolkit.reference.lean) never calls the decoder module: time its
            # run(), which stands where the decoder call stood.
            clock.wrap(lm.lean, "run")
        else:
            clock.hook(lm.decoder)
        clock.hook(lm.lm_head)
        if getattr(lm, "_head_wt", None) is not None:
            # A greedy step's output head runs as a matmul into a buffer (CachedLM._head_rows),
            # not as an lm_head call: time that instead (the argmax after it stays outside).
            clock.wrap(lm, "_head_rows")
    # The heads' methods call their submodules one by one: hook them all (nesting is counted once).
    for mod in [*rt.weights["eagle_head"].modules(), *rt.weights["medusa_heads"].modules()]:
        clock.hook(mod)
    prompts = [rt.tokenizer(p)["input_ids"] for p in PROMPTS[: args.prompts]]
    specs = _specs(rt)
    out: dict[str, Any] = {}
    for mode in args.modes:
        spec = specs[mode]
        rt.generate(prompts[0], 8, spec=spec, end_id=-1)  # warm-up
        wall = fwd = 0.0
        steps = tokens = calls = 0
        for ids in prompts:
            clock.total = 0.0
            clock.calls = 0
            t = time.thread_time()
            g = rt.generate(ids, args.new_tokens, spec=spec, end_id=-1)
            wall += time.thread_time() - t
            fwd += clock.total
            calls += clock.calls
            steps += g.stats.steps
            tokens += len(g.token_ids)
        out[mode] = {"wall": wall, "forwards": fwd, "steps": steps, "tokens": tokens, "calls": calls}
    cost = clock_cost()
    for d in out.values():
        d["clock_cost"] = cost
    return out


def _round(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    argv = [
        sys.executable,
        __file__,
        "--worker",
        "--models",
        str(args.models),
        "--threads",
        str(args.threads),
    ]
    argv += [
        "--prompts",
        str(args.prompts),
        "--new-tokens",
        str(args.new_tokens),
        "--modes",
        ",".join(args.modes),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"worker for {tree} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, action="append", help="a checkout to measure (default: this one)")
    ap.add_argument("--models", type=Path, default=REPO / "models" / "tiny")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs alone")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    trees = [t.resolve() for t in (args.tree or [REPO])]
    load_before = os.getloadavg()[0]
    rounds: dict[Path, list[dict[str, Any]]] = {t: [] for t in trees}
    for i in range(args.runs):
        for t in trees:
            rounds[t].append(_round(t, args))
        print(f"[bench_overhead] round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    section = _section(args, trees, rounds, load_before, os.getloadavg()[0])
    print(section)
    if not args.no_write:
        from benchmarks import _harness

        _harness.write_section(args.out, START, END, section)
    return 0


def per_step(rounds: list[dict[str, Any]], mode: str, key: str, cost: float | None = None) -> float:
    """Median over rounds of milliseconds per target step: `wall`, `forwards`, `clock` (what the
    clock itself added: hooked calls × `cost`, its CPU seconds per call; None: each round's own
    calibration) or `overhead` (wall − forwards − clock; a round without clock figures, from an
    older run, subtracts nothing)."""

    def one(r: dict[str, Any]) -> float:
        d = r[mode]
        clock = d.get("calls", 0) * (d.get("clock_cost", 0.0) if cost is None else cost)
        if key == "overhead":
            v = d["wall"] - d["forwards"] - clock
        else:
            v = clock if key == "clock" else d[key]
        return 1e3 * v / max(d["steps"], 1)

    return statistics.median(one(r) for r in rounds)


def _section(
    args: argparse.Namespace,
    trees: list[Path],
    rounds: dict[Path, list[dict[str, Any]]],
    load_before: float,
    load_after: float,
) -> str:
    import torch

    # One cost per call for every tree (the median of all rounds' calibrations): the clock is the
    # same code in every worker, and a per-process figure would only add its noise to the ratios.
    costs = [
        d["clock_cost"] for t in trees for r in rounds[t] for d in list(r.values())[:1] if "clock_cost" in d
    ]
    cost = statistics.median(costs) if costs else 0.0
    names = [t.name if t != REPO else "this tree" for t in trees]
    paths = [t.name if t != REPO else "." for t in trees]
    cmd = "python scripts/bench.py run overhead" + "".join(f" --tree {p}" for p in paths if len(trees) > 1)
    cmd += f" --runs {args.runs} --prompts {args.prompts} --new-tokens {args.new_tokens} --threads {args.threads}"
    lines = [
        START,
        "## The reference runtime's own cost per step (CPU time minus forwards, tiny models)",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({args.threads} thread(s)), Python {platform.python_version()}; load average {load_before:.1f} "
        f"before, {load_after:.1f} after",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- command: `{cmd}`",
        f"- method: {args.prompts} code prompts × {args.new_tokens} tokens per mode, greedy, EOS ignored; "
        "forwards = time inside the outermost calls of the target's and draft's decoder and output "
        "head, the EAGLE-3 head's modules and the Medusa heads (forward hooks); times are the "
        "thread's CPU time (load from other processes does not count); clock = what the measuring "
        "itself adds outside the forwards: outermost hooked calls × the clock's cost per call (hook "
        "dispatch and clock reads, a system call each; calibrated per round on a no-op module "
        "called right after a cache flush, as the runtime calls its modules after a forward: "
        f"{cost * 1e6:.1f} µs per call, the median of all rounds' calibrations, for every tree); overhead = total − forwards − clock (add the clock column "
        f"back for the raw figure), per target step; median of {args.runs} rounds, each tree in its own process, "
        "the trees taking turns per round" + (f"; the anchor is `{names[0]}`" if len(trees) > 1 else ""),
        "",
    ]
    head = "| mode | steps |" + "".join(
        f" CPU ms/step ({n}) | clock ms/step ({n}) | overhead ms/step ({n}) |" for n in names
    )
    if len(trees) > 1:
        head += "".join(f" overhead {n} ÷ {names[0]} |" for n in names[1:])
    lines += [head, "|---|---:|" + "---:|---:|---:|" * len(trees) + "---:|" * (len(trees) - 1)]
    for mode in args.modes:
        steps = rounds[trees[0]][0][mode]["steps"]
        row = f"| {mode} | {steps} |"
        for t in trees:
            row += "".join(
                f" {per_step(rounds[t], mode, k, cost):.3f} |" for k in ("wall", "clock", "overhead")
            )
        anchor = per_step(rounds[trees[0]], mode, "overhead", cost)
        for t in trees[1:]:
            row += f" {per_step(rounds[t], mode, 'overhead', cost) / anchor:.2f} |" if anchor > 0 else " – |"
        lines.append(row)
    lines += ["", END]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
