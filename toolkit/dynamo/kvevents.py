"""KV events of sdtk's reference worker, for Dynamo's KV router (`--router-mode kv`).

Dynamo's KV router keeps, per worker, a radix tree of the token blocks the worker holds, fed by
the worker's KV events, and routes a request to the worker with the best prefix overlap for its
load. Upstream's engines publish them with `dynamo.llm.KvEventPublisher` (`publish_stored(
token_ids, num_block_tokens, block_hashes, parent_hash)`, `publish_removed(block_hashes)`; the
router hashes the token ids itself, the block hashes are the engine's own ids for the later
removal: ai-dynamo 1.6.1 `dynamo/_core.pyi` `KvEventPublisher`, and the sample engine
`dynamo/common/backend/sample_engine.py` `_emit_synthetic_events`) and their load with
`WorkerMetricsPublisher.publish(dp_rank, active_decode_blocks, kv_used_blocks)`. On the ZMQ event
plane with file discovery no NATS or etcd is needed (measured with 1.6.1: the frontend's router
subscribed to each worker's `kv-events` ZMQ stream and reported the overlap of a repeated prefix).

What the reference runtime holds: each sequence in its in-flight batch has its own KV cache from
admission to the end of its generation; there is no prefix cache, so nothing is kept after a
request ends. The events say exactly that: a request's full prompt blocks (`block_size` tokens,
as the frontend tokenized them) are stored when it starts and removed when it leaves the batch,
with a reference count per block so that two live requests sharing a prefix store it once. The
router therefore sends a request to the worker that is serving its prefix right now; the
reference runtime does not reuse that KV (the routing is upstream's, the saving is not).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Protocol


class Publisher(Protocol):
    def publish_stored(
        self,
        token_ids: list[int],
        num_block_tokens: list[int],
        block_hashes: list[int],
        parent_hash: int | None,
    ) -> None: ...

    def publish_removed(self, block_hashes: list[int]) -> None: ...


class LoadPublisher(Protocol):
    def publish(self, dp_rank: int, active_decode_blocks: int, kv_used_blocks: int) -> None: ...


class KvBlocks:
    """The blocks the worker's live requests hold, published as KV events (reference-counted per
    block: a block is stored when its first holder starts, removed when its last one ends)."""

    def __init__(self, publisher: Publisher, block_size: int, load: LoadPublisher | None = None):
        self.publisher = publisher
        self.load = load
        self.block_size = block_size
        self._held: dict[tuple[int, ...], list[int]] = {}  # block's token prefix → [hash, holders]
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return len(self._held)

    def _keys(self, tokens: list[int]) -> list[tuple[int, ...]]:
        n = len(tokens) // self.block_size
        return [tuple(tokens[: (i + 1) * self.block_size]) for i in range(n)]

    def acquire(self, tokens: list[int]) -> list[tuple[int, ...]]:
        """A request with prompt `tokens` starts: store the full blocks no live request holds yet
        (one event, chained on the last block already held). Returns its handle for release()."""
        keys = self._keys(tokens)
        with self._lock:
            new = [i for i, k in enumerate(keys) if k not in self._held]
            for k in keys:
                if k not in self._held:
                    self._held[k] = [next(self._ids), 0]
                self._held[k][1] += 1
            if new:  # a prefix's blocks are held whenever a longer one is: the new ones are a suffix
                first = new[0]
                parent = self._held[keys[first - 1]][0] if first else None
                bs = self.block_size
                self.publisher.publish_stored(
                    token_ids=list(tokens[first * bs : len(keys) * bs]),
                    num_block_tokens=[bs] * (len(keys) - first),
                    block_hashes=[self._held[k][0] for k in keys[first:]],
                    parent_hash=parent,
                )
            self._publish_load()
        return keys

    def release(self, keys: list[tuple[int, ...]]) -> None:
        """The request of `keys` left the batch: remove the blocks no other live request holds."""
        with self._lock:
            gone = []
            for k in reversed(keys):  # leaves first
                entry = self._held[k]
                entry[1] -= 1
                if entry[1] == 0:
                    gone.append(entry[0])
                    del self._held[k]
            if gone:
                self.publisher.publish_removed(block_hashes=gone)
            self._publish_load()

    def _publish_load(self) -> None:
        if self.load is not None:
            self.load.publish(0, self.used, self.used)


async def dynamo_kv_blocks(endpoint: Any, block_size: int) -> KvBlocks:
    """KvBlocks publishing through Dynamo's runtime for the worker's `endpoint`."""
    from dynamo.llm import KvEventPublisher, WorkerMetricsPublisher

    load = WorkerMetricsPublisher()
    await load.create_endpoint(endpoint)
    blocks = KvBlocks(KvEventPublisher(endpoint=endpoint, kv_block_size=block_size), block_size, load)
    blocks._publish_load()  # the router selects a worker only once it has its load
    return blocks
