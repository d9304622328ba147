"""Tiny random Hugging Face checkpoints for the build tests, written without torch or numpy.

Llama targets/drafts (config.json + model.safetensors + a WordLevel tokenizer.json that
`tokenizers`/transformers can load), Medusa heads in the FasterDecoding layout
(`medusa_lm_head.safetensors`, keys `{i}.0.linear.weight`, `{i}.1.weight`), EAGLE-3 heads in the
official layout (`fc`, `midlayer.*`, `lm_head`, `d2t`, `t2d`) and EAGLE-1 heads (one layer + fc).
"""

from __future__ import annotations

import json
import random
import struct
from array import array
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>"]


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], array]]) -> None:
    """tensors: name -> (dtype "F32"|"I64"|"BOOL", shape, array of values)."""
    header: dict = {}
    blobs = []
    offset = 0
    for name, (dtype, shape, values) in tensors.items():
        raw = values.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _rand(rng: random.Random, *shape: int) -> tuple[str, tuple[int, ...], array]:
    n = 1
    for s in shape:
        n *= s
    return ("F32", shape, array("f", (rng.uniform(-0.05, 0.05) for _ in range(n))))


def _ones(*shape: int) -> tuple[str, tuple[int, ...], array]:
    n = 1
    for s in shape:
        n *= s
    return ("F32", shape, array("f", [1.0] * n))


def write_tokenizer(d: Path, words: list[str]) -> None:
    vocab = {t: i for i, t in enumerate(SPECIALS + words)}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, t in enumerate(SPECIALS)
    ]  # fmt: skip
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    (d / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 256,
            }
        ),
        encoding="utf-8",
    )
    (d / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}), encoding="utf-8"
    )


def words(n: int, prefix: str = "w") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def llama(
    d: Path,
    *,
    vocab_words: list[str],
    hidden: int = 32,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    inter: int = 64,
    seed: int = 0,
) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    write_tokenizer(d, vocab_words)
    vocab = len(SPECIALS) + len(vocab_words)
    hd = hidden // heads
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hd,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    rng = random.Random(seed)
    t = {"model.embed_tokens.weight": _rand(rng, vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = _rand(rng, heads * hd, hidden)
        t[p + "self_attn.k_proj.weight"] = _rand(rng, kv_heads * hd, hidden)
        t[p + "self_attn.v_proj.weight"] = _rand(rng, kv_heads * hd, hidden)
        t[p + "self_attn.o_proj.weight"] = _rand(rng, hidden, heads * hd)
        t[p + "mlp.gate_proj.weight"] = _rand(rng, inter, hidden)
        t[p + "mlp.up_proj.weight"] = _rand(rng, inter, hidden)
        t[p + "mlp.down_proj.weight"] = _rand(rng, hidden, inter)
        t[p + "input_layernorm.weight"] = _ones(hidden)
        t[p + "post_attention_layernorm.weight"] = _ones(hidden)
    t["model.norm.weight"] = _ones(hidden)
    t["lm_head.weight"] = _rand(rng, vocab, hidden)
    write_safetensors(d / "model.safetensors", t)
    return d


def medusa(
    d: Path, *, heads: int, hidden: int, vocab: int, config_heads: int | None = None, seed: int = 1
) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(
        json.dumps({"medusa_num_heads": config_heads or heads, "medusa_num_layers": 1,
                    "base_model_name_or_path": "tiny-target"}),
        encoding="utf-8",
    )  # fmt: skip
    rng = random.Random(seed)
    t = {}
    for i in range(heads):
        t[f"{i}.0.linear.weight"] = _rand(rng, hidden, hidden)
        t[f"{i}.0.linear.bias"] = _rand(rng, hidden)
        t[f"{i}.1.weight"] = _rand(rng, vocab, hidden)
    write_safetensors(d / "medusa_lm_head.safetensors", t)
    return d


def eagle3(
    d: Path,
    *,
    hidden: int,
    vocab: int,
    draft_vocab: int,
    heads: int = 4,
    kv_heads: int = 2,
    inter: int = 64,
    d2t_shift: int = 0,
    seed: int = 2,
) -> Path:
    """EAGLE-3 head; d2t maps draft id i to target id i + 2 + d2t_shift (d2t_shift breaks it)."""
    d.mkdir(parents=True, exist_ok=True)
    hd = hidden // heads
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hd,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    rng = random.Random(seed)
    t = {
        "fc.weight": _rand(rng, hidden, 3 * hidden),
        "midlayer.self_attn.q_proj.weight": _rand(rng, heads * hd, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": _rand(rng, kv_heads * hd, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": _rand(rng, kv_heads * hd, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": _rand(rng, hidden, heads * hd),
        "midlayer.mlp.gate_proj.weight": _rand(rng, inter, hidden),
        "midlayer.mlp.up_proj.weight": _rand(rng, inter, hidden),
        "midlayer.mlp.down_proj.weight": _rand(rng, hidden, inter),
        "midlayer.hidden_norm.weight": _ones(hidden),
        "midlayer.input_layernorm.weight": _ones(hidden),
        "midlayer.post_attention_layernorm.weight": _ones(hidden),
        "norm.weight": _ones(hidden),
        "lm_head.weight": _rand(rng, draft_vocab, hidden),
        # target_id = draft_id + d2t[draft_id]: the draft vocabulary skips the 2 first target ids.
        "d2t": ("I64", (draft_vocab,), array("q", [2 + d2t_shift] * draft_vocab)),
        "t2d": ("BOOL", (vocab,), array("B", [1 if 2 <= i < 2 + draft_vocab else 0 for i in range(vocab)])),
    }
    write_safetensors(d / "model.safetensors", t)
    return d


def eagle1(d: Path, *, hidden: int, vocab: int, heads: int = 4, inter: int = 64, seed: int = 3) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "max_position_embeddings": 4096,
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    rng = random.Random(seed)
    write_safetensors(
        d / "model.safetensors",
        {"fc.weight": _rand(rng, hidden, 2 * hidden), "fc.bias": _rand(rng, hidden),
         "embed_tokens.weight": _rand(rng, vocab, hidden)},
    )  # fmt: skip
    return d
