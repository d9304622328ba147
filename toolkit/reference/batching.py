"""In-flight batching for the reference runtime: one batched forward per iteration over every
active sequence, each with its own KV slot, length and positions.

Each sequence runs its own decoding logic (ReferenceRuntime.generate / verify_draft, drafting
included) in its own thread, against a `SlotLM`: the CachedLM interface over one slot of a
shared KV buffer. `SlotLM.forward` hands its step to the `Batcher` and waits. The batcher's
thread waits until every active sequence has handed in a step (lockstep, as TensorRT-LLM's
iteration-level scheduling), then runs one padded forward per model (target, draft) and
group (prefill-sized steps apart from decode/verify steps, so that a long prompt does not pad
every decode row to its length), and wakes the sequences. A sequence that arrives while others
run is admitted at the next iteration (up to `max_batch_size` at once, first come first
served); one that finishes, fails or is cancelled leaves.

Padding: row b's new tokens go to its slot at [len_b, len_b + q_b); the additive attention mask
lets query i see the row's cached context and its own ancestors (a chain or a tree), nothing of
other rows or of padding. Final logits are computed per row (lm_head on that row's hidden
states alone), so a row's logits never depend on the batch's shape after the last layer.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from toolkit.reference.models import CachedLM, Forward, tree_mask

PREFILL_Q = 16  # steps longer than this (prompts) are batched apart from decode/verify steps


class SlotPool:
    """KV buffers [slots + 1, kv_heads, capacity, head_dim] per layer (a batch's rows gather into
    the layout attention reads); the last slot takes the padding's writes. Only the batcher
    thread touches the buffers."""

    def __init__(self, lm: CachedLM, slots: int, capacity: int):
        cfg = lm.config
        self.lm = lm
        self.layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        # MLA (DeepSeek-V3) as transformers runs it caches decompressed keys of qk_nope + qk_rope
        # and values of v_head_dim; its config's head_dim is the rope part alone.
        nope, rope = getattr(cfg, "qk_nope_head_dim", None), getattr(cfg, "qk_rope_head_dim", None)
        self.key_dim = nope + rope if nope and rope else head_dim
        self.value_dim = getattr(cfg, "v_head_dim", None) or head_dim
        self.slots = slots
        self.capacity = capacity
        # The cache holds what the model computes in (float32, or the bf16/fp16 of a recipe's dtype).
        # cast: torch types a submodule's attribute read as `Tensor | Module` (nn.Module.__getattr__).
        self.dtype = cast(torch.Tensor, lm.embed.weight).dtype
        self.keys = [self._zeros(capacity, self.key_dim) for _ in range(self.layers)]
        self.values = [self._zeros(capacity, self.value_dim) for _ in range(self.layers)]
        self.free = list(range(slots))
        self.scratch = slots

    def _zeros(self, capacity: int, dim: int) -> torch.Tensor:
        return torch.zeros(self.slots + 1, self.kv_heads, capacity, dim, dtype=self.dtype)

    def ensure(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        grow = max(capacity, 2 * self.capacity) - self.capacity
        for store, dim in ((self.keys, self.key_dim), (self.values, self.value_dim)):
            for i, t in enumerate(store):
                store[i] = torch.cat([t, self._zeros(grow, dim)], dim=2)
        self.capacity += grow

    def compact(self, slot: int, start: int, rows: Sequence[int]) -> None:
        """Keep entries start+r (r in rows, ascending) at start, start+1, ..."""
        src = torch.tensor(list(rows), dtype=torch.long) + start
        for store in (self.keys, self.values):
            for t in store:
                t[slot, :, start : start + len(rows)] = t[slot, :, src]


class SlotLM:
    """One sequence's view of a SlotPool with CachedLM's interface (length, reset, crop, keep,
    forward); its forwards run batched with the other active sequences'."""

    def __init__(self, batcher: Batcher, pool: SlotPool, slot: int):
        self.batcher = batcher
        self.pool = pool
        self.slot = slot
        self.config = pool.lm.config
        self._length = 0
        self.pending: list[tuple[int, list[int]]] = []  # keeps applied by the batcher thread
        # What the slot holds for verify_draft's prefix reuse, and that request's sampling stream.
        self._verified: list[int] = []
        self._verify_gen: Any = None

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._length = 0
        self.pending.clear()

    def crop(self, length: int) -> None:
        self._length = max(0, min(self._length, length))

    def keep(self, start: int, rows: Sequence[int]) -> None:
        rows = list(rows)
        if rows != list(range(len(rows))):
            self.pending.append((start, rows))
        self._length = start + len(rows)

    def forward(
        self,
        ids: Sequence[int],
        *,
        parents: Sequence[int] | None = None,
        logits_from: int = 0,
        hidden: bool = False,
        aux: bool = False,
    ) -> Forward:
        step = Step(self, list(ids), list(parents) if parents is not None else None, logits_from, hidden, aux)
        return self.batcher.run_step(step)


@dataclass
class Step:
    lm: SlotLM
    ids: list[int]
    parents: list[int] | None
    logits_from: int
    hidden: bool
    aux: bool
    result: Forward | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Member:
    """One admitted sequence: its slots (target, draft) for the time it is active."""

    def __init__(self, batcher: Batcher, target: SlotLM, draft: SlotLM | None):
        self.batcher = batcher
        self.target = target
        self.draft = draft

    def __enter__(self) -> Member:
        return self

    def __exit__(self, *exc: object) -> None:
        self.batcher.leave(self)


class Batcher:
    """Owns the KV slots and the thread that runs the batched forwards."""

    def __init__(
        self,
        target: CachedLM,
        *,
        max_batch_size: int,
        capacity: int,
        draft: CachedLM | None = None,
        reuse_slots: int = 0,
    ):
        self.max_batch_size = max_batch_size
        # Idle slots keep their cache for verify_draft's prefix reuse (the BLS sends each
        # sequence again, one token longer): `reuse_slots` extra ones for that.
        slots = max_batch_size + reuse_slots
        self.target_pool = SlotPool(target, slots, capacity)
        self.draft_pool = SlotPool(draft, slots, capacity) if draft is not None else None
        self.idle: deque[int] = deque(range(slots))  # least recently used first
        self.target_views = {s: SlotLM(self, self.target_pool, s) for s in range(slots)}
        self._cond = threading.Condition()
        self._active: list[Member] = []
        self._waiting: deque[object] = deque()  # FIFO admission tickets
        self._steps: list[Step] = []
        self._closed = False
        self.iterations = 0
        self.batch_sizes: dict[int, int] = {}  # batch size -> iterations run at it (for stats)
        # For /metrics (toolkit.ops.batch_metrics): the last iteration's sequences and
        # prompt (prefill) steps, and the largest batch so far.
        self.last_scheduled = self.last_context = self.peak = 0
        self._thread = threading.Thread(target=self._loop, name="sdtk-reference-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ admission

    @property
    def active(self) -> int:
        """Sequences in the batch now (what draft_len_schedule and max_concurrency look at)."""
        return len(self._active)

    @property
    def waiting(self) -> int:
        """Requests queued for a place in a full batch."""
        return len(self._waiting)

    def join(self, prefix: Sequence[int] | None = None) -> Member:
        """Wait for room in the batch (first come, first served) and take a slot: with `prefix`,
        the idle slot holding the longest common prefix of it (its cache is reused)."""
        ticket = object()
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._waiting.append(ticket)
            self._cond.wait_for(
                lambda: (
                    self._closed or (self._waiting[0] is ticket and len(self._active) < self.max_batch_size)
                )
            )
            self._waiting.popleft()
            if self._closed:
                raise RuntimeError("the batcher is closed")
            slot = self._pick(prefix)
            self.idle.remove(slot)
            target = self.target_views[slot]
            if prefix is None:
                target.reset()
                target._verified = []
            draft = None
            if self.draft_pool is not None:
                draft = SlotLM(self, self.draft_pool, slot)
            seq = Member(self, target, draft)
            self._active.append(seq)
            self._cond.notify_all()
            return seq

    def _pick(self, prefix: Sequence[int] | None) -> int:
        if prefix is None:
            return self.idle[0]
        best, best_len = self.idle[0], -1
        for s in self.idle:
            held = self.target_views[s]._verified
            n = 0
            limit = min(len(held), len(prefix))
            while n < limit and held[n] == prefix[n]:
                n += 1
            if n > best_len:
                best, best_len = s, n
        return best

    def leave(self, seq: Member) -> None:
        with self._cond:
            if seq in self._active:
                self._active.remove(seq)
                self.idle.append(seq.target.slot)  # most recently used last
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ steps

    def run_step(self, step: Step) -> Forward:
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._steps.append(step)
            self._cond.notify_all()
        step.done.wait()
        if step.error is not None:
            raise step.error
        assert step.result is not None
        return step.result

    def _ready(self) -> bool:
        # Every active sequence has handed in its step (those not yet admitted wait for the next).
        return self._closed or (bool(self._steps) and len(self._steps) >= len(self._active))

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cond:
                    self._cond.wait_for(self._ready)
                    if self._closed:
                        for s in self._steps:
                            s.error = RuntimeError("the batcher is closed")
                            s.done.set()
                        return
                    steps, self._steps = self._steps, []
                    n = len(self._active)
                self.iterations += 1
                self.batch_sizes[n] = self.batch_sizes.get(n, 0) + 1
                self.last_scheduled, self.peak = n, max(self.peak, n)
                self.last_context = sum(len(s.ids) > PREFILL_Q for s in steps)
                groups: dict[tuple[int, bool], list[Step]] = {}
                for s in steps:
                    groups.setdefault((id(s.lm.pool), len(s.ids) > PREFILL_Q), []).append(s)
                for group in groups.values():
                    try:
                        outs = batched_forward(group[0].lm.pool, group)
                        for s, out in zip(group, outs, strict=True):
                            s.result = out
                    except BaseException as e:  # every sequence of the group sees the failure
                        for s in group:
                            s.error = e
                    for s in group:
                        s.done.set()


def batched_forward(pool: SlotPool, steps: list[Step]) -> list[Forward]:
    """One padded forward of `steps` (distinct slots of `pool`) after their cached contexts."""
    lm = pool.lm
    for s in steps:
        for start, rows in s.lm.pending:
            pool.compact(s.lm.slot, start, rows)
        s.lm.pending.clear()
    b = len(steps)
    q = max(len(s.ids) for s in steps)
    lens = [s.lm.length for s in steps]
    width = max(lens) + q
    pool.ensure(width)
    n_new = torch.tensor([len(s.ids) for s in steps])
    past = torch.tensor(lens)
    query = torch.arange(q)
    real = query[None, :] < n_new[:, None]  # [b, q]: not padding
    ids = torch.tensor([s.ids + [0] * (q - len(s.ids)) for s in steps], dtype=torch.long)
    # Chains (the common case) vectorised: query i sees columns < past + i + 1.
    positions = past[:, None] + query[None, :]
    cols = torch.arange(width)
    visible = cols[None, None, :] <= positions[:, :, None]
    for r, s in enumerate(steps):
        if s.parents is not None:  # a tree: the row's own ancestors instead of a causal block
            n, at = len(s.ids), lens[r]
            anc, depth = tree_mask(s.parents)
            positions[r, :n] = torch.tensor(depth, dtype=torch.long) + at
            visible[r, :n, at : at + n] = anc
    visible &= real[:, :, None]
    visible[:, :, 0] |= ~real  # padding queries see something (no all-masked softmax row)
    positions = positions.masked_fill(~real, 0)
    visible = visible[:, None]
    # New entries go to [past, past + n) of each row's slot; padding to the scratch slot.
    slots = torch.tensor([s.lm.slot for s in steps])
    wslot = torch.where(real, slots[:, None], pool.scratch).reshape(-1)
    wpos = torch.where(real, past[:, None] + query[None, :], query[None, :]).reshape(-1)
    # Additive, in the model's dtype (attention adds it to scores of that dtype).
    mask = torch.zeros(b, 1, q, width, dtype=pool.dtype).masked_fill(~visible, torch.finfo(pool.dtype).min)
    cache = _BatchKV(pool, wslot, wpos, slots, width)
    recording = any(s.aux for s in steps)
    lm._captured.clear()
    try:
        if lm.lean is not None:  # transformers' arithmetic, without its per-call machinery
            captured_list = lm._captured if recording else None
            h = lm.lean.run(
                ids, positions, mask, lambda i, k, v: cache.update(k, v, i), lm.capture, captured_list
            )
        else:
            decoder = lm.decoder
            lm._recording = recording
            h = decoder.embed_tokens(ids)
            pos_emb = decoder.rotary_emb(h, position_ids=positions)
            for layer in decoder.layers[: lm.config.num_hidden_layers]:
                h = layer(
                    h,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    position_embeddings=pos_emb,
                )
            h = decoder.norm(h)
        captured = torch.cat(lm._captured, dim=-1) if recording and lm._captured else None
    finally:
        lm._recording = False
        lm._captured.clear()
    outs = []
    for r, s in enumerate(steps):
        n = len(s.ids)
        row = h[r, :n]
        # Per-row final logits: the same lm_head call a batch-1 forward makes.
        logits = lm.lm_head(row[s.logits_from :].clone()) if s.logits_from < n else None
        outs.append(
            Forward(
                logits=logits,
                hidden=row if s.hidden else None,
                aux=captured[r, :n] if s.aux and captured is not None else None,
            )
        )
        s.lm._length = lens[r] + n
    return outs


class _BatchKV:
    """The Cache-like object the decoder layers call: `update` writes the new keys and values to
    their slots and returns each row's [0, width) of its slot."""

    def __init__(
        self, pool: SlotPool, wslot: torch.Tensor, wpos: torch.Tensor, slots: torch.Tensor, width: int
    ):
        self.pool = pool
        self.wslot = wslot
        self.wpos = wpos
        self.slots = slots
        self.width = width

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        b, heads, q, _ = key.shape
        out = []
        for store, new in ((self.pool.keys, key), (self.pool.values, value)):
            buf = store[layer_idx]
            # buf[wslot, :, wpos] is [b*q, heads, d]: row r of the batch's new entries (d: the
            # keys' or the values' width, which MLA makes differ).
            buf[self.wslot, :, self.wpos] = new.transpose(1, 2).reshape(b * q, heads, new.shape[-1])
            out.append(buf[self.slots, :, : self.width])
        return out[0], out[1]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width
