"""One trainer per trainable mode, behind one loop (toolkit.train.loop, the Hugging Face Trainer):
EAGLE-3 (ModelOpt `eagle`), Medusa (ModelOpt `medusa`), and a draft model distilled from the target
(draft-target).

A sample is a window of `seq_len` tokens over the concatenated self-distilled sequences at a start
drawn from a generator seeded by (seed, sample index); under torchrun the Trainer gives each rank
its share of every global batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import modes
from toolkit.errors import UsageError
from toolkit.modes import DRAFT_TARGET, EAGLE3, MEDUSA
from toolkit.modes.mtp import MTP
from toolkit.modes.pard import PARD
from toolkit.train import draft, eagle3, loop, medusa, mtp, pard


@dataclass
class Trainee:
    module: Any  # the nn.Module whose parameters with requires_grad train (DDP-wrapped under torchrun)
    step: Callable[[Any, Any], tuple[Any, dict[str, float]]]  # (module, token batch) -> (loss, metrics)
    export: Callable[[Path], dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)
    key: list[Any] = field(default_factory=list)  # what else decides the run (resume fingerprint)


def train(
    mode: str,
    target_dir: Path,
    current: Path | None,
    examples: list[Any],
    opts: Any,
    artifact: Path,
    data_hash: str,
    *,
    rank: int = 0,
) -> dict[str, Any]:
    """Train the mode's draft on `examples`; export it to `artifact` (rank 0). `current`: the
    recipe's own head/draft (its architecture, when training from scratch needs one)."""
    import torch

    if opts.threads:
        torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    world, _ = loop.dist_world()
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
    stream = torch.tensor([t for e in examples for t in e.ids], dtype=torch.long)
    builders = {EAGLE3: _eagle3, MEDUSA: _medusa, DRAFT_TARGET: _draft, PARD: _pard, MTP: _mtp}
    with contextlib.redirect_stdout(sys.stderr):  # ModelOpt prints; stdout carries the --json data
        trainee = builders[mode](target_dir, current, stream, opts, device)
    seq = min(opts.seq_len, max(8, int(stream.numel()) - 1))
    n_starts = int(stream.numel()) - seq + 1

    def window(gen: Any) -> Any:  # one training sample: `seq` tokens from a seeded start
        s = int(torch.randint(0, n_starts, (1,), generator=gen))
        return stream[s : s + seq]

    fp = hashlib.sha256(
        json.dumps(
            [mode, data_hash, str(opts.from_), opts.seed, opts.batch_size, world, seq, opts.lr, *trainee.key],
            default=str,
        ).encode()
    ).hexdigest()
    cfg = loop.LoopConfig(
        max_steps=opts.max_steps,
        lr=opts.lr,
        checkpoint_every=opts.checkpoint_every,
        max_minutes=opts.max_minutes,
        seed=opts.seed,
        batch_size=opts.batch_size,
        resume=opts.resume,
        fingerprint=fp,
    )
    # the Trainer places the batches on the module's device and, under torchrun, wraps the module
    # in DistributedDataParallel (gradients of the trainable parameters all-reduced in backward)
    res = loop.run(
        mode, trainee.module, trainee.step, window, cfg, Path(opts.out) / "checkpoints",
        progress=opts.progress,
    )  # fmt: skip
    if res.stopped == "interrupted" or rank != 0:
        return res.to_dict()
    with contextlib.redirect_stdout(sys.stderr):
        written = trainee.export(artifact)
    return {
        **res.to_dict(),
        **trainee.info,
        "batch": [opts.batch_size, seq],
        "gpus_or_processes": world,
        "lr": opts.lr,
        "train_tokens": int(stream.numel()),
        "export": written,
    }


def _load_target(target_dir: Path, device: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(target_dir), dtype=torch.float32 if device.type == "cpu" else torch.bfloat16
    )
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _eagle3(target_dir: Path, current: Path | None, stream: Any, opts: Any, device: Any) -> Trainee:
    import torch

    model = _load_target(target_dir, device)
    c = model.config
    if opts.from_ is not None:
        from_cfg = json.loads((Path(opts.from_) / "config.json").read_text())
        dv = int(from_cfg.get("draft_vocab_size", c.vocab_size))
        layer_ids = list(from_cfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or [])
        layer_ids = layer_ids or eagle3.default_layer_ids(c.num_hidden_layers)
        theta = float(from_cfg.get("rope_theta") or 10000)
    else:
        dv = c.vocab_size // 2 if c.vocab_size <= 64000 else 32000
        if getattr(opts, "draft_vocab", None):
            dv = int(opts.draft_vocab)
            if not 1 <= dv <= c.vocab_size:
                raise UsageError(f"--draft-vocab must be between 1 and {c.vocab_size}, got {dv}")
        layer_ids = eagle3.default_layer_ids(c.num_hidden_layers)
        theta = eagle3.rope_theta(c)
    eagle3.convert(model, eagle3.modelopt_config(c, dv, layer_ids, rope_theta=theta))
    coverage = None
    if opts.from_ is not None:
        eagle3.init_from_export(model, Path(opts.from_))
        init = f"fine-tuned from {opts.from_}"
    else:
        counts = torch.bincount(stream, minlength=c.vocab_size)
        used, d2t, coverage = eagle3.draft_vocab(
            counts, dv, bos=c.bos_token_id, eos=c.eos_token_id, pad=c.pad_token_id
        )
        eagle3.init_from_target(model, used, d2t)
        init = "from scratch (draft vocab: the most frequent tokens of the self-distilled data)"
    if device.type != "cpu":  # the target stays bf16; the head trains in fp32 under autocast
        model.to(device)
        model.eagle_module.float()
    eagle3.freeze_for_training(model)  # the head alone trains (checked)
    model.train()
    return Trainee(
        module=model,
        step=eagle3.train_step,
        export=lambda d: _keys(eagle3.export(model.float().cpu(), d)),
        info={
            "trainer": f"ModelOpt mtsp.convert(model, [({modes.info(EAGLE3).modelopt_mode!r}, "
            "EAGLE3_DEFAULT_CFG['config'] + overrides)]), "
            "its forward and loss (TTT steps, self-logit distillation on the draft vocab)",
            "init": init,
            "draft_vocab_size": dv,
            "draft_vocab_coverage": round(coverage, 4) if coverage is not None else None,
            "aux_layer_ids": layer_ids,
        },
        key=[dv, layer_ids],
    )


def _keys(written: dict[str, Any]) -> dict[str, Any]:
    return {
        "how": "modelopt.torch.export.export_speculative_decoding; layers.0.* -> midlayer.*, float16, d2t int64",
        "keys": written["keys"],
    }


def _medusa(target_dir: Path, current: Path | None, stream: Any, opts: Any, device: Any) -> Trainee:
    src = Path(opts.from_) if opts.from_ is not None else current
    heads, layers = 4, 1
    if src is not None and (src / "config.json").exists():
        cfg = json.loads((src / "config.json").read_text())
        heads, layers = int(cfg.get("medusa_num_heads", heads)), int(cfg.get("medusa_num_layers", layers))
    model = _load_target(target_dir, device)
    medusa.convert(model, heads, layers)
    if opts.from_ is not None:
        medusa.init_from_export(model, Path(opts.from_))
    if device.type != "cpu":
        model.to(device)
        model.medusa_heads.float()
    model.train()  # medusa.convert froze everything but the heads
    return Trainee(
        module=model,
        step=medusa.loss,
        export=lambda d: medusa.export(model.float().cpu(), d, heads, layers, str(target_dir)),
        info={
            "trainer": f"ModelOpt mtsp.convert(model, [({modes.info(MEDUSA).modelopt_mode!r}, {{...}})]) "
            "-> HFMedusaModel forward; "
            "loss = Σ_i 0.8^i CE(head_i(t), softmax(target logits at t+1+i)); backbone frozen",
            "init": f"fine-tuned from {opts.from_}"
            if opts.from_
            else "from scratch (heads' LM layers = target lm_head)",
            "heads": heads,
            "layers_per_head": layers,
        },
        key=[heads, layers],
    )


def _draft(target_dir: Path, current: Path | None, stream: Any, opts: Any, device: Any) -> Trainee:
    src = Path(opts.from_) if opts.from_ is not None else current
    if src is None:
        raise UsageError(
            "draft-target training needs a draft architecture: --from DRAFT or models.draft.path"
        )
    target = _load_target(target_dir, device).to(device)  # the teacher: bf16 on a GPU
    model = draft.load(src, fresh=opts.from_ is None, seed=opts.seed, target=target).to(device)
    model.train()
    shared = not model.get_input_embeddings().weight.requires_grad
    return Trainee(
        module=model,
        step=lambda m, x: draft.loss(target, m, x),
        export=lambda d: draft.export(model, d, target_dir),
        info={
            "trainer": "forward KL(p_target ‖ q_draft) at T=1 over the full vocabulary (distillation)"
            + ("; the embedding (tied LM head) is the target's, frozen and not stored" if shared else ""),
            "init": f"fine-tuned from {opts.from_}"
            if opts.from_
            else f"from scratch with the architecture of {src}",
        },
        key=[str(src)],
    )


def _pard(target_dir: Path, current: Path | None, stream: Any, opts: Any, device: Any) -> Trainee:
    src = Path(opts.from_) if opts.from_ is not None else current
    if src is None:
        raise UsageError(
            "PARD training starts from a small LM of the target's family: --from DRAFT or models.draft.path"
        )
    model = draft.load(src, fresh=False, seed=opts.seed).to(device)
    mask = pard.mask_id(model.config)
    model.train()
    return Trainee(
        module=model,
        step=lambda m, x: pard.loss(m, x, mask),
        export=lambda d: pard.export(model, d, target_dir, mask),
        info={
            "trainer": f"PARD mask-token training: the sample + {pard.COPIES - 1} mask copies, "
            "cross-entropy on the tokens 1..P ahead (no COD subsampling)",
            "init": f"fine-tuned from {src}",
            "mask_token_id": mask,
            "copies": pard.COPIES,
        },
        key=[str(src), pard.COPIES],
    )


def _mtp(target_dir: Path, current: Path | None, stream: Any, opts: Any, device: Any) -> Trainee:
    module = mtp.build(_load_target(target_dir, device)).to(device)
    module.mtp.float()
    module.train()
    return Trainee(
        module=module,
        step=mtp.loss,
        export=lambda d: mtp.export(module, d, target_dir),
        info={
            "trainer": "one DeepSeek-V3-shaped MTP module on the frozen target: KL(p_target ‖ q) for t+2, "
            f"plus {mtp.SECOND} × the reused step's for t+3",
            "init": "block from the target's last decoder layer, eh_proj [0 | I]",
        },
        key=[mtp.SECOND],
    )
