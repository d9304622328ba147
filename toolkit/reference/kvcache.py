"""The KV cache the reference runtime's models write in place: one preallocated buffer for all
full-attention layers (KVStore), the transformers cache layer over it (PreallocLayer), and the
DynamicCache made of them (preallocated_cache)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import DynamicLayer


class KVStore:
    """The keys and values of a cache's full-attention layers in one buffer [layers, 2, batch,
    heads, capacity, head_dim] that grows geometrically: a step writes each layer's new entries
    in place (no concatenation of the whole cache), and a tree step's accepted rows move down
    in all layers at once (CachedLM.keep). Values and their order are those of DynamicLayer."""

    def __init__(self, count: int):
        self.count = count
        self.buf: torch.Tensor | None = None
        self.generation = 0  # bumped when the buffer is replaced (the layers refresh their views)

    def fits(self, states: torch.Tensor) -> bool:
        """Whether a layer whose new entries look like `states` [batch, heads, q, head_dim] can live here."""
        buf = self.buf
        if buf is None:
            return True
        return (
            buf.dtype == states.dtype
            and buf.shape[2:4] == states.shape[:2]
            and buf.shape[-1] == states.shape[-1]
        )

    def reserve(self, states: torch.Tensor, n: int, min_capacity: int) -> None:
        """Room for `n` entries per layer, keeping what is there."""
        old = self.buf
        cap = 0 if old is None else old.shape[-2]
        if n <= cap:
            return
        b, h, _, d = states.shape
        new = states.new_empty(self.count, 2, b, h, max(n, min_capacity, 2 * cap), d)
        if old is not None:
            new[..., :cap, :] = old
        self.buf = new
        self.generation += 1


class PreallocLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views [..., :length, :] of its slot in a KVStore
    (shared with the cache's other layers, or its own): a step writes its new entries in place,
    and a crop only sets the length. Values and their order are the same."""

    MIN_CAPACITY = 256

    def __init__(self, store: KVStore | None = None, slot: int = 0, **kwargs: Any) -> None:
        self.store = store if store is not None else KVStore(1)
        self.slot = slot if store is not None else 0
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self._gen = -1
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        super().__init__(**kwargs)

    # DynamicLayer's code reads and assigns `keys` / `values`: here they are the live views.
    @property
    def keys(self) -> torch.Tensor | None:
        return self._keys if self.kbuf is None else self.kbuf.narrow(-2, 0, self.length)

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._keys = value

    @property
    def values(self) -> torch.Tensor | None:
        return self._values if self.vbuf is None else self.vbuf.narrow(-2, 0, self.length)

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._values = value

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.length = 0
        if not self.store.fits(key_states):
            self.store, self.slot = KVStore(1), 0  # a layer of another shape gets its own buffer
        self.is_initialized = True

    def _views(self) -> None:
        buf = self.store.buf
        assert buf is not None
        self.kbuf, self.vbuf = buf[self.slot, 0], buf[self.slot, 1]
        self._gen = self.store.generation

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.length
        n = start + key_states.shape[-2]
        store = self.store
        store.reserve(key_states, n, self.MIN_CAPACITY)
        if self._gen != store.generation:
            self._views()
        kbuf, vbuf = self.kbuf, self.vbuf
        assert kbuf is not None and vbuf is not None
        q = n - start
        kbuf.narrow(-2, start, q).copy_(key_states)
        vbuf.narrow(-2, start, q).copy_(value_states)
        self.length = n
        return kbuf.narrow(-2, 0, n), vbuf.narrow(-2, 0, n)

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        if max_length <= 0:
            max_length = self.length - abs(max_length)
        self.length = max(0, min(self.length, max_length))


def preallocated_cache(config: PreTrainedConfig) -> DynamicCache:
    """A DynamicCache whose full-attention layers are PreallocLayers sharing one KVStore (sliding
    ones stay as they are). MLA (DeepSeek-V3, as transformers runs it) caches keys and values of
    different widths (qk_nope + qk_rope, v_head_dim), which one buffer cannot hold: its layers stay
    DynamicLayers."""
    cache = DynamicCache(config=config)
    if getattr(config, "v_head_dim", None) and getattr(config, "qk_rope_head_dim", None):
        return cache
    full = [i for i, layer in enumerate(cache.layers) if type(layer) is DynamicLayer]
    store = KVStore(len(full))
    slots = {i: s for s, i in enumerate(full)}
    cache.layers = [
        PreallocLayer(store, slots[i]) if i in slots else layer for i, layer in enumerate(cache.layers)
    ]
    return cache
