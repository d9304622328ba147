"""Loading Hugging Face causal LMs and running them with a KV cache and tree attention.

A step feeds a *tree* of tokens rooted at the first one: `parents[i]` is the index of
token i's parent in the same call (-1: it continues the cached context). Each token
attends to the cached context, its ancestors and itself; its position is the cache
length plus its depth. A chain (parents i-1) is plain causal attention and takes
transformers' own mask path.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from toolkit.errors import ModelError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def read_config(path: Path, what: str) -> dict:
    """config.json of a checkpoint directory, or a ModelError that says what is missing."""
    if not path.is_dir():
        raise ModelError(f"{what} directory {path} does not exist", hint="check the model path in the recipe")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelError(
            f"{what} at {path} has no config.json", hint="point at a Hugging Face checkpoint directory"
        )
    try:
        return json.loads(cfg.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {cfg}: {e}", hint="re-export or re-download the checkpoint") from None


def require_weights(path: Path, what: str, names: Sequence[str] = WEIGHT_FILES) -> Path:
    for name in names:
        if (path / name).is_file():
            return path / name
    raise ModelError(
        f"{what} at {path} has no weight file (looked for {', '.join(names)})",
        hint="the download or export is incomplete; fetch the checkpoint again",
    )


def load_causal_lm(path: Path, what: str, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """An HF causal LM in `dtype` (float32 by default; the weights may be stored in another) and
    eval mode. transformers keeps the rotary inverse frequencies in float32 whatever `dtype` is."""
    from transformers import AutoModelForCausalLM

    read_config(path, what)
    require_weights(path, what)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelError(
            f"cannot load {what} from {path}: {e}", hint="check that it is a complete HF checkpoint"
        ) from None
    return model.eval()


@torch.no_grad()
def inflate_mlp(model: PreTrainedModel, factor: int) -> None:
    """Zero-pad every decoder layer's MLP to `factor` × its intermediate width, in place (the
    memory-bound twin, toolkit.membound): gate and up projections get zero rows (and zero bias),
    the down projection zero columns. The new units output silu(0) · 0 = 0, so the function is
    unchanged up to the order of floating-point sums; the bytes a step reads grow."""
    if factor <= 1:
        return
    layers = getattr(model.get_decoder(), "layers", None)
    # MLP classes differ per architecture: they are checked by their attributes, not by type.
    mlps: list[Any] = [getattr(layer, "mlp", None) for layer in layers or ()]
    if not mlps or not all(all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj")) for m in mlps):
        raise ModelError(
            f"cannot pad the MLP of a {type(model).__name__}: not a gate/up/down (Llama-style) MLP",
            hint="remove reference.inflate, or use a Llama/Qwen/Mistral-style target",
        )
    width = 0
    for mlp in mlps:
        for name in ("gate_proj", "up_proj"):
            lin = getattr(mlp, name)
            w = lin.weight.new_zeros(lin.out_features * factor, lin.in_features)
            w[: lin.out_features] = lin.weight
            b = None
            if lin.bias is not None:
                b = lin.bias.new_zeros(lin.out_features * factor)
                b[: lin.out_features] = lin.bias
            setattr(mlp, name, _linear(w, b))
        down = mlp.down_proj
        w = down.weight.new_zeros(down.out_features, down.in_features * factor)
        w[:, : down.in_features] = down.weight
        mlp.down_proj = _linear(w, None if down.bias is None else down.bias.clone())
        width = mlp.gate_proj.out_features
        if hasattr(mlp, "intermediate_size"):
            mlp.intermediate_size = width
    model.config.intermediate_size = width
    model.eval()


class MatrixLinear(torch.nn.Linear):
    """A padded projection of the memory-bound twin that always runs the matrix-matrix kernel: a
    product over one row (a batch-1 decoding step) is made over two, the second zero, and the
    first row kept.

    Why: on this CPU a one-row product takes the matrix-vector kernel, about twice as fast as the
    matrix-matrix kernel that any 2 to 8 rows take (measured on the ×32 tiny target, 1 thread:
    50 ms a 1-token step, 104-116 ms a step over 2, 4, 5 or 8 tokens). A GPU has no such
    discount: at batch 1 its step streams the weights once whether it carries 1 token or 8 (the
    extra FLOPs are free below the ridge point), which is the regime speculation trades on. Run
    on one kernel, a twin step over 1 to 8 tokens costs the same (97-112 ms), as on the GPU, and
    so do 1 to 8 batched sequences. Row 0 of the two-row product is row 0 of the same product
    without the zero row (each output row is its own dot products)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != x.shape[-1]:
            return super().forward(x)
        two = torch.cat([x.reshape(1, -1), x.new_zeros(1, x.shape[-1])])
        return torch.nn.functional.linear(two, self.weight, self.bias)[:1].reshape(*x.shape[:-1], -1)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Linear:
    """A MatrixLinear holding these tensors (built on the meta device: no random init to overwrite)."""
    out_f, in_f = weight.shape
    lin = MatrixLinear(in_f, out_f, bias=bias is not None, device="meta")
    lin.weight = torch.nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        lin.bias = torch.nn.Parameter(bias, requires_grad=False)
    return lin


def step_bytes(model: PreTrainedModel) -> int:
    """Weight bytes one decoding step reads: every parameter but the input embedding (a step
    gathers only its tokens' rows), unless it is tied to the output head."""
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embed
    return sum(p.numel() * p.element_size() for p in model.parameters() if tied or p is not embed)


@dataclass
class Forward:
    """Outputs of one cached forward, one row per input token."""

    logits: torch.Tensor | None  # [q, vocab]; rows from `logits_from` on
    hidden: torch.Tensor | None  # [q, hidden]: the final-norm output, i.e. lm_head's input
    aux: torch.Tensor | None  # [q, k*hidden]: outputs of the captured layers, in layer order


def tree_mask(parents: Sequence[int]) -> tuple[torch.Tensor, list[int]]:
    """Ancestor-or-self matrix [q, q] and the depth of each node (roots at depth 0). The matrix
    is built once per tree shape and shared: read it, never write into it."""
    mask, depth, _ = _tree(tuple(parents))
    return mask, list(depth)


@functools.lru_cache(maxsize=512)
def _tree(parents: tuple[int, ...]) -> tuple[torch.Tensor, tuple[int, ...], torch.Tensor]:
    """(ancestor-or-self matrix, depths, depths as a tensor) of one tree shape, cached: a mode
    verifies the same few shapes step after step."""
    q = len(parents)
    mask = torch.eye(q, dtype=torch.bool)
    depth = [0] * q
    for i, p in enumerate(parents):
        if p >= 0:
            if p >= i:
                raise ValueError(f"tree node {i} has parent {p}; parents must come first")
            mask[i] |= mask[p]
            depth[i] = depth[p] + 1
    return mask, tuple(depth), torch.tensor([depth], dtype=torch.long)


class PreallocLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views [..., :length, :] of buffers that grow
    geometrically: a step writes its new entries in place instead of concatenating the whole
    cache into a new tensor (per layer, per step). Values and their order are the same."""

    MIN_CAPACITY = 256

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.length + key_states.shape[-2]
        if self.kbuf is None or self.vbuf is None or n > self.kbuf.shape[-2]:
            cap = max(n, self.MIN_CAPACITY, 2 * (self.kbuf.shape[-2] if self.kbuf is not None else 0))
            kbuf = key_states.new_empty(*key_states.shape[:-2], cap, key_states.shape[-1])
            vbuf = value_states.new_empty(*value_states.shape[:-2], cap, value_states.shape[-1])
            if self.length:
                assert self.keys is not None and self.values is not None  # set by the previous update
                kbuf[..., : self.length, :] = self.keys
                vbuf[..., : self.length, :] = self.values
            self.kbuf, self.vbuf = kbuf, vbuf
        self.kbuf[..., self.length : n, :] = key_states
        self.vbuf[..., self.length : n, :] = value_states
        self.length = n
        self.keys, self.values = self.kbuf[..., :n, :], self.vbuf[..., :n, :]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, max_length: int) -> None:
        if max_length <= 0:
            max_length = self.get_seq_length() - abs(max_length)
        # kbuf and vbuf exist once lazy_initialization has run.
        kbuf, vbuf = getattr(self, "kbuf", None), getattr(self, "vbuf", None)
        if self.get_seq_length() <= max_length or kbuf is None or vbuf is None:
            return
        self.length = max(0, max_length)
        self.keys, self.values = kbuf[..., : self.length, :], vbuf[..., : self.length, :]


def preallocated_cache(config: PreTrainedConfig) -> DynamicCache:
    """A DynamicCache whose full-attention layers are PreallocLayers (sliding ones stay as they are)."""
    cache = DynamicCache(config=config)
    cache.layers = [PreallocLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def is_chain(parents: Sequence[int]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


class CachedLM:
    """An HF decoder-only LM with a DynamicCache that can be cropped and compacted."""

    def __init__(self, model: PreTrainedModel, *, capture: Sequence[int] = ()):
        self.model = model
        self.config = model.config
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.embed = model.get_input_embeddings()
        self.cache = preallocated_cache(model.config)
        self._captured: list[torch.Tensor] = []
        self._recording = False
        layers = self.decoder.layers
        for i in capture:
            if not 0 <= i < len(layers):
                raise ModelError(
                    f"cannot capture layer {i}: the model has {len(layers)} layers",
                    hint="fix the head's eagle_aux_hidden_state_layer_ids or speculative.layers_to_capture",
                )
        # Hooks fire in layer order, so the concatenation is in ascending layer order (as ModelOpt's).
        self._hooks = [layers[i].register_forward_hook(self._grab) for i in sorted(set(capture))]

    def _grab(
        self, _module: torch.nn.Module, _args: object, output: torch.Tensor | tuple[torch.Tensor, ...]
    ) -> None:
        if self._recording:
            self._captured.append(output if isinstance(output, torch.Tensor) else output[0])

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def reset(self) -> None:
        self.cache = preallocated_cache(self.config)

    def crop(self, length: int) -> None:
        if length <= 0:
            self.reset()  # DynamicCache.crop(0) is a no-op: non-positive lengths count from the end
        elif length < self.length:
            self.cache.crop(length)

    @torch.inference_mode()
    def keep(self, start: int, rows: Sequence[int]) -> None:
        """Keep the first `start` cached entries plus entries start+r for r in `rows` (ascending).
        The kept rows move down in place (the context before `start` is not copied)."""
        rows = list(rows)
        n = len(rows)
        if rows != list(range(n)):
            src = torch.tensor(rows, dtype=torch.long) + start
            for layer in self.cache.layers:
                # Full and sliding attention layers (DynamicLayer and its subclasses) hold keys and values.
                assert isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None
                layer.keys[:, :, start : start + n] = layer.keys.index_select(2, src)
                layer.values[:, :, start : start + n] = layer.values.index_select(2, src)
        self.crop(start + n)

    @torch.inference_mode()
    def forward(
        self,
        ids: Sequence[int],
        *,
        parents: Sequence[int] | None = None,
        logits_from: int = 0,
        hidden: bool = False,
        aux: bool = False,
    ) -> Forward:
        """Run `ids` after the cached context and append their KV to the cache."""
        q = len(ids)
        past = self.length
        input_ids = torch.tensor([list(ids)], dtype=torch.long)
        mask = positions = None
        if parents is not None and not is_chain(parents):
            anc, _, depth = _tree(tuple(parents))
            mask = torch.ones(1, 1, q, past + q, dtype=torch.bool)
            mask[0, 0, :, past:] = anc
            positions = depth + past
        self._captured.clear()
        self._recording = aux
        out = self.decoder(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        h = out.last_hidden_state[0]
        logits = self.lm_head(h[logits_from:]) if logits_from < q else None
        self._recording = False
        captured = torch.cat([t[0] for t in self._captured], dim=-1) if aux and self._hooks else None
        self._captured.clear()
        return Forward(logits=logits, hidden=h if hidden else None, aux=captured)
