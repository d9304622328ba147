#!/usr/bin/env python
"""What one step of the memory-bound twin's target costs over q new tokens (or q batched rows).

Loads models/tiny/target padded ×N (`toolkit.reference.models.inflate_mlp`), prefills a context,
then times cached forwards over q = 1, 2, 4, 8, 16, 32 new tokens (the cache cropped back after
each), median of --reps, on --threads torch threads. Twice: as the twin runs (every padded
projection on the matrix-matrix kernel, `MatrixLinear`), and with the padded projections as plain
`torch.nn.Linear`, whose one-row product takes the matrix-vector kernel. The ratio t(q) ÷ t(1)
is what a verify step over q tokens costs against a plain step: about 1 on a GPU at batch 1
below its ridge point. Writes its section of docs/lab/benchmarks-history.md between the bench_twin_step
markers.

    python scripts/bench.py run twin_step [--inflate 32] [--reps 15] [--threads 1] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from benchmarks._harness import cpu_model  # noqa: E402
from toolkit.reference.models import MatrixLinear, inflate_mlp  # noqa: E402

START, END = "<!-- bench_twin_step:start -->", "<!-- bench_twin_step:end -->"
QS = (1, 2, 4, 8, 16, 32)
CONTEXT = 120


def _times(model, reps: int) -> dict[int, float]:
    from transformers import DynamicCache

    ctx = torch.randint(0, model.config.vocab_size, (1, CONTEXT), generator=torch.Generator().manual_seed(0))
    out: dict[int, float] = {}
    with torch.inference_mode():
        cache = DynamicCache()
        model(ctx, past_key_values=cache)
        for q in QS:
            x = torch.randint(0, model.config.vocab_size, (1, q), generator=torch.Generator().manual_seed(q))
            ts = []
            for _ in range(reps + 2):
                t = time.perf_counter()
                model(x, past_key_values=cache)
                ts.append(time.perf_counter() - t)
                cache.crop(CONTEXT)
            out[q] = statistics.median(ts[2:])  # the first two warm the kernels
    return out


def _kernel(model, cls: type) -> None:
    for layer in model.get_decoder().layers:
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(layer.mlp, name).__class__ = cls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inflate", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "lab" / "benchmarks-history.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        REPO / "models" / "tiny" / "target", dtype=torch.float32
    ).eval()
    inflate_mlp(model, args.inflate)
    load0 = os.getloadavg()[0]
    rows = {}
    for label, cls in (("twin (MatrixLinear)", MatrixLinear), ("plain nn.Linear", torch.nn.Linear)):
        _kernel(model, cls)
        rows[label] = _times(model, args.reps)
    _kernel(model, MatrixLinear)
    load1 = os.getloadavg()[0]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        START,
        f"## One step of the memory-bound twin's target over q tokens (×{args.inflate}, CPU)",
        "",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} ({args.threads} thread(s)), "
        f"Python {platform.python_version()}; load average {load0:.1f} before, {load1:.1f} after",
        f"- date: {now}",
        f"- command: `python scripts/bench.py run twin_step --inflate {args.inflate} --reps {args.reps} "
        f"--threads {args.threads}`",
        f"- method: cached forwards of models/tiny/target padded ×{args.inflate} over q new tokens after a "
        f"{CONTEXT}-token context, median of {args.reps}; t(q) ÷ t(1) is a verify step's cost against a plain "
        "step (a GPU at batch 1: about 1 below its ridge point)",
        "",
        "| projections | " + " | ".join(f"q={q}" for q in QS) + " |",
        "|---|" + "---:|" * len(QS),
    ]
    for label, t in rows.items():
        cells = [f"{t[q] * 1e3:.1f} ms ({t[q] / t[1]:.2f})" for q in QS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(END)
    section = "\n".join(lines) + "\n"
    print(section)
    if not args.no_write:
        from benchmarks import _harness

        _harness.write_section(args.out, START, END, section)
    return 0
