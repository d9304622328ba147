"""`sdtk plan`: predict the best draft length (or tree / lookahead shape) before deploying.

Two inputs feed the cost model (`costmodel`):

1. Acceptance, from a probe (decide.probe): a few dozen prompts of the user's workload through
   the reference runtime with the recipe's mode, reading per-position acceptance from SpecStats;
   for draft-target also α = E[Σ min(p, q)] from the draft's and target's logits along the
   target's own continuation (lower variance than counting acceptances).
2. Step costs: measured in-process (target forwards of 1..n tokens, draft forwards, and the
   probe's own step times) for the reference backend; a GPU roofline (`sizing`) otherwise.

Recipes whose models cannot run on this CPU get sizing, the roofline and Leviathan's table for
*assumed* α values, labelled as assumptions. The predictions themselves are decide.predict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.bench.decide import costmodel as cm
from toolkit.bench.decide import sizing as sz
from toolkit.bench.decide.predict import (
    PlanResult,
    assumed_table,
    config_shape,
    predict_measured,
    predict_roofline,
    recommend,
    roofline_costs,
)
from toolkit.bench.decide.probe import run_probe
from toolkit.bench.measure.inprocess import probe_possible, torch_threads
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.proposers import draft_forwards
from toolkit.errors import UsageError
from toolkit.membound import recipe_label
from toolkit.modes import CHAIN_MODES

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
ASSUMED_ALPHAS = (0.6, 0.7, 0.8, 0.9)


def plan(
    rec: Any,
    wl: Workload,
    *,
    gpu: str | None = None,
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
    """Probe acceptance and costs, size the GPU, and recommend a speculative configuration
    for a loaded recipe `rec` on workload `wl` (toolkit.bench.api.plan resolves both)."""
    if gamma_max < 1:
        raise UsageError(f"gamma_max must be ≥ 1, got {gamma_max}")
    if probe_prompts < 1 or probe_tokens < 2:
        raise UsageError("the probe needs at least 1 prompt and 2 new tokens per prompt")
    concurrency = check_concurrency(concurrency)
    mode = rec.speculative.mode
    result = PlanResult(
        recipe=rec.display_name,
        mode=mode,
        backend=_backend(rec),
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
    result.notes.extend(wl.warnings)

    if do_probe:
        _probe_and_predict(
            result,
            rec,
            wl,
            runtime=runtime,
            threads=threads,
            probe_prompts=probe_prompts,
            probe_tokens=probe_tokens,
            gamma_max=gamma_max,
            concurrency=concurrency,
            temperature=temperature,
            seed=seed,
            progress=progress,
        )
    gpu_name = None
    if components and (gpu is not None or not do_probe):
        gpu_name = _size_and_roofline(
            result,
            rec,
            components,
            gpu,
            context=context,
            tp=tp,
            gamma_max=gamma_max,
            concurrency=concurrency,
            assumed_alphas=assumed_alphas,
        )
    _recommend(result, concurrency, gpu_name or gpu)
    return result


def _probe_and_predict(
    result: PlanResult,
    rec: Any,
    wl: Workload,
    *,
    runtime: Any,
    threads: int | None,
    probe_prompts: int,
    probe_tokens: int,
    gamma_max: int,
    concurrency: list[int],
    temperature: float,
    seed: int,
    progress: bool,
) -> None:
    """Run the probe and the measured-basis predictions (reference runtime on this CPU)."""
    spec = rec.speculative
    with torch_threads(threads):
        result.probe = run_probe(
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
        spec.mode,
        spec,
        gamma_max=gamma_max,
        concurrency=concurrency,
        alpha=alpha.point if alpha else None,
    )
    result.basis = "measured (reference runtime on this CPU)"
    twin = recipe_label(rec)
    if twin:
        result.basis = f"measured (reference runtime on this CPU; {twin})"
    t = result.probe.timing
    if t.batch_points:
        result.notes.append(
            "batch dimension: speedup at concurrency b = speedup at 1 × (plain step growth from 1 to b "
            f"rows) ÷ (verify step growth), from batched target forwards at {', '.join(str(b) for b, _ in t.batch_points[1])} rows"
            + (f"; beyond max_batch_size {t.max_batch} requests queue" if t.max_batch else "")
        )


def add_serving_overhead(result: PlanResult, rec: Any, overhead: float, source: str) -> None:
    """Re-predict the measured basis for a served deployment whose every step costs `overhead`
    seconds beyond its forwards (costmodel.served_speedup), measured once per deployment, e.g.
    by `tune` from its baseline run (served TPOT at concurrency 1 − the probe's plain step).
    Nothing changes without a probe or with overhead ≤ 0."""
    if result.probe is None or not result.predictions or overhead <= 0:
        return
    t = result.probe.timing
    t.serving_overhead, t.serving_source = overhead, source
    alpha = result.probe.alpha_logits if result.probe.temperature > 0 else result.probe.alpha_greedy
    old_basis = result.basis
    result.predictions = predict_measured(
        result.probe,
        rec.speculative.mode,
        rec.speculative,
        gamma_max=max(p.draft_len for p in result.predictions),
        concurrency=result.concurrency,
        alpha=alpha.point if alpha else None,
    )
    result.basis = f"{old_basis}, served: + {overhead * 1e3:.2f} ms per step ({source})"
    if result.recommendation is not None and result.recommendation.basis == old_basis:
        result.recommendation = recommend(result.predictions, result.mode, result.concurrency, result.basis)


def _size_and_roofline(
    result: PlanResult,
    rec: Any,
    components: list[sz.Component],
    gpu: str | None,
    *,
    context: int | None,
    tp: int | None,
    gamma_max: int,
    concurrency: list[int],
    assumed_alphas: Sequence[float],
) -> str:
    """GPU sizing, roofline-basis predictions and the assumed-α table; returns the GPU's name."""
    spec = rec.speculative
    mode = spec.mode
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
        draft_fw = config_shape(mode, best_pred.settings, spec).draft_forwards
    elif mode != "none":
        tau = cm.expected_tokens(0.8, spec.draft_len if mode in CHAIN_MODES else 4)
        tau_src = "assumed α=0.8 (no probe)"
        draft_fw = draft_forwards(mode, spec.draft_len)
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
    if mode == "none":
        return gpu_obj.name
    t_roof, d_roof = roofline_costs(components, gpu_obj, dtype, tp=use_tp, context=result.sizing.context)
    if result.probe is not None:
        cands = [
            (
                p.label,
                p.settings,
                config_shape(mode, p.settings, spec),
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
    return gpu_obj.name


def _recommend(result: PlanResult, concurrency: list[int], gpu_name: str | None) -> None:
    """The recommendation on the deployment's basis: measured on reference, else the roofline."""
    if result.predictions:
        basis_preds = result.predictions
        basis = result.basis
        if result.backend != "reference" and result.roofline_predictions:
            basis_preds, basis = result.roofline_predictions, f"roofline ({gpu_name})"
        result.recommendation = recommend(basis_preds, result.mode, concurrency, basis)
    elif result.assumed:
        result.notes.append(
            "the assumed-α table is an illustration, not a prediction: α depends on the draft, the "
            "target and the workload; run `sdtk tune` on the deployment to measure it"
        )


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


def check_concurrency(levels: Sequence[int]) -> list[int]:
    levels = list(levels)
    if not levels:
        raise UsageError("give at least one concurrency level")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(f"concurrency levels must be positive integers, got {c!r}")
    return sorted(set(levels))
