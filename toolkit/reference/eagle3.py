"""EAGLE-3 (Li et al. 2025) heads in the exported layout, run as ModelOpt trains them.

Export layout (ModelOpt `EagleExporter`; `midlayer.*` in the official repo is read as
`layers.0.*`): `fc.weight` [H, k·H], one Llama decoder layer whose q/k/v take 2H inputs plus
`hidden_norm`, `norm`, `lm_head` [draft_vocab, H] and `d2t` (target id = draft id + d2t[id]).
There is no embedding: the target's `embed_tokens` is used.

At eagle position j the input is g_j and the embedding of token j+1, and the output predicts
token j+2. g_j = fc(concatenated outputs of the captured target layers at j) while the
target's features exist; for drafted positions it is the layer's own pre-norm output at the
parent position. The first layer sees cat(input_layernorm(emb), hidden_norm(input_layernorm(g)))
with g as the residual: ModelOpt's HF plugin concatenates in an attention pre-hook, after the
decoder layer has already applied its input_layernorm to g.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from toolkit.errors import ModelError
from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward, preallocated_cache, read_config, require_weights, tree_mask


class Eagle3Head(nn.Module):
    d2t: torch.Tensor  # a buffer (draft id -> target id offset); declared for the type checker

    def __init__(
        self, config: LlamaConfig, num_aux: int, draft_vocab: int, layers: list[int], last_norm: bool
    ):
        super().__init__()
        h = config.hidden_size
        self.config = config
        self.capture = layers
        self.fc = nn.Linear(num_aux * h, h, bias=False)
        layer = LlamaDecoderLayer(config, layer_idx=0)
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(attn, name)
            setattr(attn, name, nn.Linear(2 * h, old.out_features, bias=config.attention_bias))
        layer.hidden_norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList([layer])
        self.norm = LlamaRMSNorm(h, eps=config.rms_norm_eps) if last_norm else nn.Identity()
        self.lm_head = nn.Linear(h, draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.rotary = LlamaRotaryEmbedding(config=config)
        self.embed: nn.Module | None = None  # the target's embed_tokens, set by the runtime

    def new_cache(self) -> DynamicCache:
        return preallocated_cache(self.config)

    @torch.inference_mode()
    def step(
        self,
        g: torch.Tensor,
        tokens: list[int],
        cache: DynamicCache,
        positions: list[int],
        visible: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run m inputs after the cache with attention mask `visible` [m, past+m].
        Returns the pre-norm outputs [m, H] and the draft-vocabulary logits [m, draft_vocab]."""
        assert self.embed is not None
        # casts: ModuleList items and attributes set on a module read as `Module` / `Tensor | Module`.
        layer = cast(LlamaDecoderLayer, self.layers[0])
        hidden_norm = cast(LlamaRMSNorm, layer.hidden_norm)
        emb = self.embed(torch.tensor([tokens], dtype=torch.long))
        x = g[None]
        attn_in = torch.cat([layer.input_layernorm(emb), hidden_norm(layer.input_layernorm(x))], dim=-1)
        attn, _ = layer.self_attn(
            hidden_states=attn_in,
            position_embeddings=self.rotary(x, torch.tensor([positions], dtype=torch.long)),
            attention_mask=visible[None, None],
            past_key_values=cache,
        )
        h = x + attn
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h[0], self.lm_head(self.norm(h))[0]

    def to_target(self, draft_ids: torch.Tensor) -> list[int]:
        return (draft_ids + self.d2t[draft_ids]).tolist()


def load_eagle3_head(path: Path, target_config: Any, layers: list[int] | None = None) -> Eagle3Head:
    from safetensors.torch import load_file

    cfg = read_config(path, "EAGLE-3 head")
    weights = require_weights(path, "EAGLE-3 head", ("model.safetensors",))
    eagle = cfg.get("eagle_config") or {}
    layers = list(layers if layers is not None else eagle.get("eagle_aux_hidden_state_layer_ids") or [])
    if not layers:
        raise ModelError(
            f"{path}/config.json names no captured layers (eagle_config.eagle_aux_hidden_state_layer_ids)",
            hint="set speculative.layers_to_capture in the recipe",
        )
    state = {k.replace("midlayer.", "layers.0."): v for k, v in load_file(weights).items()}
    state.pop("t2d", None)
    state.pop("embed_tokens.weight", None)
    for key in ("fc.weight", "lm_head.weight", "layers.0.self_attn.q_proj.weight"):
        if key not in state:
            raise ModelError(
                f"{weights} has no {key}", hint="export the head in the EAGLE-3 layout (ModelOpt export)"
            )
    hidden = int(cfg.get("hidden_size", 0))
    if hidden != target_config.hidden_size:
        raise ModelError(
            f"EAGLE-3 head hidden_size {hidden} does not fit the target's {target_config.hidden_size}",
            hint="use a head trained for this target",
        )
    if int(cfg.get("vocab_size", target_config.vocab_size)) != target_config.vocab_size:
        raise ModelError(
            f"EAGLE-3 head vocab_size {cfg.get('vocab_size')} does not fit the target's {target_config.vocab_size}",
            hint="use a head trained for this target",
        )
    fc_in = state["fc.weight"].shape[1]
    if fc_in != len(layers) * hidden:
        raise ModelError(
            f"the head's fc takes {fc_in // hidden} hidden states but {len(layers)} layers are captured ({layers})",
            hint="speculative.layers_to_capture must match the layers the head was trained on",
        )
    draft_vocab = state["lm_head.weight"].shape[0]
    if "d2t" not in state:
        if draft_vocab != target_config.vocab_size:
            raise ModelError(
                f"{weights} has a reduced draft vocabulary but no d2t", hint="re-export the head"
            )
        state["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
    config_dict = {
        k: v for k, v in cfg.items() if k not in ("architectures", "eagle_config", "draft_vocab_size")
    }
    config_dict["num_hidden_layers"] = 1
    config = LlamaConfig(**config_dict)
    config._attn_implementation = "sdpa"
    head = Eagle3Head(
        config,
        num_aux=len(layers),
        draft_vocab=draft_vocab,
        layers=layers,
        last_norm="norm.weight" in state,
    )
    try:
        head.load_state_dict({k: v if v.dtype == torch.long else v.float() for k, v in state.items()})
    except RuntimeError as e:
        raise ModelError(
            f"EAGLE-3 weights in {weights} do not match its config.json: {e}", hint="re-export the head"
        ) from None
    return head.eval()


def _visible(cached: list[int], anc: torch.Tensor, past: int, nodes: list[int]) -> torch.Tensor:
    """Attention rows for draft `nodes`: the verified context (the cache minus the `cached` draft
    nodes at its end), those cached nodes that are ancestors, and the node itself. `anc` is the
    tree's ancestor-or-self matrix (anc[i, j]: node j is node i or one of its ancestors)."""
    ctx = past - len(cached)
    mask = torch.zeros(len(nodes), past + len(nodes), dtype=torch.bool)
    mask[:, :ctx] = True
    rows = torch.tensor(nodes, dtype=torch.long)
    if cached:
        mask[:, ctx:past] = anc[rows][:, torch.tensor(cached, dtype=torch.long)]
    mask[:, past:] = anc[rows][:, rows]  # each node sees itself; siblings do not see each other
    return mask


class Eagle3Speculator:
    """Chain (choices [[0], [0, 0], ...]) or static tree, drafted level by level with tree attention."""

    needs_hidden = False
    needs_aux = True

    def __init__(self, head: Eagle3Head, tree: tuple[list[list[int]], list[int]]):
        self.head = head
        self.choices, self.parents = tree
        n = len(self.choices)
        self.depth = [len(c) for c in self.choices]
        self.has_children = [False] * n
        for p in self.parents:
            if p >= 0:
                self.has_children[p] = True
        self.anc = tree_mask(self.parents)[0] if n else torch.zeros(0, 0, dtype=torch.bool)
        self.levels = [
            [i for i in range(n) if self.depth[i] == d] for d in range(1, max(self.depth, default=0) + 1)
        ]
        # Top-k needed below each parent (-1: the root).
        self.top: dict[int, int] = {}
        for c, p in zip(self.choices, self.parents, strict=True):
            self.top[p] = max(self.top.get(p, 0), c[-1] + 1)
        self.cache = head.new_cache()
        self.feats: torch.Tensor | None = None  # target features not yet run through the head
        self.next_tokens: list[int] = []  # the token after each of those positions

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.cache = self.head.new_cache()
        self.feats = fwd.aux if fwd is not None else None
        self.next_tokens = ctx.tokens[1:] if fwd is not None else []

    def propose(self, ctx: Context, budget: int) -> Proposal:
        if self.feats is None or budget <= 0:
            return Proposal()
        head = self.head
        m = len(self.next_tokens)
        past = self.cache.get_seq_length()
        causal = torch.ones(m, past + m, dtype=torch.bool).tril(past)
        h, logits = head.step(
            head.fc(self.feats), self.next_tokens, self.cache, list(range(past, past + m)), causal
        )
        self.feats, self.next_tokens = None, []
        context = self.cache.get_seq_length()
        limit = min(budget, max(self.depth))
        count = sum(1 for d in self.depth if d <= limit)
        tokens = [0] * count
        # Per node: (pre-norm output, logits) of the head run on it, for its children.
        out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {-1: (h[-1], logits[-1])}
        ranked: dict[int, list[int]] = {}
        cached: list[int] = []
        for d in range(1, limit + 1):
            level = self.levels[d - 1]
            for i in level:
                p = self.parents[i]
                if p not in ranked:
                    ranked[p] = head.to_target(torch.topk(out[p][1], self.top[p]).indices)
                tokens[i] = ranked[p][self.choices[i][-1]]
            grow = [i for i in level if self.has_children[i] and d < limit]
            if not grow:
                break
            g = torch.stack([out[self.parents[i]][0] for i in grow])
            past = self.cache.get_seq_length()
            visible = _visible(cached, self.anc, past, grow)
            # Node at depth d sits at eagle position t-1+d = context-1+d.
            hs, ls = head.step(
                g, [tokens[i] for i in grow], self.cache, [context - 1 + d] * len(grow), visible
            )
            for r, i in enumerate(grow):
                out[i] = (hs[r], ls[r])
            cached.extend(grow)
        self.cache.crop(context)
        return Proposal(tokens=tokens, parents=self.parents[:count])

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        assert fwd.aux is not None
        rows = [0, *(i + 1 for i in verdict.path)]
        feats = fwd.aux[rows]
        nxt = [proposal.tokens[i] for i in verdict.path] + [verdict.token]
        if self.feats is not None:
            feats = torch.cat([self.feats, feats])
            nxt = self.next_tokens + nxt
        self.feats, self.next_tokens = feats, nxt
