"""A PARD draft (arXiv 2504.18583; AMD-AGI/PARD pard/pard_train.py @8a0d2bd): a small causal LM of the
target's family, trained to predict several tokens ahead from mask tokens.

A sample x (L tokens) is followed by P-1 copies made entirely of one mask token id; every copy reuses
the position ids 0..L-1. Copy i at position p sees x[0..p-i], the masks at the same diagonal in copies
1..i-1, and itself: exactly "context ending at x[p-i], then i masks". Its label is x[p+1] (i+1 tokens
past the context); copy 0 is the ordinary next-token loss. The loss is cross-entropy over all copies.
Upstream's Conditional Drop-token (COD) subsampling of copies (a training-speed device) is not
applied: every position of every copy trains. Export: `save_pretrained` in float16 with config.json
`pard_token` (the mask id) and `spd_type`, plus the target's tokenizer files."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from toolkit.errors import UsageError
from toolkit.modes.pard import PARD
from toolkit.train import draft

COPIES = 4  # P: the trained draft proposes up to P tokens per forward (upstream's example: 8)


def mask_id(config: Any) -> int:
    """The mask token: the source's `pard_token` (fine-tuning a PARD draft), else its pad token (never
    in the training text: documents are packed without padding)."""
    for key in ("pard_token", "mask_token_id", "pad_token_id"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise UsageError(
        "the draft has no pard_token, mask_token_id or pad_token_id to use as PARD's mask token",
        hint="start from a draft whose config.json names one (upstream uses an unused token id)",
    )


@functools.lru_cache(maxsize=8)
def layout(length: int, copies: int) -> tuple[Any, Any]:
    """(additive attention mask [1, 1, T, T], position ids [T]) of a sample of `length` tokens and
    its copies, T = copies * length."""
    import torch

    t = torch.arange(copies * length)
    c, p = t // length, t % length
    cq, pq, ck, pk = c[:, None], p[:, None], c[None, :], p[None, :]
    allowed = ((ck == 0) & (pk <= pq - cq)) | ((ck >= 1) & (ck <= cq) & (pk == pq - cq + ck))
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    return mask[None, None], p


def loss(model: Any, x: Any, mask: int, copies: int = COPIES) -> tuple[Any, dict[str, float]]:
    import torch
    import torch.nn.functional as F

    b, n = x.shape
    attn, pos = layout(n, copies)
    ids = torch.cat([x, torch.full((b, (copies - 1) * n), mask, dtype=x.dtype, device=x.device)], 1)
    labels = torch.full((b, copies, n), -100, dtype=x.dtype, device=x.device)
    for i in range(copies):
        labels[:, i, i : n - 1] = x[:, i + 1 :]
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        logits = model(
            input_ids=ids,
            attention_mask=attn.to(x.device).expand(b, 1, -1, -1),
            position_ids=pos.to(x.device)[None].expand(b, -1),
        ).logits
    flat = labels.reshape(b, -1)
    out = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), flat.reshape(-1), ignore_index=-100)
    with torch.no_grad():
        hit = (logits.argmax(-1) == flat).reshape(b, copies, n).float()
        valid = (labels != -100).float()
        acc = (hit * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)
    return out, {f"acc{i + 1}": float(a) for i, a in enumerate(acc)}


def export(model: Any, out_dir: Path, target_dir: Path, mask: int) -> dict[str, Any]:
    model.config.pard_token = mask
    model.config.spd_type = PARD
    written = draft.export(model, out_dir, target_dir)
    return {**written, "pard_token": mask}
