"""Draft-target BLS loops in the target's in-flight batcher, replayed as discrete events.

The reference batcher (toolkit.reference.batching), like TensorRT-LLM's iteration-level
scheduler, runs one forward over every sequence in the batch, and a sequence that is not in the
batch is not waited for: one that arrives during a forward joins the next. A BLS loop leaves the
target's batch every iteration (its target request ends after γ + 1 tokens) to draft, and comes
back with a new request. While it is away the other loops' next forward starts without it; when
it comes back it waits for that forward to end. So at concurrency b the loops fall out of step:
forwards run fewer rows than b, and each iteration pays a wait the closed form of one loop
(costmodel.bls_loop_speedup) does not see.

`simulate_bls` replays those rules for b loops serving a queue of requests, each request a
sequence of BLS iterations (its fill steps per iteration, runs.bls_fills), and returns what an
iteration's target request costs a loop on average. Pure and deterministic: no I/O, no clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoopCosts:
    """What the target's batcher costs a BLS loop, averaged over every loop's iterations."""

    verify: float  # seconds from a loop's return to the batch to its verify step's end (waits included)
    fill: float  # seconds of one plain fill step (the forward it rides in, as wide as its widest row)
    rows: float  # mean rows per target forward
    one_row: float  # share of the target's forwards that ran one row
    forwards: int  # target forwards replayed


@dataclass(frozen=True)
class IterationCosts:
    """Seconds of a BLS iteration's parts for one loop at one concurrency (iteration_costs)."""

    step: float  # its draft and its verify step, the wait for the batch included
    fill: float  # one plain fill step
    loops: LoopCosts | None  # the replay behind them (None: one loop's closed form)


@dataclass
class _Loop:
    queue: deque[int]  # fill steps of the iterations left in its request
    fills: int = 0  # fill steps left in the current target request (-1: the verify step is next)
    back: float = 0.0  # when it came back from drafting


def simulate_bls(
    requests: Sequence[Sequence[int]],
    *,
    loops: int,
    draft_len: int,
    away: float,
    forward: Callable[[int, int], float],
) -> LoopCosts:
    """Replay `loops` concurrent BLS loops over `requests` (each the fill steps of its
    iterations, in order), which the loops take first come, first served, as `bench`'s concurrent
    clients do; fewer requests than loops are repeated, each copy starting one iteration further
    on, so that every loop has one (the plain side is priced at that many rows).

    Each iteration: the loop is away `away` seconds (its draft and the serving cost of an
    iteration), then its target request joins the batch and hands in a verify step of γ + 1
    tokens, then one plain step per fill; after the last it leaves. The batcher runs a forward as
    soon as it is idle and has steps: every request in the batch hands its next step in when its
    forward ends, so a forward holds every request in the batch, and one that joins during a
    forward waits for it. `forward(width, rows)`: seconds of one forward of `rows` rows padded to
    `width` tokens. As in a bench run, the last requests finish with the batch draining."""
    if loops < 1:
        raise ValueError(f"loops must be ≥ 1, got {loops}")
    if not away >= 0:  # NaN too
        raise ValueError(f"away must be ≥ 0 seconds, got {away}")
    given = [list(r) for r in requests if r]
    if not given:
        raise ValueError("no BLS iterations to replay")
    if len(given) < loops:  # copy j starts j iterations further on
        given = [r[j % len(r) :] + r[: j % len(r)] for j in range(-(-loops // len(given))) for r in given]
    pending = deque(deque(r) for r in given)
    now = 0.0
    returns: list[tuple[float, int, _Loop]] = []  # (time back, tie-break, loop): a min-heap
    active: list[_Loop] = []
    order = itertools.count()

    def start(loop: _Loop, at: float) -> None:  # draft the next iteration, or take a request
        if not loop.queue:
            if not pending:
                return
            loop.queue = pending.popleft()
        loop.fills = -1
        loop.back = at + away
        heapq.heappush(returns, (loop.back, next(order), loop))

    for _ in range(loops):
        start(_Loop(deque()), 0.0)
    verify_s = fill_s = 0.0
    iterations = fills = forwards = one_row = rows_total = 0
    while returns or active:
        while returns and returns[0][0] <= now:
            active.append(heapq.heappop(returns)[2])
        if not active:
            now = returns[0][0]
            continue
        # One forward over every active request's step: a verify step (γ + 1 tokens) or a fill.
        width = draft_len + 1 if any(lp.fills < 0 for lp in active) else 1
        rows = len(active)
        seconds = forward(width, rows)
        now += seconds
        forwards += 1
        rows_total += rows
        one_row += rows == 1
        for lp in list(active):
            if lp.fills < 0:
                verify_s += now - lp.back
                iterations += 1
                lp.fills = lp.queue.popleft()
            else:
                fill_s += seconds
                fills += 1
                lp.fills -= 1
            if lp.fills == 0:
                active.remove(lp)
                start(lp, now)
    return LoopCosts(
        verify=verify_s / iterations,
        fill=fill_s / fills if fills else forward(1, 1),
        rows=rows_total / forwards,
        one_row=one_row / forwards,
        forwards=forwards,
    )


def iteration_costs(
    requests: Sequence[Sequence[int]],
    *,
    loops: int,
    draft_len: int,
    t_step: float,
    serving: float,
    forward: Callable[[int, int], float],
) -> IterationCosts:
    """An iteration's costs at `loops` concurrent BLS loops, from the speculative step of one
    loop alone (`t_step`: its draft, then its verify forward, `forward(γ + 1, 1)`) and the
    serving cost per iteration: each loop is away for the draft and the serving cost, and
    `simulate_bls` replays the rest. The draft is its own model's and does not grow with the
    target's batch. The step is the draft plus the wait for and the run of its verify forward; a
    fill costs the forward it rides in. At one loop: max(t_step, forward(γ + 1, 1)) and
    forward(1, 1)."""
    draft = max(0.0, t_step - forward(draft_len + 1, 1))
    replay = simulate_bls(requests, loops=loops, draft_len=draft_len, away=draft + serving, forward=forward)
    return IterationCosts(draft + replay.verify, replay.fill, replay)


def simulate_closed_loop(
    steps: Sequence[int],
    *,
    clients: int,
    max_rows: int | None,
    prefill: Sequence[float],
    iteration: Callable[[int, int], float],
    widths: Sequence[Sequence[int]] | None = None,
) -> list[float]:
    """Each request's end-to-end seconds when `clients` closed-loop clients (`sdtk bench`'s
    concurrency) send the requests in order, first come first served, through the in-flight
    batcher (toolkit.reference.batching): request i is a prompt step of `prefill[i]` seconds
    followed by `steps[i]` decode steps, one per iteration.

    The batcher's rules: an iteration holds every request in the batch; one that arrives during
    an iteration joins at the next, while the batch has fewer than `max_rows` (None: no limit);
    in its first iteration a request runs its prompt step (prompts are batched apart from decode
    steps, in the same iteration, so a prefill holds every row); `iteration(r, w)` is the seconds
    of a decode iteration over r rows padded to the widest of them, w tokens. A request ends with
    the iteration of its last step, and its client sends the next one at once. Unlike pricing
    every step at `clients` rows, requests that finish unevenly leave the tail of a run with fewer
    rows.

    `widths`: per request, the tokens each of its decode steps runs through the forward (a
    speculative step verifies its proposal and one more; `steps[i]` of them). Rows that start
    together step together, so where proposals are alike at the same point of their generations
    (n-gram's, which find nothing early on and whole matches later) an iteration is narrower
    than the widest of independent draws. None: every step runs 1 token. Pure and deterministic."""
    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")
    if len(prefill) != len(steps):
        raise ValueError(f"{len(prefill)} prefill times for {len(steps)} requests")
    if any(s < 0 for s in steps) or any(not p >= 0 for p in prefill):
        raise ValueError("steps and prefill times must be ≥ 0")
    if widths is not None and (
        len(widths) != len(steps) or any(len(w) != n for w, n in zip(widths, steps, strict=True))
    ):
        raise ValueError("widths must give one width per decode step of every request")
    cap = max_rows if max_rows else clients
    todo = deque(range(len(steps)))
    queue: deque[int] = deque()  # sent, waiting for a place in the batch
    started = dict.fromkeys(range(len(steps)), 0.0)
    ended = [0.0] * len(steps)
    left: dict[int, int] = {}  # request in the batch → decode steps left
    now = 0.0
    for _ in range(min(clients, len(todo))):
        queue.append(todo.popleft())
    while queue or left:
        joining: list[int] = []
        while queue and len(left) + len(joining) < cap:
            joining.append(queue.popleft())
        rows = [i for i in left if left[i] > 0]
        widest = max((widths[i][steps[i] - left[i]] for i in rows), default=1) if widths else 1
        now += sum(prefill[i] for i in joining) + (iteration(len(rows), widest) if rows else 0.0)
        for i in rows:
            left[i] -= 1
        for i in joining:
            left[i] = steps[i]
        for i in [i for i, n in left.items() if n == 0]:
            del left[i]
            ended[i] = now
            if todo:  # its client sends the next request, which joins the next iteration
                j = todo.popleft()
                started[j] = now
                queue.append(j)
    return [ended[i] - started[i] for i in range(len(steps))]
