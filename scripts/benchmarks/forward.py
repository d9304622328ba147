#!/usr/bin/env python
"""One cached forward of the tiny models through transformers' LlamaModel.forward and through
the reference's lean forward (toolkit/reference/lean.py), in one process.

For each model (the tiny target and draft) two CachedLMs share the weights: one runs the lean
forward, the other transformers' (`lean` set to None). Both prefill the same --context tokens;
then, round by round and side by side, each runs --steps forwards over q new tokens (q = 1, a
decoding step; q = 5, a verification of four drafts) from the same cache length (cropped back
after each). Reported: the median over rounds of the milliseconds per forward, and transformers
÷ lean. The last forward's logits of the two sides are compared bitwise on every round (the
script stops if they differ). Writes its section of docs/lab/benchmarks-history.md between the
bench_forward markers.

    python scripts/bench.py run forward [--rounds 5] [--steps 50] [--context 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from benchmarks._harness import cpu_model, publish  # noqa: E402

START, END = "<!-- bench_forward:start -->", "<!-- bench_forward:end -->"
WIDTHS = (1, 5)


def time_model(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from toolkit.reference.models import CachedLM, load_causal_lm

    model = load_causal_lm(path, path.name)
    lean, hf = CachedLM(model), CachedLM(model)
    if lean.lean is None:
        raise SystemExit(f"{path}: the lean forward refuses this model ({lean.lean_refusal})")
    hf.lean = None
    vocab = model.config.vocab_size
    context = torch.randint(0, vocab, (args.context,), generator=torch.Generator().manual_seed(0)).tolist()
    times: dict[tuple[str, int], list[float]] = {(side, q): [] for side in ("hf", "lean") for q in WIDTHS}
    with torch.inference_mode():
        for lm in (lean, hf):
            lm.forward(context)
        for r in range(args.rounds + 1):  # round 0 warms up
            for q in WIDTHS:
                ids = [
                    int(t) for t in torch.randint(0, vocab, (q,), generator=torch.Generator().manual_seed(r))
                ]
                last = {}
                for side, lm in (("hf", hf), ("lean", lean)):
                    t = time.perf_counter()
                    for _ in range(args.steps):
                        out = lm.forward(ids)
                        lm.crop(args.context)
                    dt = (time.perf_counter() - t) / args.steps
                    last[side] = out.logits
                    if r:
                        times[(side, q)].append(dt)
                if not torch.equal(last["hf"], last["lean"]):
                    raise SystemExit(f"{path}: the lean forward's logits differ from transformers' (q = {q})")
    rows = []
    for q in WIDTHS:
        hf_ms = statistics.median(times[("hf", q)]) * 1e3
        lean_ms = statistics.median(times[("lean", q)]) * 1e3
        rows.append(
            {"model": path.name, "q": q, "hf_ms": hf_ms, "lean_ms": lean_ms, "ratio": hf_ms / lean_ms}
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=REPO / "models" / "tiny")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs alone")
    args = ap.parse_args(argv)

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    rows = [row for name in ("target", "draft") for row in time_model(args.models / name, args)]
    cmd = "python scripts/bench.py run forward " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        START,
        "## One forward: transformers' against the lean forward (tiny models, CPU)",
        "",
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, torch {torch.__version__} "
        f"({args.threads} thread{'s' if args.threads != 1 else ''}), transformers {transformers.__version__}, "
        f"Python {platform.python_version()}; float32, batch 1.",
        "",
        "```",
        cmd.strip(),
        "```",
        "",
        f"One cached forward over q new tokens after {args.context} tokens of context, the output head "
        f"included; the median over {args.rounds} rounds of {args.steps} forwards, the two sides "
        "alternating within each round; the two sides' logits are bitwise equal on every round.",
        "",
        "| model | q | transformers, ms | lean, ms | transformers ÷ lean |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['q']} | {r['hf_ms']:.2f} | {r['lean_ms']:.2f} | {r['ratio']:.2f}× |"
        )
    lines.append(END)
    publish("\n".join(lines), args.out, START, END, write=not args.no_write)
    return 0
