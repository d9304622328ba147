"""Medusa heads with NVIDIA ModelOpt's `medusa` mode, exported in the FasterDecoding layout.

Shared by `sdtk train-draft` and scripts/train_tiny_models.py (which trained models/tiny/medusa with
these functions). ModelOpt's Medusa mode only exports TensorRT-LLM engines checkpoints, so the heads
are re-keyed (`medusa_heads.` prefix stripped) into FasterDecoding's `medusa_lm_head.safetensors`
layout: `{i}.{j}.linear.weight/bias` = ResBlock j of head i (x + SiLU(Linear(x))), `{i}.{L}.weight` =
head i's Linear(hidden -> vocab), no bias. Head i reads the target's final (post-norm) hidden state
at t and predicts the token at t+2+i. ModelOpt's built-in loss needs hard labels, so the loss here is
self-distillation: Σ_i 0.8^i · CE(head_i(t), softmax(target logits at t+1+i)).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from toolkit import modes
from toolkit._fs import publish_dir
from toolkit.errors import ModelError

DECAY = 0.8  # ModelOpt's medusa_decay_coefficient, Medusa's λ_k = 0.8^k


def convert(model: Any, num_heads: int, num_layers: int) -> None:
    """ModelOpt HFMedusaModel in place; heads start from the target's LM head (Medusa practice)."""
    import modelopt.torch.speculative as mtsp
    import torch

    mode = modes.info(modes.MEDUSA).modelopt_mode
    mtsp.convert(model, [(mode, {"medusa_num_heads": num_heads, "medusa_num_layers": num_layers})])
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        for head in model.medusa_heads:
            head[-1].weight.copy_(model.lm_head.weight)
    for p in model.medusa_heads.parameters():
        p.requires_grad_(True)


def init_from_export(model: Any, heads_dir: Path) -> None:
    """Fine-tuning: FasterDecoding-layout heads back into ModelOpt's module."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(str(Path(heads_dir) / "model.safetensors"))
    own = model.medusa_heads.state_dict()
    if set(sd) != set(own):
        raise ModelError(f"{heads_dir}: Medusa keys {sorted(set(sd) ^ set(own))[:4]} do not match the heads")
    with torch.no_grad():
        for k, v in sd.items():
            own[k].copy_(v.to(own[k].dtype))


def loss(model: Any, x: Any) -> tuple[Any, dict[str, float]]:
    """One ModelOpt HFMedusaModel forward (no labels) and the self-distillation loss."""
    import torch
    import torch.nn.functional as F

    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        o = model(input_ids=x, freeze_base_model=True)
    p_base = F.softmax(o.logits.float(), -1)
    base_arg = o.logits.argmax(-1)
    total: Any = 0.0
    accs = {}
    for i, ml in enumerate(o.medusa_logits):
        lq = F.log_softmax(ml[:, : -(1 + i)].float(), -1)
        total = total + (DECAY**i) * -(p_base[:, 1 + i :] * lq).sum(-1).mean()
        accs[f"acc{i}"] = float((ml[:, : -(1 + i)].argmax(-1) == base_arg[:, 1 + i :]).float().mean())
    return total, accs


def export(model: Any, out_dir: Path, num_heads: int, num_layers: int, base: str) -> dict[str, Any]:
    """FasterDecoding layout in `out_dir` (replaced): model.safetensors + its medusa_lm_head name."""
    import torch
    from safetensors.torch import save_file

    sd = {
        k[len("medusa_heads.") :]: v.detach().to(torch.float16).contiguous()
        for k, v in model.state_dict().items()
        if k.startswith("medusa_heads.")
    }
    expected = set()
    for i in range(num_heads):
        for j in range(num_layers):
            expected |= {f"{i}.{j}.linear.weight", f"{i}.{j}.linear.bias"}
        expected.add(f"{i}.{num_layers}.weight")
    if set(sd) != expected:
        raise RuntimeError(
            f"Medusa export keys differ from the FasterDecoding layout: {sorted(set(sd) ^ expected)}"
        )
    tmp = Path(out_dir).with_name(Path(out_dir).name + ".incomplete")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    # TensorRT-LLM's convert_checkpoint.py --medusa_model_dir and TGI open medusa_lm_head.safetensors
    os.symlink("model.safetensors", tmp / "medusa_lm_head.safetensors")
    cfg = {
        "architectures": ["MedusaModel"],
        "medusa_num_heads": num_heads,
        "medusa_num_layers": num_layers,
        "hidden_size": model.config.hidden_size,
        "vocab_size": model.config.vocab_size,
        "base_model_name_or_path": base,
        "torch_dtype": "float16",
        "medusa_head_offsets": {
            str(
                i
            ): f"head {i} predicts the token at t+{i + 2} from the target's final (post-norm) hidden state at t"
            for i in range(num_heads)
        },
        "weight_layout": "{i}.{j}.linear.weight/bias = ResBlock j of head i (x + SiLU(Linear(x)));"
        f" {{i}}.{num_layers}.weight = head i's Linear(hidden->vocab), no bias",
    }
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    publish_dir(tmp, Path(out_dir))
    return {"keys": sorted(sd), "params": sum(v.numel() for v in sd.values())}
