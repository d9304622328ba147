"""A draft model for draft-target, distilled from the target: forward KL(p_target ‖ q_draft) at T=1
over the full vocabulary, on the target's own (self-distilled) sequences. The same objective
scripts/train_tiny_models.py trained models/tiny/draft with. Exported with `save_pretrained` in
float16 plus the target's tokenizer files: the layout `sdtk build` and TensorRT-LLM's converters read.

A draft whose config.json sets `sdtk_embedding_from_target` (toolkit.modes.draft_target) trains
with the target's embedding (its tied LM head) frozen and is exported without it, with no tokenizer
files: the reference runtime rebuilds it from the target at load time."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from toolkit._fs import publish_dir
from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET, EMBEDDING_KEYS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")


def load(source: Path, *, fresh: bool, seed: int, target: Any = None) -> Any:
    """The draft to train: `source`'s weights (fine-tuning) or, `fresh`, its architecture with new
    weights (seeded). A source stored without its embedding takes `target`'s, frozen."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from toolkit.reference import draft_target  # torch: imported where a model is trained

    shared = target is not None and draft_target.embedding_from_target(Path(source))
    if shared and not fresh:
        model = draft_target.load_draft_lm(Path(source), target)
    elif fresh:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(source)), dtype=torch.float32)
        if shared:
            with torch.no_grad():
                model.get_input_embeddings().weight.copy_(target.get_input_embeddings().weight)
    else:
        return AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32)
    if shared:
        model.get_input_embeddings().weight.requires_grad_(False)
    return model


def loss(target: Any, draft: Any, x: Any) -> tuple[Any, dict[str, float]]:
    import torch
    import torch.nn.functional as F

    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16):
        tl = target(input_ids=x).logits
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        dl = draft(input_ids=x).logits
    logp = F.log_softmax(tl.float(), -1)
    logq = F.log_softmax(dl.float(), -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    with torch.no_grad():
        agree = float((tl.argmax(-1) == dl.argmax(-1)).float().mean())
    return kl, {"agree": agree}


def export(draft: Any, out_dir: Path, target_dir: Path) -> dict[str, Any]:
    import copy

    import torch

    tmp = Path(out_dir).with_name(Path(out_dir).name + ".incomplete")
    shutil.rmtree(tmp, ignore_errors=True)
    m16 = copy.deepcopy(draft).cpu().to(torch.float16)
    m16.eval()
    shared = bool(getattr(draft.config, EMBEDDING_FROM_TARGET, False))
    if shared:  # the target's embedding (and tied LM head) stays out: loaders copy it back
        state = {k: v for k, v in m16.state_dict().items() if k not in EMBEDDING_KEYS}
        m16.save_pretrained(str(tmp), state_dict=state)
    else:
        m16.save_pretrained(str(tmp))
    copied = []
    for f in () if shared else TOKENIZER_FILES:
        if (Path(target_dir) / f).exists():
            shutil.copy2(Path(target_dir) / f, tmp / f)
            copied.append(f)
    publish_dir(tmp, Path(out_dir))
    return {
        "params": sum(p.numel() for p in draft.parameters()),
        "stored_params": sum(p.numel() for p in draft.parameters())
        - (draft.get_input_embeddings().weight.numel() if shared else 0),
        "embedding": "the target's (not stored)" if shared else "stored",
        "tokenizer_files": copied,
    }
