#!/usr/bin/env python
"""Train the tiny, reproducible model family used for CPU speculative-decoding tests.

One command reproduces everything (about 35-45 min on 2 CPU cores):

    python scripts/train_tiny_models.py --out models/tiny

Outputs (all weights float16, total well under 25 MB):

  <out>/target/   byte-level BPE tokenizer + LlamaForCausalLM target (+ generation_config.json)
  <out>/draft/    much smaller LlamaForCausalLM distilled from the target (same tokenizer files)
  <out>/medusa/   4 Medusa heads (FasterDecoding/Medusa HF layout) trained with ModelOpt's medusa mode
  <out>/eagle3/   EAGLE-3 draft head trained with ModelOpt's eagle mode, exported to the official
                  layout (LlamaForCausalLMEagle3, fc / midlayer.* / norm / lm_head / d2t) + ARCHITECTURE.md
  <out>/training_report.json   every measured number (times, agreement, alpha, accuracies, checks)
  <out>/README.md              generated from the report

Corpus: the *.py files of the running interpreter's standard library (sysconfig stdlib path,
site-packages excluded, sorted by relative POSIX path, non-UTF-8 files skipped). Every
``--heldout-every``-th file (index 0, 20, 40, ...) is held out for evaluation only.

Stages can be re-run individually (``--stages eagle3,eval,docs``); later stages load the artefacts
earlier stages wrote under ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import sysconfig
import time
from pathlib import Path

# Keep the BLAS / tokenizer thread pools as small as torch's (2 shared cores).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
os.environ.setdefault("RAYON_NUM_THREADS", "2")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ALL_STAGES = ["tokenizer", "target", "draft", "medusa", "eagle3", "eval", "docs"]
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
SIZE_BUDGET_BYTES = 25 * 1000 * 1000


# --------------------------------------------------------------------------------------------
# CLI / utilities
# --------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="models/tiny", help="output directory (default: models/tiny)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--stages", default="all", help=f"comma list of {ALL_STAGES} or 'all'")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--heldout-every", type=int, default=20)
    p.add_argument("--max-files", type=int, default=0, help="debug: use only the first N corpus files")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--target-steps", type=int, default=1400)
    p.add_argument("--draft-steps", type=int, default=700)
    p.add_argument("--medusa-steps", type=int, default=400)
    p.add_argument("--eagle-steps", type=int, default=500)
    p.add_argument("--eagle-batch-size", type=int, default=8)
    p.add_argument(
        "--gen-chains",
        type=int,
        default=512,
        help="target greedy chains (self-distillation data) mixed into draft/medusa/eagle batches",
    )
    p.add_argument(
        "--eval-chunks", type=int, default=48, help="held-out text chunks for teacher-forced metrics"
    )
    p.add_argument(
        "--eval-chains", type=int, default=32, help="held-out prompts for free-running greedy chains"
    )
    p.add_argument("--eval-prompt-len", type=int, default=64)
    p.add_argument("--eval-new-tokens", type=int, default=160)
    p.add_argument("--log-every", type=int, default=50)
    args = p.parse_args(argv)
    args.stages = (
        ALL_STAGES if args.stages == "all" else [s.strip() for s in args.stages.split(",") if s.strip()]
    )
    bad = [s for s in args.stages if s not in ALL_STAGES]
    if bad:
        p.error(f"unknown stages {bad}; choose from {ALL_STAGES}")
    return args


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def seed_all(seed):
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def stage_seed(args, name):
    return args.seed * 1000 + ALL_STAGES.index(name) + 1


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            fp = Path(root) / f
            if not fp.is_symlink():
                total += fp.stat().st_size
    return total


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def load_report(out: Path) -> dict:
    fp = out / "training_report.json"
    if fp.exists():
        return json.loads(fp.read_text())
    return {}


def save_report(out: Path, report: dict):
    (out / "training_report.json").write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")


def lr_at(step, steps, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    prog = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))


def run_training(name, params, steps, peak_lr, step_fn, log_every, warmup=None, weight_decay=0.1):
    """Generic AdamW loop. step_fn(step) -> (loss tensor, dict of float metrics)."""
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak_lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    warmup = warmup if warmup is not None else max(1, min(100, steps // 15))
    t0 = time.time()
    hist = []
    ema = None
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak_lr, warmup)
        loss, metrics = step_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = float(loss.detach())
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        if (step + 1) % log_every == 0 or step == 0 or step + 1 == steps:
            el = time.time() - t0
            extra = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            log(
                f"{name} step {step + 1}/{steps} loss={lv:.4f} ema={ema:.4f} {extra} "
                f"lr={opt.param_groups[0]['lr']:.2e} {el:.0f}s ({el / (step + 1):.2f}s/step)"
            )
            hist.append(
                {
                    "step": step + 1,
                    "elapsed_s": round(el, 1),
                    "loss": round(lv, 4),
                    "ema": round(ema, 4),
                    **{k: round(v, 4) for k, v in metrics.items()},
                }
            )
    return {"seconds": round(time.time() - t0, 1), "final_loss_ema": round(ema, 4), "log": hist}


# --------------------------------------------------------------------------------------------
# Corpus and tokenizer
# --------------------------------------------------------------------------------------------
def load_corpus(args):
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p
        for p in root.rglob("*.py")
        if p.is_file()
        and "site-packages" not in p.relative_to(root).parts
        and "__pycache__" not in p.relative_to(root).parts
    ]
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    docs, skipped = [], []
    for p in files:
        rel = p.relative_to(root).as_posix()
        try:
            docs.append((rel, p.read_bytes().decode("utf-8")))
        except UnicodeDecodeError:
            skipped.append(rel)
    if args.max_files:
        docs = docs[: args.max_files]
    heldout = [d for i, d in enumerate(docs) if i % args.heldout_every == 0]
    train = [d for i, d in enumerate(docs) if i % args.heldout_every != 0]
    h = hashlib.sha256()
    for rel, text in docs:
        h.update(rel.encode())
        h.update(b"\0")
        h.update(text.encode())
        h.update(b"\0")
    info = {
        "stdlib_path": str(root),
        "python_version": platform.python_version(),
        "files_total": len(docs),
        "files_skipped_non_utf8": skipped,
        "files_train": len(train),
        "files_heldout": len(heldout),
        "heldout_rule": f"file index % {args.heldout_every} == 0 (sorted by relative path)",
        "chars_train": sum(len(t) for _, t in train),
        "chars_heldout": sum(len(t) for _, t in heldout),
        "sha256": h.hexdigest(),
        "heldout_first_files": [r for r, _ in heldout[:5]],
    }
    return train, heldout, info


def train_tokenizer(train_docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([t for _, t in train_docs], trainer=trainer)
    assert (
        tok.token_to_id(BOS) == BOS_ID and tok.token_to_id(EOS) == EOS_ID and tok.token_to_id(PAD) == PAD_ID
    )
    # Default behaviour (documented): tokenizer(text) prepends <s>; never appends </s>.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID)]
    )
    return tok


def save_tokenizer(tok, directory: Path):
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    hf.save_pretrained(str(directory))
    cfg_path = directory / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("backend", None)
    # Portable class name: transformers 4.x and 5.x both resolve it (5.x -> TokenizersBackend).
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["padding_side"] = "right"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (directory / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2) + "\n"
    )


TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


def encode_stream(tok, docs):
    """Concatenate <s> doc </s> for every document (no post-processor: explicit ids)."""
    encs = tok.encode_batch([t for _, t in docs], add_special_tokens=False)
    out = []
    for e in encs:
        out.append(BOS_ID)
        out.extend(e.ids)
        out.append(EOS_ID)
    return torch.tensor(out, dtype=torch.long)


class Data:
    """Token streams + helpers shared by the stages."""

    def __init__(self, args, out: Path):
        from tokenizers import Tokenizer

        self.args = args
        self.train_docs, self.heldout_docs, self.info = load_corpus(args)
        self.tok = Tokenizer.from_file(str(out / "target" / "tokenizer.json"))
        t = time.time()
        self.train = encode_stream(self.tok, self.train_docs)
        self.heldout = encode_stream(self.tok, self.heldout_docs)
        self.info["tokens_train"] = int(self.train.numel())
        self.info["tokens_heldout"] = int(self.heldout.numel())
        self.info["chars_per_token_train"] = round(
            self.info["chars_train"] / max(1, self.info["tokens_train"]), 3
        )
        log(
            f"corpus: {self.info['files_train']} train files / {self.info['tokens_train']} tokens, "
            f"{self.info['files_heldout']} held-out files / {self.info['tokens_heldout']} tokens "
            f"(encode {time.time() - t:.1f}s)"
        )
        self.chains = None

    def batch(self, gen, bs, seq, stream=None):
        stream = self.train if stream is None else stream
        offs = torch.randint(0, stream.numel() - seq - 1, (bs,), generator=gen)
        return torch.stack([stream[o : o + seq] for o in offs.tolist()])

    def mixed_batch(self, gen, bs, seq):
        """Half real training text, half target greedy chains (self-distillation data)."""
        if self.chains is None or bs < 2:
            return self.batch(gen, bs, seq)
        n_chain = bs // 2
        x_text = self.batch(gen, bs - n_chain, seq)
        idx = torch.randint(0, self.chains.shape[0], (n_chain,), generator=gen)
        ch = self.chains[idx]
        if ch.shape[1] > seq:
            ch = ch[:, :seq]
        elif ch.shape[1] < seq:
            ch = torch.cat([ch, self.batch(gen, n_chain, seq - ch.shape[1])], 1)
        return torch.cat([x_text, ch], 0)

    def heldout_chunks(self, n, seq):
        """Deterministic, evenly spaced held-out chunks."""
        last = self.heldout.numel() - seq - 1
        offs = torch.linspace(0, last, n).long().tolist()
        return torch.stack([self.heldout[o : o + seq] for o in offs])


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------
def target_config(vocab_size):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.02,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        attention_bias=False,
        mlp_bias=False,
    )


def draft_config(vocab_size):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.02,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        attention_bias=False,
        mlp_bias=False,
    )


def save_lm(model, directory: Path):
    from transformers import GenerationConfig

    directory.mkdir(parents=True, exist_ok=True)
    m16 = copy.deepcopy(model).to(torch.float16)
    m16.config.bos_token_id, m16.config.eos_token_id, m16.config.pad_token_id = BOS_ID, EOS_ID, PAD_ID
    m16.generation_config = GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, do_sample=False
    )
    m16.save_pretrained(str(directory))


def load_lm(directory: Path):
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


@torch.no_grad()
def greedy_chains(model, prompts, n_new, bs=64):
    """Exact (fp32) greedy continuation with a KV cache; ignores EOS (fixed length)."""
    outs = []
    for i in range(0, prompts.shape[0], bs):
        p = prompts[i : i + bs]
        o = model(input_ids=p, use_cache=True)
        past = o.past_key_values
        nxt = o.logits[:, -1].argmax(-1)
        seq = [p, nxt[:, None]]
        for _ in range(n_new - 1):
            o = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past = o.past_key_values
            nxt = o.logits[:, -1].argmax(-1)
            seq.append(nxt[:, None])
        outs.append(torch.cat(seq, 1))
    return torch.cat(outs, 0)


def build_chains(data: Data, target, args, n, seed, stream=None, prompt_len=32, total_len=None):
    total_len = total_len or args.seq_len
    g = torch.Generator().manual_seed(seed)
    prompts = data.batch(g, n, prompt_len, stream=stream)
    return greedy_chains(target, prompts, total_len - prompt_len)


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
def stage_tokenizer(args, out: Path, report: dict):
    t0 = time.time()
    train_docs, _, info = load_corpus(args)
    tok = train_tokenizer(train_docs, args.vocab_size)
    save_tokenizer(tok, out / "target")
    from transformers import AutoTokenizer

    at = AutoTokenizer.from_pretrained(str(out / "target"))
    ids = at("def fib(n):").input_ids
    assert ids[0] == BOS_ID, "tokenizer must add <s> by default"
    report["corpus"] = info
    report["tokenizer"] = {
        "type": "byte-level BPE (tokenizers: ByteLevel pre-tokenizer + ByteLevel decoder)",
        "vocab_size": tok.get_vocab_size(),
        "special_tokens": {BOS: BOS_ID, EOS: EOS_ID, PAD: PAD_ID},
        "adds_bos_by_default": True,
        "adds_eos_by_default": False,
        "autotokenizer_class": type(at).__name__,
        "example_def_fib": {"input_ids": ids, "tokens": at.convert_ids_to_tokens(ids)},
        "seconds": round(time.time() - t0, 1),
    }
    log(f"tokenizer: vocab {tok.get_vocab_size()} in {time.time() - t0:.1f}s; 'def fib(n):' -> {ids}")


def stage_target(args, out: Path, data: Data, report: dict):
    from transformers import LlamaForCausalLM

    seed_all(stage_seed(args, "target"))
    cfg = target_config(data.tok.get_vocab_size())
    model = LlamaForCausalLM(cfg)
    model.train()
    g = torch.Generator().manual_seed(stage_seed(args, "target"))
    log(f"target: {n_params(model) / 1e6:.3f}M params")

    def step_fn(step):
        x = data.batch(g, args.batch_size, args.seq_len)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        return loss, {}

    res = run_training("target", model.parameters(), args.target_steps, 1.5e-3, step_fn, args.log_every)
    model.eval()
    save_lm(model, out / "target")
    report["target"] = {
        "architecture": "LlamaForCausalLM",
        "config": {
            k: getattr(cfg, k)
            for k in [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "tie_word_embeddings",
            ]
        },
        "params": n_params(model),
        "dtype": "float16",
        "train_steps": args.target_steps,
        "batch": [args.batch_size, args.seq_len],
        "train_tokens": args.target_steps * args.batch_size * args.seq_len,
        "optimizer": "AdamW(0.9,0.95) lr 1.5e-3 cosine->10%, wd 0.1, clip 1.0, bf16 autocast",
        **res,
    }


def stage_draft(args, out: Path, data: Data, target, report: dict):
    from transformers import LlamaForCausalLM

    from toolkit.train import draft as tdraft

    seed_all(stage_seed(args, "draft"))
    cfg = draft_config(target.config.vocab_size)
    draft = LlamaForCausalLM(cfg)
    draft.train()
    g = torch.Generator().manual_seed(stage_seed(args, "draft"))
    log(f"draft: {n_params(draft) / 1e6:.3f}M params")

    def step_fn(step):
        # forward KL(p_target || q_draft), T=1, full vocab (toolkit.train.draft, as sdtk train-draft)
        return tdraft.loss(target, draft, data.mixed_batch(g, args.batch_size, args.seq_len))

    res = run_training("draft", draft.parameters(), args.draft_steps, 2e-3, step_fn, args.log_every)
    draft.eval()
    save_lm(draft, out / "draft")
    for f in TOKENIZER_FILES:
        shutil.copy2(out / "target" / f, out / "draft" / f)
    report["draft"] = {
        "architecture": "LlamaForCausalLM",
        "config": {
            k: getattr(cfg, k)
            for k in [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "tie_word_embeddings",
            ]
        },
        "params": n_params(draft),
        "dtype": "float16",
        "train_steps": args.draft_steps,
        "batch": [args.batch_size, args.seq_len],
        "objective": "forward KL(target || draft) at T=1 on the full vocab; batches = 1/2 training text + "
        "1/2 target greedy chains",
        **res,
    }


MEDUSA_HEADS, MEDUSA_LAYERS = 4, 1  # the loss decay is toolkit.train.medusa.DECAY (0.8)


def stage_medusa(args, out: Path, data: Data, report: dict):
    from toolkit.train import medusa as tm

    seed_all(stage_seed(args, "medusa"))
    model = load_lm(out / "target")
    tm.convert(model, MEDUSA_HEADS, MEDUSA_LAYERS)  # heads' LM layers start from the target's lm_head
    model.train()
    g = torch.Generator().manual_seed(stage_seed(args, "medusa"))

    def step_fn(step):
        return tm.loss(model, data.mixed_batch(g, args.batch_size, args.seq_len))

    res = run_training(
        "medusa",
        model.medusa_heads.parameters(),
        args.medusa_steps,
        1e-3,
        step_fn,
        args.log_every,
        weight_decay=0.0,
    )
    model.eval()
    mdir = out / "medusa"
    rel_target = (Path(args.out) / "target").as_posix()
    written = tm.export(model, mdir, MEDUSA_HEADS, MEDUSA_LAYERS, rel_target)
    hidden = model.config.hidden_size
    report["medusa"] = {
        "heads": MEDUSA_HEADS,
        "layers_per_head": MEDUSA_LAYERS,
        "hidden_size": hidden,
        "params": written["params"],
        "dtype": "float16",
        "train_steps": args.medusa_steps,
        "batch": [args.batch_size, args.seq_len],
        "trainer": "ModelOpt mtsp.convert(model, [('medusa', {...})]) -> HFMedusaModel; its forward produces "
        "medusa_logits; loss = sum_i 0.8^i * CE(head_i(t), softmax(target logits at t+1+i)) "
        "(self-distillation; ModelOpt's built-in loss needs hard labels)",
        "backbone_frozen": True,
        "head_lm_init": "copy of target lm_head",
        **res,
    }


EAGLE_LAYER_IDS = [1, 3, 4]


def draft_vocab(data: Data, vocab_size, draft_vocab_size):
    """Most frequent target tokens in the training stream (+ </s>), sorted by id; d2t = used - arange."""
    from toolkit.train.eagle3 import draft_vocab as shared_draft_vocab

    counts = torch.bincount(data.train, minlength=vocab_size)
    return shared_draft_vocab(counts, draft_vocab_size, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)


def stage_eagle3(args, out: Path, data: Data, report: dict):
    from toolkit.train import eagle3 as te

    seed_all(stage_seed(args, "eagle3"))
    model = load_lm(out / "target")
    vocab = model.config.vocab_size
    dv = vocab // 2
    used, d2t, coverage = draft_vocab(data, vocab, dv)
    cfg = te.modelopt_config(model.config, dv, EAGLE_LAYER_IDS)
    te.convert(model, cfg)
    em = model.eagle_module
    te.init_from_target(model, used, d2t)  # draft LM head = the target head's rows, norm = the target's
    te.freeze_for_training(model)  # input_layernorm frozen at 1 (see toolkit.train.eagle3)
    model.train()
    g = torch.Generator().manual_seed(stage_seed(args, "eagle3"))

    def step_fn(step):
        # ModelOpt HFEagleModel.forward: base fwd + TTT steps, self-logit distillation
        return te.train_step(model, data.mixed_batch(g, args.eagle_batch_size, args.seq_len))

    res = run_training(
        "eagle3",
        [p for p in model.parameters() if p.requires_grad],
        args.eagle_steps,
        1e-3,
        step_fn,
        max(1, args.log_every // 2),
        weight_decay=0.0,
    )
    model.eval()
    # ---- export with ModelOpt, then convert to the official single-layer layout ----
    edir = out / "eagle3"
    written = te.export(model, edir)
    raw_keys = written["modelopt_export_keys"]
    # in-memory module rounded to the exported precision for the equivalence check
    with torch.no_grad():
        for p in em.parameters():
            p.copy_(p.half().float())
    ver = verify_eagle3_export(model, edir, out / "target", data)
    report["eagle3"] = {
        "architecture": "LlamaForCausalLMEagle3 (1 decoder layer)",
        "aux_layer_ids": EAGLE_LAYER_IDS,
        "draft_vocab_size": dv,
        "vocab_size": vocab,
        "draft_vocab_token_coverage_train": round(coverage, 4),
        "params": written["params"],
        "dtype": "float16 (+ d2t int64)",
        "train_steps": args.eagle_steps,
        "batch": [args.eagle_batch_size, args.seq_len],
        "trainer": "ModelOpt mtsp.convert(model, [('eagle', EAGLE3_DEFAULT_CFG['config'] + overrides)]); "
        "ModelOpt forward/loss (3 TTT steps, decay 0.9, self-logit distillation on the draft vocab); "
        "input_layernorm weight frozen at 1",
        "modelopt_export_keys": raw_keys,
        "export": "modelopt.torch.export.export_speculative_decoding -> keys 'layers.0.*' renamed to the "
        "official 'midlayer.*', floats cast to float16",
        "modelopt_overrides": {k: v for k, v in cfg.items() if k != "eagle_architecture_config"},
        "verify": ver,
        **res,
    }
    if not ver["ok"]:
        raise RuntimeError(f"EAGLE-3 export verification failed: {ver}")


# --------------------------------------------------------------------------------------------
# EAGLE-3 reference implementation (plain torch, from the exported safetensors only)
# --------------------------------------------------------------------------------------------
def _rms(x, w, eps):
    xf = x.float()
    return w.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta):
    # x: [B, H, T, D]; HF Llama "rotate_half" convention
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    fr = pos.float()[:, None] * inv[None, :]  # [T, D/2]
    emb = torch.cat([fr, fr], -1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def load_eagle3(edir: Path):
    from safetensors.torch import load_file

    W = load_file(str(edir / "model.safetensors"))
    W = {k: (v if v.dtype == torch.int64 else v.float()) for k, v in W.items()}
    cfg = json.loads((edir / "config.json").read_text())
    return W, cfg


def eagle3_layer(W, cfg, h, emb, pos, official_norm=False):
    """One EAGLE-3 draft step over a whole sequence (causal). Returns (draft logits, pre-norm hidden).

    h:   [B, T, H] hidden input per index (fc(fused features) or the fed-back pre-norm output)
    emb: [B, T, H] target embedding of the token carried by each index
    pos: [T] rotary positions
    """
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta") or cfg["rope_scaling"]["rope_theta"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    B, T, H = h.shape
    residual = h
    if official_norm:
        hn = _rms(h, W["midlayer.hidden_norm.weight"], eps)
    else:  # exact ModelOpt computation
        hn = _rms(_rms(h, W["midlayer.input_layernorm.weight"], eps), W["midlayer.hidden_norm.weight"], eps)
    en = _rms(emb, W["midlayer.input_layernorm.weight"], eps)
    x = torch.cat([en, hn], -1)  # [embedding ; hidden], 2H
    q = (x @ W["midlayer.self_attn.q_proj.weight"].T).view(B, T, nh, hd).transpose(1, 2)
    k = (x @ W["midlayer.self_attn.k_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
    v = (x @ W["midlayer.self_attn.v_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
    q, k = _rope(q, pos, theta), _rope(k, pos, theta)
    k = k.repeat_interleave(nh // nkv, dim=1)
    v = v.repeat_interleave(nh // nkv, dim=1)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~causal, float("-inf")).softmax(-1)
    a = (att @ v).transpose(1, 2).reshape(B, T, nh * hd)
    h = residual + a @ W["midlayer.self_attn.o_proj.weight"].T
    m = _rms(h, W["midlayer.post_attention_layernorm.weight"], eps)
    m = F.silu(m @ W["midlayer.mlp.gate_proj.weight"].T) * (m @ W["midlayer.mlp.up_proj.weight"].T)
    h = h + m @ W["midlayer.mlp.down_proj.weight"].T
    pre = h
    logits = _rms(h, W["norm.weight"], eps) @ W["lm_head.weight"].T
    return logits, pre


@torch.no_grad()
def eagle3_features(target, ids, layer_ids):
    """Target forward: fused features (concat of decoder-layer OUTPUTS layer_ids = HF hidden_states[i+1])."""
    o = target(input_ids=ids, output_hidden_states=True)
    feats = torch.cat([o.hidden_states[i + 1] for i in layer_ids], -1)
    return feats, o.logits


@torch.no_grad()
def eagle3_draft_chain(W, cfg, target, ids, steps, official_norm=False):
    """Chain drafting exactly as ModelOpt's pseudo_speculative_generate: returns (base token, draft tokens)."""
    layer_ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    feats, logits = eagle3_features(target, ids, layer_ids)
    base = logits[:, -1].argmax(-1)
    tokens = torch.cat([ids[:, 1:], base[:, None]], 1)  # index t carries token t+1
    hidden = feats @ W["fc.weight"].T
    emb_table = target.get_input_embeddings().weight
    drafts = []
    for _ in range(steps):
        T = tokens.shape[1]
        lg, pre = eagle3_layer(W, cfg, hidden, emb_table[tokens], torch.arange(T), official_norm)
        d = lg[:, -1].argmax(-1)
        d = d + W["d2t"][d]  # draft id -> target id
        drafts.append(d)
        tokens = torch.cat([tokens, d[:, None]], 1)
        hidden = torch.cat([hidden, pre[:, -1:]], 1)  # feed back the PRE-norm output of the last index
    return base, torch.stack(drafts, 1)


@torch.no_grad()
def verify_eagle3_export(model, edir: Path, target_dir: Path, data: Data):
    """Re-implement the exported head from model.safetensors + config.json in plain torch and compare it
    with ModelOpt's in-memory eagle module (weights already rounded to the exported fp16)."""
    from transformers import DynamicCache

    model.eval()
    target = load_lm(target_dir)
    W, cfg = load_eagle3(edir)
    ids = data.heldout_chunks(4, 96)
    # --- ModelOpt in-memory reference, one eagle forward (TTT step 0) ---
    base_out, _ = model._eagle_base_model_forward(ids, None, None, None, True, None)
    e_emb, e_hid, e_mask, e_pos, _, _ = model._prepare_eagle_inputs(ids, None, None, DynamicCache(), base_out)
    model.eagle_module._maybe_init_rope(device=e_hid.device)
    _, ref_pre, ref_logits, _ = model._eagle_forward(e_hid, e_emb, e_mask, e_pos, None)
    # --- plain torch from the exported files ---
    layer_ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    feats, _ = eagle3_features(target, ids, layer_ids)
    emb = target.get_input_embeddings().weight[ids.roll(-1, 1)]
    g = feats @ W["fc.weight"].T
    T = ids.shape[1]
    lg, pre = eagle3_layer(W, cfg, g, emb, torch.arange(T))
    lg_off, _ = eagle3_layer(W, cfg, g, emb, torch.arange(T), official_norm=True)
    res = {
        "sample": list(ids.shape),
        "max_abs_diff_logits": float((lg - ref_logits).abs().max()),
        "max_abs_diff_prenorm_hidden": float((pre - ref_pre).abs().max()),
        "max_abs_diff_fc_output": float((g - e_hid).abs().max()),
        "max_abs_logit": float(ref_logits.abs().max()),
        "argmax_equal_frac": float((lg.argmax(-1) == ref_logits.argmax(-1)).float().mean()),
        "official_norm_vs_modelopt_max_abs_diff_logits": float((lg_off - lg).abs().max()),
        "input_layernorm_weight_all_ones": bool((W["midlayer.input_layernorm.weight"] == 1).all()),
    }
    # --- multi-step chain drafting vs ModelOpt's pseudo_speculative_generate ---
    prompts = ids[:, :48]
    b_ref, d_ref = model.pseudo_speculative_generate(prompts, steps=4)
    b_pl, d_pl = eagle3_draft_chain(W, cfg, target, prompts, 4)
    b_off, d_off = eagle3_draft_chain(W, cfg, target, prompts, 4, official_norm=True)
    res["pseudo_speculative_generate_tokens_equal"] = bool(
        torch.equal(d_ref, d_pl) and torch.equal(b_ref[:, 0], b_pl)
    )
    res["official_norm_chain_tokens_equal"] = bool(torch.equal(d_off, d_pl))
    res["ok"] = bool(res["max_abs_diff_logits"] < 1e-3 and res["pseudo_speculative_generate_tokens_equal"])
    log(f"verify_eagle3_export: {res}")
    return res


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------
def load_medusa(mdir: Path):
    from safetensors.torch import load_file

    W = {k: v.float() for k, v in load_file(str(mdir / "model.safetensors")).items()}
    cfg = json.loads((mdir / "config.json").read_text())
    return W, cfg


def medusa_logits(W, cfg, h):
    """h: target final hidden state (after model.norm). Returns list of [.., vocab] logits per head."""
    outs = []
    L = cfg["medusa_num_layers"]
    for i in range(cfg["medusa_num_heads"]):
        x = h
        for j in range(L):
            x = x + F.silu(x @ W[f"{i}.{j}.linear.weight"].T + W[f"{i}.{j}.linear.bias"])
        outs.append(x @ W[f"{i}.{L}.weight"].T)
    return outs


def beta(p_logits, q_logits):
    p = F.softmax(p_logits.float(), -1)
    q = F.softmax(q_logits.float(), -1)
    return torch.minimum(p, q).sum(-1)


@torch.no_grad()
def draft_accept_len(target_chain, draft, start, gamma):
    """Greedy draft-target: from prefix chain[:, :start], draft gamma tokens; count accepted (prefix matches)."""
    x = target_chain[:, :start]
    cur = x
    drafted = []
    for _ in range(gamma):
        d = draft(input_ids=cur).logits[:, -1].argmax(-1)
        drafted.append(d)
        cur = torch.cat([cur, d[:, None]], 1)
    drafted = torch.stack(drafted, 1)
    match = (drafted == target_chain[:, start : start + gamma]).long()
    return match.cumprod(1).sum(1)


def stage_eval(args, out: Path, data: Data, report: dict):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    seed_all(stage_seed(args, "eval"))
    target = load_lm(out / "target")
    draft = load_lm(out / "draft")
    MW, Mcfg = load_medusa(out / "medusa")
    EW, Ecfg = load_eagle3(out / "eagle3")
    layer_ids = Ecfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    emb_table = target.get_input_embeddings().weight
    res = {}
    with torch.no_grad():
        # ---------------- teacher-forced on held-out text ----------------
        X = data.heldout_chunks(args.eval_chunks, args.seq_len)
        tf = {"chunks": list(X.shape)}
        nll, agree_d, beta_d, top1_t = [], [], [], []
        med_acc = [[] for _ in range(Mcfg["medusa_num_heads"])]
        eag_acc, eag_in_vocab = [], []
        for i in range(0, X.shape[0], 8):
            x = X[i : i + 8]
            o = target(input_ids=x, output_hidden_states=True)
            tl = o.logits
            A = tl.argmax(-1)
            nll.append(
                F.cross_entropy(tl[:, :-1].reshape(-1, tl.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
            )
            top1_t.append((A[:, :-1] == x[:, 1:]).float().flatten())
            dl = draft(input_ids=x).logits
            agree_d.append((dl.argmax(-1) == A).float().flatten())
            beta_d.append(beta(tl, dl).flatten())
            h = o.hidden_states[-1]  # final hidden after model.norm
            for k, ml in enumerate(medusa_logits(MW, Mcfg, h)):
                med_acc[k].append((ml[:, : -(1 + k)].argmax(-1) == A[:, 1 + k :]).float().flatten())
            feats = torch.cat([o.hidden_states[j + 1] for j in layer_ids], -1)
            lg, _ = eagle3_layer(
                EW, Ecfg, feats @ EW["fc.weight"].T, emb_table[x.roll(-1, 1)], torch.arange(x.shape[1])
            )
            d = lg.argmax(-1)
            d = d + EW["d2t"][d]
            eag_acc.append(
                (d[:, :-1] == A[:, 1:]).float().flatten()
            )  # index t (token t+1) -> target argmax at t+1
            in_vocab = torch.zeros(tl.shape[-1], dtype=torch.bool)
            in_vocab[torch.arange(EW["d2t"].numel()) + EW["d2t"]] = True
            eag_in_vocab.append(in_vocab[A[:, 1:]].float().flatten())
        nll = torch.cat(nll)
        tf["target_heldout_loss_nats"] = round(float(nll.mean()), 4)
        tf["target_heldout_ppl"] = round(float(nll.mean().exp()), 3)
        tf["target_top1_vs_text"] = round(float(torch.cat(top1_t).mean()), 4)
        tf["draft_greedy_agreement"] = round(float(torch.cat(agree_d).mean()), 4)
        tf["draft_alpha_T1"] = round(float(torch.cat(beta_d).mean()), 4)
        tf["medusa_head_top1_vs_target_greedy"] = [round(float(torch.cat(a).mean()), 4) for a in med_acc]
        tf["eagle3_step1_top1_vs_target_argmax"] = round(float(torch.cat(eag_acc).mean()), 4)
        tf["eagle3_target_argmax_in_draft_vocab"] = round(float(torch.cat(eag_in_vocab).mean()), 4)
        res["teacher_forced_heldout"] = tf

        # ---------------- free-running target greedy chains from held-out prompts ----------------
        P = args.eval_prompt_len
        t1 = time.time()
        C = build_chains(
            data,
            target,
            args,
            args.eval_chains,
            stage_seed(args, "eval"),
            stream=data.heldout,
            prompt_len=P,
            total_len=P + args.eval_new_tokens,
        )
        ch = {
            "chains": list(C.shape),
            "prompt_len": P,
            "new_tokens": args.eval_new_tokens,
            "generation_seconds": round(time.time() - t1, 1),
        }
        o = target(input_ids=C, output_hidden_states=True)
        tl = o.logits
        A = tl.argmax(-1)
        gen = slice(P - 1, C.shape[1] - 1)  # positions whose greedy next token is part of the chain
        assert torch.equal(A[:, gen], C[:, P:]), "chains must be the target's own greedy output"
        dl = draft(input_ids=C).logits
        ch["draft_greedy_agreement"] = round(float((dl.argmax(-1)[:, gen] == A[:, gen]).float().mean()), 4)
        ch["draft_alpha_T1"] = round(float(beta(tl[:, gen], dl[:, gen]).mean()), 4)
        gamma = 4
        starts = list(range(P, C.shape[1] - gamma, 12))
        acc_len = torch.cat([draft_accept_len(C, draft, s, gamma).float() for s in starts])
        ch["draft_gamma4_mean_accepted"] = round(float(acc_len.mean()), 4)
        ch["draft_gamma4_tokens_per_target_step"] = round(float(acc_len.mean() + 1), 4)
        # Medusa on the chain: head k at position t vs chain token t+2+k
        h = o.hidden_states[-1]
        K = Mcfg["medusa_num_heads"]
        mls = medusa_logits(MW, Mcfg, h)
        T = C.shape[1]
        lo, hi = P - 1, T - 1 - K  # positions with all K head targets inside the chain
        hits = torch.stack(
            [(mls[k][:, lo:hi].argmax(-1) == C[:, lo + 2 + k : hi + 2 + k]) for k in range(K)], -1
        )
        ch["medusa_head_top1_vs_target_greedy"] = [
            round(float(hits[..., k].float().mean()), 4) for k in range(K)
        ]
        ch["medusa_chain_mean_accepted"] = round(float(hits.long().cumprod(-1).sum(-1).float().mean()), 4)
        ch["medusa_chain_tokens_per_target_step"] = round(1 + ch["medusa_chain_mean_accepted"], 4)
        # EAGLE-3 step 1 over all chain positions + multi-step chain drafting at sampled positions
        feats = torch.cat([o.hidden_states[j + 1] for j in layer_ids], -1)
        lg, _ = eagle3_layer(EW, Ecfg, feats @ EW["fc.weight"].T, emb_table[C.roll(-1, 1)], torch.arange(T))
        d = lg.argmax(-1)
        d = d + EW["d2t"][d]
        ch["eagle3_step1_top1_vs_target_argmax"] = round(
            float((d[:, P - 1 : T - 1] == A[:, P:T]).float().mean()), 4
        )
        steps = 4
        e_len, e_step_hits = [], torch.zeros(steps)
        for s in range(P, T - steps - 1, 12):
            _, dr = eagle3_draft_chain(EW, Ecfg, target, C[:, :s], steps)  # base token = C[:, s]
            m = (dr == C[:, s + 1 : s + 1 + steps]).long()
            e_len.append(m.cumprod(1).sum(1).float())
            e_step_hits += m.cumprod(1).float().mean(0)
        n_pos = len(e_len)
        ch["eagle3_chain4_mean_accepted"] = round(float(torch.cat(e_len).mean()), 4)
        ch["eagle3_chain4_tokens_per_target_step"] = round(1 + ch["eagle3_chain4_mean_accepted"], 4)
        ch["eagle3_chain4_cumulative_accept_rate_by_step"] = [round(float(v / n_pos), 4) for v in e_step_hits]
        res["greedy_chains_heldout"] = ch

    # ---------------- sanity: HF Auto classes ----------------
    at = AutoTokenizer.from_pretrained(str(out / "target"))
    am = AutoModelForCausalLM.from_pretrained(str(out / "target"), dtype=torch.float32)
    enc = at("def fib(n):", return_tensors="pt")
    gen_ids = am.generate(**enc, max_new_tokens=64, do_sample=False)
    res["sanity_generate"] = {
        "prompt": "def fib(n):",
        "input_ids": enc.input_ids[0].tolist(),
        "bos_added": bool(enc.input_ids[0, 0] == at.bos_token_id),
        "eos_token_id": at.eos_token_id,
        "output": at.decode(gen_ids[0], skip_special_tokens=True),
    }
    log("sanity generate:\n" + res["sanity_generate"]["output"])
    res["seconds"] = round(time.time() - t0, 1)
    report["eval"] = res


# --------------------------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------------------------
ARCH_MD = """# EAGLE-3 draft head for `../target` — exact inference recipe

Trained with NVIDIA ModelOpt {modelopt_version} (`mtsp.convert(model, [("eagle", EAGLE3_DEFAULT_CFG["config"] + overrides)])`),
exported with `modelopt.torch.export.export_speculative_decoding`, then re-keyed from ModelOpt 0.47's
`layers.0.*` to the official single-layer name `midlayer.*` (the form used by the EAGLE reference code,
SGLang, vLLM and TensorRT-LLM loaders) and cast to float16. `d2t` stays int64.
The recipe below is verified by `verify_eagle3_export()` in `scripts/train_tiny_models.py`: a plain-torch
re-implementation from `model.safetensors` + `config.json` matches ModelOpt's in-memory module
(max |Δlogit| = {diff_logits:.2e}, max |Δhidden| = {diff_pre:.2e}) and reproduces the draft tokens of
ModelOpt's `pseudo_speculative_generate(steps=4)` exactly ({chain_equal}).

## Tensors (`model.safetensors`)

| name | shape | role |
|---|---|---|
| `fc.weight` | [{H}, {H3}] | fuse the 3 captured target features (no bias) |
| `midlayer.hidden_norm.weight` | [{H}] | RMSNorm on the hidden input |
| `midlayer.input_layernorm.weight` | [{H}] | RMSNorm on the token embedding (all ones, see norms) |
| `midlayer.self_attn.{{q,k,v}}_proj.weight` | [out, {H2}] | q/k/v take the 2H input `[emb ; hidden]` |
| `midlayer.self_attn.o_proj.weight` | [{H}, {H}] | |
| `midlayer.post_attention_layernorm.weight` | [{H}] | |
| `midlayer.mlp.{{gate,up,down}}_proj.weight` | | SwiGLU MLP, intermediate {I} |
| `norm.weight` | [{H}] | final RMSNorm before the draft LM head |
| `lm_head.weight` | [{DV}, {H}] | draft LM head over the reduced draft vocab |
| `d2t` | [{DV}] int64 | `target_id = draft_id + d2t[draft_id]` |

No embedding table: use the target's `model.embed_tokens.weight` (`../target/model.safetensors`).
Config: hidden {H}, {NH} heads, {NKV} KV heads, head_dim {HD}, rms_norm_eps {EPS}, rope_theta {THETA},
default RoPE (no scaling; `eagle_export_rope_scaling` was disabled), max_position_embeddings {MAXPOS}.
All arithmetic below in float32 (weights upcast).

## 1. Target features

Captured layers `eagle_config.eagle_aux_hidden_state_layer_ids = {ids}` index **decoder-layer OUTPUTS**,
0-based (ModelOpt registers a forward hook on `model.layers[i]` and takes its output).
With HF `output_hidden_states=True` (`hidden_states[0]` = embeddings) that is
`hidden_states[i + 1]` → `hidden_states[{hs_ids}]`. These are raw residual-stream states (no final norm).
(Caution: in transformers 5 the LAST entry `hidden_states[{L}]` is the output after `model.norm`, not the raw
output of layer {Lm1}; none of the captured ids is the last layer, so this does not matter here.)
An engine that captures layer *inputs* (the official EAGLE / vLLM convention) must capture the inputs of
layers `{inp_ids}` (same tensors). The target has {L} layers; all ids are < {L}-1, so both conventions work.

Fused feature at position t: `f_t = concat(out[{i0}]_t, out[{i1}]_t, out[{i2}]_t)` (this order, = ascending id),
shape [{H3}]; `g_t = f_t @ fc.weight.T` ([{H}]).

## 2. Inputs of the draft layer (index alignment)

The draft sequence is indexed like the target sequence. Index t carries
* the hidden input `h_t`: `g_t` for positions the target has verified, or a fed-back draft hidden (step 4);
* the token **x_(t+1)** (the token that FOLLOWS position t): `e_t = embed_tokens[x_(t+1)]`;
* the rotary position **t** (position ids = 0, 1, 2, … of the index, not of the token).

So the first draft step for a context x_0..x_(n-1) uses the features at n-1 together with the token
x_n = argmax of the target at n-1 (the target's own next/bonus token): "token at t+1 with features at t".
The output at index t predicts token x_(t+2).

## 3. The layer (exactly what ModelOpt computes)

```
RMSNorm(x, w) = w * x / sqrt(mean(x^2, -1) + eps)            # computed in float32
residual = h                                                   # [T, H]   (the hidden input, not the concat)
hn  = RMSNorm(RMSNorm(h, input_layernorm.w), hidden_norm.w)    # ModelOpt: input_layernorm then hidden_norm
en  = RMSNorm(e, input_layernorm.w)
x   = concat([en, hn], -1)                                     # [T, 2H]: EMBEDDING FIRST, hidden second
q = x @ q_proj.T ; k = x @ k_proj.T ; v = x @ v_proj.T         # heads {NH} (q) / {NKV} (k,v), head_dim {HD}
q, k = rope(q, pos), rope(k, pos)                              # HF Llama rotate_half, theta {THETA}
attn = softmax(q k^T / sqrt({HD}) + causal_mask) v              # GQA: query head j uses KV head j // {GQA}
h = residual + attn @ o_proj.T
h = h + down(silu(gate(RMSNorm(h, post_attention_layernorm.w))) * up(RMSNorm(h, post_attention_layernorm.w)))
pre  = h                                                       # PRE-norm output -> fed back (step 4)
logits_draft = RMSNorm(pre, norm.w) @ lm_head.T                 # [T, {DV}]
token = argmax(logits_draft) ; token += d2t[token]              # target vocabulary id
```

Norms: `input_layernorm` is applied to the embedding (and, in ModelOpt, also to the hidden before
`hidden_norm`); `hidden_norm` to the hidden input; `post_attention_layernorm` before the MLP; `norm` before
`lm_head`. In this checkpoint `input_layernorm.weight` is all ones (frozen during training) so the
official formula `hn = RMSNorm(h, hidden_norm.w)` (EAGLE reference / TRT-LLM / vLLM / SGLang) gives the
same result: max |Δlogit| = {off_diff:.2e}, identical chain tokens ({off_equal}).

## 4. Chain drafting (what is fed back)

```
context x_0..x_(n-1); run the target once -> features g_0..g_(n-1), base token b = argmax target logits at n-1
tokens  = [x_1, ..., x_(n-1), b]          # index t carries x_(t+1)
hidden  = [g_0, ..., g_(n-1)]
for step in 1..K:
    logits, pre = layer(hidden, embed(tokens), positions 0..len-1)  # causal over all indices
    d = argmax(logits[last]) ; d += d2t[d]
    tokens.append(d)                      # new index n-1+step carries the drafted token
    hidden.append(pre[last])              # PRE-norm output of the previous last index (not fc, not normed)
```
With a KV cache only the new index is computed per step (its keys/values attend to all earlier indices
and itself, rotary position = its index). After verification, the accepted tokens' real target features
replace the drafted hidden states (re-run `fc` on the target's captured layers).
Training matched this: 3 training-time-test steps (ModelOpt default), loss decay 0.9.

## Measured (held-out, see training_report.json)
* step-1 top-1 agreement with the target argmax: teacher-forced {s1_tf:.3f}, on target greedy chains {s1_ch:.3f}
* 4-token chain drafts on target greedy chains: mean accepted {acc4:.3f} (tokens per target step {tps:.3f}),
  cumulative accept rate by depth {bystep}
"""


README_MD = """# Tiny speculative-decoding model family (CPU-trainable, reproducible)

Generated by `scripts/train_tiny_models.py` from `training_report.json`; do not edit by hand.

```
python scripts/train_tiny_models.py --out models/tiny          # seed {seed}, {threads} CPU threads
```
Total wall time of the run that produced these files: **{total_min:.1f} min**
({host}). Sizes: {size_line}.

## Corpus
Python {pyver} standard library `*.py` (`{stdlib}`; `site-packages` excluded; sorted by relative path;
{n_skip} non-UTF-8 file(s) skipped): {n_train} training files ({tok_train:,} tokens), {n_held} held-out files
({tok_held:,} tokens), held-out rule: {rule}. Corpus sha256 `{sha}`.
Documents are packed as `<s> text </s>`; training samples are random 256-token windows.

## Tokenizer (`target/`, copied to `draft/`)
Byte-level BPE trained with `tokenizers` (ByteLevel pre-tokenizer + ByteLevel decoder), vocab {vocab},
special tokens `<s>`=0 (bos), `</s>`=1 (eos), `<pad>`=2 (pad).
`AutoTokenizer.from_pretrained("models/tiny/target")` returns a `PreTrainedTokenizerFast`
(`{tokcls}` in transformers 5) that **adds `<s>` (id 0) by default** through the `tokenizer.json`
TemplateProcessing post-processor (`add_special_tokens=False` disables it) and **never appends `</s>`**;
eos_token_id = 1, pad_token_id = 2. `"def fib(n):"` → `{fib_ids}`.

## Models

| dir | what | size | params | dtype | train time |
|---|---|---|---|---|---|
| `target/` | `LlamaForCausalLM`, hidden {t_h}, {t_L} layers, {t_nh} heads / {t_kv} KV heads (head_dim {t_hd}), MLP {t_i}, untied embeddings, max_pos {t_pos} | {s_target} | {p_target:,} | float16 | {tt_target} |
| `draft/` | `LlamaForCausalLM`, hidden {d_h}, {d_L} layers, {d_nh} heads / {d_kv} KV heads, MLP {d_i}; distilled from the target (forward KL, T=1) | {s_draft} | {p_draft:,} | float16 | {tt_draft} |
| `medusa/` | {m_heads} Medusa heads × {m_layers} ResBlock (FasterDecoding layout), backbone frozen, ModelOpt `medusa` mode | {s_medusa} | {p_medusa:,} | float16 | {tt_medusa} |
| `eagle3/` | EAGLE-3 head (`LlamaForCausalLMEagle3`), captured layers {e_ids}, draft vocab {e_dv}/{vocab}, ModelOpt `eagle` mode + export | {s_eagle} | {p_eagle:,} | float16 (+int64 d2t) | {tt_eagle} |

Tokenizer training {tt_tok}; evaluation {tt_eval}. Target training: {t_steps} steps × {t_batch} tokens
({t_tokens:,} tokens), final train loss (EMA) {t_loss}; held-out loss {ho_loss} nats/token (ppl {ho_ppl}).

### Medusa layout (`medusa/`)
`config.json`: `medusa_num_heads` {m_heads}, `medusa_num_layers` {m_layers}, `hidden_size`, `vocab_size`,
`base_model_name_or_path`. Weights `model.safetensors` (+ symlink `medusa_lm_head.safetensors`, the file
name TensorRT-LLM's `convert_checkpoint.py --medusa_model_dir` and TGI open): `{{i}}.0.linear.weight` [H,H],
`{{i}}.0.linear.bias` [H] (ResBlock `x + SiLU(Linear(x))`), `{{i}}.1.weight` [vocab,H] (no bias), i = 0..{m_last}.
Head i reads the target's final hidden state **after** `model.norm` at position t and predicts the token at
t+2+i (the base LM head predicts t+1).

### EAGLE-3 (`eagle3/`)
See `eagle3/ARCHITECTURE.md` for the exact inference recipe (verified against ModelOpt's module).

## Measured agreement (held-out files only)

Teacher-forced on {tf_chunks} held-out windows (same prefix for draft and target):

| metric | value |
|---|---|
| draft argmax == target argmax | {tf_agree} |
| draft α = E[Σ min(p,q)], T=1 | {tf_alpha} |
| Medusa head top-1 vs target greedy next tokens (heads 0..{m_last}, t+2..t+{m_far}) | {tf_med} |
| EAGLE-3 step-1 top-1 vs target argmax | {tf_eag} (target argmax inside draft vocab: {tf_inv}) |

Free-running target greedy chains ({ch_n} held-out prompts of {ch_p} tokens + {ch_new} greedy tokens):

| metric | value |
|---|---|
| draft argmax == target argmax | {ch_agree} |
| draft α = E[Σ min(p,q)], T=1 | {ch_alpha} |
| draft γ=4 greedy: mean accepted / tokens per target step | {ch_dacc} / {ch_dtps} |
| Medusa head top-1 vs target greedy tokens | {ch_med} |
| Medusa top-1 chain: mean accepted / tokens per target step | {ch_macc} / {ch_mtps} |
| EAGLE-3 step-1 top-1 vs target argmax | {ch_eag} |
| EAGLE-3 4-step chain: mean accepted / tokens per target step | {ch_eacc} / {ch_etps} |

## Sanity check
`AutoModelForCausalLM.from_pretrained("models/tiny/target", dtype=torch.float32)`, greedy, 64 new tokens:
```python
{sanity}
```

## Notes
* Wall times are measured on a 2-core machine shared with other jobs, so they include contention
  (1-min load averages at stage start/end: {loads}). {timing_note}
  Invocations that produced these files: {runs}.
  Every stage seeds itself from `--seed` and reloads its inputs from `--out`, so a staged run
  (`--stages ...`) produces the same result as one full run. {det}
* Everything is seeded (`--seed`, stage seeds derive from it); `tokenizers` BPE training and CPU torch
  kernels with a fixed thread count are deterministic in practice; bf16 autocast is used for training speed.
* ModelOpt {modelopt_version}: EAGLE-3 trained with its own forward/loss (`eagle_use_torch_compile=False`,
  `eagle_export_rope_scaling={{}}`); the exporter writes `layers.0.*` keys which the script renames to the
  official `midlayer.*`. ModelOpt's Medusa mode only has a TensorRT-LLM-engine exporter, so its heads are
  re-keyed (`medusa_heads.` prefix stripped) into the FasterDecoding layout; its built-in loss needs hard
  labels, so the script computes a self-distillation loss from the same forward.
"""


def fmt_time(s):
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def human(n):
    return f"{n / 1e6:.2f} MB"


def stage_docs(args, out: Path, report: dict):
    import modelopt

    sizes = {d: dir_size(out / d) for d in ["target", "draft", "medusa", "eagle3"]}
    total = dir_size(out)
    report["sizes_bytes"] = {**sizes, "total_dir": total}
    ev = report["eval"]
    tf, ch = ev["teacher_forced_heldout"], ev["greedy_chains_heldout"]
    e3 = report["eagle3"]
    ver = e3["verify"]
    ecfg = json.loads((out / "eagle3" / "config.json").read_text())
    H = ecfg["hidden_size"]
    ids = e3["aux_layer_ids"]
    arch = ARCH_MD.format(
        modelopt_version=modelopt.__version__,
        diff_logits=ver["max_abs_diff_logits"],
        diff_pre=ver["max_abs_diff_prenorm_hidden"],
        chain_equal=ver["pseudo_speculative_generate_tokens_equal"],
        H=H,
        H2=2 * H,
        H3=3 * H,
        I=ecfg["intermediate_size"],
        DV=ecfg["draft_vocab_size"],
        NH=ecfg["num_attention_heads"],
        NKV=ecfg["num_key_value_heads"],
        HD=ecfg["head_dim"],
        GQA=ecfg["num_attention_heads"] // ecfg["num_key_value_heads"],
        EPS=ecfg["rms_norm_eps"],
        THETA=ecfg.get("rope_theta"),
        MAXPOS=ecfg["max_position_embeddings"],
        ids=ids,
        hs_ids=", ".join(str(i + 1) for i in ids),
        inp_ids=[i + 1 for i in ids],
        i0=ids[0],
        i1=ids[1],
        i2=ids[2],
        L=report["target"]["config"]["num_hidden_layers"],
        Lm1=report["target"]["config"]["num_hidden_layers"] - 1,
        off_diff=ver["official_norm_vs_modelopt_max_abs_diff_logits"],
        off_equal=ver["official_norm_chain_tokens_equal"],
        s1_tf=tf["eagle3_step1_top1_vs_target_argmax"],
        s1_ch=ch["eagle3_step1_top1_vs_target_argmax"],
        acc4=ch["eagle3_chain4_mean_accepted"],
        tps=ch["eagle3_chain4_tokens_per_target_step"],
        bystep=ch["eagle3_chain4_cumulative_accept_rate_by_step"],
    )
    (out / "eagle3" / "ARCHITECTURE.md").write_text(arch)
    tc, dc = report["target"]["config"], report["draft"]["config"]
    times = report.get("timings_seconds", {})
    total_s = sum(times.values())
    size_line = ", ".join(f"`{k}/` {human(v)}" for k, v in sizes.items()) + f", total {human(total)}"
    readme = README_MD.format(
        seed=args.seed,
        threads=args.threads,
        total_min=total_s / 60,
        host=report.get("host", ""),
        size_line=size_line,
        pyver=report["corpus"]["python_version"],
        stdlib=report["corpus"]["stdlib_path"],
        n_skip=len(report["corpus"]["files_skipped_non_utf8"]),
        n_train=report["corpus"]["files_train"],
        tok_train=report["corpus"].get("tokens_train", 0),
        n_held=report["corpus"]["files_heldout"],
        tok_held=report["corpus"].get("tokens_heldout", 0),
        rule=report["corpus"]["heldout_rule"],
        sha=report["corpus"]["sha256"],
        vocab=report["tokenizer"]["vocab_size"],
        tokcls=report["tokenizer"]["autotokenizer_class"],
        fib_ids=report["tokenizer"]["example_def_fib"]["input_ids"],
        t_h=tc["hidden_size"],
        t_L=tc["num_hidden_layers"],
        t_nh=tc["num_attention_heads"],
        t_kv=tc["num_key_value_heads"],
        t_hd=tc["head_dim"],
        t_i=tc["intermediate_size"],
        t_pos=tc["max_position_embeddings"],
        d_h=dc["hidden_size"],
        d_L=dc["num_hidden_layers"],
        d_nh=dc["num_attention_heads"],
        d_kv=dc["num_key_value_heads"],
        d_i=dc["intermediate_size"],
        s_target=human(sizes["target"]),
        s_draft=human(sizes["draft"]),
        s_medusa=human(sizes["medusa"]),
        s_eagle=human(sizes["eagle3"]),
        p_target=report["target"]["params"],
        p_draft=report["draft"]["params"],
        p_medusa=report["medusa"]["params"],
        p_eagle=e3["params"],
        tt_target=fmt_time(times.get("target", 0)),
        tt_draft=fmt_time(times.get("draft", 0)),
        tt_medusa=fmt_time(times.get("medusa", 0)),
        tt_eagle=fmt_time(times.get("eagle3", 0)),
        tt_tok=fmt_time(times.get("tokenizer", 0)),
        tt_eval=fmt_time(times.get("eval", 0)),
        m_heads=report["medusa"]["heads"],
        m_layers=report["medusa"]["layers_per_head"],
        m_last=report["medusa"]["heads"] - 1,
        m_far=report["medusa"]["heads"] + 1,
        e_ids=ids,
        e_dv=e3["draft_vocab_size"],
        t_steps=report["target"]["train_steps"],
        t_batch=f"{report['target']['batch'][0]}×{report['target']['batch'][1]}",
        t_tokens=report["target"]["train_tokens"],
        t_loss=report["target"]["final_loss_ema"],
        ho_loss=tf["target_heldout_loss_nats"],
        ho_ppl=tf["target_heldout_ppl"],
        tf_chunks=f"{tf['chunks'][0]}×{tf['chunks'][1]}",
        tf_agree=tf["draft_greedy_agreement"],
        tf_alpha=tf["draft_alpha_T1"],
        tf_med=tf["medusa_head_top1_vs_target_greedy"],
        tf_eag=tf["eagle3_step1_top1_vs_target_argmax"],
        tf_inv=tf["eagle3_target_argmax_in_draft_vocab"],
        ch_n=ch["chains"][0],
        ch_p=ch["prompt_len"],
        ch_new=ch["new_tokens"],
        ch_agree=ch["draft_greedy_agreement"],
        ch_alpha=ch["draft_alpha_T1"],
        ch_dacc=ch["draft_gamma4_mean_accepted"],
        ch_dtps=ch["draft_gamma4_tokens_per_target_step"],
        ch_med=ch["medusa_head_top1_vs_target_greedy"],
        ch_macc=ch["medusa_chain_mean_accepted"],
        ch_mtps=ch["medusa_chain_tokens_per_target_step"],
        ch_eag=ch["eagle3_step1_top1_vs_target_argmax"],
        ch_eacc=ch["eagle3_chain4_mean_accepted"],
        ch_etps=ch["eagle3_chain4_tokens_per_target_step"],
        sanity=ev["sanity_generate"]["output"],
        modelopt_version=modelopt.__version__,
        loads=report.get("load_average_1min_start_end") or "not recorded",
        timing_note=report.get("timing_note", ""),
        det=("Checked: " + report["determinism_check"] + ".") if report.get("determinism_check") else "",
        runs="; ".join(f"`{r}`" for r in report.get("runs", [report.get("command", "")])),
    )
    (out / "README.md").write_text(readme)
    report["sizes_bytes"]["total_dir"] = dir_size(out)
    if report["sizes_bytes"]["total_dir"] > SIZE_BUDGET_BYTES:
        log(f"WARNING: {out} is {human(report['sizes_bytes']['total_dir'])} > 25 MB budget")
    log(f"docs written; sizes {report['sizes_bytes']}")


# --------------------------------------------------------------------------------------------
def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = load_report(out)
    import modelopt
    import transformers

    report["command"] = "python " + " ".join(
        [Path(sys.argv[0]).as_posix()] + (sys.argv[1:] if argv is None else argv)
    )
    report["seed"] = args.seed
    report["args"] = {k: v for k, v in vars(args).items()}
    report["host"] = (
        f"{os.cpu_count()} CPUs visible, torch threads {args.threads}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, modelopt {modelopt.__version__}, "
        f"python {platform.python_version()}"
    )
    timings = report.setdefault("timings_seconds", {})
    t_all = time.time()

    loads = report.setdefault("load_average_1min_start_end", {})
    report.setdefault("runs", []).append(report["command"])

    def timed(name, fn, *a):
        t = time.time()
        l0 = os.getloadavg()[0]
        log(f"=== stage {name} ===")
        fn(*a)
        timings[name] = round(time.time() - t, 1)
        loads[name] = [round(l0, 2), round(os.getloadavg()[0], 2)]
        save_report(out, report)
        log(f"=== stage {name} done in {timings[name]:.1f}s ===")

    if "tokenizer" in args.stages:
        timed("tokenizer", stage_tokenizer, args, out, report)
    need_data = any(s in args.stages for s in ["target", "draft", "medusa", "eagle3", "eval"])
    data = Data(args, out) if need_data else None
    if data is not None:
        report.setdefault("corpus", {}).update(data.info)
    if "target" in args.stages:
        timed("target", stage_target, args, out, data, report)
    if any(s in args.stages for s in ["draft", "medusa", "eagle3"]):
        t = time.time()
        target = load_lm(out / "target")
        data.chains = build_chains(data, target, args, args.gen_chains, stage_seed(args, "draft") + 7)
        timings["self_distillation_chains"] = round(time.time() - t, 1)
        log(
            f"built {tuple(data.chains.shape)} target greedy chains in {timings['self_distillation_chains']:.1f}s"
        )
        if "draft" in args.stages:
            timed("draft", stage_draft, args, out, data, target, report)
        del target
    if "medusa" in args.stages:
        timed("medusa", stage_medusa, args, out, data, report)
    if "eagle3" in args.stages:
        timed("eagle3", stage_eagle3, args, out, data, report)
    if "eval" in args.stages:
        timed("eval", stage_eval, args, out, data, report)
    if "docs" in args.stages:
        stage_docs(args, out, report)
    report["last_run_seconds"] = round(time.time() - t_all, 1)
    save_report(out, report)
    log(f"all done in {time.time() - t_all:.1f}s")


if __name__ == "__main__":
    main()
