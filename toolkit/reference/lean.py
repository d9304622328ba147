"""A Llama decoder's forward without transformers' per-call machinery, bit for bit the same.

On the tiny models most of a step is not arithmetic: transformers' LlamaModel.forward runs its
output-capture and config-default decorators, the causal-mask factory, the rotary module, a
module call per layer with keyword plumbing, the attention-function registry and the cache's
dispatch. scripts/bench.py run forward times one forward both ways (docs/lab/benchmarks-history.md,
"One forward: transformers' against the lean forward").

LeanDecoder runs the same tensor operations as transformers 5's Llama code, in the same order,
with the same arguments and shapes, on the model's own parameters (its projections are called
as transformers calls them: `F.linear` on a plain nn.Linear's weight and bias, the module's own
forward otherwise, e.g. the memory-bound twin's MatrixLinear). Its outputs are therefore
bitwise transformers', which tests/reference/test_lean.py checks on prefills, one-token steps,
chains, trees, batched steps, captured layers, the padded target, bfloat16, float16, biases,
multi-head attention and the static RoPE kinds (on this CPU build of torch). What differs is
only elementwise-identical regrouping: RoPE is applied to the queries and keys in one tensor,
and `.to` calls to the dtype a tensor already has are skipped.

It takes only what it was written from: transformers' own Llama classes (not subclasses) with
causal SDPA attention through transformers' own SDPA functions, a RoPE table that does not
change with the sequence (not the dynamic or longrope kinds), no sliding-window layers, and
modules that run their classes' forward (no hooks but CachedLM's capture, no replaced or
compiled forward, none in training mode). Anything else runs transformers' forward (`refusal`
says why). Setting SDTK_REFERENCE_HF_FORWARD=1 makes every model run transformers' forward.
Hooks registered after the runtime loaded a model are not run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules import module as torch_module
from transformers import PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama as llama

HF_FORWARD_ENV = "SDTK_REFERENCE_HF_FORWARD"

Linear = Callable[[torch.Tensor], torch.Tensor]
# update(layer index, new keys, new values) -> (all keys, all values) the layer attends to
Update = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _linear(module: torch.nn.Module) -> Linear:
    """The projection as nn.Linear.forward computes it (F.linear on its own weight and bias),
    or the module's own forward when it is another class."""
    if type(module) is torch.nn.Linear:
        weight, bias = module.weight, module.bias
        return lambda x: F.linear(x, weight, bias)
    return module.forward


class _Layer:
    __slots__ = ("norm1", "norm2", "eps1", "eps2", "q", "k", "v", "o", "gate", "up", "down", "act")

    def __init__(self, layer: Any):
        attn, mlp = layer.self_attn, layer.mlp
        self.norm1, self.eps1 = layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon
        self.norm2, self.eps2 = (
            layer.post_attention_layernorm.weight,
            layer.post_attention_layernorm.variance_epsilon,
        )
        self.q, self.k, self.v, self.o = (
            _linear(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        )
        self.gate, self.up, self.down = (_linear(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        self.act = mlp.act_fn


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm.forward."""
    if x.dtype == torch.float32:  # both of its .to() calls return x itself
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _runs_as_written(modules: Iterable[torch.nn.Module], ours: Callable[[Any], bool]) -> str:
    """Why calling these modules would run something else than their classes' forward ("" when
    it would not): a forward hook or pre-hook (but forward hooks `ours` accepts), a forward set
    on the instance (accelerate's offloading hooks, a patch), a compiled call, a submodule in
    training mode (dropout), or global module hooks."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return "global module hooks are registered"
    for m in modules:
        if m._forward_pre_hooks or any(not ours(h) for h in m._forward_hooks.values()):
            return "a module of the model has hooks"
        if "forward" in m.__dict__ or hasattr(m, "_hf_hook") or getattr(m, "_compiled_call_impl", None):
            return f"a {type(m).__name__} of the model has its forward replaced"
        if m.training:
            return "the model is in training mode"
    return ""


class LeanDecoder:
    """LlamaModel.forward's arithmetic, for a model `refusal` accepts. Built after the model's
    last change: it keeps the parameters and projections it found."""

    def __init__(self, model: PreTrainedModel):
        decoder: Any = model.get_decoder()
        self.decoder = decoder
        self.layers = [_Layer(layer) for layer in decoder.layers[: decoder.config.num_hidden_layers]]
        attn = decoder.layers[0].self_attn
        self.head_dim: int = attn.head_dim
        self.half = self.head_dim // 2
        self.groups: int = attn.num_key_value_groups
        self.scaling: float = attn.scaling
        self.heads: int = decoder.config.num_attention_heads
        self.kv_heads: int = decoder.config.num_key_value_heads
        self.norm, self.norm_eps = decoder.norm.weight, decoder.norm.variance_epsilon
        self.rotary = decoder.rotary_emb  # its buffer and scale are read per call (model.to() replaces them)

    def rope(self, dtype: torch.dtype, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """LlamaRotaryEmbedding.forward for `positions` [b, q], then unsqueezed for heads: cos and
        sin [b, 1, q, head_dim] in `dtype`. Like it, in float32 whatever autocast is on."""
        if torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                return self.rope(dtype, positions)
        rotary = self.rotary
        inv = rotary.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        freqs = (inv @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * rotary.attention_scaling
        sin = emb.sin() * rotary.attention_scaling
        if dtype != torch.float32:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    def run(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        update: Update,
        capture: frozenset[int] = frozenset(),
        captured: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The final-norm hidden states [b, q, hidden] of `ids` [b, q] at `positions` [b, q].

        `mask`: what transformers hands SDPA, a boolean (True: attend) or additive [b, 1, q, kv]
        mask; None for a step it needs none for, a single token's or a prefill from an empty
        cache (causal when it is more than one token). `update` appends each layer's new keys
        and values to the cache and returns what the layer attends to. The outputs of the
        layers in `capture` are appended to `captured`, in layer order."""
        x = self.decoder.embed_tokens(ids)
        b, q = ids.shape
        cos, sin = self.rope(x.dtype, positions)
        hd, half, heads, kv_heads, groups = self.head_dim, self.half, self.heads, self.kv_heads, self.groups
        causal = mask is None and q > 1
        gqa = groups > 1 and mask is None  # transformers' use_gqa_in_sdpa (torch >= 2.5, head_dim <= 256)
        sdpa = F.scaled_dot_product_attention
        for i, lay in enumerate(self.layers):
            h = _rms_norm(x, lay.norm1, lay.eps1)
            qs = lay.q(h).view(b, q, -1, hd)
            ks = lay.k(h).view(b, q, -1, hd)
            vs = lay.v(h).view(b, q, -1, hd).transpose(1, 2)
            # apply_rotary_pos_emb on queries and keys at once: q·cos + rotate_half(q)·sin, per element.
            qk = torch.cat((qs, ks), dim=2).transpose(1, 2)
            qk = (qk * cos) + (torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin)
            keys, values = update(i, qk[:, heads:], vs)
            if groups > 1 and not gqa:  # repeat_kv
                n = keys.shape[2]
                keys = keys[:, :, None].expand(b, kv_heads, groups, n, hd).reshape(b, heads, n, hd)
                values = values[:, :, None].expand(b, kv_heads, groups, n, hd).reshape(b, heads, n, hd)
            # enable_gqa=False is SDPA's default, what transformers' call without it gets.
            out = sdpa(
                qk[:, :heads],
                keys,
                values,
                attn_mask=mask,
                scale=self.scaling,
                is_causal=causal,
                enable_gqa=gqa,
            )
            x = x + lay.o(out.transpose(1, 2).reshape(b, q, -1))
            h = _rms_norm(x, lay.norm2, lay.eps2)
            x = x + lay.down(lay.act(lay.gate(h)) * lay.up(h))
            if i in capture and captured is not None:
                captured.append(x)
        return _rms_norm(x, self.norm, self.norm_eps)


def refusal(model: PreTrainedModel, ours: Callable[[Any], bool] = lambda hook: False) -> str:
    """Why LeanDecoder cannot run `model` ("" when it can). `ours`: which forward hooks the
    caller does the work of itself (CachedLM's layer capture), so that skipping them loses
    nothing."""
    if os.environ.get(HF_FORWARD_ENV) == "1":
        return f"{HF_FORWARD_ENV}=1"
    decoder: Any = model.get_decoder()
    config = model.config
    if type(decoder) is not llama.LlamaModel:
        return f"{type(decoder).__name__} is not transformers' LlamaModel"
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"attention is {config._attn_implementation!r}, not 'sdpa'"
    if (
        ALL_ATTENTION_FUNCTIONS["sdpa"] is not sdpa_attention_forward
        or ALL_MASK_ATTENTION_FUNCTIONS["sdpa"] is not sdpa_mask
    ):
        return "transformers' 'sdpa' attention or mask function is replaced"
    if not getattr(config, "is_causal", True):
        return "the model is configured as not causal"
    rotary = decoder.rotary_emb
    rope_type = str(getattr(rotary, "rope_type", "default"))
    if type(rotary) is not llama.LlamaRotaryEmbedding or "dynamic" in rope_type or rope_type == "longrope":
        return f"RoPE {rope_type!r} changes with the sequence"
    if type(decoder.norm) is not llama.LlamaRMSNorm:
        return "the final norm is not LlamaRMSNorm"
    layers = list(decoder.layers[: config.num_hidden_layers])
    types = getattr(config, "layer_types", None) or ()
    if not layers or getattr(config, "sliding_window", None) or any(t != "full_attention" for t in types):
        return "not every layer is full attention"
    for layer in layers:
        parts = (
            (layer, llama.LlamaDecoderLayer),
            (layer.self_attn, llama.LlamaAttention),
            (layer.mlp, llama.LlamaMLP),
            (layer.input_layernorm, llama.LlamaRMSNorm),
            (layer.post_attention_layernorm, llama.LlamaRMSNorm),
        )
        for module, cls in parts:
            if type(module) is not cls:
                return f"{type(module).__name__} is not transformers' {cls.__name__}"
        attn: Any = layer.self_attn
        if attn.head_dim > 256:
            return "head_dim is above 256 (SDPA takes another path there)"
        if not attn.is_causal or attn.config._attn_implementation != "sdpa":
            return "a layer's attention is not causal SDPA"
    return _runs_as_written(model.modules(), ours)
