"""The self-test's tiny random-weight checkpoints, written locally (nothing is downloaded): a
Llama-architecture target of a few layers, a smaller Llama draft, Medusa heads (FasterDecoding
layout), an EAGLE-3 head with the upstream config keys and, for the MTP cell, a DeepSeek-V3
target that carries one MTP layer, plus a byte-level BPE tokenizer trained on the spot; and the
check that each target's greedy choices are decisive (MIN_MARGIN).

Checkpoint shapes fit TensorRT-LLM's kernels: every attention head is 64 wide (its decoder
attention kernels are instantiated for head sizes 32-256 only: NVIDIA/TensorRT-LLM
cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/instantiation/, no 16).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import TieProneCheckpoint
from toolkit.modes import REGISTRY, SOURCES

# The targets the self-test's cells serve (each mode's ModeInfo.selftest.target), then the model
# sources (the recipe's `models.<source>`): every role make_checkpoints writes, and its directory.
TARGETS: tuple[str, ...] = tuple(
    dict.fromkeys(("target", *(m.selftest.target for m in REGISTRY if m.selftest is not None)))
)
ROLES: tuple[str, ...] = (*TARGETS, *SOURCES)
# The MTP cell's target: a DeepSeek-V3 whose checkpoint carries one MTP layer (see _mtp_target).
MTP_TARGET = "mtp_target"
MTP_TARGET_LAYERS = 4

# Layers the EAGLE-3 head captures: TensorRT-LLM's default {1, L//2-1, L-4} for L target layers.
TARGET_LAYERS = 8
HEAD_DIM = 64  # a head size every TensorRT-LLM attention kernel family supports (see the docstring)
CAPTURE = sorted({1, TARGET_LAYERS // 2 - 1, TARGET_LAYERS - 4})
CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Speculative decoding drafts tokens cheaply and verifies them with the target model in one pass.",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps again.",
    "import os\nfor name in os.listdir('.'):\n    print(name)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
] * 8
PROMPTS = ("def fibonacci(n):", "The quick brown fox", "import os\n")
VALIDATE_TOKENS = 16  # tokens per prompt the greedy-equality check compares
# Decisive greedy choices. Validation demands token-for-token equality between two deployments
# whose kernels differ (speculative verification runs other shapes than plain decoding), so every
# greedy choice of the target must survive fp16/bf16 rounding. Rounding is relative to the
# magnitudes involved (unit roundoff 2^-11 for fp16, 2^-8 for bf16, compounded over the layers),
# so the margin is measured relative to the step's largest |logit|: (top-1 - top-2) / max|logit|.
# Measured on the plain random checkpoints this replaced (all weights N(0, 0.02)): casting fp32 → bf16
# moved logits by up to ~1% of max|logit| (fp16: ~0.14%), while their smallest margin over these
# prompts was 0.02%-0.8% (seeds 0-4), and a cast changed a greedy token in 3 of 5 seeds (bf16) and
# in 1 of 5 (fp16).
# MIN_MARGIN is 10x that bf16 drift (~25x bf16's unit roundoff, ~200x fp16's).
MIN_MARGIN = 0.1
# The target's construction (make_checkpoints): token embeddings of norm ~sqrt(hidden), so each
# position's own embedding dominates the residual stream (every decoder layer still adds its random
# attention/MLP output, ~0.1 of it), and an lm_head whose row for token pi(x) holds the unit
# embedding of x (pi: seeded, onto the tokens that decode to printable ASCII), scaled so the top logit
# is ~PEAK_LOGIT. The greedy choice after x is then pi(x) with a margin of ~0.45-0.5 of the top
# logit (measured, seeds 0-4, in float32 and in bf16/fp16 casts), since random
# unit embeddings in 128 dimensions overlap by at most ~0.35. The price: the choice follows from the
# current token, so validation catches speculative-decoding errors (tokens wrongly accepted, dropped,
# repeated or misplaced) but not a target attention error that leaves every winner unchanged.
PEAK_LOGIT = 10.0
SPECIAL_TOKENS = 3  # <s>, </s>, <pad>: never a greedy choice


def _tokenizer() -> Any:
    """A byte-level BPE tokenizer of 512 tokens trained on CORPUS (<s>, </s>, <pad> first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def make_checkpoints(root: Path, seed: int = 0) -> dict[str, Path]:
    """Tiny random-weight checkpoints and a tokenizer under `root`; returns role → directory."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    fast = _tokenizer()
    vocab = len(fast)

    def llama(heads: int, kv: int, layers: int) -> LlamaConfig:
        hidden = heads * HEAD_DIM
        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=hidden * 3,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=HEAD_DIM,
            max_position_embeddings=512,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=2,
            tie_word_embeddings=False,
            dtype="float16",
        )

    # Keyed (and named) by the targets' roles and the recipe's model sources.
    unknown = sorted(set(TARGETS) - {"target", MTP_TARGET})
    if unknown:
        raise TypeError(f"the self-test writes no checkpoint for the target role(s) {', '.join(unknown)}")
    paths = {role: root / role for role in ROLES}
    for role, cfg in (("target", llama(2, 1, TARGET_LAYERS)), ("draft", llama(1, 1, 1))):
        model = LlamaForCausalLM(cfg)
        if role == "target":
            _make_decisive(model, fast)
        model.save_pretrained(paths[role])
        fast.save_pretrained(paths[role])

    # Medusa heads, FasterDecoding layout: {i}.0.linear = ResBlock, {i}.1 = Linear(hidden → vocab).
    hidden, heads = 2 * HEAD_DIM, 2  # the target's hidden size
    state = {}
    for i in range(heads):
        state[f"{i}.0.linear.weight"] = torch.randn(hidden, hidden) * 0.02
        state[f"{i}.0.linear.bias"] = torch.zeros(hidden)
        state[f"{i}.1.weight"] = torch.randn(vocab, hidden) * 0.02
    paths["medusa_heads"].mkdir(parents=True, exist_ok=True)
    save_file(state, str(paths["medusa_heads"] / "medusa_lm_head.safetensors"))
    save_file(state, str(paths["medusa_heads"] / "model.safetensors"))
    (paths["medusa_heads"] / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MedusaModel"],
                "medusa_num_heads": heads,
                "medusa_num_layers": 1,
                "hidden_size": hidden,
                "vocab_size": vocab,
                "base_model_name_or_path": str(paths["target"]),
            },
            indent=2,
        )
    )

    # EAGLE-3 head: one decoder layer over concat(embedding, fused hidden), a reduced draft vocab + d2t.
    draft_vocab = vocab // 2
    inter, kv_dim = hidden * 3, HEAD_DIM  # 2 query heads, 1 KV head, as the target
    e3 = {
        "fc.weight": torch.randn(hidden, hidden * len(CAPTURE)) * 0.02,
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": torch.randn(hidden, 2 * hidden) * 0.02,
        "midlayer.self_attn.k_proj.weight": torch.randn(kv_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.v_proj.weight": torch.randn(kv_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.o_proj.weight": torch.randn(hidden, hidden) * 0.02,
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.down_proj.weight": torch.randn(hidden, inter) * 0.02,
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": torch.randn(draft_vocab, hidden) * 0.02,
        "d2t": torch.zeros(draft_vocab, dtype=torch.long),  # draft id i → target id i
    }
    paths["eagle_head"].mkdir(parents=True, exist_ok=True)
    save_file(e3, str(paths["eagle_head"] / "model.safetensors"))
    (paths["eagle_head"] / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "bos_token_id": 0,
                "eos_token_id": 1,
                "pad_token_id": 2,
                "hidden_act": "silu",
                "hidden_size": hidden,
                "intermediate_size": inter,
                "max_position_embeddings": 512,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": HEAD_DIM,
                "num_hidden_layers": 1,
                "rms_norm_eps": 1e-5,
                "tie_word_embeddings": False,
                "torch_dtype": "float16",
                "vocab_size": vocab,
                "draft_vocab_size": draft_vocab,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": CAPTURE, "use_aux_hidden_state": True},
            },
            indent=2,
        )
    )
    if MTP_TARGET in paths:
        _mtp_target(paths[MTP_TARGET], fast)
    return paths


def _mtp_target(path: Path, tokenizer: Any) -> None:
    """A decisive DeepSeek-V3 target (model_type deepseek_v3, the family TensorRT-LLM's MTP has in
    every release: NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_speculative.py,
    MTPForCausalLM) with one MTP layer in DeepSeek-V3's layout: config.json
    `num_nextn_predict_layers: 1`, weights `model.layers.{num_hidden_layers}.{enorm, hnorm, eh_proj,
    shared_head.norm, shared_head.head, embed_tokens}` plus a decoder block's (deepseek-ai/DeepSeek-V3
    README_WEIGHTS.md @0b39205), in mtp.safetensors beside the target's model.safetensors.

    Attention is DeepSeek-V3's MLA with its own dimensions (kv_lora_rank 512, qk_rope_head_dim 64,
    qk_nope_head_dim 128, v_head_dim 128: deepseek-ai/DeepSeek-V3 config.json), so the GPU's MLA
    kernels run the shapes they run for the real model; 2 heads, hidden 128. Every layer, the MTP
    layer's included, is dense (first_k_dense_replace past it): no MoE in the tiny model. The MTP
    layer's weights are random (the self-test checks losslessness, not acceptance)."""
    import torch
    from safetensors.torch import save_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    hidden = 2 * HEAD_DIM
    cfg = DeepseekV3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        moe_intermediate_size=hidden // 2,
        num_hidden_layers=MTP_TARGET_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=MTP_TARGET_LAYERS + 1,
        q_lora_rank=64,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    cfg.num_nextn_predict_layers = (
        1  # not a DeepseekV3Config argument: config.json carries it as DeepSeek-V3's
    )
    model = DeepseekV3ForCausalLM(cfg)
    _make_decisive(model, tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # The MTP layer: a decoder block of the same architecture (a one-layer model's layer 0) and its
    # own parts; the embedding and the head are copies of the target's, as DeepSeek-V3 ships them.
    one = DeepseekV3ForCausalLM(DeepseekV3Config(**{**cfg.to_dict(), "num_hidden_layers": 1}))
    block = {k.removeprefix("model.layers.0."): v for k, v in one.state_dict().items()}
    state = {k: v for k, v in block.items() if not k.startswith(("model.", "lm_head"))}
    state |= {
        "enorm.weight": torch.ones(hidden),
        "hnorm.weight": torch.ones(hidden),
        "eh_proj.weight": torch.randn(hidden, 2 * hidden) * 0.02,
        "shared_head.norm.weight": torch.ones(hidden),
        "shared_head.head.weight": model.lm_head.weight.detach().clone(),
        "embed_tokens.weight": model.model.embed_tokens.weight.detach().clone(),
    }
    prefix = f"model.layers.{MTP_TARGET_LAYERS}."
    tensors = {prefix + k: v.contiguous() for k, v in state.items()}
    save_file(tensors, str(path / "mtp.safetensors"), metadata={"format": "pt"})


# config.json stand-ins for `sdtk selftest --dry-run`, which writes no weights: what each role's
# checkpoint declares (the build's plan reads the family and, for MTP, the layer count).
STAND_IN_CONFIGS: dict[str, dict[str, Any]] = {
    "target": {"model_type": "llama"},
    "draft": {"model_type": "llama"},
    MTP_TARGET: {
        "model_type": "deepseek_v3",
        "num_hidden_layers": MTP_TARGET_LAYERS,
        "num_nextn_predict_layers": 1,
    },
}


def _make_decisive(model: Any, tokenizer: Any) -> None:
    """Give a random Llama target decisive greedy choices (see MIN_MARGIN and PEAK_LOGIT).

    Successors are tokens that decode, alone, to printable ASCII: streamed chunks then decode to
    the same text as the whole output (a lone byte of a multi-byte character would not)."""
    import torch

    vocab = len(tokenizer)
    text = [tokenizer.decode([t]) for t in range(vocab)]
    printable = [
        t for t in range(SPECIAL_TOKENS, vocab) if text[t] and text[t].isascii() and text[t].isprintable()
    ]
    others = [t for t in range(SPECIAL_TOKENS, vocab) if t not in set(printable)]
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        hidden = embed.shape[1]
        embed.normal_(0.0, 1.0)  # norm ~sqrt(hidden): dominates the ~0.1-sized layer outputs
        unit = embed / embed.norm(dim=1, keepdim=True)
        head = torch.zeros(vocab, hidden)
        # a permutation of the printable tokens; every other token leads to a random printable one
        succ = dict(
            zip(printable, torch.tensor(printable)[torch.randperm(len(printable))].tolist(), strict=True)
        )
        succ |= dict(
            zip(
                others,
                torch.tensor(printable)[torch.randint(len(printable), (len(others),))].tolist(),
                strict=True,
            )
        )
        for token, nxt in succ.items():
            head[nxt] += unit[token]
        # the final RMSNorm leaves a hidden state of norm ~sqrt(hidden): row · h ≈ PEAK_LOGIT · cos
        head *= PEAK_LOGIT / hidden**0.5
        head[:SPECIAL_TOKENS] = torch.randn(SPECIAL_TOKENS, hidden) * 0.02  # never a greedy choice
        model.lm_head.weight.copy_(head)


@dataclass(frozen=True)
class Margins:
    """The smallest greedy top-1 margin (a fraction of the step's largest |logit|) over the
    selftest's prompts and token budget, and where it occurred."""

    min_margin: float
    prompt: str
    step: int
    tokens: dict[str, list[int]]  # prompt → greedy token ids


def greedy_margins(
    target: Path,
    *,
    dtype: str = "float32",
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = VALIDATE_TOKENS,
) -> Margins:
    """Greedy-decode each prompt on the target with transformers (in `dtype`: a cast of the stored
    weights, which simulates that precision's rounding), measuring each step's top-1 margin."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).to(getattr(torch, dtype)).eval()
    worst = (float("inf"), "", 0)
    tokens: dict[str, list[int]] = {}
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt").input_ids
            out: list[int] = []
            for step in range(max_tokens):
                logits = model(ids).logits[0, -1].float()
                top = torch.topk(logits, 2)
                margin = float(top.values[0] - top.values[1]) / float(logits.abs().max())
                worst = min(worst, (margin, prompt, step))
                out.append(int(top.indices[0]))
                if out[-1] == tok.eos_token_id:
                    break
                ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
            tokens[prompt] = out
    return Margins(worst[0], worst[1], worst[2], tokens)


def check_margins(target: Path) -> Margins:
    """The target's greedy margins in float32; TieProneCheckpoint below MIN_MARGIN."""
    m = greedy_margins(target)
    if m.min_margin < MIN_MARGIN:
        raise TieProneCheckpoint(
            target,
            margin=m.min_margin,
            threshold=MIN_MARGIN,
            prompt=m.prompt,
            step=m.step,
            hint="write the checkpoints with toolkit.selftest.make_checkpoints, which builds a decisive target",
        )
    return m
