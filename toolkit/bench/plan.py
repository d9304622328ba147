"""`sdtk plan`: predict the best draft length (or tree / lookahead shape) before deploying.

Two inputs feed the cost model (`costmodel`):

1. Acceptance, from a probe: a few dozen prompts of the user's workload through the reference
   runtime with the recipe's mode, reading per-position acceptance from SpecStats; for
   draft-target also α = E[Σ min(p, q)] from the draft's and target's logits along the
   target's own continuation (lower variance than counting acceptances).
2. Step costs: measured in-process (target forwards of 1..n tokens, draft forwards, and the
   probe's own step times) for the reference backend; a GPU roofline (`sizing`) otherwise.

Recipes whose models cannot run on this CPU get sizing, the roofline and Leviathan's table for
*assumed* α values, labelled as assumptions.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolkit.bench import costmodel as cm
from toolkit.bench import sizing as sz
from toolkit.bench.metrics import Interval, bootstrap_ci
from toolkit.bench.workloads import Workload, load_workload
from toolkit.errors import UsageError
from toolkit.modes import CHAIN_MODES

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
ASSUMED_ALPHAS = (0.6, 0.7, 0.8, 0.9)
PROBE_PARAM_LIMIT = 3e9  # bigger local checkpoints are too slow to probe on a CPU by default
FORWARD_SIZES = (1, 2, 3, 5, 9, 17, 33)


# --------------------------------------------------------------------------- results


@dataclass
class StepTiming:
    """In-process costs on this machine (seconds)."""

    t_base: float  # one plain decoding step (1 token), from timed generation
    forward_points: list[tuple[int, float]]  # bare target forward time over n new tokens
    draft_forward: float | None = None  # bare draft forward, 1 token (draft_target)
    c_forward: float | None = None  # draft_forward / target forward(1): Leviathan's c
    kappa: float = 0.0  # slope of forward time in tokens, relative to forward(1)
    # Batched target forward time: tokens per row -> [(batch size, seconds)], the batch dimension
    # of the reference backend's in-flight batching (empty: not measured).
    batch_points: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    max_batch: int | None = None  # the engine's build.max_batch_size: concurrency beyond it queues

    def batch_scale(self, width: int, batch: int) -> float:
        """How much longer a step verifying `width` tokens per row takes at `batch` rows than at
        one, relative to a plain step's growth: the factor a speedup at concurrency 1 is
        multiplied by at that concurrency (1.0 when unmeasured)."""
        if not self.batch_points or batch <= 1:
            return 1.0
        b = min(batch, self.max_batch) if self.max_batch else batch

        def growth(w: int) -> float:
            widths = sorted(self.batch_points)
            near = min(widths, key=lambda x: (abs(x - w), x))
            pts = isotonic(self.batch_points[near])
            return interpolate(pts, b) / interpolate(pts, 1)

        return growth(1) / growth(width)

    def delta(self, n: int) -> float:
        """Extra seconds to verify n tokens instead of 1 (from the monotone fit of the points)."""
        f = cm.MeasuredStepCost(tuple(isotonic(self.forward_points)))
        return max(0.0, f.time(1, n) - f.time(1, 1))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProbeConfig:
    """One speculative configuration the probe ran."""

    label: str
    settings: dict[str, Any]  # recipe `speculative` fields
    shape: cm.Shape
    steps: int
    tokens: int
    draft_tokens: int
    accepted_tokens: int
    per_position_proposed: list[int]
    per_position_accepted: list[int]
    t_step: float  # measured seconds per speculative step (decode only)
    step_tokens: list[list[int]] = field(default_factory=list)  # per prompt: tokens committed by each step

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def marginals(self) -> list[float]:
        """Accepted tokens at draft position k per step: E(γ) = 1 + Σ_{k<γ} marginals[k].

        Per *step*, not per proposal: an n-gram proposer often proposes fewer than γ tokens (or
        none), and those steps still cost a target forward. For a chain, truncating at γ keeps
        positions < γ unchanged (each depends only on the ones before it).
        """
        acc = list(self.per_position_accepted) + [0] * len(self.per_position_proposed)
        return [acc[i] / self.steps if self.steps else 0.0 for i in range(len(self.per_position_proposed))]

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(draft positions 1..k all accepted | position k was proposed): what reports show."""
        acc = list(self.per_position_accepted) + [0] * len(self.per_position_proposed)
        return [acc[i] / p if p else 0.0 for i, p in enumerate(self.per_position_proposed)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = asdict(self.shape)
        d.update(
            acceptance_length=self.acceptance_length,
            acceptance_rate=self.acceptance_rate,
            per_position_acceptance=self.per_position_acceptance,
            accepted_per_step=self.marginals,
        )
        return d


@dataclass
class Probe:
    prompts: int
    new_tokens: int
    temperature: float
    workload: dict[str, Any]
    timing: StepTiming
    configs: list[ProbeConfig]
    alpha_logits: Interval | None = None  # E[Σ min(p,q)] at the probe temperature (T=1 if greedy)
    alpha_logits_temperature: float | None = None
    alpha_greedy: Interval | None = None  # P(draft argmax == target argmax)
    seconds: float = 0.0
    threads: int | None = None  # torch threads during the probe (None: the process default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "new_tokens": self.new_tokens,
            "temperature": self.temperature,
            "workload": self.workload,
            "timing": self.timing.to_dict(),
            "configs": [c.to_dict() for c in self.configs],
            "alpha_logits": self.alpha_logits.to_dict() if self.alpha_logits else None,
            "alpha_logits_temperature": self.alpha_logits_temperature,
            "alpha_greedy": self.alpha_greedy.to_dict() if self.alpha_greedy else None,
            "seconds": self.seconds,
            "threads": self.threads,
        }


@dataclass
class Prediction:
    """Predicted speedup of one candidate configuration under one cost basis."""

    label: str
    settings: dict[str, Any]
    draft_len: int  # TRT-LLM max_draft_len of this configuration
    expected_tokens: float  # E (= τ) per step
    expected_tokens_iid: float | None  # from α, i.i.d.
    speedup: dict[int, float]  # concurrency → predicted speedup
    speedup_iid: dict[int, float] | None = None  # Leviathan's closed form from α, c, κ (a cross-check)
    source: str = ""  # how E and the step time were obtained, or "assumed α=0.8"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Recommendation:
    label: str
    settings: dict[str, Any]
    predicted_speedup: float  # at concurrency 1
    schedule: dict[int, int] | None  # TRT-LLM draft_len_schedule {concurrency: draft_len}
    max_concurrency: int | None  # speculation off above this (TRT-LLM max_concurrency)
    break_even: int | None  # first concurrency with predicted speedup < 1
    basis: str
    overlay: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PlanResult:
    recipe: str
    mode: str
    backend: str
    basis: str  # "measured (reference runtime, CPU)" | "roofline (H100 SXM 80GB)"
    concurrency: list[int]
    probe: Probe | None = None
    sizing: sz.Sizing | None = None
    predictions: list[Prediction] = field(default_factory=list)
    roofline_predictions: list[Prediction] = field(default_factory=list)
    assumed: list[Prediction] = field(default_factory=list)  # Leviathan-style, for assumed α
    recommendation: Recommendation | None = None
    notes: list[str] = field(default_factory=list)
    batching: str = "inflight"  # how the deployment serves concurrent requests

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "mode": self.mode,
            "backend": self.backend,
            "basis": self.basis,
            "batching": self.batching,
            "concurrency": list(self.concurrency),
            "probe": self.probe.to_dict() if self.probe else None,
            "sizing": self.sizing.to_dict() if self.sizing else None,
            "predictions": [p.to_dict() for p in self.predictions],
            "roofline_predictions": [p.to_dict() for p in self.roofline_predictions],
            "assumed": [p.to_dict() for p in self.assumed],
            "recommendation": self.recommendation.to_dict() if self.recommendation else None,
            "notes": list(self.notes),
        }

    def prediction_for(self, draft_len: int) -> Prediction | None:
        for p in self.predictions:
            if p.settings.get("max_draft_len") == draft_len:
                return p
        return None

    def render(self) -> str:
        from toolkit.bench.report import render_plan

        return render_plan(self)


# --------------------------------------------------------------------------- helpers


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"[plan] {msg}", file=sys.stderr, flush=True)


def load_recipe_any(recipe: Any, overrides: Sequence[str] = ()) -> Any:
    from toolkit.recipe import Recipe, load_recipe

    if isinstance(recipe, Recipe):
        if overrides:
            raise UsageError("overrides apply to a recipe path or name, not to a loaded Recipe")
        return recipe
    return load_recipe(recipe, list(overrides))


def _sources(recipe: Any) -> dict[str, Any]:
    out = {"target": recipe.models.target}
    for role in ("draft", "medusa_heads", "eagle_head"):
        if getattr(recipe.models, role) is not None:
            out[role] = getattr(recipe.models, role)
    return out


def probe_possible(recipe: Any, components: list[sz.Component] | None = None) -> tuple[bool, str]:
    """Whether this machine can run the recipe's models in the reference runtime, and why not."""
    if recipe.mode == "eagle":
        return False, "EAGLE-1/2 has no reference implementation (engine backend only)"
    for role, src in _sources(recipe).items():
        path = recipe.local_path(src)
        if path is None:
            return False, f"{role} is a hub checkpoint ({src.describe()}), not a local directory"
        if not path.is_dir():
            return False, f"{role} directory {path} does not exist"
    from toolkit import hub

    if not hub.has_weights(recipe.local_path(recipe.models.target)):
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


def load_runtime(recipe: Any) -> Any:
    from toolkit.reference import ReferenceRuntime

    m = recipe.models

    def p(src: Any) -> Path | None:
        return recipe.local_path(src) if src is not None else None

    return ReferenceRuntime.load(
        target=p(m.target),
        draft=p(m.draft),
        medusa=p(m.medusa_heads),
        eagle3=p(m.eagle_head),
        spec=recipe.speculative,
        tokenizer=p(m.tokenizer),
    )


def encode(rt: Any, text: str) -> list[int]:
    tok = rt.tokenizer
    ids = tok(text)["input_ids"] if callable(tok) else tok.encode(text)
    return [int(i) for i in ids]


def _step_mean(ts: Sequence[float], outlier: float = 5.0) -> float:
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
    for each batch size: the in-flight batched step's cost (HF model, a batch of equal rows;
    the runtime pads rows of different lengths to the longest, which this does not model)."""
    import torch

    model = lm.model
    times: dict[tuple[int, int], list[float]] = {(w, b): [] for w in widths for b in batches}
    caches = {}
    with torch.inference_mode():
        for b in batches:
            out = model(torch.tensor([context] * b, dtype=torch.long), use_cache=True)
            caches[b] = out.past_key_values
        tok = context[-1]
        for r in range(repeats + 1):
            for b in batches:
                for w in widths:
                    ids = torch.full((b, w), tok, dtype=torch.long)
                    t = time.perf_counter()
                    model(ids, past_key_values=caches[b], use_cache=True)
                    dt = time.perf_counter() - t
                    caches[b].crop(len(context))
                    if r:  # the first round warms the allocator for every shape
                        times[(w, b)].append(dt)
    return {w: [(b, _robust(times[(w, b)])) for b in batches] for w in widths}


def isotonic(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Non-decreasing least-squares fit of (n, t) points (pool adjacent violators).

    A forward over more tokens never costs less; timing noise says otherwise now and then, and
    an unsmoothed curve would make γ=2 look dearer than γ=3.
    """
    pts = sorted(points)
    blocks: list[list[float]] = []  # [sum, count]
    for _, t in pts:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            a, b = blocks.pop(), blocks.pop()
            blocks.append([a[0] + b[0], a[1] + b[1]])
    out: list[tuple[int, float]] = []
    i = 0
    for total, count in blocks:
        for _ in range(int(count)):
            out.append((pts[i][0], total / count))
            i += 1
    return out


def fit_kappa(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares κ in t(n) = t(1)·(1 + κ(n−1)), through the measured t(1)."""
    t1 = dict(points).get(1) or min(t for _, t in points)
    num = sum((n - 1) * (t / t1 - 1) for n, t in points)
    den = sum((n - 1) ** 2 for n, _ in points)
    return max(0.0, num / den) if den else 0.0


def generate_timed(
    rt: Any, ids: list[int], new_tokens: int, sampling: Any, *, spec: Any = None, speculative: bool = True
) -> tuple[Any, list[float], list[int]]:
    """One generation, the wall time of each decode step and the tokens each step committed.

    Times come from on_tokens callbacks; the first callback also covers the prefill, so it only
    starts the clock: durations[i] belongs to step i+1, whose tokens are counts[i+1].
    """
    marks: list[float] = []
    counts: list[int] = []

    def on_tokens(tokens: list[int]) -> None:
        marks.append(time.perf_counter())
        counts.append(len(tokens))

    res = rt.generate(
        ids, new_tokens, sampling=sampling, speculative=speculative, spec=spec, end_id=-1, on_tokens=on_tokens
    )
    return res, [b - a for a, b in zip(marks, marks[1:], strict=False)], counts


def _add_stats(total: Any, st: Any) -> None:
    total.steps += st.steps
    total.tokens += st.tokens
    total.draft_tokens += st.draft_tokens
    total.accepted_tokens += st.accepted_tokens
    for name in ("per_position_proposed", "per_position_accepted"):
        acc, add = getattr(total, name), getattr(st, name)
        if len(acc) < len(add):
            acc.extend([0] * (len(add) - len(acc)))
        for i, v in enumerate(add):
            acc[i] += v


def alpha_from_logits(
    rt: Any, prompts: list[list[int]], outputs: list[list[int]], temperature: float, seed: int = 0
) -> tuple[Interval, Interval]:
    """(α at `temperature` (T=1 when greedy), P(argmax agree)) along the target's continuations.

    β_t = Σ_x min(p_t(x), q_t(x)) (Leviathan Thm 3.5) after the same temperature on both; the
    greedy acceptance indicator is argmax equality. Intervals are bootstrapped over prompts.
    """
    from toolkit.reference.sampling import SamplingParams, probs

    t_eff = temperature if temperature > 0 else 1.0
    sp = SamplingParams(temperature=t_eff)
    betas, agree = [], []
    for ids, out in zip(prompts, outputs, strict=False):
        if not out:
            continue
        seq = ids + out[:-1]
        start = len(ids) - 1
        rt.target.reset()
        rt.draft.reset()
        p_log = rt.target.forward(seq, logits_from=start).logits
        q_log = rt.draft.forward(seq, logits_from=start).logits
        p = probs(p_log, sp)
        q = probs(q_log, sp)
        betas.append(float(p.minimum(q).sum(-1).mean()))
        agree.append(float((p_log.argmax(-1) == q_log.argmax(-1)).float().mean()))
    rt.target.reset()
    rt.draft.reset()
    return bootstrap_ci(betas, seed=seed), bootstrap_ci(agree, seed=seed)


# --------------------------------------------------------------------------- candidates


def _tree_prefixes(choices: list[list[int]], max_candidates: int = 4) -> list[list[list[int]]]:
    """Valid sub-trees made of the first k paths (parents before children), a few sizes up to all."""
    n = len(choices)
    sizes = sorted({max(1, n // 4), max(1, n // 2), max(1, 3 * n // 4), n})[-max_candidates:]
    out = []
    for k in sizes:
        kept: list[list[int]] = []
        have = set()
        for path in choices[:k]:
            if len(path) == 1 or tuple(path[:-1]) in have:
                kept.append(path)
                have.add(tuple(path))
        if kept and kept not in out:
            out.append(kept)
    return out


def probe_candidates(recipe: Any, gamma_max: int) -> list[tuple[str, dict[str, Any]]]:
    """Configurations the probe runs: (label, speculative fields to override)."""
    spec = recipe.speculative
    mode = spec.mode
    if mode in ("draft_target", "ngram") or (mode == "eagle3" and spec.eagle_choices is None):
        # The longest chain gives acceptance at every position (and its accepted runs predict τ
        # for every shorter γ); shorter chains add measured step times to interpolate between.
        g = max(gamma_max, spec.max_draft_len)
        extra = sorted({1, (g + 1) // 2} - {g}, reverse=True)
        return [(f"γ={x}", {"max_draft_len": x}) for x in [g, *extra]]
    if mode == "medusa":
        return [(f"tree {len(t)} nodes", {"medusa_choices": t}) for t in _tree_prefixes(spec.choices)]
    if mode == "eagle3":
        return [(f"tree {len(t)} nodes", {"eagle_choices": t}) for t in _tree_prefixes(spec.eagle_choices)]
    if mode == "lookahead":
        own = (spec.window, spec.ngram, spec.verification_set)
        grid = [own, (2, 3, 2), (4, 3, 4), (4, 4, 4), (6, 4, 6)]
        seen, out = set(), []
        for w, n, g in grid:
            if (w, n, g) not in seen:
                seen.add((w, n, g))
                out.append(
                    (
                        f"W={w} N={n} G={g}",
                        {"window": w, "ngram": n, "verification_set": g, "max_draft_len": None},
                    )
                )
        return out[:4]
    return []


def _shape(mode: str, settings: dict[str, Any], spec: Any) -> cm.Shape:
    from toolkit import choices as tree

    if mode in ("draft_target", "eagle3") and "max_draft_len" in settings:
        return cm.chain_shape(settings["max_draft_len"])
    if mode == "ngram":
        return cm.chain_shape(settings["max_draft_len"], draft_forwards=0)
    if mode == "medusa":
        ch = settings.get("medusa_choices") or spec.choices
        return cm.tree_shape(len(ch), tree.depth(ch), draft_forwards=1)
    if mode == "eagle3":
        ch = settings["eagle_choices"]
        return cm.tree_shape(len(ch), tree.depth(ch))
    if mode == "lookahead":
        return cm.lookahead_shape(settings["window"], settings["ngram"], settings["verification_set"])
    return cm.Shape(0, 1, "none")


def _draft_len(mode: str, settings: dict[str, Any], spec: Any) -> int:
    from toolkit.recipe import lookahead_max_draft_len

    if mode == "lookahead":
        return lookahead_max_draft_len(settings["window"], settings["ngram"], settings["verification_set"])
    if "max_draft_len" in settings:
        return int(settings["max_draft_len"])
    if "medusa_choices" in settings:
        return len(settings["medusa_choices"])
    if "eagle_choices" in settings:
        return len(settings["eagle_choices"])
    return spec.draft_len


# --------------------------------------------------------------------------- prediction


def run_lengths(step_tokens: Sequence[int], gamma_max: int, p_tail: float) -> list[float]:
    """How many drafts the proposer would get right from every root position of one generation.

    A step run at γ_max that accepted a < γ_max drafts from root p tells R_p = a exactly, and
    also R_{p+k} = a − k inside the run: the proposer is a function of the context, and its
    proposal from p+1 is the rest of its proposal from p (exact for greedy draft-target,
    close for n-gram and EAGLE). A fully accepted step only bounds R from below; beyond the
    bound the proposer continues with probability `p_tail` per token.
    """
    out: list[float] = []
    r_next = 0.0
    for c in reversed(step_tokens):
        a = c - 1
        if a < gamma_max:
            run = [float(a - k) for k in range(a + 1)]
        else:
            tail = p_tail * (1 + r_next)
            run = [gamma_max - k + tail for k in range(a + 1)]
        out[:0] = run
        r_next = run[0]
    return out


def simulate_tau(runs: Sequence[Sequence[float]], gamma: int) -> float:
    """Tokens per step at draft length γ, replaying the run lengths: each step from root p
    commits min(R_p, γ) + 1 tokens (fractional R: the expectation of the rounding)."""
    steps = tokens = 0.0
    for r in runs:
        p, n = 0, len(r)
        while p < n:
            a = min(r[p], gamma)
            lo = int(a)
            c = lo + 1 + (1 if (a - lo) >= 0.5 else 0)
            c = min(c, n - p)
            steps += 1
            tokens += c
            p += c
    return tokens / steps if steps else 1.0


def interpolate(points: Sequence[tuple[int, float]], x: int) -> float:
    """Piecewise-linear through measured (γ, seconds) points, monotone, linear beyond the ends."""
    pts = isotonic(points)
    if len(pts) == 1:
        return pts[0][1]
    f = cm.MeasuredStepCost(tuple(pts))
    if x < pts[0][0]:
        (x0, y0), (x1, y1) = pts[0], pts[1]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return f.time(1, x)


def predict_measured(
    probe: Probe, mode: str, spec: Any, *, gamma_max: int, concurrency: Sequence[int], alpha: float | None
) -> list[Prediction]:
    """Cost model with this machine's measured costs (reference runtime, one sequence at a time).

    Chains: τ(γ) replays the accepted runs of the longest probe (`run_lengths`), which keeps
    the selection effect a per-position average misses (long accepted runs consume the easy
    stretches in few steps); the step time is interpolated between the probes' measured step
    times (each includes the proposer, the verify forward over γ+1 tokens and the bookkeeping).
    Speedup = τ(γ) · t_base / t_step(γ). Other shapes were each probed directly. Leviathan's
    closed form E/(γc + 1 + κγ) with the bare-forward c and κ is kept as a cross-check
    (`speedup_iid` when α is known). The batch dimension: the reference runtime batches in
    flight, so at concurrency b a step runs b rows; the speedup at 1 is scaled by how much a
    plain step grows from 1 to b rows against how much a step verifying γ+1 tokens per row
    grows (`StepTiming.batch_scale`, from timed batched forwards; b capped at max_batch_size).
    The draft's and proposers' own costs are taken to scale like the plain step.
    """
    t = probe.timing
    out: list[Prediction] = []
    chain_cfgs = [c for c in probe.configs if "max_draft_len" in c.settings and mode in CHAIN_MODES]
    if chain_cfgs:
        primary = max(chain_cfgs, key=lambda c: c.settings["max_draft_len"])
        gmax = primary.settings["max_draft_len"]
        ppa = primary.per_position_acceptance
        p_tail = min(1.0, ppa[-1] / ppa[-2]) if len(ppa) >= 2 and ppa[-2] > 0 else (ppa[-1] if ppa else 0.0)
        runs = [run_lengths(st, gmax, p_tail) for st in primary.step_tokens]
        step_pts = [(c.settings["max_draft_len"], c.t_step) for c in chain_cfgs if c.t_step > 0]
        c_lev = t.c_forward if (t.c_forward is not None and mode == "draft_target") else 0.0
        for g in range(1, min(gamma_max, gmax) + 1):
            e = simulate_tau(runs, g) if runs else cm.expected_tokens_from_marginals(primary.marginals, g)
            step = interpolate(step_pts, g) if step_pts else t.t_base
            s = e * t.t_base / step if step > 0 else 0.0
            e_iid = cm.expected_tokens(alpha, g) if alpha is not None else None
            lev = (
                {b: cm.leviathan_speedup_with_verify(e_iid, g, c_lev, t.kappa, g + 1) for b in concurrency}
                if e_iid is not None
                else None
            )
            out.append(
                Prediction(
                    label=f"γ={g}",
                    settings={"max_draft_len": g},
                    draft_len=g,
                    expected_tokens=e,
                    expected_tokens_iid=e_iid,
                    speedup={b: s * t.batch_scale(g + 1, b) for b in concurrency},
                    speedup_iid=lev,
                    source=f"τ replayed from the {primary.label} probe; step time interpolated from probes at "
                    + ", ".join(f"γ={x}" for x, _ in sorted(step_pts)),
                )
            )
    for cfg in probe.configs:
        if cfg in chain_cfgs:
            continue
        e = cfg.acceptance_length
        s = e * t.t_base / cfg.t_step if cfg.t_step > 0 else 0.0
        out.append(
            Prediction(
                label=cfg.label,
                settings=cfg.settings,
                draft_len=_draft_len(mode, cfg.settings, spec),
                expected_tokens=e,
                expected_tokens_iid=None,
                speedup={
                    b: s * t.batch_scale(_draft_len(mode, cfg.settings, spec) + 1, b) for b in concurrency
                },
                source="measured τ and step time",
            )
        )
    return out


def roofline_costs(
    components: list[sz.Component], gpu: sz.GPU, dtype: str, *, tp: int, context: int
) -> tuple[sz.Roofline, sz.Roofline | None]:
    nbytes = sz.dtype_bytes(dtype)
    target = next(c for c in components if c.role == "target")
    extra = [c for c in components if c.role != "target"]
    t = sz.roofline_for(target, gpu, nbytes, tp=tp, context=context)
    d = sz.roofline_for(extra[0], gpu, nbytes, tp=tp, context=context) if extra else None
    return t, d


def predict_roofline(
    candidates: list[tuple[str, dict[str, Any], cm.Shape, float, float | None, str]],
    target: sz.Roofline,
    draft: sz.Roofline | None,
    concurrency: Sequence[int],
    mode: str,
    spec: Any,
) -> list[Prediction]:
    """candidates: (label, settings, shape, E, E_iid, source)."""
    out = []
    for label, settings, shape, e, e_iid, source in candidates:
        shp = shape
        if shape.draft_forwards and draft is None:
            shp = cm.Shape(0, shape.verify_tokens, shape.label)
        sp = {b: cm.step_speedup(e, shp, target, draft=draft, batch=b) for b in concurrency}
        sp_iid = (
            {b: cm.step_speedup(e_iid, shp, target, draft=draft, batch=b) for b in concurrency}
            if e_iid is not None
            else None
        )
        out.append(
            Prediction(label, settings, _draft_len(mode, settings, spec), e, e_iid, sp, sp_iid, source)
        )
    return out


NEAR_BEST = 0.01  # within 1% of the best predicted speedup, the shortest draft wins


def _near_best(preds: list[Prediction], b: int) -> Prediction:
    """The cheapest configuration within NEAR_BEST of the best at concurrency b: a shorter draft
    wastes less work when acceptance drops and leaves more room as the batch grows."""
    top = max(p.speedup[b] for p in preds)
    return min((p for p in preds if p.speedup[b] >= top * (1 - NEAR_BEST)), key=lambda p: p.draft_len)


def valid_schedule(schedule: dict[int, int]) -> dict[int, int] | None:
    """Per-concurrency draft lengths as a draft_len_schedule TensorRT-LLM accepts (llm_args.py:
    keyed by batch size, an entry for 1 equal to max_draft_len, none above it), or None when
    speculation does not pay at the lowest concurrency (then: no speculation, not a schedule)."""
    if not schedule:
        return None
    g1 = schedule[min(schedule)]
    if g1 <= 0:
        return None
    out = {1: g1}
    for c in sorted(schedule):
        if c > 1:
            out[c] = min(schedule[c], g1)
    return out


def recommend(
    preds: list[Prediction], mode: str, concurrency: Sequence[int], basis: str
) -> Recommendation | None:
    """The candidate with the best speedup at the lowest concurrency, and a per-concurrency schedule."""
    if not preds:
        return None
    c0 = min(concurrency)
    best = _near_best(preds, c0)
    schedule = None
    max_conc = None
    chain = all("max_draft_len" in p.settings for p in preds) and mode in CHAIN_MODES
    if chain:
        schedule = {}
        for b in concurrency:
            top = _near_best(preds, b)
            schedule[b] = top.draft_len if top.speedup[b] > 1.0 else 0
        on = [b for b in concurrency if schedule[b] > 0]
        max_conc = max(on) if on else 0
    else:
        on = [b for b in concurrency if best.speedup[b] > 1.0]
        max_conc = max(on) if on else 0
    below = [b for b in concurrency if best.speedup[b] < 1.0]
    overlay: dict[str, Any] = {"speculative": dict(best.settings)}
    valid = valid_schedule(schedule) if chain and schedule else None
    if valid is not None:  # a recipe change: the fields live under `speculative`
        overlay["speculative"].update(max_draft_len=valid[1], draft_len_schedule=valid)
        if max_conc and max_conc < max(concurrency):
            overlay["speculative"]["max_concurrency"] = max_conc
    return Recommendation(
        label=best.label,
        settings=dict(best.settings),
        predicted_speedup=best.speedup[c0],
        schedule=schedule,
        max_concurrency=max_conc,
        break_even=min(below) if below else None,
        basis=basis,
        overlay=overlay,
    )


def assumed_table(
    alphas: Sequence[float],
    gamma_max: int,
    concurrency: Sequence[int],
    target: sz.Roofline,
    draft: sz.Roofline | None,
    mode: str,
    spec: Any,
) -> list[Prediction]:
    """Roofline-basis predictions for assumed α values (the best γ per α): not measurements.

    Drafting is modelled as a chain of γ: a draft model or EAGLE head runs γ times, Medusa heads
    once, n-gram and lookahead proposers cost nothing on the GPU.
    """
    if mode in ("ngram", "lookahead") or draft is None:
        per_g = 0
    elif mode == "medusa":
        per_g = -1  # one pass of the heads whatever γ is
    else:
        per_g = 1
    out = []
    for a in alphas:
        cands = []
        for g in range(1, gamma_max + 1):
            fw = g if per_g == 1 else (1 if per_g == -1 else 0)
            shape = cm.chain_shape(g, draft_forwards=fw)
            cands.append(
                (
                    f"α={a} γ={g}",
                    {"max_draft_len": g},
                    shape,
                    cm.expected_tokens(a, g),
                    None,
                    f"assumed α={a}",
                )
            )
        preds = predict_roofline(cands, target, draft, concurrency, "draft_target", spec)
        out.append(max(preds, key=lambda p: p.speedup[min(concurrency)]))
    return out


# --------------------------------------------------------------------------- the command


def plan(
    recipe: Any,
    *,
    workload: str | Workload | None = "code",
    prompts_file: str | Path | None = None,
    gpu: str | None = None,
    overrides: Sequence[str] = (),
    probe: bool | None = None,
    probe_prompts: int = 24,
    probe_tokens: int = 64,
    gamma_max: int = 8,
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    temperature: float = 0.0,
    seed: int = 0,
    assumed_alphas: Sequence[float] = ASSUMED_ALPHAS,
    context: int | None = None,
    tp: int | None = None,
    fetch: str = "metadata",
    runtime: Any = None,
    threads: int | None = None,
    progress: bool = True,
) -> PlanResult:
    """Probe acceptance and costs, size the GPU, and recommend a speculative configuration.

    `threads`: torch intra-op threads during the probe (restored afterwards); None keeps the
    current setting. Tiny models run best, and time most steadily on a busy machine, with 1.
    """
    if gamma_max < 1:
        raise UsageError(f"gamma_max must be ≥ 1, got {gamma_max}")
    if probe_prompts < 1 or probe_tokens < 2:
        raise UsageError("the probe needs at least 1 prompt and 2 new tokens per prompt")
    concurrency = _check_concurrency(concurrency)
    rec = load_recipe_any(recipe, overrides)
    spec = rec.speculative
    mode = spec.mode
    backend = _backend(rec)
    result = PlanResult(
        recipe=rec.display_name,
        mode=mode,
        backend=backend,
        basis="",
        concurrency=list(concurrency),
        batching="inflight",
    )
    if mode == "none":
        result.notes.append("the recipe has no speculation (mode none); only sizing applies")

    components: list[sz.Component] = []
    try:
        components = sz.recipe_components(rec, fetch=fetch)
    except Exception as e:  # noqa: BLE001 - sizing is optional when a probe can run
        result.notes.append(f"no sizing: {e}")

    can, why = probe_possible(rec, components if probe is None else None)
    do_probe = (probe if probe is not None else can) and mode != "none"
    if probe and not can:
        raise UsageError(f"cannot probe {rec.display_name}: {why}")
    if not do_probe and mode != "none":
        result.notes.append(f"no acceptance probe: {why}")

    wl = (
        workload
        if isinstance(workload, Workload)
        else load_workload(None if prompts_file else workload, prompts_file=prompts_file, seed=seed)
    )
    result.notes.extend(wl.warnings)

    if do_probe:
        with torch_threads(threads):
            result.probe = _run_probe(
                rec,
                wl,
                runtime=runtime,
                probe_prompts=probe_prompts,
                probe_tokens=probe_tokens,
                gamma_max=gamma_max,
                temperature=temperature,
                seed=seed,
                progress=progress,
            )
        result.probe.threads = threads
        alpha = result.probe.alpha_logits if temperature > 0 else result.probe.alpha_greedy
        result.predictions = predict_measured(
            result.probe,
            mode,
            spec,
            gamma_max=gamma_max,
            concurrency=concurrency,
            alpha=alpha.point if alpha else None,
        )
        result.basis = "measured (reference runtime on this CPU)"
        t = result.probe.timing
        if t.batch_points:
            result.notes.append(
                "batch dimension: speedup at concurrency b = speedup at 1 × (plain step growth from 1 to b "
                f"rows) ÷ (verify step growth), from batched target forwards at {', '.join(str(b) for b, _ in t.batch_points[1])} rows"
                + (f"; beyond max_batch_size {t.max_batch} requests queue" if t.max_batch else "")
            )

    gpu_obj = None
    if components and (gpu is not None or not do_probe):
        if gpu is None:
            gpu = "h100"
            result.notes.append("no --gpu given: sized for h100")
        gpu_obj = sz.get_gpu(gpu)
        target_facts_dtype = None
        try:
            from toolkit import hub

            target_facts_dtype = hub.resolve(
                rec.models.target, role="target", recipe=rec, fetch="none"
            ).facts.dtype
        except Exception:  # noqa: BLE001 - dtype falls back to bfloat16
            target_facts_dtype = None
        dtype = sz.recipe_dtype(rec, target_facts_dtype)
        tau, tau_src, draft_fw = None, None, 0
        if result.probe is not None and result.predictions:
            best_pred = max(result.predictions, key=lambda p: p.speedup[concurrency[0]])
            tau, tau_src = best_pred.expected_tokens, f"probe ({best_pred.label})"
            draft_fw = _shape(mode, best_pred.settings, spec).draft_forwards
        elif mode != "none":
            tau = cm.expected_tokens(0.8, spec.draft_len if mode in CHAIN_MODES else 4)
            tau_src = "assumed α=0.8 (no probe)"
            draft_fw = (
                spec.draft_len if mode in ("draft_target", "eagle3") else (1 if mode == "medusa" else 0)
            )
        result.sizing = sz.size(
            components,
            gpu_obj,
            dtype=dtype,
            max_seq_len=rec.build.max_seq_len,
            context=context,
            kv_fraction=rec.serving.kv_cache_free_gpu_mem_fraction,
            tau=tau,
            tau_source=tau_src,
            draft_forwards=draft_fw,
        )
        use_tp = tp or rec.parallel.tp
        fit = next((f for f in result.sizing.fits if f.tp == use_tp), None)
        if fit is not None and not fit.fits:
            min_tp = result.sizing.min_tp
            result.notes.append(
                f"does not fit on {use_tp}× {gpu_obj.name}: {fit.note}"
                + (f"; needs tp ≥ {min_tp}" if min_tp else "; does not fit at any TP size here")
            )
        if mode != "none":
            ctx = result.sizing.context
            t_roof, d_roof = roofline_costs(components, gpu_obj, dtype, tp=use_tp, context=ctx)
            if result.probe is not None:
                cands = [
                    (
                        p.label,
                        p.settings,
                        _shape(mode, p.settings, spec),
                        p.expected_tokens,
                        p.expected_tokens_iid,
                        p.source,
                    )
                    for p in result.predictions
                ]
                result.roofline_predictions = predict_roofline(cands, t_roof, d_roof, concurrency, mode, spec)
            if mode in CHAIN_MODES or result.probe is None:
                result.assumed = assumed_table(
                    assumed_alphas, max(gamma_max, 10), concurrency, t_roof, d_roof, mode, spec
                )
            if not result.basis:
                result.basis = f"roofline ({gpu_obj.name}, tp={use_tp})"
    if result.predictions:
        basis_preds = result.predictions
        basis = result.basis
        if backend != "reference" and result.roofline_predictions:
            basis_preds, basis = result.roofline_predictions, f"roofline ({gpu_obj.name if gpu_obj else gpu})"
        result.recommendation = recommend(basis_preds, mode, concurrency, basis)
    elif result.assumed:
        result.notes.append(
            "the assumed-α table is an illustration, not a prediction: α depends on the draft, the "
            "target and the workload; run `sdtk tune` on the deployment to measure it"
        )
    return result


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


def _backend(rec: Any) -> str:
    """The backend `auto` resolves to; the recipe's own value if it cannot be resolved here."""
    if rec.backend != "auto":
        return rec.backend
    from toolkit.compat import installed_trtllm_version, resolve_backend
    from toolkit.errors import CompatError

    try:
        return resolve_backend(
            rec.mode, "auto", recipe_version=rec.trtllm_version, installed_version=installed_trtllm_version()
        ).backend
    except CompatError:
        return "auto"


def _check_concurrency(levels: Sequence[int]) -> list[int]:
    levels = list(levels)
    if not levels:
        raise UsageError("give at least one concurrency level")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(f"concurrency levels must be positive integers, got {c!r}")
    return sorted(set(levels))


def _run_probe(
    rec: Any,
    wl: Workload,
    *,
    runtime: Any,
    probe_prompts: int,
    probe_tokens: int,
    gamma_max: int,
    temperature: float,
    seed: int,
    progress: bool,
) -> Probe:
    from toolkit.reference.sampling import SamplingParams

    t_start = time.perf_counter()
    spec = rec.speculative
    mode = spec.mode
    _say(progress, f"loading {rec.display_name} into the reference runtime")
    rt = runtime if runtime is not None else load_runtime(rec)
    budget = rt.max_context - probe_tokens - 1
    prompts = []
    for p in wl.sample(probe_prompts, seed):
        ids = encode(rt, p.text)
        prompts.append(ids[-budget:] if len(ids) > budget else ids)
    sampling = SamplingParams(temperature=temperature, seed=seed if temperature > 0 else None)

    # Warm-up: first calls pay for allocation and lazy initialisation.
    rt.generate(prompts[0], 4, sampling=sampling, speculative=False, end_id=-1)
    from toolkit.reference.stats import SpecStats

    cands = probe_candidates(rec, gamma_max)
    cfg_specs = [spec.model_copy(update=settings) for _, settings in cands]
    base_steps: list[float] = []
    outputs: list[list[int]] = []
    totals = [SpecStats() for _ in cands]
    steps: list[list[float]] = [[] for _ in cands]
    step_tokens: list[list[list[int]]] = [[] for _ in cands]
    _say(
        progress,
        f"baseline and {len(cands)} speculative configuration(s): {len(prompts)} prompts × {probe_tokens} tokens",
    )
    # Interleaved per prompt, so that every configuration sees the same machine conditions.
    for ids in prompts:
        res, durs, _ = generate_timed(rt, ids, probe_tokens, sampling, speculative=False)
        outputs.append(res.token_ids)
        base_steps += durs
        for k, cs in enumerate(cfg_specs):
            res, durs, counts = generate_timed(rt, ids, probe_tokens, sampling, spec=cs)
            _add_stats(totals[k], res.stats)
            steps[k] += durs
            step_tokens[k].append(counts)
    ctx = prompts[0] + outputs[0][: probe_tokens // 2]
    _say(progress, "timing forwards")
    lms = {"target": rt.target}
    sizes: dict[str, Sequence[int]] = {"target": FORWARD_SIZES}
    if rt.draft is not None:
        lms["draft"] = rt.draft
        sizes["draft"] = (1,)
    fw = time_forwards(lms, ctx, sizes)
    points = fw["target"]
    timing = StepTiming(
        t_base=_step_mean(base_steps) if base_steps else 0.0,
        forward_points=points,
        kappa=fit_kappa(points),
    )
    if "draft" in fw:
        timing.draft_forward = fw["draft"][0][1]
        timing.c_forward = timing.draft_forward / dict(points)[1]
    _say(progress, "timing batched forwards (in-flight batching)")
    widths = sorted({1, *(min(_draft_len(mode, st, spec), 32) + 1 for _, st in cands)})
    timing.batch_points = time_batched_forwards(rt.target, ctx, widths)
    timing.max_batch = getattr(getattr(rec, "build", None), "max_batch_size", None)
    configs = []
    for (label, settings), st, durs, stoks in zip(cands, totals, steps, step_tokens, strict=True):
        configs.append(
            ProbeConfig(
                label=label,
                settings={k: v for k, v in settings.items() if v is not None},
                shape=_shape(mode, settings, spec),
                steps=st.steps,
                tokens=st.tokens,
                draft_tokens=st.draft_tokens,
                accepted_tokens=st.accepted_tokens,
                per_position_proposed=list(st.per_position_proposed),
                per_position_accepted=list(st.per_position_accepted),
                t_step=_step_mean(durs) if durs else 0.0,
                step_tokens=stoks,
            )
        )
    probe = Probe(
        prompts=len(prompts),
        new_tokens=probe_tokens,
        temperature=temperature,
        workload=wl.to_dict(),
        timing=timing,
        configs=configs,
    )
    if mode == "draft_target" and rt.draft is not None:
        _say(progress, "α from draft/target logits")
        a_t, a_g = alpha_from_logits(rt, prompts, outputs, temperature, seed)
        probe.alpha_logits, probe.alpha_greedy = a_t, a_g
        probe.alpha_logits_temperature = temperature if temperature > 0 else 1.0
    probe.seconds = time.perf_counter() - t_start
    return probe
