"""MTP layers for a target (DeepSeek-V3 shape, toolkit.reference.mtp): one module trained on the
frozen target's own hidden states and logits.

At position i the module reads the target's final hidden state h_i and the embedding of t_{i+1} and
is trained toward the target's distribution of t_{i+2} (forward KL at T=1, as the draft-model
distillation). A second term (weight 0.5) runs the module once more on its own output and Emb(t_{i+2})
toward the target's t_{i+3}: the reuse that drafting beyond one token does (TensorRT-LLM's MTP-Eagle).
The block starts from the target's last decoder layer, eh_proj from [0 | I].

Export (the layout the reference runtime and TensorRT-LLM read): the target's config.json with
`num_nextn_predict_layers: 1`, its tokenizer files, its weight files linked (relative symlinks, not
copied), and `mtp.safetensors` with the layer under `model.layers.<num_hidden_layers>.*` in float16.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from toolkit._fs import publish_dir
from toolkit.reference.mtp import COUNT_KEY, OWN, MtpModule
from toolkit.train.draft import TOKENIZER_FILES

SECOND = 0.5  # weight of the second (reused) step's loss


def build(target: Any) -> Any:
    """The trainable module on the frozen `target` (a causal LM), initialised as described above."""
    import torch
    from torch import nn

    class Trainee(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.target = target
            self.mtp = MtpModule(target.config)
            self.mtp.shared = [target.get_input_embeddings(), target.get_output_embeddings()]
            layer = target.get_decoder().layers[-1].state_dict()
            self.mtp.block.layers[0].load_state_dict(layer)
            h = target.config.hidden_size
            with torch.no_grad():
                self.mtp.eh_proj.weight.zero_()
                self.mtp.eh_proj.weight[:, h:] = torch.eye(h)
                self.mtp.shared_head.norm.weight.copy_(target.get_decoder().norm.weight)

    return Trainee()


def loss(module: Any, x: Any) -> tuple[Any, dict[str, float]]:
    import torch
    import torch.nn.functional as F

    target, mtp = module.target, module.mtp
    with torch.no_grad():
        hidden = target.get_decoder()(input_ids=x).last_hidden_state  # after the final norm
        logp = F.log_softmax(target.get_output_embeddings()(hidden).float(), -1)
        emb = target.get_input_embeddings()(x)
    total: Any = 0.0
    metrics: dict[str, float] = {}
    prev = hidden[:, :-1]
    for depth, weight in ((1, 1.0), (2, SECOND)):
        out = mtp(emb[:, depth:], prev[:, : x.shape[1] - depth])  # position i: predicts t_{i+depth+1}
        logq = F.log_softmax(mtp.logits(out).float(), -1)
        teacher = logp[:, depth:]
        total = total + weight * (teacher.exp() * (teacher - logq)).sum(-1).mean()
        with torch.no_grad():
            metrics[f"agree{depth}"] = float((teacher.argmax(-1) == logq.argmax(-1)).float().mean())
        prev = out
    return total, metrics


def export(module: Any, out_dir: Path, target_dir: Path) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    target_dir = Path(target_dir)
    tmp = Path(out_dir).with_name(Path(out_dir).name + ".incomplete")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg = json.loads((target_dir / "config.json").read_text())
    cfg[COUNT_KEY] = 1
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    linked = []
    for f in sorted(target_dir.iterdir()):
        if f.name.endswith((".safetensors", ".safetensors.index.json")) or f.name == "generation_config.json":
            os.symlink(os.path.relpath(f.resolve(), Path(out_dir).resolve()), tmp / f.name)
            linked.append(f.name)
        elif f.name in TOKENIZER_FILES:
            shutil.copy2(f, tmp / f.name)
    prefix = f"model.layers.{int(cfg['num_hidden_layers'])}."
    state = {}
    for k, v in module.mtp.state_dict().items():
        if k.startswith("block.rotary_emb"):
            continue
        name = k if k.startswith(OWN) else k.removeprefix("block.layers.0.")
        state[prefix + name] = v.detach().cpu().to(torch.float16).contiguous()
    save_file(state, str(tmp / "mtp.safetensors"), metadata={"format": "pt"})
    publish_dir(tmp, Path(out_dir))
    return {"mtp_params": sum(int(v.numel()) for v in state.values()), "linked": linked, "keys": len(state)}
