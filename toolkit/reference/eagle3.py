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

from toolkit.errors import GenerationError, ModelError
from toolkit.modes.eagle3 import INFO
from toolkit.reference.core import Context, Proposal, Verdict, tree_from_choices
from toolkit.reference.kvcache import preallocated_cache
from toolkit.reference.models import (
    ContextMask,
    Forward,
    arange_row,
    ids_tensor,
    inference,
    read_config,
    require_weights,
    rows_tensor,
    same_row,
    tree_mask,
)
from toolkit.reference.sa import enhance


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

    def _parts(self) -> tuple[LlamaDecoderLayer, LlamaRMSNorm]:
        """The decoder layer and its hidden_norm, looked up once (ModuleList indexing and module
        attribute reads are slow per step); kept in a tuple, not registered as submodules again."""
        parts = self.__dict__.get("_layer_parts")
        if parts is None:
            # casts: ModuleList items and attributes set on a module read as `Module` / `Tensor | Module`.
            layer = cast(LlamaDecoderLayer, self.layers[0])
            parts = (layer, cast(LlamaRMSNorm, layer.hidden_norm))
            self.__dict__["_layer_parts"] = parts
        return parts

    def forward(
        self,
        g: torch.Tensor,
        ids: torch.Tensor,
        cache: DynamicCache,
        positions: torch.Tensor,
        mask: torch.Tensor,
        features: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step, the head's whole computation in one module call: m inputs `g` [1, m, H]
        (with `features`, the captured target layers [1, m, k·H], run through fc first) and
        their next tokens `ids` [1, m] at `positions` [1, m] after the cache, attention mask
        `mask` [1, 1, m, past+m]. Returns the pre-norm outputs [1, m, H] and the draft-vocabulary
        logits [1, m, draft_vocab]."""
        embed = self.embed
        assert embed is not None
        layer, hidden_norm = self._parts()
        x = self.fc(g) if features else g
        emb = embed(ids)
        attn_in = torch.cat([layer.input_layernorm(emb), hidden_norm(layer.input_layernorm(x))], dim=-1)
        attn, _ = layer.self_attn(
            hidden_states=attn_in,
            position_embeddings=self.rotary(x, positions),
            attention_mask=mask,
            past_key_values=cache,
        )
        h = x + attn
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h, self.lm_head(self.norm(h))

    @inference
    def step(
        self,
        g: torch.Tensor,
        tokens: list[int],
        cache: DynamicCache,
        positions: list[int],
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run m inputs `g` [1, m, H] after the cache with attention mask `mask` [1, 1, m, past+m]
        (forward with token and position lists). Returns the pre-norm outputs [1, m, H] and the
        draft-vocabulary logits [1, m, draft_vocab]."""
        result: tuple[torch.Tensor, torch.Tensor] = self(
            g, ids_tensor(tokens), cache, torch.tensor([positions], dtype=torch.long), mask
        )
        return result

    def to_target(self, draft_ids: torch.Tensor) -> list[int]:
        return (draft_ids + self.d2t[draft_ids]).tolist()

    def target_ids(self) -> list[int]:
        """Target id of each draft id (draft id + d2t), as a list: the top-k of a step map to
        target ids by list indexing. Rebuilt when d2t changes (its version counter)."""
        cached = self.__dict__.get("_target_ids")
        version = self.d2t._version
        if cached is None or cached[0] != version:
            ids = (torch.arange(len(self.d2t), dtype=torch.long) + self.d2t).tolist()
            cached = (version, ids)
            self.__dict__["_target_ids"] = cached
        return cached[1]


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


class _Level:
    """One level d of a static draft tree as the head drafts it: its nodes; the nodes that grow
    children (run through the head when d < the step's depth limit), with the row of each one's
    parent in the previous head step's outputs; and their attention mask after the verified
    context: the cached nodes of earlier levels that are ancestors, and the node itself (siblings
    do not see each other)."""

    def __init__(self, nodes: list[int], grow: list[int], parent_rows: list[int], block: torch.Tensor):
        self.nodes = nodes
        self.grow = grow
        self.parent_rows = parent_rows
        self.rows_t = torch.tensor(parent_rows, dtype=torch.long)
        self.contiguous = parent_rows == list(range(len(parent_rows)))
        self.masks = ContextMask(block)
        self.one_parent = False  # whether every node of the level has the same parent


class Eagle3Speculator:
    """Chain (choices [[0], [0, 0], ...]) or static tree, drafted level by level with tree attention."""

    needs_hidden = False
    needs_aux = True

    def __init__(self, head: Eagle3Head, tree: tuple[list[list[int]], list[int]]):
        self.head = head
        self.choices, self.parents = tree
        n = len(self.choices)
        self.depth = [len(c) for c in self.choices]
        self.max_depth = max(self.depth, default=0)
        has_children = [False] * n
        for p in self.parents:
            if p >= 0:
                has_children[p] = True
        anc = tree_mask(self.parents)[0] if n else torch.zeros(0, 0, dtype=torch.bool)
        # Top-k needed below each parent (-1: the root).
        self.top: dict[int, int] = {}
        for c, p in zip(self.choices, self.parents, strict=True):
            self.top[p] = max(self.top.get(p, 0), c[-1] + 1)
        self.levels: list[_Level] = []
        cached: list[int] = []
        prev: list[int] = []  # the nodes the previous head step ran
        for d in range(1, self.max_depth + 1):
            nodes = [i for i in range(n) if self.depth[i] == d]
            grow = [i for i in nodes if has_children[i]]
            rows = [prev.index(self.parents[i]) if d > 1 else 0 for i in grow]
            cols = torch.tensor(cached + grow, dtype=torch.long)
            block = anc[torch.tensor(grow, dtype=torch.long)][:, cols]
            level = _Level(nodes, grow, rows, block)
            level.one_parent = len({self.parents[i] for i in nodes}) == 1
            self.levels.append(level)
            cached += grow
            prev = grow
        self.count_at = [sum(1 for x in self.depth if x <= d) for d in range(self.max_depth + 1)]
        self._causal: dict[int, ContextMask] = {}  # per number of fed positions
        self.cache = head.new_cache()
        self.feats: torch.Tensor | None = None  # target features not yet run through the head
        self.next_tokens: list[int] = []  # the token after each of those positions

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.cache = self.head.new_cache()
        self.feats = fwd.aux.unsqueeze(0) if fwd is not None and fwd.aux is not None else None
        self.next_tokens = ctx.tokens[1:] if fwd is not None else []

    def _causal_mask(self, m: int, past: int) -> torch.Tensor:
        masks = self._causal.get(m)
        if masks is None:
            masks = self._causal[m] = ContextMask(torch.ones(m, m, dtype=torch.bool).tril())
        return masks.mask(past)

    def propose(self, ctx: Context, budget: int) -> Proposal:
        if self.feats is None or budget <= 0:
            return Proposal()
        head = self.head
        m = len(self.next_tokens)
        past = self.cache.get_seq_length()
        h, logits = head(
            self.feats,
            ids_tensor(self.next_tokens),
            self.cache,
            arange_row(past, past + m),
            self._causal_mask(m, past),
            True,
        )
        self.feats, self.next_tokens = None, []
        context = past + m
        limit = min(budget, self.max_depth)
        tokens = [0] * self.count_at[limit]
        to_target = head.target_ids()
        # The previous head step's outputs (pre-norm: only the rows the next level grows from;
        # logits) and the row of each node it ran.
        hs, ls = (h if m == 1 else h.narrow(1, m - 1, 1)), logits
        row_of = {-1: m - 1}
        ran = 1  # rows in hs
        for d in range(1, limit + 1):
            level = self.levels[d - 1]
            ranked: dict[int, list[int]] = {}
            for i in level.nodes:
                p = self.parents[i]
                top = ranked.get(p)
                if top is None:
                    if level.one_parent:
                        # The level's one parent: the top-k of every row (per row, the same as of
                        # that row alone), read at the parent's row; no row view to make.
                        best = torch.topk(ls, self.top[p]).indices.tolist()[0][row_of[p]]
                    else:
                        best = torch.topk(ls.select(0, 0).select(0, row_of[p]), self.top[p]).indices.tolist()
                    top = ranked[p] = [to_target[j] for j in best]
                tokens[i] = top[self.choices[i][-1]]
            grow = level.grow
            if d >= limit or not grow:
                break
            g = hs if level.contiguous and len(grow) == ran else hs.index_select(1, level.rows_t)
            # Node at depth d sits at eagle position t-1+d = context-1+d; it sees the verified context.
            hs, ls = head(
                g,
                ids_tensor([tokens[i] for i in grow]),
                self.cache,
                same_row(context - 1 + d, len(grow)),
                level.masks.mask(context),
            )
            row_of = {i: r for r, i in enumerate(grow)}
            ran = len(grow)
        self.cache.crop(context)
        return Proposal(tokens=tokens, parents=self.parents[: len(tokens)])

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        aux = fwd.aux
        assert aux is not None
        path = verdict.path
        k = len(path)
        if all(i == r for r, i in enumerate(path)):
            feats = aux[None, : k + 1]  # the root and a prefix of the nodes (a chain): a view
        else:
            feats = aux.index_select(0, rows_tensor((0, *(i + 1 for i in path)))).unsqueeze(0)
        tokens = proposal.tokens
        nxt = [tokens[i] for i in path]
        nxt.append(verdict.token)
        if self.feats is not None:
            feats = torch.cat([self.feats, feats], dim=1)
            nxt = self.next_tokens + nxt
        self.feats, self.next_tokens = feats, nxt


# ------------------------------------------------------------------ the proposer (proposers.py)


def load_weights(path: Path, target: Any, dtype: torch.dtype, spec: Any) -> Eagle3Head:
    """The head at `path` on the target model `target` (its input embedding shared); the layers it
    captures: `spec.layers_to_capture` where set, else the head's config."""
    head = load_eagle3_head(Path(path), target.config, layers=getattr(spec, "layers_to_capture", None))
    for part in (head.fc, head.layers, head.norm, head.lm_head):
        part.to(dtype)  # the rotary frequencies stay float32, as the target's
    head.embed = target.get_input_embeddings()
    return head


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> Any:
    head = runtime.weights.get(INFO.source)
    if head is None:
        raise GenerationError(
            "eagle3 needs an EAGLE-3 head", hint=f"load the runtime with weights={{{INFO.source!r}: <dir>}}"
        )
    if spec.use_dynamic_tree:
        raise GenerationError(
            "EAGLE-3 dynamic trees are not implemented by the reference runtime",
            hint="use a static tree (speculative.eagle_choices) or the default chain",
        )
    choices = spec.eagle_choices or [[0] * d for d in range(1, spec.max_draft_len + 1)]
    made = Eagle3Speculator(head, tree_from_choices(choices))
    if spec.sa_config is None:
        return made
    if spec.eagle_choices is not None:
        raise GenerationError(
            "the SA enhancer replaces a chain; the reference runtime does not enhance an EAGLE-3 tree",
            hint="drop speculative.eagle_choices or speculative.sa_config",
        )
    return enhance(made, spec.sa_config, spec.max_draft_len, runtime)
