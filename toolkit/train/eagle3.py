"""EAGLE-3 heads with NVIDIA ModelOpt: configure, initialise, train step, export to the official layout.

Shared by `sdtk train-draft` (toolkit.train.api) and scripts/train_tiny_models.py, which trained the
shipped head models/tiny/eagle3 with exactly these functions. The export is ModelOpt's
`export_speculative_decoding`, whose `layers.0.*` keys are renamed to the official `midlayer.*`
(yuhuili/EAGLE3-*, read by TensorRT-LLM, vLLM, SGLang and toolkit.reference.eagle3), floats in
float16 and `d2t` in int64.

ModelOpt's EAGLE-3 layer normalises the fused feature twice, hidden_norm(input_layernorm(g)); the
official implementations use hidden_norm(g). Freezing input_layernorm's weight at 1 makes both agree,
so every head trained here is exact under either implementation.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from toolkit import modes
from toolkit._fs import publish_dir
from toolkit.errors import ModelError

DEFAULT_LAYER_IDS = (1, 3, 4)  # the tiny family's captured layers (6-layer target)
EXPORT_KEYS = (
    "d2t",
    "fc.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "lm_head.weight",
    "norm.weight",
)


def default_layer_ids(num_layers: int) -> list[int]:
    """Low, middle and high decoder layers, as EAGLE-3 captures them (1, L/2-1, L-4 upstream);
    the tiny family's 6-layer target uses [1, 3, 4]."""
    if num_layers == 6:
        return list(DEFAULT_LAYER_IDS)
    return sorted({1, max(1, num_layers // 2 - 1), max(1, num_layers - 4)})


def rope_theta(config: Any) -> float:
    """The target's RoPE base: `rope_theta`, or transformers 5's `rope_parameters["rope_theta"]`
    (its configs no longer carry the attribute); 10000 when neither says."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    return float(theta or 10000)


def modelopt_config(
    target_config: Any, draft_vocab_size: int, layer_ids: list[int], rope_theta: float = 10000
) -> dict[str, Any]:
    """ModelOpt's EAGLE3_DEFAULT_CFG with the head shaped like the target (one decoder layer)."""
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    c = target_config
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    cfg["eagle_architecture_config"].update(
        {
            "hidden_size": c.hidden_size,
            "vocab_size": c.vocab_size,
            "draft_vocab_size": draft_vocab_size,
            "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": rope_theta,
            "rope_scaling": {"rope_type": "default", "rope_theta": rope_theta},
            "eagle_aux_hidden_state_layer_ids": list(layer_ids),
            "torch_dtype": "float16",
            "bos_token_id": c.bos_token_id,
            "eos_token_id": c.eos_token_id,
            "pad_token_id": c.pad_token_id,
        }
    )
    cfg["eagle_use_torch_compile"] = False  # CPU: compile costs ~96 s on the first forward
    cfg["eagle_export_rope_scaling"] = {}  # keep the trained (default) RoPE in the export
    return cfg


def draft_vocab(
    counts: Any, draft_vocab_size: int, *, bos: int, eos: int, pad: int
) -> tuple[Any, Any, float]:
    """The `draft_vocab_size` most frequent target tokens (+ </s>), sorted by id; d2t = used - arange.

    `counts`: a tensor of token counts over the training tokens. Returns (used ids, d2t, coverage)."""
    import torch

    counts = counts.clone().to(torch.long)
    vocab_size = counts.numel()
    counts[eos] = counts.max() + 1  # always keep </s>
    counts[bos] = -1
    if pad not in (bos, eos):  # a tokenizer whose pad is its eos (SmolLM2) keeps it
        counts[pad] = -1
    order = sorted(range(vocab_size), key=lambda i: (-int(counts[i]), i))  # ties: lower id first
    used = torch.tensor(sorted(order[:draft_vocab_size]), dtype=torch.long)
    d2t = used - torch.arange(draft_vocab_size)
    coverage = float(counts[used].clamp_min(0).sum() / counts.clamp_min(0).sum().clamp_min(1))
    return used, d2t, coverage


def convert(model: Any, cfg: dict[str, Any]) -> Any:
    """Turn a HF causal LM into ModelOpt's HFEagleModel in place; returns the eagle module."""
    import modelopt.torch.speculative as mtsp

    mtsp.convert(model, [(modes.info(modes.EAGLE3).modelopt_mode, cfg)])
    return model.eagle_module


def init_from_target(model: Any, used: Any, d2t: Any) -> None:
    """A fresh head: draft LM head = the target's rows for the draft vocab, norm = the target's."""
    import torch

    em = model.eagle_module
    with torch.no_grad():
        em.d2t.copy_(d2t)
        em.lm_head.weight.copy_(model.lm_head.weight[used])
        em.norm.weight.copy_(model.model.norm.weight)


def init_from_export(model: Any, head_dir: Path) -> None:
    """Fine-tuning: load an exported head (official layout) back into ModelOpt's eagle module."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(str(Path(head_dir) / "model.safetensors"))
    state = {
        (k.replace("midlayer.", "layers.0.", 1) if k.startswith("midlayer.") else k): v for k, v in sd.items()
    }
    em = model.eagle_module
    own = em.state_dict()
    missing = sorted(k for k in own if k not in state and not k.startswith("rotary"))
    if missing:
        raise ModelError(
            f"{head_dir}: the EAGLE-3 head has no {', '.join(missing[:4])}",
            hint="pass a head exported by sdtk or ModelOpt",
        )
    with torch.no_grad():
        for k, v in state.items():
            if k in own:
                if own[k].shape != v.shape:
                    raise ModelError(
                        f"{head_dir}: {k} has shape {list(v.shape)}, the target needs {list(own[k].shape)}"
                    )
                own[k].copy_(v.to(own[k].dtype))


def freeze_for_training(model: Any) -> list[Any]:
    """The trainable parameters: ModelOpt's convert froze the target; input_layernorm stays at 1
    (see the module docstring)."""
    model.eagle_module.layers[0].input_layernorm.weight.requires_grad_(False)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not all(n.startswith("eagle_module.") for n, _ in trainable):
        raise RuntimeError(f"parameters outside the head would train: {[n for n, _ in trainable]}")
    return [p for _, p in trainable]


def train_step(model: Any, x: Any) -> tuple[Any, dict[str, float]]:
    """One ModelOpt HFEagleModel forward (base forward + TTT steps, self-logit distillation)."""
    import torch

    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        o = model(input_ids=x)
    accs = {f"acc{i}": float(a) for i, a in enumerate(o.train_acc[0])}
    return o.loss, accs


def export(model: Any, out_dir: Path) -> dict[str, Any]:
    """ModelOpt's exporter, then the official single-layer layout in `out_dir` (replaced).
    Returns what was written: the exporter's raw keys and the config."""
    import torch
    import transformers
    from modelopt.torch.export import export_speculative_decoding
    from safetensors.torch import load_file, save_file

    model.eval()
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        export_speculative_decoding(model, export_dir=tmp)
        raw = load_file(str(Path(tmp) / "model.safetensors"))
        ecfg = json.loads((Path(tmp) / "config.json").read_text())
    sd = {}
    for k, v in raw.items():
        nk = k.replace("layers.0.", "midlayer.") if k.startswith("layers.0.") else k
        sd[nk] = v.contiguous() if k == "d2t" else v.to(torch.float16).contiguous()
    if sd["d2t"].dtype != torch.int64:
        raise RuntimeError(f"ModelOpt exported d2t as {sd['d2t'].dtype}, not int64")
    ecfg["torch_dtype"] = "float16"
    ecfg["transformers_version"] = transformers.__version__
    tmp_dir = out_dir.with_name(out_dir.name + ".incomplete")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    save_file(sd, str(tmp_dir / "model.safetensors"), metadata={"format": "pt"})
    (tmp_dir / "config.json").write_text(json.dumps(ecfg, indent=4) + "\n")

    publish_dir(tmp_dir, out_dir)
    params = sum(v.numel() for k, v in sd.items() if k != "d2t")
    return {"modelopt_export_keys": sorted(raw), "keys": sorted(sd), "params": params, "config": ecfg}
