"""`plan`'s pure part: the records a probe yields, and the predictions made from them.

No I/O, no torch: the probe (orchestrate.probe) measures, this turns measurements (or a GPU
roofline from decide.sizing) into predicted speedups per configuration and concurrency, and a
recommendation. The cost model itself is decide.costmodel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from toolkit.bench.decide import costmodel as cm
from toolkit.bench.decide import sizing as sz
from toolkit.bench.decide.runs import (
    bls_fills,
    proposals,
    run_lengths,
    simulate_tau,
    step_count,
    step_widths,
)
from toolkit.bench.decide.timing import ReplayStep, StepTiming, interpolate
from toolkit.bench.measure.metrics import Interval
from toolkit.bench.proposers import (
    ONE_PASS_MODES,
    WINDOW_FIELDS,
    draft_forwards,
    has_draft_model,
    has_window,
    tree_field,
    window_of,
)
from toolkit.modes import CHAIN_MODES, info

# --------------------------------------------------------------------------- results


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
    # Per prompt: tokens each step's verify forward ran (its proposal and one more), one per
    # step_tokens entry; empty: not recorded (a probe kept from before).
    step_widths: list[list[int]] = field(default_factory=list)
    # Of t_step, the seconds outside the target's forwards: proposing (an EAGLE head's or a draft
    # model's forwards), acceptance, bookkeeping; per row of an in-flight batch (replay_speedup).
    t_own: float = 0.0

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
    new_tokens: int  # per prompt (the most, when each prompt ran its own max_tokens)
    temperature: float
    workload: dict[str, Any]
    timing: StepTiming
    configs: list[ProbeConfig]
    alpha_logits: Interval | None = None  # E[Σ min(p,q)] at the probe temperature (T=1 if greedy)
    alpha_logits_temperature: float | None = None
    alpha_greedy: Interval | None = None  # P(draft argmax == target argmax)
    seconds: float = 0.0
    threads: int | None = None  # torch threads during the probe (None: the process default)
    # Per prompt, in order: seconds to the first token of its plain generation (the prefill);
    # empty when not measured (then predictions count decode time only).
    prefill: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "new_tokens": self.new_tokens,
            "prefill": list(self.prefill),
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
    # concurrency → predicted speedup: measured basis, what `sdtk bench --compare` reports (the
    # ratio of mean per-request output tok/s, costmodel.request_mean_speedup); roofline, per step.
    speedup: dict[int, float]
    speedup_iid: dict[int, float] | None = None  # Leviathan's closed form from α, c, κ (a cross-check)
    source: str = ""  # how E and the step time were obtained, or "assumed α=0.8"
    # concurrency → tokens per decode second with speculation ÷ without, every request's tokens
    # and steps pooled (τ = Σ tokens ÷ Σ steps): the decode throughput ratio (measured basis).
    throughput: dict[int, float] = field(default_factory=dict)

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
    # Requests per level of the `sdtk bench --compare` run the measured predictions are for (its
    # closed loop replayed, StepTiming.replay_speedup); None: the probed ones.
    requests: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "mode": self.mode,
            "backend": self.backend,
            "basis": self.basis,
            "batching": self.batching,
            "concurrency": list(self.concurrency),
            "requests": self.requests,
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


def config_shape(mode: str, settings: dict[str, Any], spec: Any) -> cm.Shape:
    """The step shape of one configuration (`settings`: the speculative fields it overrides)."""
    from toolkit import trees as tree

    if info(mode).chain and settings.get("max_draft_len") is not None:
        g = settings["max_draft_len"]
        return cm.chain_shape(g, draft_forwards=draft_forwards(mode, g))
    paths = _tree(mode, settings, spec)
    if paths is not None:  # the head runs per level (its draft_forwards at the depth), or once
        depth = tree.depth(paths)
        return cm.tree_shape(len(paths), depth, draft_forwards=draft_forwards(mode, depth))
    if has_window(settings):
        return cm.lookahead_shape(*window_of(settings))
    return cm.Shape(0, 1, "none")


def config_draft_len(mode: str, settings: dict[str, Any], spec: Any) -> int:
    if has_window(settings):  # the mode's own draft length (Lookahead.draft_len) at this window
        return int(
            spec.model_copy(update=dict(zip(WINDOW_FIELDS, window_of(settings), strict=True))).draft_len
        )
    if "max_draft_len" in settings:
        return int(settings["max_draft_len"])
    found = tree_field(spec.model_copy(update=settings))  # a tree the settings set: its paths
    if found is not None and found[0] in settings:
        return len(found[1])
    return spec.draft_len


def _tree(mode: str, settings: dict[str, Any], spec: Any) -> list[list[int]] | None:
    """The static tree of a configuration, from the mode's proposer facts (its `proposer` hook) on
    the recipe's `speculative` with the configuration's overrides: where `settings` set the tree,
    or always for heads that propose their tree in one pass (ONE_PASS_MODES); else None."""
    found = tree_field(spec.model_copy(update=settings)) if spec is not None else None
    if found is None:
        return None
    field_, paths = found
    return paths if field_ in settings or mode in ONE_PASS_MODES else None


# --------------------------------------------------------------------------- prediction


def verify_widths(cfg: ProbeConfig, draft_len: int) -> list[float] | None:
    """P(a step verifies k + 1 tokens), k = 0..γ, from a chain probe at a draft length ≥ γ: a
    step that proposed L tokens there proposes min(L, γ) at γ (n-gram's proposal is a prefix of
    its longer one; a draft model's or head's always γ). None without steps."""
    if not cfg.steps:
        return None
    at_least = [cfg.steps] + [min(cfg.steps, n) for n in cfg.per_position_proposed[:draft_len]]
    at_least += [0] * (draft_len + 1 - len(at_least))  # positions never proposed
    at_least.append(0)
    return [(at_least[k] - at_least[k + 1]) / cfg.steps for k in range(draft_len + 1)]


def _request_mean(
    timing: StepTiming,
    requests: Sequence[tuple[int, float]],
    batch: int,
    speedup: Callable[[float], float],
    prefill: Sequence[float],
) -> float:
    """costmodel.request_mean_speedup at concurrency `batch`, with this machine's plain step
    (grown to the batch) and the serving cost measured there."""
    plain = timing.t_base * timing.growths(1, batch)[0] + timing.overhead_at(batch)
    return cm.request_mean_speedup(requests, speedup, plain, timing.overhead_at(batch), batch, prefill)


def _recorded(cfg: ProbeConfig) -> bool:
    """Whether the probe recorded the width of each of this configuration's steps."""
    return len(cfg.step_widths) == len(cfg.step_tokens) and all(
        len(w) == len(t) for w, t in zip(cfg.step_widths, cfg.step_tokens, strict=True)
    )


def _chain_widths(
    primary: ProbeConfig, runs: Sequence[Sequence[float]], draft_len: int
) -> list[list[int]] | None:
    """Each probed request's step widths at draft length γ (runs.step_widths), from the widths
    the longest chain probe recorded; None where it recorded none."""
    if not _recorded(primary):
        return None
    return [
        step_widths(run, proposals(tokens, wide), draft_len)
        for run, tokens, wide in zip(runs, primary.step_tokens, primary.step_widths, strict=True)
    ]


def _replayable(probe: Probe, requests: int) -> bool:
    """Whether `bench --compare`'s closed loop can be replayed from the probe (StepTiming.replay_speedup):
    each probed request's prefill was timed, and there are requests."""
    return requests > 0 and len(probe.prefill) == requests


_BLS_SOURCE = "; BLS loop: plain steps up to γ+1 per iteration, the loops replayed in the batcher"


def _per_step(
    t: StepTiming,
    g: int,
    step: float,
    widths: list[float] | None,
    fills: list[list[int]] | None,
    bs: Sequence[int],
) -> dict[int, Callable[[float], float]]:
    """Per concurrency in `bs`, the per-step speedup at draft length g of a request committing τ per
    step: through the BLS loop when `fills` (its iterations' fill steps, per request), its costs
    replayed in the batcher (`StepTiming.bls_costs`); else `StepTiming.speedup_at`."""
    if fills is not None:
        costs = {b: t.bls_costs(g, b, step, fills) for b in bs}
        return {b: partial(t.bls_speedup_at, draft_len=g, batch=b, costs=costs[b]) for b in bs}
    return {b: partial(t.speedup_at, t_step=step, width=g + 1, batch=b, widths=widths) for b in bs}


def predict_measured(
    probe: Probe,
    mode: str,
    spec: Any,
    *,
    draft_len_max: int,
    concurrency: Sequence[int],
    alpha: float | None,
    bls_loop: bool = False,
    requests: int | None = None,
) -> list[Prediction]:
    """Cost model with this machine's measured costs (reference runtime, one sequence at a time).

    Chains: τ(γ) replays the accepted runs of the longest probe (`run_lengths`), which keeps
    the selection effect a per-position average misses (long accepted runs consume the easy
    stretches in few steps); the step time is interpolated between the probes' measured step
    times (each includes the proposer, the verify forward over γ+1 tokens and the bookkeeping).
    Speedup = τ(γ) · (t_base + o) / (t_step(γ) + o), o the serving cost per step when one was
    measured for the deployment (`StepTiming.overhead_at`, else 0: the in-process
    speedup). Other shapes were each probed directly. Leviathan's
    closed form E/(γc + 1 + κγ) with the bare-forward c and κ is kept as a cross-check
    (`speedup_iid` when α is known). The batch dimension: the reference runtime batches in
    flight, so at concurrency b a step runs b rows: t_base grows as a plain batched step from 1
    to b rows and t_step as a step verifying γ+1 tokens per row (or the widest of b rows whose
    widths vary, `verify_widths`), from timed batched forwards, b capped at max_batch_size
    (`StepTiming.growths`); o is the serving cost measured at b when it was
    (`StepTiming.speedup_at`). The draft's and proposers' own costs are taken to scale like the
    verify step (not the BLS loop's draft, its own model's).
    `bls_loop`: draft-target served through the `tensorrt_llm_bls` loop (engine and reference
    repositories), where each iteration's target request also decodes plainly up to γ+1 tokens
    (`costmodel.bls_loop_speedup`); at b loops, which leave the target's batch to draft and so fall
    out of step, an iteration's costs come from replaying them in the batcher (`bls_costs`).
    That per-step speedup with the pooled τ is `Prediction.throughput`; `Prediction.speedup` is
    the statistic `bench --compare` measures, the mean over the probed requests of each one's
    rate. When the probe timed each request's prefill (and not through the BLS loop), that mean
    comes from replaying the closed loop of `bench` through the batcher on both sides
    (`StepTiming.replay_speedup`): each request its own steps at this γ (`runs.step_count`), so
    that the batch drains as requests finish unevenly and an iteration costs what its rows cost,
    each step as wide as the probe's verify forward ran there (`runs.step_widths`; rows that
    start together step together, and n-gram's proposals are alike at the same point of their
    generations).
    Otherwise (and for the BLS loop) every step is priced at b rows, each request with its own τ
    (`costmodel.request_mean_speedup`, with its prefill when timed).
    `requests`: the requests per level of the `bench --compare` run predicted, which the replay
    sends (the probed ones in order, then over again; `StepTiming.replay_speedup`'s `count`);
    None: the probed ones.
    """
    chain_cfgs = [c for c in probe.configs if "max_draft_len" in c.settings and mode in CHAIN_MODES]
    out = (
        _predict_chain(
            probe, chain_cfgs, draft_len_max, concurrency, alpha, bls_loop, has_draft_model(mode), requests
        )
        if chain_cfgs
        else []
    )
    for cfg in probe.configs:
        if cfg not in chain_cfgs:
            out.append(
                _predict_probed(probe, cfg, config_draft_len(mode, cfg.settings, spec), concurrency, requests)
            )
    return out


def _predict_chain(
    probe: Probe,
    chain_cfgs: list[ProbeConfig],
    draft_len_max: int,
    concurrency: Sequence[int],
    alpha: float | None,
    bls_loop: bool,
    draft_model: bool,
    requests: int | None = None,
) -> list[Prediction]:
    """predict_measured for the chain probes at γ = 1..min(γ_max, the longest probe's)."""
    t = probe.timing
    out: list[Prediction] = []
    primary = max(chain_cfgs, key=lambda c: c.settings["max_draft_len"])
    gmax = primary.settings["max_draft_len"]
    ppa = primary.per_position_acceptance
    p_tail = min(1.0, ppa[-1] / ppa[-2]) if len(ppa) >= 2 and ppa[-2] > 0 else (ppa[-1] if ppa else 0.0)
    runs = [run_lengths(st, gmax, p_tail) for st in primary.step_tokens]
    step_pts = [(c.settings["max_draft_len"], c.t_step) for c in chain_cfgs if c.t_step > 0]
    own_pts = [(c.settings["max_draft_len"], c.t_own) for c in chain_cfgs if c.t_step > 0]
    c_lev = t.c_forward if (t.c_forward is not None and draft_model) else 0.0
    for g in range(1, min(draft_len_max, gmax) + 1):
        # Through the BLS loop, τ is what a verify step commits there (simulate_tau's `bls`).
        tau = partial(simulate_tau, draft_len=g, bls=bls_loop)
        e = tau(runs) if runs else cm.expected_tokens_from_marginals(primary.marginals, g)
        # Through the probed step times as measured: a probed γ keeps its own time. A step is
        # not always dearer for a longer draft (on the memory-bound twin a 3-token verify
        # forward took 124 ms where 2 and 5 tokens took 87), and a monotone fit would spread
        # such a point onto its neighbours.
        step = interpolate(step_pts, g, monotone=False) if step_pts else t.t_base
        # A draft model's forwards (the bulk of its own work) go through the batcher's draft pool,
        # batched across rows, so they grow with the batch as the step does, not once per row.
        own = interpolate(own_pts, g, monotone=False) if own_pts and not draft_model else 0.0
        widths = verify_widths(primary, g)
        e_iid = cm.expected_tokens(alpha, g) if alpha is not None else None
        lev = (
            {b: cm.leviathan_speedup_with_verify(e_iid, g, c_lev, t.kappa, g + 1) for b in concurrency}
            if e_iid is not None
            else None
        )

        fills = [bls_fills(r, g) for r in runs] if bls_loop else None
        at = _per_step(t, g, step, widths, fills, concurrency)
        pooled = {b: at[b](e) for b in concurrency}
        if fills is None and _replayable(probe, len(runs)):
            loop = [(len(r), step_count(r, g)) for r in runs]
            wide = _chain_widths(primary, runs, g)
            speedup = {
                b: t.replay_speedup(
                    loop,
                    probe.prefill,
                    ReplayStep(step, g + 1, widths=widths, t_own=own, step_widths=wide),
                    batch=b,
                    count=requests,
                )
                for b in concurrency
            }
        else:
            reqs = [(sum(st), tau([r])) for st, r in zip(primary.step_tokens, runs, strict=True)]
            speedup = {
                b: _request_mean(t, reqs, b, at[b], probe.prefill) if reqs else pooled[b] for b in concurrency
            }
        out.append(
            Prediction(
                label=f"γ={g}",
                settings={"max_draft_len": g},
                draft_len=g,
                expected_tokens=e,
                expected_tokens_iid=e_iid,
                speedup=speedup,
                throughput=pooled,
                speedup_iid=lev,
                source=f"τ replayed from the {primary.label} probe; step time interpolated from probes at "
                + ", ".join(f"γ={x}" for x, _ in sorted(step_pts))
                + (_BLS_SOURCE if bls_loop else ""),
            )
        )
    return out


def _predict_probed(
    probe: Probe, cfg: ProbeConfig, draft_len: int, concurrency: Sequence[int], requests: int | None = None
) -> Prediction:
    """predict_measured for a configuration probed directly (trees, lookahead, a chain of
    another mode): its own τ and step time."""
    t = probe.timing
    e = cfg.acceptance_length
    width = draft_len + 1
    if cfg.t_step <= 0:
        pooled = {b: 0.0 for b in concurrency}
        speedup = dict(pooled)
    else:
        pooled = {b: t.speedup_at(e, cfg.t_step, width, b) for b in concurrency}
        loop = [(sum(st), len(st)) for st in cfg.step_tokens]  # one per prompt
        if _replayable(probe, len(loop)):
            speedup = {
                b: t.replay_speedup(
                    loop,
                    probe.prefill,
                    ReplayStep(
                        cfg.t_step,
                        width,
                        t_own=cfg.t_own,
                        step_widths=cfg.step_widths if _recorded(cfg) else None,
                    ),
                    batch=b,
                    count=requests,
                )
                for b in concurrency
            }
        else:
            reqs = [(n, n / max(1, steps)) for n, steps in loop]
            speedup = {
                b: _request_mean(
                    t, reqs, b, partial(t.speedup_at, t_step=cfg.t_step, width=width, batch=b), probe.prefill
                )
                if reqs
                else pooled[b]
                for b in concurrency
            }
    return Prediction(
        label=cfg.label,
        settings=cfg.settings,
        draft_len=draft_len,
        expected_tokens=e,
        expected_tokens_iid=None,
        speedup=speedup,
        throughput=pooled,
        source="measured τ and step time",
    )


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
            Prediction(label, settings, config_draft_len(mode, settings, spec), e, e_iid, sp, sp_iid, source)
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
    draft_len_max: int,
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
    out = []
    for a in alphas:
        cands: list[tuple[str, dict[str, Any], cm.Shape, float, float | None, str]] = []
        for g in range(1, draft_len_max + 1):
            # The mode's cost shape (its draft_forwards hook); unpriced without a draft roofline.
            fw = draft_forwards(mode, g) if draft is not None else 0
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
        preds = predict_roofline(cands, target, draft, concurrency, mode, spec)
        out.append(max(preds, key=lambda p: p.speedup[min(concurrency)]))
    return out
