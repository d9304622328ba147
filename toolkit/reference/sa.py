"""Suffix-automaton (SA) speculation: TensorRT-LLM's `SADecodingConfig` drafter, and its
`sa_config` enhancer of a model drafter.

Each request keeps an online suffix automaton over its prompt and every committed token
(`SuffixAutomaton.extend`, amortized O(1) per token). A state's `pos` is the end index of the
first (leftmost) occurrence of its strings: a new state takes the index of the token just
appended, a clone copies the `pos` of the state it clones, and no state's `pos` ever changes
(NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/speculativeDecoding/suffixAutomaton/suffixAutomaton.h
@b120c7c, adapted from basetenlabs/sa_spec). The draft is the continuation of the first
occurrence of the longest suffix of the text that also ended earlier: s = link(last), L = len(s),
draft = text[pos(s)+1 : pos(s)+1+K]. With `max_matching_ngram_size` N > 0 the matched length is
min(L, N), continued after the first occurrence of that shorter suffix (suffixAutomatonKernels.cu
@a070a1f). The draft is shorter than K where the text ends first, and empty with no match.

The draft is a deterministic function of the context (q is one-hot), so the runtime's
sample-and-match verification keeps the target's distribution at any temperature; greedy output
is the target's own. docs/methods.md says where this follows upstream and where it cannot know.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward

# The global pool matches at most the last 64 tokens of a request against the other automata
# (SADecodingConfig.enable_global_pool: "suffix matching is capped at 64 tokens per request").
POOL_PATTERN = 64
# SADecodingConfig.global_pool_size when unset: max(64, max_batch_size).
POOL_MIN = 64


class SuffixAutomaton:
    """The online suffix automaton of `text` over token ids (state 0 is the root)."""

    __slots__ = ("last", "length", "link", "next", "pos", "text")

    def __init__(self, tokens: list[int] | None = None):
        self.length: list[int] = [0]
        self.link: list[int] = [-1]
        self.pos: list[int] = [-1]
        self.next: list[dict[int, int]] = [{}]
        self.text: list[int] = []
        self.last = 0
        for t in tokens or ():
            self.extend(t)

    def extend(self, tok: int) -> None:
        """Append one token (the classic construction; a clone keeps its original's `pos`)."""
        length, link, pos, nxt = self.length, self.link, self.pos, self.next
        cur = len(length)
        # The new state's lists are complete before any transition points at it, so that a
        # reader on another thread (the global pool) never meets a half-made state.
        length.append(length[self.last] + 1)
        link.append(0)
        pos.append(len(self.text))
        nxt.append({})
        self.text.append(tok)
        p = self.last
        while p != -1 and tok not in nxt[p]:
            nxt[p][tok] = cur
            p = link[p]
        if p != -1:
            q = nxt[p][tok]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(length)
                length.append(length[p] + 1)
                link.append(link[q])
                pos.append(pos[q])
                nxt.append(dict(nxt[q]))
                while p != -1 and nxt[p].get(tok) == q:
                    nxt[p][tok] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        self.last = cur

    def catch_up(self, tokens: list[int]) -> None:
        """Extend with the tokens of `tokens` past the automaton's text (its text is a prefix)."""
        for t in tokens[len(self.text) :]:
            self.extend(t)

    def _state_of(self, s: int, k: int) -> int:
        """The state on `s`'s suffix-link chain that holds the length-`k` suffix of `s`'s strings."""
        link, length = self.link, self.length
        while length[link[s]] >= k:
            s = link[s]
        return s

    def match(self, max_n: int = -1) -> tuple[int, int]:
        """(match length, end index of its first occurrence) of the longest suffix of the text
        that also ends before the text's last token (min(L, max_n) with max_n > 0); (0, -1) when
        none does."""
        s = self.link[self.last]
        if s <= 0:
            return 0, -1
        length = self.length[s]
        if 0 < max_n < length:
            length = max_n
            s = self._state_of(s, max_n)
        return length, self.pos[s]

    def draft(self, k: int, max_n: int = -1) -> tuple[int, list[int]]:
        """(match length, up to `k` tokens that followed the match's first occurrence)."""
        length, end = self.match(max_n)
        if length == 0 or k <= 0:
            return length, []
        return length, self.text[end + 1 : end + 1 + k]

    def find(self, pattern: list[int], max_n: int = -1) -> tuple[int, int]:
        """(length, end of first occurrence) of the longest suffix of `pattern` (min(that, max_n)
        with max_n > 0) that occurs in the text with at least one token after it; (0, -1) if none."""
        nxt, link, length = self.next, self.link, self.length
        s, n = 0, 0
        for t in pattern:
            while s and t not in nxt[s]:
                s = link[s]
                n = length[s]
            to = nxt[s].get(t)
            if to is None:
                s, n = 0, 0
            else:
                s, n = to, n + 1
        if 0 < max_n < n:
            n = max_n
            s = self._state_of(s, n)
        last = len(self.text) - 1
        # The first occurrence ends the text (it is the only one): nothing follows it; a shorter
        # suffix may occur earlier.
        while s > 0 and self.pos[s] >= last:
            s = link[s]
            n = length[s]
        return (n, self.pos[s]) if s > 0 else (0, -1)


class GlobalPool:
    """The automata that requests with `enable_global_pool` share (one pool per runtime): the
    active ones, and completed ones until the pool is full, the oldest completed evicted first
    (SADecodingConfig.global_pool_size)."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.members: dict[int, tuple[SuffixAutomaton, bool]] = {}  # id -> (automaton, active), oldest first
        self._ids = 0

    def join(self, sa: SuffixAutomaton) -> int:
        with self.lock:
            self._ids += 1
            self.members[self._ids] = (sa, True)
            self._evict()
            return self._ids

    def leave(self, key: int) -> None:
        with self.lock:
            if key in self.members:
                self.members[key] = (self.members[key][0], False)
                self._evict()

    def _evict(self) -> None:
        done = [k for k, (_, active) in self.members.items() if not active]
        for k in done[: max(0, len(self.members) - self.size)]:
            del self.members[k]

    def extend(self, sa: SuffixAutomaton, tokens: list[int]) -> None:
        with self.lock:
            sa.catch_up(tokens)

    def best(self, own: SuffixAutomaton, k: int, max_n: int) -> tuple[int, list[int]]:
        """The request's own match, unless another automaton holds a strictly longer one (the
        oldest such wins a tie among the others); (match length, draft)."""
        with self.lock:
            length, draft = own.draft(k, max_n)
            pattern = own.text[-POOL_PATTERN:]
            for sa, _ in self.members.values():
                if sa is own:
                    continue
                n, end = sa.find(pattern, max_n)
                if n > length:
                    length, draft = n, sa.text[end + 1 : end + 1 + k]
            return length, draft


_POOLS: weakref.WeakKeyDictionary[Any, GlobalPool] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def pool_for(runtime: Any, size: int | None) -> GlobalPool:
    """The runtime's global pool (made on first use); `size` None: max(64, max_batch_size)."""
    batcher = getattr(runtime, "batcher", None)
    batch = int(getattr(batcher, "max_batch_size", 1) or 1)
    want = size if size is not None else max(POOL_MIN, batch)
    with _POOLS_LOCK:
        pool = _POOLS.get(runtime)
        if pool is None:
            pool = _POOLS[runtime] = GlobalPool(want)
        pool.size = want
        return pool


class SASpeculator:
    """Standalone SA: every step proposes the continuation of the longest match (no threshold),
    up to `draft_len` tokens; a chain."""

    needs_hidden = False
    needs_aux = False

    def __init__(self, draft_len: int, max_matching_ngram_size: int = -1, pool: GlobalPool | None = None):
        self.draft_len = draft_len
        self.max_n = max_matching_ngram_size
        self.pool = pool
        self.sa = SuffixAutomaton()
        self.match_len = 0  # of the last proposal
        self._leave: Callable[[], None] | None = None

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        """Build the automaton from the prompt; with a pool, join it (and leave it when this
        speculator, that is the request, ends)."""
        self.sa = SuffixAutomaton()
        if self.pool is not None:
            key = self.pool.join(self.sa)
            self._leave = weakref.finalize(self, self.pool.leave, key)
            self.pool.extend(self.sa, ctx.tokens)
        else:
            self.sa.catch_up(ctx.tokens)

    def draft(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(match length, draft of up to `k` tokens) after the automaton caught up with `tokens`."""
        if self.pool is None:
            self.sa.catch_up(tokens)
            return self.sa.draft(k, self.max_n)
        self.pool.extend(self.sa, tokens)
        return self.pool.best(self.sa, k, self.max_n)

    def propose_chain(self, tokens: list[int], budget: int) -> list[int]:
        """The proposal's tokens (a chain; empty: no match or no budget), for the generation
        loop's greedy chain path, which needs no Proposal."""
        k = self.draft_len if self.draft_len < budget else budget
        self.match_len, chain = self.draft(tokens, k)
        return chain

    def propose(self, ctx: Context, budget: int) -> Proposal:
        chain = self.propose_chain(ctx.tokens, budget)
        return Proposal.chain(chain) if chain else Proposal()

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        """The automaton catches up lazily in `propose`."""


class SAEnhanced:
    """A model drafter enhanced by SA (`sa_config`): where SA's match is at least `threshold`
    tokens long, its draft replaces the drafter's, all slots at once; otherwise the drafter's
    own proposal stands (TensorRT-LLM tensorrt_llm/_torch/speculative/sa_enhancer.py @1a487b3).
    Every committed token extends the automaton. The drafter does not draft in a step whose
    proposal SA replaces (upstream drafts anyway and throws it away): its state catches up from
    the verified step as after any step (`update` gets the proposal the target verified)."""

    def __init__(self, inner: Any, sa: SASpeculator, threshold: int, draft_len: int):
        self.inner = inner
        self.sa = sa
        self.threshold = threshold
        self.draft_len = draft_len
        self.needs_hidden = inner.needs_hidden
        self.needs_aux = inner.needs_aux
        self.replaced = 0  # steps whose proposal was SA's

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        self.inner.prefill(ctx, fwd)
        self.sa.prefill(ctx, fwd)

    def propose(self, ctx: Context, budget: int) -> Proposal:
        k = min(self.draft_len, budget)
        length, chain = self.sa.draft(ctx.tokens, k)
        self.sa.match_len = length
        if chain and length >= self.threshold:
            self.replaced += 1
            return Proposal.chain(chain)
        return self.inner.propose(ctx, budget)

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        self.inner.update(ctx, proposal, fwd, verdict)


def standalone(spec: Any, runtime: Any) -> SASpeculator:
    """The speculator of an `sa` recipe section (toolkit/modes/sa.py)."""
    pool = pool_for(runtime, spec.global_pool_size) if spec.enable_global_pool else None
    return SASpeculator(spec.max_draft_len, spec.max_matching_ngram_size, pool)


def enhance(inner: Any, sa_config: Any, draft_len: int, runtime: Any) -> SAEnhanced:
    """`inner` (a model drafter's speculator) enhanced by an `sa_config` (SAEnhancerConfig:
    threshold, enable_global_pool): longest-match SA, as upstream's enhancer always uses."""
    pool = pool_for(runtime, None) if sa_config.enable_global_pool else None
    return SAEnhanced(inner, SASpeculator(draft_len, -1, pool), sa_config.threshold, draft_len)


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> SASpeculator:
    return standalone(spec, runtime)
