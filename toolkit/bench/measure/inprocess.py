"""In-process measurement with the reference runtime: loading a recipe's models, timing
generations and bare forwards. `plan`'s probe and `compare`'s replay both measure through here.

torch and transformers are imported only inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from toolkit.errors import UsageError
from toolkit.modes import SOURCES, info

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

PROBE_PARAM_LIMIT = 3e9  # bigger local checkpoints are too slow to probe on a CPU by default
FORWARD_SIZES = (1, 2, 3, 5, 9, 17, 33)


def _sources(recipe: Recipe) -> dict[str, Any]:
    out = {"target": recipe.models.target}
    for role in SOURCES:
        if getattr(recipe.models, role) is not None:
            out[role] = getattr(recipe.models, role)
    return out


def probe_possible(recipe: Recipe, components: Sequence[Any] | None = None) -> tuple[bool, str]:
    """Whether this machine can run the recipe's models in the reference runtime, and why not."""
    ref = info(recipe.mode).reference
    if not ref.supported:
        return False, f"no reference implementation: {ref.reason}"
    paths = {}
    for role, src in _sources(recipe).items():
        path = recipe.local_path(src)
        if path is None:
            return False, f"{role} is a hub checkpoint ({src.describe()}), not a local directory"
        if not path.is_dir():
            return False, f"{role} directory {path} does not exist"
        paths[role] = path
    from toolkit import hub

    if not hub.has_weights(paths["target"]):
        return False, "the target directory has no weight files"
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False, "torch/transformers are not installed (pip install 'sdtk[reference]')"
    if components:
        big = sum(c.params for c in components)
        if big > PROBE_PARAM_LIMIT:
            return (
                False,
                f"{big / 1e9:.1f}B parameters are too many to probe on a CPU (pass probe=True to force)",
            )
    return True, ""


def load_runtime(recipe: Recipe) -> Any:
    from toolkit.reference import ReferenceRuntime

    m = recipe.models

    def p(src: Any) -> Path | None:
        return recipe.local_path(src) if src is not None else None

    target = p(m.target)
    if target is None:  # probe_possible() turns such recipes away first
        raise UsageError(f"the target {m.target.describe()} is not a local directory")
    return ReferenceRuntime.load(
        target,
        {source: p(getattr(m, source)) for source in SOURCES},
        spec=recipe.speculative,
        # What the served model computes in: the build writes the recipe's dtype into the engine
        # config (`auto`: the reference backend's float32) and the served runtime loads that.
        dtype=recipe.dtype,
        tokenizer=p(m.tokenizer),
        inflate=recipe.reference.inflate,
    )


def encode(rt: Any, text: str) -> list[int]:
    tok = rt.tokenizer
    ids = tok(text)["input_ids"] if callable(tok) else tok.encode(text)
    return [int(i) for i in ids]


def step_mean(ts: Sequence[float], outlier: float = 5.0) -> float:
    """Mean step time without descheduled outliers (> `outlier` × the median).

    Steps of one configuration differ in real work (an n-gram step may propose nothing, a
    draft catching up feeds two tokens), so neither a median nor a trimmed mean: both would
    drop real cost. Only a step the OS took the CPU away from is dropped.
    """
    med = statistics.median(ts)
    keep = [t for t in ts if t <= outlier * med]
    return sum(keep) / len(keep)


def _robust(ts: Sequence[float]) -> float:
    """Median of the fastest half: other processes on the machine only ever add time, so the
    slow tail is interference, not cost (the reason timeit reports a minimum)."""
    xs = sorted(ts)
    return statistics.median(xs[: max(1, (len(xs) + 1) // 2)])


def time_forwards(
    lms: dict[str, Any], context: list[int], sizes: dict[str, Sequence[int]], repeats: int = 15
) -> dict[str, list[tuple[int, float]]]:
    """Seconds of one cached forward over n new tokens after `context`, per model and n.

    Models and sizes are interleaved within each repeat so that they all see the same machine
    conditions; each (model, n) reports the median of its fastest half of `repeats` runs.
    """
    jobs = [(name, n) for name in lms for n in sizes[name]]
    base: dict[str, int] = {}
    for name, lm in lms.items():
        lm.reset()
        lm.forward(context[:-1] if len(context) > 1 else context, logits_from=max(0, len(context) - 2))
        base[name] = lm.length
    extra = [context[-1]] * max(n for _, n in jobs)  # token identity does not change the cost
    times: dict[tuple[str, int], list[float]] = {j: [] for j in jobs}
    for r in range(repeats + 1):
        for name, n in jobs:
            lm = lms[name]
            t = time.perf_counter()
            lm.forward(extra[:n], logits_from=n - 1)
            dt = time.perf_counter() - t
            lm.crop(base[name])
            if r:  # the first round warms the allocator for every shape
                times[(name, n)].append(dt)
    for lm in lms.values():
        lm.reset()
    return {name: [(n, _robust(times[(name, n)])) for n in sizes[name]] for name in lms}


BATCH_SIZES = (1, 2, 4, 8, 16)


def time_batched_forwards(
    lm: Any, context: list[int], widths: Sequence[int], batches: Sequence[int] = BATCH_SIZES, repeats: int = 7
) -> dict[int, list[tuple[int, float]]]:
    """Seconds of one batched target forward over `width` new tokens per row after `context`,
    for each batch size: the forward a reference deployment's in-flight batcher runs for a
    batch of equal rows (toolkit.reference.batching.batched_forward over a SlotPool: the same
    padding, masks, KV slots and per-row output head), so that what a served step costs as its
    batch grows is measured on the code that serves it. Sizes are interleaved within each
    repeat; each point is the median of its fastest half."""
    import torch

    from toolkit.reference.batching import SlotLM, SlotPool, Step, batched_forward

    rows = max(batches)
    pool = SlotPool(lm, rows, len(context) + max(widths) + 1)
    views = [SlotLM(cast(Any, None), pool, s) for s in range(rows)]  # no batcher: called directly
    times: dict[tuple[int, int], list[float]] = {(w, b): [] for w in widths for b in batches}
    tok = context[-1]
    with torch.inference_mode():
        for v in views:  # each row's slot holds the context (one prefill per row, as served)
            batched_forward(pool, [Step(v, list(context), None, len(context) - 1, False, False)])
        for r in range(repeats + 1):
            for b in batches:
                for w in widths:
                    steps = [Step(views[s], [tok] * w, None, 0, False, False) for s in range(b)]
                    t = time.perf_counter()
                    batched_forward(pool, steps)
                    dt = time.perf_counter() - t
                    for v in views[:b]:
                        v.crop(len(context))
                    if r:  # the first round warms the allocator for every shape
                        times[(w, b)].append(dt)
    return {w: [(b, _robust(times[(w, b)])) for b in batches] for w in widths}


class ForwardTimer:
    """Wall seconds spent inside one CachedLM's forwards while installed (a context manager):
    `run`, `_next` and `_rows`, the entries every step of the generation loop goes through
    (forward, greedy_next and greedy_chain call the first two, the greedy chain path the third).
    Instance attributes shadow the methods while it is installed and are removed after (timers
    nest: each restores what it found). `last`: the tokens the latest forward ran (each entry's
    first argument is its ids), what a speculative step's verify forward was wide."""

    NAMES = ("run", "_next", "_rows")

    def __init__(self, lm: Any):
        self.lm = lm
        self.seconds = 0.0
        self.last = 0
        self._before: dict[str, Any] = {}

    def _timed(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.last = len(args[0]) if args else len(kwargs["ids"])
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed

    def __enter__(self) -> ForwardTimer:
        self._before = {n: vars(self.lm)[n] for n in self.NAMES if n in vars(self.lm)}
        for name in self.NAMES:
            setattr(self.lm, name, self._timed(getattr(self.lm, name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.NAMES:  # what was there before (another timer's), else the class's
            if name in self._before:
                setattr(self.lm, name, self._before[name])
            else:
                vars(self.lm).pop(name, None)


def generate_timed(
    rt: Any,
    ids: list[int],
    new_tokens: int,
    sampling: Any,
    *,
    spec: Any = None,
    inside: list[float] | None = None,
    widths: list[int] | None = None,
) -> tuple[Any, list[float], list[int], float]:
    """One generation: its result, the wall time of each decode step, the tokens each step
    committed, and the seconds to the first token (the prefill).

    Times come from on_tokens callbacks; the first callback also covers the prefill, so it only
    starts the decode clock: durations[i] belongs to step i+1, whose tokens are counts[i+1].
    `inside`: when given, the seconds of each decode step spent inside the target's forwards
    (ForwardTimer) are appended to it, one per duration; the rest of a step is the runtime's own
    work (proposing, drafting, acceptance, bookkeeping). `widths`: when given, the tokens each
    step's last target forward ran are appended to it, one per count (a speculative step's verify
    forward: its proposal and one more; the first step's, after the prompt's).
    """
    marks: list[float] = []
    counts: list[int] = []
    reads: list[float] = []
    timer = ForwardTimer(rt.target) if inside is not None or widths is not None else None

    def on_tokens(tokens: list[int]) -> None:
        marks.append(time.perf_counter())
        counts.append(len(tokens))
        if timer is not None:
            reads.append(timer.seconds)
            if widths is not None:
                widths.append(timer.last)

    start = time.perf_counter()
    with timer if timer is not None else contextlib.nullcontext():
        res = rt.generate(
            ids,
            new_tokens,
            sampling=sampling,
            spec=spec,
            end_id=-1,
            on_tokens=on_tokens,
        )
    first = marks[0] - start if marks else 0.0
    if inside is not None:
        inside.extend(b - a for a, b in zip(reads, reads[1:], strict=False))
    return res, [b - a for a, b in zip(marks, marks[1:], strict=False)], counts, first


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with `n` torch intra-op threads, then restore the previous count."""
    if n is None:
        yield
        return
    if n < 1:
        raise UsageError(f"threads must be ≥ 1, got {n}")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
