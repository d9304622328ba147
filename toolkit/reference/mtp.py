"""MTP (multi-token prediction, DeepSeek-V3 arXiv 2412.19437 §2.2): a module that combines the
previous hidden state with the next token's embedding and predicts one more token; drafting runs it
k times, each step on its own output (TensorRT-LLM's MTP-Eagle path, which runs a checkpoint with one
MTP layer: tensorrt_llm/_torch/speculative/mtp.py @000a01d, spec_dec_mode in llm_args.py @0004396).

Module (DeepSeek-V3 layout, README_WEIGHTS.md @0b39205; vLLM deepseek_mtp.py @03356f8), at position i
with the depth-0 input h_i (the target's final hidden state, after its final norm, as vLLM passes it):
    x_i = eh_proj([enorm(Emb(t_{i+1})) ; hnorm(h_i)])        # embedding first, 2H -> H, no bias
    o_i = block(x_i)                                          # one decoder layer, causal over i
    logits of t_{i+2} = head(shared_head.norm(o_i))           # the target's own LM head
The embedding and the head are the target's (shared), unless the layer stores its own copies.

Checkpoint: a target whose config.json has `num_nextn_predict_layers` >= 1 and whose weights hold
`model.layers.{num_hidden_layers + j}.{enorm,hnorm,eh_proj,shared_head.norm,self_attn.*,mlp.*,
input_layernorm,post_attention_layernorm}` (any of its *.safetensors files). The block is built as
layer 0 of the target's own architecture with one layer (dense Llama-family targets: the tiny model;
DeepSeek-V3's MoE MTP layer would need its MoE block, which this runtime does not build).

Speculation: the module keeps its own KV cache of (h_i, t_{i+1}) pairs over the committed text. A
step feeds the pairs committed since the last one (the verified rows' hidden states and the
committed tokens), drafts d_1 from the last, then d_j from (its own output o, Emb(d_{j-1})); the
draft positions' KV is cropped after the step. Drafting is greedy; verification exact (greedy) or
sample-and-match (temperature > 0): lossless. TensorRT-LLM's relaxed acceptance for thinking is
lossy and not implemented.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from pathlib import Path
from typing import Any

import torch
from torch import nn

from toolkit.errors import ModelError
from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward, inference

COUNT_KEY = "num_nextn_predict_layers"
OWN = ("enorm", "hnorm", "eh_proj", "shared_head")  # the module's own parts; the rest is the block


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class SharedHead(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = RMSNorm(hidden, eps)


class MtpModule(nn.Module):
    """One DeepSeek-V3-shaped MTP module; `block` is a one-layer decoder of the target's own
    architecture whose final norm is the identity (shared_head.norm is applied before the head)."""

    def __init__(self, target_config: Any):
        super().__init__()
        from transformers import AutoModel

        h = int(target_config.hidden_size)
        eps = float(getattr(target_config, "rms_norm_eps", 1e-6))
        self.enorm = RMSNorm(h, eps)
        self.hnorm = RMSNorm(h, eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.shared_head = SharedHead(h, eps)
        cfg = copy.deepcopy(target_config)
        cfg.num_hidden_layers = 1
        for key in (COUNT_KEY, "pard_token"):
            if hasattr(cfg, key):
                delattr(cfg, key)
        # float32 explicitly: from_config would build in config.json's dtype by switching torch's
        # default dtype for the call, which concurrent loads (served requests) could leave switched.
        self.block = AutoModel.from_config(cfg, dtype=torch.float32)
        self.block.norm = nn.Identity()
        self.block.embed_tokens = None  # inputs_embeds only: the target's embedding is shared
        # The embedding and LM head (the target's, unless the layer stores its own): held in a list,
        # so that they are not this module's parameters (not trained, not exported, not cast).
        self.shared: list[nn.Module] = []

    @property
    def embed(self) -> nn.Module:
        return self.shared[0]

    @property
    def head(self) -> nn.Module:
        return self.shared[1]

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, cache: Any = None) -> torch.Tensor:
        """[b, q, H] embeddings and previous hidden states -> the block's outputs [b, q, H]."""
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))
        out = self.block(inputs_embeds=x, past_key_values=cache, use_cache=cache is not None)
        result: torch.Tensor = out.last_hidden_state
        return result

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.shared_head.norm(out))
        return result


def count(config: dict[str, Any]) -> int:
    """The MTP layers a checkpoint's config.json declares (0: none)."""
    value = config.get(COUNT_KEY) or 0
    return int(value) if isinstance(value, int) else 0


def mtp_state(path: Path, config: dict[str, Any], index: int = 0) -> dict[str, torch.Tensor]:
    """The tensors of MTP layer `index` (DeepSeek-V3 keys, prefix stripped), from any safetensors file
    of the checkpoint; an error that says what is missing."""
    from safetensors import safe_open

    n = count(config)
    if n < 1:
        raise ModelError(
            f"{path} has no MTP layers (config.json {COUNT_KEY} is {config.get(COUNT_KEY)!r})",
            hint="use a checkpoint that ships MTP layers (DeepSeek-V3 layout), or train one with "
            "`sdtk train-draft` on an mtp recipe",
        )
    prefix = f"model.layers.{int(config['num_hidden_layers']) + index}."
    state: dict[str, torch.Tensor] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                if key.startswith(prefix):
                    state[key[len(prefix) :]] = f.get_tensor(key)
    if "eh_proj.weight" not in state:
        raise ModelError(
            f"{path}: config.json declares {n} MTP layer(s) but no safetensors file holds {prefix}eh_proj.weight",
            hint="the reference runtime reads the DeepSeek-V3 layout (model.layers.<num_hidden_layers>.*)",
        )
    return state


def load_mtp(path: Path, target: Any, dtype: torch.dtype) -> MtpModule:
    """MTP layer 0 of the checkpoint at `path`, on the target model `target` (its embedding and head
    are shared unless the layer stores its own)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelError(
            f"cannot read {path}/config.json: {e}", hint="point at the target checkpoint"
        ) from None
    with _LOADING:  # one load at a time: the cache below does not hold concurrent callers back
        return _load(str(path), json.dumps(config, sort_keys=True), target, dtype)


_LOADING = threading.Lock()


@functools.lru_cache(maxsize=4)
def _load(path: str, config_text: str, target: Any, dtype: torch.dtype) -> MtpModule:
    config = json.loads(config_text)
    state = mtp_state(Path(path), config)
    from transformers import AutoConfig

    # The checkpoint's own config, not the loaded target's (the memory-bound twin pads its MLP).
    module = MtpModule(AutoConfig.from_pretrained(path))
    own_head = state.pop("shared_head.head.weight", None)
    own_embed = state.pop("embed_tokens.weight", None)
    mapped = {k if k.startswith(OWN) else f"block.layers.0.{k}": v.float() for k, v in state.items()}
    try:
        missing, unexpected = module.load_state_dict(mapped, strict=False)
    except RuntimeError as e:  # shapes that do not fit the architecture
        raise ModelError(
            f"{path}: the MTP layer does not fit config.json: {e}", hint="re-export the MTP layer"
        ) from None
    missing = [k for k in missing if not k.startswith("block.rotary_emb")]
    if missing or unexpected:
        raise ModelError(
            f"{path}: the MTP layer does not match the target's architecture "
            f"(missing {missing[:4]}, unexpected {unexpected[:4]})",
            hint="the reference runtime builds the MTP block as one decoder layer of the target's architecture",
        )
    embed: nn.Module = target.get_input_embeddings()
    head: nn.Module = target.get_output_embeddings()
    if own_embed is not None:
        embed = nn.Embedding.from_pretrained(own_embed.to(dtype))
    if own_head is not None:
        head = nn.Linear(own_head.shape[1], own_head.shape[0], bias=False).to(dtype)
        head.weight = nn.Parameter(own_head.to(dtype), requires_grad=False)
    module.shared = [embed, head]
    return module.to(dtype).eval()


class MtpSpeculator:
    needs_hidden = True
    needs_aux = False

    def __init__(self, module: MtpModule, draft_len: int):
        from transformers import DynamicCache

        self.module = module
        self.draft_len = draft_len
        self._cache_type = DynamicCache
        self.cache: Any = DynamicCache()
        self.kept = 0  # committed pairs in the module's cache
        self.pend_h: list[torch.Tensor] = []  # committed hidden states not fed yet ([q, H] each)
        self.pend_t: list[int] = []  # ... and the tokens that follow them

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.cache = self._cache_type()
        self.kept = 0
        self.pend_h, self.pend_t = [], []
        if fwd is not None:
            assert fwd.hidden is not None
            self.pend_h.append(fwd.hidden)
            self.pend_t.extend(ctx.tokens[1:])

    @inference
    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.draft_len, budget)
        # Nothing to draft from: a one-token prompt's first step. (A zero budget feeds nothing:
        # the pairs wait for the next step.)
        if k <= 0 or not self.pend_t:
            return Proposal()
        m = self.module
        hidden = torch.cat(self.pend_h)[None]
        ids = torch.tensor([self.pend_t], dtype=torch.long)
        out = m(m.embed(ids), hidden.to(m.eh_proj.weight.dtype), self.cache)[:, -1:]
        self.kept += len(self.pend_t)
        self.pend_h, self.pend_t = [], []
        drafts = [int(m.logits(out)[0, -1].argmax())]
        for _ in range(k - 1):
            out = m(m.embed(torch.tensor([[drafts[-1]]], dtype=torch.long)), out, self.cache)
            drafts.append(int(m.logits(out)[0, -1].argmax()))
        return Proposal.chain(drafts)

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        self.cache.crop(self.kept)  # the draft positions' KV
        assert fwd.hidden is not None
        rows = [0, *(i + 1 for i in verdict.path)]
        self.pend_h.append(fwd.hidden[rows])
        self.pend_t.extend(ctx.tokens[len(ctx.tokens) - len(rows) :])


# ------------------------------------------------------------------ the proposer (proposers.py)


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> MtpSpeculator:
    """The MTP layers of the target's own checkpoint (no source of their own)."""
    model = runtime.target.model
    dtype = runtime.target.embed.weight.dtype
    return MtpSpeculator(load_mtp(Path(model.name_or_path), model, dtype), spec.max_draft_len)
