"""Loading Hugging Face causal LMs and running them with a KV cache and tree attention.

A step feeds a *tree* of tokens rooted at the first one: `parents[i]` is the index of
token i's parent in the same call (-1: it continues the cached context). Each token
attends to the cached context, its ancestors and itself; its position is the cache
length plus its depth. A chain (parents i-1) is plain causal attention and takes
transformers' own mask path.
"""

from __future__ import annotations

import array
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from toolkit.errors import ModelError
from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET, EMBEDDING_KEY
from toolkit.reference.kvcache import KVStore, PreallocLayer, preallocated_cache
from toolkit.reference.lean import LeanDecoder, refusal

P = ParamSpec("P")
R = TypeVar("R")

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

    if read_config(path, what).get(EMBEDDING_FROM_TARGET):
        raise ModelError(
            f"{what} at {path} is stored without its embedding ({EMBEDDING_FROM_TARGET}): it loads next to its target",
            hint="load it as a draft (ReferenceRuntime.load(..., {'draft': DIR})) or with embedding_from=TARGET_DIR",
        )
    require_weights(path, what)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelError(
            f"cannot load {what} from {path}: {e}", hint="check that it is a complete HF checkpoint"
        ) from None
    return model.eval()


def checkpoint_embedding(path: Path) -> torch.Tensor:
    """The input embedding of the HF checkpoint at `path`, read alone from its safetensors."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    name = EMBEDDING_KEY
    try:
        file = (
            path / json.loads(index.read_text())["weight_map"][name]
            if index.is_file()
            else path / WEIGHT_FILES[0]
        )
        with safe_open(str(file), "pt") as f:
            return f.get_tensor(name)
    except (OSError, KeyError, ValueError) as e:
        raise ModelError(
            f"cannot read the embedding ({name}) of {path}: {e}", hint="point at a safetensors HF checkpoint"
        ) from None


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
    matrix-matrix kernel that any 2 to 8 rows take (measured on the ×32 tiny target, 1 thread,
    quiet machine: 50 ms a 1-token step, 83-95 ms a step over 2, 4 or 8 tokens). A GPU has no such
    discount: at batch 1 its step streams the weights once whether it carries 1 token or 8 (the
    extra FLOPs are free below the ridge point), which is the regime speculation trades on. Run
    on one kernel, a twin step over 1 to 8 tokens costs the same (95-108 ms), as on the GPU, and
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


class Forward:
    """Outputs of one cached forward, one row per input token: `logits` [q, vocab] (rows from
    `logits_from` on), `hidden` [q, hidden] (the final-norm output, i.e. lm_head's input) and
    `aux` [q, k*hidden] (outputs of the captured layers, in layer order). A sequence's own
    forward may give its logits as `logits1` [1, q, vocab] (batch row 0 of them: the output
    head's own output shape); `logits` is then that row, a view made on first read (a greedy
    chain reads `logits1` alone)."""

    __slots__ = ("_logits", "logits1", "hidden", "aux", "argmax")

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        hidden: torch.Tensor | None = None,
        aux: torch.Tensor | None = None,
        *,
        logits1: torch.Tensor | None = None,
        argmax: list[int] | None = None,
    ):
        self._logits = logits
        self.logits1 = logits1
        self.hidden = hidden
        self.aux = aux
        self.argmax = argmax  # instead of logits (run(..., argmax=True)): each row's argmax

    @property
    def logits(self) -> torch.Tensor | None:
        logits = self._logits
        if logits is None and self.logits1 is not None:
            logits = self._logits = self.logits1.select(0, 0)
        return logits


def tree_mask(parents: Sequence[int]) -> tuple[torch.Tensor, list[int]]:
    """Ancestor-or-self matrix [q, q] and the depth of each node (roots at depth 0). The matrix
    is built once per tree shape and shared: read it, never write into it."""
    shape = tree_shape(tuple(parents))
    return shape.anc, list(shape.depth)


class ContextMask:
    """Attention masks [1, 1, q, past + q] = [every cached entry | `block`] for a fixed block
    [q, q'] of the new rows over the step's own entries (q' ≥ q: a block may also cover cached
    draft entries), as views of one buffer [ones | block] built once and grown with the context:
    no new tensor per step. Shared: read the masks, never write into them."""

    def __init__(self, block: torch.Tensor):
        self.block = block
        self._cols = block.shape[1]
        self._buf = block[None, None]
        self._room = 0  # cached entries the buffer has columns for

    def mask(self, past: int) -> torch.Tensor:
        """The mask after `past` entries that every row sees (the block covers the rest)."""
        room = self._room
        if past > room:
            room = max(past, 256, 2 * room)
            rows, cols = self.block.shape
            buf = torch.ones(1, 1, rows, room + cols, dtype=torch.bool)
            buf[0, 0, :, room:] = self.block
            self._buf, self._room = buf, room
        return self._buf.narrow(3, room - past, past + self._cols)


class TreeShape:
    """What a tree shape's forwards need, built once: its ancestor-or-self matrix, depths (also
    as a [1, q] tensor), and its attention masks after the cached context (ContextMask)."""

    def __init__(self, parents: tuple[int, ...]):
        q = len(parents)
        rows: list[list[bool]] = []
        depth = [0] * q
        for i, p in enumerate(parents):
            if p >= 0:
                if p >= i:
                    raise ValueError(f"tree node {i} has parent {p}; parents must come first")
                row = list(rows[p])
                depth[i] = depth[p] + 1
            else:
                row = [False] * q
            row[i] = True
            rows.append(row)
        self.anc = torch.tensor(rows, dtype=torch.bool).reshape(q, q)
        self.depth = tuple(depth)
        self.depth_t = torch.tensor([depth], dtype=torch.long)
        self.masks = ContextMask(self.anc)
        self._positions = self.depth_t  # row r: the positions after r cached entries
        self._rows = 1

    def positions(self, past: int) -> torch.Tensor:
        """[1, q]: each node's position after `past` cached entries (past + its depth), a row of
        a table built once per shape and grown with the context. Shared: never write into it."""
        if past >= self._rows:
            self._rows = max(past + 1, 256, 2 * self._rows)
            self._positions = self.depth_t + torch.arange(self._rows, dtype=torch.long)[:, None]
        return self._positions.narrow(0, past, 1)


def argmax_list(t: torch.Tensor) -> list[Any]:
    """t.argmax(-1).tolist(): by numpy for float32 (the same rule, the first maximum's index; about
    half a torch reduction's cost per call on this path), by torch for other dtypes."""
    if t.dtype == torch.float32:
        result: list[Any] = t.numpy().argmax(-1).tolist()
        return result
    return t.argmax(-1).tolist()


_ONE_TOKEN: dict[int, torch.Tensor] = {}


def ids_tensor(ids: list[int]) -> torch.Tensor:
    """[1, q] long tensor of `ids`. A single token's (every decoding step's, every draft token's)
    is made once and shared: a step then creates no tensor for it. Never write into it."""
    if len(ids) == 1:
        t = _ONE_TOKEN.get(ids[0])
        if t is None:
            t = _ONE_TOKEN[ids[0]] = torch.tensor([ids], dtype=torch.long)
        return t
    # A view of the ids' own 64-bit buffer (the tensor keeps the array alive): cheaper than
    # torch.tensor's walk over a nested list.
    return torch.frombuffer(array.array("q", ids), dtype=torch.long).view(1, len(ids))


_ARANGE = torch.arange(0)[None]  # [1, n]


def arange_row(start: int, stop: int) -> torch.Tensor:
    """[1, stop - start]: the positions start..stop-1, a view of a shared arange (grown as needed)."""
    global _ARANGE
    table = _ARANGE
    if stop > table.shape[1]:
        table = _ARANGE = torch.arange(max(stop, 1024, 2 * table.shape[1]), dtype=torch.long)[None]
    return table.narrow(1, start, stop - start)


_SAME: dict[int, torch.Tensor] = {}


def same_row(value: int, k: int) -> torch.Tensor:
    """[1, k]: `value` k times, a row of a per-k table (grown as needed). Shared: never write into it."""
    table = _SAME.get(k)
    if table is None or value >= table.shape[0]:
        rows = max(value + 1, 1024, 0 if table is None else 2 * table.shape[0])
        table = _SAME[k] = torch.arange(rows, dtype=torch.long)[:, None].expand(rows, k).contiguous()
    return table.narrow(0, value, 1)


@functools.lru_cache(maxsize=4096)
def rows_tensor(rows: tuple[int, ...]) -> torch.Tensor:
    """`rows` as a long tensor, made once per tuple (a tree step keeps one of a few row sets)."""
    return torch.tensor(rows, dtype=torch.long)


@functools.lru_cache(maxsize=512)
def tree_shape(parents: tuple[int, ...]) -> TreeShape:
    """The TreeShape of `parents`, cached: a mode verifies the same few shapes step after step
    (built once per shape and shared: never modify it)."""
    return TreeShape(parents)


@functools.lru_cache(maxsize=256)
def _causal_shape(q: int) -> TreeShape:
    """The TreeShape of a chain of q tokens (plain causal attention over them), per q."""
    return tree_shape(tuple(range(-1, q - 1)))


def inference(fn: Callable[P, R]) -> Callable[P, R]:
    """torch.inference_mode() as a decorator, entered only when it is not on already (the
    runtime's generation loop runs in it): the same mode, without a context switch per call."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            return fn(*args, **kwargs)

    return wrapper


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
        self.capture = frozenset(capture)
        # transformers' arithmetic without its per-call machinery, where the model allows it
        # (toolkit.reference.lean); `lean_refusal` says why not otherwise.
        # The capture hooks of this or any other CachedLM on the model are ours to skip: one only
        # records while its own CachedLM runs transformers' forward with `aux`.
        self.lean_refusal = refusal(model, lambda hook: getattr(hook, "__func__", None) is CachedLM._grab)
        self.lean = LeanDecoder(model) if not self.lean_refusal else None
        # Where the lean forward runs, a greedy step's output head writes into one buffer whose
        # numpy view the argmax reads (no new tensor, no module call, no conversion per step), and
        # a chain's ids are written into one buffer the forward reads (see _head_rows, _ids).
        self._head_wt: torch.Tensor | None = None
        head = self.lm_head
        if (
            self.lean is not None
            and type(head) is torch.nn.Linear
            and head.bias is None
            and head.weight.dtype == torch.float32
        ):
            self._head_wt = head.weight.detach().t()
        self._head_buf = torch.empty(1, 0, 0)
        self._head_np: Any = None
        self._ids_buf = torch.zeros(1, 0, dtype=torch.long)
        self._ids_np: Any = None

    def _grab(
        self, _module: torch.nn.Module, _args: object, output: torch.Tensor | tuple[torch.Tensor, ...]
    ) -> None:
        if self._recording:
            self._captured.append(output if isinstance(output, torch.Tensor) else output[0])

    @property
    def length(self) -> int:
        first = self._first
        return first.length if first is not None else self.cache.get_seq_length()

    @property
    def cache(self) -> DynamicCache:
        return self._cache

    @cache.setter
    def cache(self, cache: DynamicCache) -> None:
        self._cache = cache
        # The cache's length is its first layer's when that one is preallocated (all layers agree
        # between forwards): read without DynamicCache's per-call checks.
        first = cache.layers[0] if cache.layers else None
        self._first = first if isinstance(first, PreallocLayer) else None
        self._keep_plan: tuple[list[KVStore], list[DynamicLayer]] | None = None
        # When every layer is preallocated, a crop or a reset only sets their lengths.
        prealloc = [layer for layer in cache.layers if isinstance(layer, PreallocLayer)]
        self._prealloc = prealloc if prealloc and len(prealloc) == len(cache.layers) else []

    def _plan(self) -> tuple[list[KVStore], list[DynamicLayer]]:
        """The KVStores of this cache (each once) and its other layers, found once per cache after
        its layers were initialized (a layer of another shape may get its own store then)."""
        plan = self._keep_plan
        if plan is None:
            stores: list[KVStore] = []
            others: list[DynamicLayer] = []
            for layer in self.cache.layers:
                if isinstance(layer, PreallocLayer):
                    if layer.store.buf is not None and all(st is not layer.store for st in stores):
                        stores.append(layer.store)
                else:
                    assert isinstance(layer, DynamicLayer)
                    others.append(layer)
            plan = self._keep_plan = (stores, others)
        return plan

    def reset(self) -> None:
        """Empty the cache: a preallocated one in place (its buffers kept for the next sequence,
        which writes from entry 0), any other by a new cache."""
        if self._prealloc:
            self._set_length(0)
        else:
            self.cache = preallocated_cache(self.config)

    def crop(self, length: int) -> None:
        if length <= 0:
            self.reset()  # DynamicCache.crop(0) is a no-op: non-positive lengths count from the end
        elif length < self.length:
            if self._prealloc:
                self._set_length(length)
            else:
                self.cache.crop(length)

    def _set_length(self, length: int) -> None:
        """PreallocLayer.crop on every layer of an all-preallocated cache (`length` ≤ theirs)."""
        for layer in self._prealloc:
            layer.length = length

    @inference
    def keep(self, start: int, rows: Sequence[int]) -> None:
        """Keep the first `start` cached entries plus entries start+r for r in `rows` (ascending).
        The kept rows move down in place (the context before `start` is not copied), in one copy
        per KVStore (all the layers that share it at once)."""
        n = len(rows)
        # Ascending distinct rows from 0 are 0..n-1 exactly when the last one is n-1.
        if n and rows[-1] != n - 1:
            src = rows_tensor(tuple(rows))  # relative to `start`
            stores, others = self._plan()
            for layer in others:
                # Other (sliding) layers are DynamicLayers and hold keys and values themselves.
                assert layer.keys is not None and layer.values is not None
                layer.keys[:, :, start : start + n] = layer.keys[:, :, start:].index_select(2, src)
                layer.values[:, :, start : start + n] = layer.values[:, :, start:].index_select(2, src)
            for st in stores:
                buf = st.buf
                assert buf is not None
                seg = buf.narrow(-2, start, rows[-1] + 1)
                seg.narrow(-2, 0, n).copy_(seg.index_select(-2, src))
        self.crop(start + n)

    @inference
    def greedy_next(self, ids: list[int]) -> int:
        """Run `ids` after the cached context (their KV appended) and return the argmax of the last
        one's logits: forward(ids, logits_from=len(ids) - 1).logits[-1].argmax(), without the
        Forward and the reshapes (the output head runs on that row alone, as there)."""
        return self._next(ids)

    @inference
    def greedy_chain(self, ids: list[int], k: int) -> list[int]:
        """`k` greedy tokens after the cached context and `ids`: greedy_next k times in one call."""
        nxt = self._next
        out = [nxt(ids)]
        for _ in range(k - 1):
            out.append(nxt(out[-1:]))
        return out

    def _next(self, ids: list[int]) -> int:
        """greedy_next for a caller already in inference mode."""
        last = self._chain(ids)
        if len(ids) > 1:
            last = last.narrow(1, -1, 1)
        return self._argmaxes(last, 1)[0]

    def _chain(self, ids: list[int]) -> torch.Tensor:
        """The decoder's final hidden states [1, q, hidden] for `ids` run as a chain (causal)
        after the cached context, their KV appended: by the lean forward where it runs."""
        if self.lean is not None:
            return self._lean(ids, None)
        out: torch.Tensor = self.decoder(
            input_ids=ids_tensor(ids), past_key_values=self.cache, use_cache=True
        ).last_hidden_state
        return out

    def _rows(self, ids: list[int]) -> list[int]:
        """The argmax of every row's logits for `ids` run as a chain after the cached context
        (their KV appended): forward(ids).logits.argmax(-1).tolist() without the Forward, for a
        caller already in inference mode (the generation loop's greedy chain path)."""
        return self._argmaxes(self._chain(ids), len(ids))

    def _argmaxes(self, last: torch.Tensor, q: int) -> list[int]:
        """The argmax of each row of the output head on `last` [1, q, hidden]: from this model's
        logits buffer (_head_rows) where it has one, else from lm_head's output."""
        if self._head_wt is not None:
            rows: list[int] = self._head_rows(last, q).argmax(1).tolist()
            return rows
        preds: list[int] = argmax_list(self.lm_head(last))[0]
        return preds

    def _head_rows(self, last: torch.Tensor, q: int) -> Any:
        """The output head's logits for `last` [1, q, hidden], as a numpy view [q, vocab] of this
        model's one logits buffer (valid until the next call; read it, never keep it). Bit for bit
        lm_head(last): nn.Linear without a bias is matmul(x, weight.t()), here with `out=`."""
        buf, wt = self._head_buf, self._head_wt
        assert wt is not None
        if q > buf.shape[1]:
            buf = self._head_buf = torch.empty(1, max(q, 16), wt.shape[1])
            self._head_np = buf[0].numpy()
        torch.matmul(last, wt, out=buf.narrow(1, 0, q))
        return self._head_np[:q]

    def _ids(self, ids: list[int]) -> torch.Tensor:
        """[1, q] long tensor of `ids` for a forward that reads it at once: a view of this model's
        one ids buffer, written through numpy (a single token's is ids_tensor's shared one)."""
        q = len(ids)
        if q == 1:
            return ids_tensor(ids)
        buf = self._ids_buf
        if q > buf.shape[1]:
            buf = self._ids_buf = torch.zeros(1, max(q, 64), dtype=torch.long)
            self._ids_np = buf[0].numpy()
        self._ids_np[:q] = ids
        return buf.narrow(1, 0, q)

    def _lean(self, ids: list[int], shape: TreeShape | None, aux: bool = False) -> torch.Tensor:
        """The decoder's final hidden states [1, q, hidden] for `ids` after the cached context, by
        LeanDecoder, with the positions and mask transformers' forward would make (a tree's from
        its shape; a chain's causal, none for one token or from an empty cache)."""
        assert self.lean is not None
        past, q = self.length, len(ids)
        mask = None
        if shape is not None:
            mask, positions = shape.masks.mask(past), shape.positions(past)
        else:
            positions = arange_row(past, past + q)
            if q > 1 and past:
                mask = _causal_shape(q).masks.mask(past)
        layers: Any = self.cache.layers
        captured = self._captured if aux else None
        return self.lean.run(
            self._ids(ids),
            positions,
            mask,
            lambda i, k, v: layers[i].update(k, v),
            self.capture,
            captured,
        )

    @inference
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
        shape = tree_shape(tuple(parents)) if parents is not None and not is_chain(parents) else None
        return self.run(ids if isinstance(ids, list) else list(ids), shape, logits_from, hidden, aux)

    def run(
        self,
        ids: list[int],
        shape: TreeShape | None,
        logits_from: int = 0,
        hidden: bool = False,
        aux: bool = False,
        argmax: bool = False,
    ) -> Forward:
        """forward() for a caller already in inference mode (the generation loop), with the tree
        shape of the step resolved (None: a chain, plain causal attention). `argmax`: a caller that
        reads only each row's argmax (greedy verification) gets them as `Forward.argmax` instead
        of logits where the output head can write into this model's buffer (_head_rows)."""
        try:  # _captured is empty here: every forward clears it when it ends
            if self.lean is not None:
                last = self._lean(ids, shape, aux)
            else:
                mask = positions = None
                if shape is not None:
                    past = self.length
                    mask = shape.masks.mask(past)
                    positions = shape.positions(past)
                self._recording = aux
                last = self.decoder(
                    input_ids=ids_tensor(ids),
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=self.cache,
                    use_cache=True,
                ).last_hidden_state
            logits1 = rows = None
            if logits_from < len(ids):
                # The output head on [1, q', H]: the same rows as on [q', H] (it flattens them).
                head_in = last.narrow(1, logits_from, len(ids) - logits_from) if logits_from else last
                if argmax and self._head_wt is not None:
                    rows = self._argmaxes(head_in, len(ids) - logits_from)
                else:
                    logits1 = self.lm_head(head_in)
            captured = None
            if aux and self._hooks:
                captured = torch.cat(self._captured, dim=-1).select(0, 0)
        finally:
            self._recording = False
            self._captured.clear()
        return Forward(
            hidden=last.select(0, 0) if hidden else None, aux=captured, logits1=logits1, argmax=rows
        )
