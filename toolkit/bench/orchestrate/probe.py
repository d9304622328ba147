"""`plan`'s probe: a few prompts of the workload through the reference runtime with each
candidate configuration (decide.candidates), interleaved with plain decoding, for acceptance
and step costs.

What it measures goes into decide.predict's records (Probe, ProbeConfig, StepTiming); the
predictions over them are toolkit.bench.decide's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolkit.bench.decide.candidates import probe_candidates
from toolkit.bench.decide.predict import Probe, ProbeConfig, config_draft_len, config_shape
from toolkit.bench.decide.timing import StepTiming, fit_kappa
from toolkit.bench.measure.inprocess import (
    FORWARD_SIZES,
    encode,
    generate_timed,
    load_runtime,
    step_mean,
    time_batched_forwards,
    time_forwards,
)
from toolkit.bench.measure.metrics import Interval, bootstrap_ci
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.proposers import has_draft_model
from toolkit.progress import Step

if TYPE_CHECKING:
    from toolkit.bench.decide.plan import PlanOptions
    from toolkit.recipe import Recipe


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


def run_probe(
    rec: Recipe,
    wl: Workload,
    options: PlanOptions,
    *,
    runtime: Any,
    temperature: float,
    seed: int,
    progress: Step,
) -> Probe:
    """`options.probe_prompts` prompts of `options.probe_tokens` new tokens each; None: each
    prompt's own max_tokens, as the served requests of the same workload ask (`sdtk tune` probes
    the very requests it serves); draft lengths up to `options.draft_len_max`."""
    probe_prompts, probe_tokens, draft_len_max = (
        options.probe_prompts,
        options.probe_tokens,
        options.draft_len_max,
    )
    from toolkit.reference.sampling import SamplingParams

    t_start = time.perf_counter()
    spec = rec.speculative
    mode = spec.mode
    progress(f"loading {rec.display_name} into the reference runtime")
    rt = runtime if runtime is not None else load_runtime(rec)
    prompts, lengths = [], []
    for p in wl.sample(probe_prompts, seed):
        n = probe_tokens or max(2, p.max_tokens)
        budget = rt.max_context - n - 1
        ids = encode(rt, p.text)
        prompts.append(ids[-budget:] if len(ids) > budget else ids)
        lengths.append(n)
    tokens_label = f"{lengths[0]}" if len(set(lengths)) == 1 else f"{min(lengths)}-{max(lengths)}"
    sampling = SamplingParams(temperature=temperature, seed=seed if temperature > 0 else None)

    from toolkit.reference import PLAIN

    # Warm-up: first calls pay for allocation and lazy initialisation.
    rt.generate(prompts[0], 4, sampling=sampling, spec=PLAIN, end_id=-1)
    from toolkit.reference.stats import SpecStats

    cands = probe_candidates(rec, draft_len_max)
    cfg_specs = [spec.model_copy(update=settings) for _, settings in cands]
    base_steps: list[float] = []
    base_inside: list[float] = []  # per plain decode step: seconds inside the target's forwards
    prefill: list[float] = []  # per prompt, from its plain generation
    outputs: list[list[int]] = []
    totals = [SpecStats() for _ in cands]
    steps: list[list[float]] = [[] for _ in cands]
    inside_steps: list[list[float]] = [[] for _ in cands]
    step_tokens: list[list[list[int]]] = [[] for _ in cands]
    step_widths: list[list[list[int]]] = [[] for _ in cands]
    progress(
        f"baseline and {len(cands)} speculative configuration(s): {len(prompts)} prompts × {tokens_label} tokens",
    )
    # Interleaved per prompt, so that every configuration sees the same machine conditions.
    for ids, n in zip(prompts, lengths, strict=True):
        res, durs, _, first = generate_timed(rt, ids, n, sampling, spec=PLAIN, inside=base_inside)
        outputs.append(res.token_ids)
        base_steps += durs
        prefill.append(first)
        for k, cs in enumerate(cfg_specs):
            wide: list[int] = []
            res, durs, counts, _ = generate_timed(
                rt, ids, n, sampling, spec=cs, inside=inside_steps[k], widths=wide
            )
            _add_stats(totals[k], res.stats)
            steps[k] += durs
            step_tokens[k].append(counts)
            step_widths[k].append(wide)
    widths = sorted({1, *(min(config_draft_len(mode, st, spec), 32) + 1 for _, st in cands)})
    timing = _time_costs(rt, prompts[0] + outputs[0][: lengths[0] // 2], base_steps, widths, progress)
    timing.max_batch = getattr(getattr(rec, "build", None), "max_batch_size", None)
    timing.t_own_base = _own(base_steps, base_inside)
    configs = []
    for (label, settings), st, durs, stoks, swide, ins in zip(
        cands, totals, steps, step_tokens, step_widths, inside_steps, strict=True
    ):
        configs.append(
            ProbeConfig(
                label=label,
                settings={k: v for k, v in settings.items() if v is not None},
                shape=config_shape(mode, settings, spec),
                steps=st.steps,
                tokens=st.tokens,
                draft_tokens=st.draft_tokens,
                accepted_tokens=st.accepted_tokens,
                per_position_proposed=list(st.per_position_proposed),
                per_position_accepted=list(st.per_position_accepted),
                t_step=step_mean(durs) if durs else 0.0,
                t_own=_own(durs, ins),
                step_tokens=stoks,
                step_widths=swide,
            )
        )
    probe = Probe(
        prompts=len(prompts),
        new_tokens=max(lengths),
        temperature=temperature,
        workload=wl.to_dict(),
        timing=timing,
        configs=configs,
        prefill=prefill,
    )
    if has_draft_model(mode) and rt.draft is not None:
        progress("α from draft/target logits")
        a_t, a_g = alpha_from_logits(rt, prompts, outputs, temperature, seed)
        probe.alpha_logits, probe.alpha_greedy = a_t, a_g
        probe.alpha_logits_temperature = temperature if temperature > 0 else 1.0
    probe.seconds = time.perf_counter() - t_start
    return probe


def _own(durations: list[float], inside: list[float]) -> float:
    """Seconds per decode step outside the target's forwards: the step's mean less the mean time
    inside them (the same outlier rule for both, step_mean); 0 without steps."""
    return max(0.0, step_mean(durations) - step_mean(inside)) if durations and inside else 0.0


def _time_costs(
    rt: Any, ctx: list[int], base_steps: list[float], widths: list[int], progress: Step
) -> StepTiming:
    """Step costs after `ctx`: the plain step (from the probe's own steps), bare target (and
    draft) forwards over 1..n tokens, and batched target forwards `widths` tokens per row."""
    progress("timing forwards")
    lms = {"target": rt.target}
    sizes: dict[str, Sequence[int]] = {"target": FORWARD_SIZES}
    if rt.draft is not None:
        lms["draft"] = rt.draft
        sizes["draft"] = (1,)
    fw = time_forwards(lms, ctx, sizes)
    points = fw["target"]
    timing = StepTiming(
        t_base=step_mean(base_steps) if base_steps else 0.0,
        forward_points=points,
        kappa=fit_kappa(points),
    )
    if "draft" in fw:
        timing.draft_forward = fw["draft"][0][1]
        timing.c_forward = timing.draft_forward / dict(points)[1]
    progress("timing batched forwards (in-flight batching)")
    timing.batch_points = time_batched_forwards(rt.target, ctx, widths)
    return timing
