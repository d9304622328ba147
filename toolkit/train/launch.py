"""`sdtk train-draft --dry-run`: the multi-GPU launch (torchrun, one process per GPU, data parallel),
the memory each GPU needs, and the steps per epoch, from the recipe's config alone (no weights).

The launch runs this same command under `torchrun`; the Hugging Face Trainer wraps the trained
module in DistributedDataParallel, which all-reduces its gradients across ranks in backward
(torch.distributed: NCCL on GPUs, gloo on CPU); rank 0 writes the data,
checkpoints, export and report. Every rank holds the whole frozen target (as ModelOpt's EAGLE
examples do with DDP), so the memory per GPU does not shrink with more GPUs; the steps do.

Memory per GPU (an estimate; the formula is printed with it):
  target weights    params(target) × bytes(dtype)                      (frozen, no grads)
  head              params(head) × 16 bytes: fp32 weights, fp32 grads, AdamW m and v
  activations       batch × seq × per-token bytes: the target's captured features (3h, bf16),
                    its logits over the draft vocab (fp32) and, for each of the TTT_STEPS unrolled
                    draft steps, one decoder layer's saved activations (bf16) + draft logits (fp32, ×2)
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import hub
from toolkit.errors import UsageError
from toolkit.modes import EAGLE3
from toolkit.recipe import load_recipe, resolve_recipe_path
from toolkit.train import data as data_mod
from toolkit.train.api import TrainOptions

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1}
# ModelOpt's EAGLE-3 training-time test unrolls 4 draft steps (TensorRT-Model-Optimizer @5a4242f)
TTT_STEPS = 4
HEAD_BYTES_PER_PARAM = 16  # fp32 weight + fp32 grad + AdamW exp_avg + exp_avg_sq
GIB = 1024**3


@dataclass
class LaunchPlan:
    argv: list[str]
    gpus: int
    memory: dict[str, float]  # GiB per GPU
    formula: dict[str, str]
    steps_per_epoch: int
    tokens_per_epoch: int
    tokens_source: str
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "argv": self.argv,
            "gpus": self.gpus,
            "memory_gib_per_gpu": {k: round(v, 2) for k, v in self.memory.items()},
            "memory_formula": self.formula,
            "steps_per_epoch": self.steps_per_epoch,
            "tokens_per_epoch": self.tokens_per_epoch,
            "tokens_source": self.tokens_source,
            "facts": self.facts,
            "notes": self.notes,
        }

    def render(self) -> str:
        m = self.memory
        lines = [
            f"launch ({self.gpus} GPUs, data parallel, one process per GPU):",
            f"  {self.command}",
            "memory per GPU (estimate):",
            *(f"  {k:<16} {v:8.2f} GiB   {self.formula.get(k, '')}" for k, v in m.items()),
            f"steps per epoch: {self.steps_per_epoch} ({self.tokens_per_epoch} tokens, {self.tokens_source})",
            *(f"note: {n}" for n in self.notes),
        ]
        return "\n".join(lines)


def eagle3_head_params(h: int, inter: int, nh: int, nkv: int, hd: int, draft_vocab: int) -> int:
    """An EAGLE-3 head shaped like its target: fc (3h→h), one decoder layer whose q/k/v read 2h,
    three norms in the layer, the final norm and the draft LM head (d2t is int64, no parameter)."""
    fc = 3 * h * h
    attn = 2 * h * (nh * hd) + 2 * (2 * h * (nkv * hd)) + (nh * hd) * h
    mlp = 3 * h * inter
    norms = 3 * h + h
    return fc + attn + mlp + norms + draft_vocab * h


def dry_run(recipe: str | Path, opts: Any, *, gpus: int = 8, config_json: Path | None = None) -> LaunchPlan:
    if gpus < 1:
        raise UsageError(f"--gpus must be ≥ 1, got {gpus}")
    rpath = resolve_recipe_path(recipe)
    rec = load_recipe(rpath)
    if rec.speculative.mode != EAGLE3:
        raise UsageError(f"--dry-run sizes EAGLE-3 training; {rpath.name} uses mode {rec.speculative.mode}")
    if config_json is not None:
        facts = hub.facts_from_config(json.loads(Path(config_json).read_text()), cite=str(config_json))
    else:
        facts = hub.resolve(rec.models.target, role="target", recipe=rec, fetch="none").facts
    if facts.parameters is None and facts.known:
        facts.parameters = hub.estimate_parameters(facts)  # as hub.inspect does for a bare config
    dims = (facts.hidden_size, facts.intermediate_size, facts.num_attention_heads, facts.num_key_value_heads)
    h, inter, nh, nkv = (int(d) if d is not None else 0 for d in dims)
    if facts.parameters is None or facts.vocab_size is None or not all((h, inter, nh, nkv)):
        raise UsageError(
            f"no config facts for {rec.models.target.describe()} offline",
            hint="pass --config PATH/config.json (the target's), or download its metadata",
        )
    hd = int(facts.head_dim or h // nh)
    vocab = int(facts.vocab_size)
    dv = 32000 if vocab > 64000 else vocab // 2
    head = eagle3_head_params(h, inter, nh, nkv, hd, dv)
    dtype = rec.dtype if rec.dtype in DTYPE_BYTES else (facts.dtype or "bfloat16")
    wbytes = DTYPE_BYTES.get(dtype, 2)
    B, T = opts.batch_size, opts.seq_len
    layer_tok = 2 * (2 * h + (nh + 2 * nkv) * hd + nh * hd + 2 * h + 3 * inter)  # bf16 saved tensors
    per_tok = 3 * h * 2 + dv * 4 + TTT_STEPS * (layer_tok + 2 * dv * 4)
    memory = {
        "target weights": facts.parameters * wbytes / GIB,
        "head+optimizer": head * HEAD_BYTES_PER_PARAM / GIB,
        "activations": B * T * per_tok / GIB,
    }
    memory["total"] = sum(memory.values())
    formula = {
        "target weights": f"{facts.parameters:,} params × {wbytes} B ({dtype})",
        "head+optimizer": f"{head:,} params × {HEAD_BYTES_PER_PARAM} B (fp32 weight, grad, AdamW m, v)",
        "activations": f"batch {B} × seq {T} × {per_tok:,} B/token ({TTT_STEPS} TTT steps)",
        "total": "sum (CUDA context and allocator slack not included)",
    }
    tokens, source = _epoch_tokens(opts)
    steps = max(1, math.ceil(tokens / (B * T * gpus)))
    argv = ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(gpus), "-m", "toolkit.cli"]
    argv += ["train-draft", str(recipe), "--data", str(opts.data), "--out", str(opts.out)]
    argv += forwarded_options(opts)
    return LaunchPlan(
        argv=argv,
        gpus=gpus,
        memory=memory,
        formula=formula,
        steps_per_epoch=steps,
        tokens_per_epoch=tokens,
        tokens_source=source,
        facts={"target": facts.to_dict(), "head_params": head, "draft_vocab_size": dv},
        notes=[
            "every rank holds the whole frozen target (data parallel); gradients of the head are all-reduced",
        ],
    )


def forwarded_options(opts: Any) -> list[str]:
    """The options of this command the launched ranks get (defaults left out)."""
    default = TrainOptions(data="", out=Path())
    out: list[str] = []
    for name, flag in (
        ("from_", "--from"),
        ("generate_with", "--generate-with"),
        ("holdout", "--holdout"),
        ("seed", "--seed"),
        ("max_steps", "--max-steps"),
        ("max_minutes", "--max-minutes"),
        ("checkpoint_every", "--checkpoint-every"),
        ("batch_size", "--batch-size"),
        ("seq_len", "--seq-len"),
        ("lr", "--lr"),
        ("gen_tokens", "--gen-tokens"),
        ("eval_tokens", "--eval-tokens"),
    ):
        v = getattr(opts, name)
        if v is not None and v != getattr(default, name):
            out += [flag, str(v)]
    if opts.resume:
        out.append("--resume")
    return out


def _epoch_tokens(opts: Any) -> tuple[int, str]:
    """Training tokens in one pass: from the self-distillation cache in OUT when there is one,
    else prompts × (prompt + response tokens) with the prompt's tokens estimated at 4 characters each."""
    cache = sorted(Path(opts.out).glob("data/selfdistill-*.jsonl")) if Path(opts.out).is_dir() else []
    if cache:
        rows = [json.loads(x) for x in cache[-1].read_text().splitlines() if x.strip()]
        return sum(len(r["prompt_ids"]) + len(r["output_ids"]) for r in rows), f"cached data {cache[-1].name}"
    _, prompts = data_mod.load_prompts(opts.data)
    train, _ = data_mod.split(prompts, opts.holdout, opts.seed)
    n = sum(math.ceil(len(p.text) / 4) + min(p.max_tokens, opts.gen_tokens) for p in train)
    return (
        n,
        f"estimated: {len(train)} training prompts, prompt tokens ≈ characters / 4, responses ≤ --gen-tokens",
    )
