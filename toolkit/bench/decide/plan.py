"""`sdtk plan`'s decisions: predictions and a recommendation from what was measured.

Two inputs feed the cost model (`costmodel`):

1. Acceptance, from a probe (toolkit.bench.orchestrate.probe): a few dozen prompts of the user's
   workload through the reference runtime with the recipe's mode, reading per-position
   acceptance from SpecStats; for draft-target also α = E[Σ min(p, q)] from the draft's and
   target's logits along the target's own continuation (lower variance than counting acceptances).
2. Step costs: measured in-process (target forwards of 1..n tokens, draft forwards, and the
   probe's own step times) for the reference backend; a GPU roofline (`sizing`) otherwise.

Recipes whose models cannot run on this CPU get sizing, the roofline and Leviathan's table for
*assumed* α values, labelled as assumptions. The predictions themselves are decide.predict.
Everything here is a pure function of the recipe and those measurements: the probe, the hub
look-ups and the backend resolution are toolkit.bench.orchestrate.plan's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolkit import modes
from toolkit.bench.decide import costmodel as cm
from toolkit.bench.decide import sizing as sz
from toolkit.bench.decide.predict import (
    PlanResult,
    Probe,
    assumed_table,
    config_shape,
    predict_measured,
    predict_roofline,
    recommend,
    roofline_costs,
)
from toolkit.bench.proposers import draft_forwards
from toolkit.errors import UsageError
from toolkit.modes import CHAIN_MODES

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
ASSUMED_ALPHAS = (0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class PlanOptions:
    """What `sdtk plan` probes, sizes and predicts.

    `gpu`: the GPU to size for (None: h100 when nothing was probed); `probe`: True / False, or
    None to probe when this machine can; `probe_prompts` prompts of `probe_tokens` new tokens each
    (None: each prompt's own max_tokens); draft lengths up to `draft_len_max`; predictions at
    `concurrency`, and for `assumed_alphas` without a probe; `context`: KV tokens for the
    roofline; `tp`: the TP size to check (default the recipe's); `fetch`: what the hub look-ups
    may download; `threads`: torch threads during the probe (None: a reference deployment's);
    `serving_overhead`: seconds each served step costs beyond its forwards (predict served speedups).
    """

    gpu: str | None = None
    probe: bool | None = None
    probe_prompts: int = 24
    probe_tokens: int | None = 64
    draft_len_max: int = 8
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY
    assumed_alphas: Sequence[float] = ASSUMED_ALPHAS
    context: int | None = None
    tp: int | None = None
    fetch: str = "metadata"
    threads: int | None = None
    serving_overhead: float | None = None


def check_plan(draft_len_max: int, probe_prompts: int, probe_tokens: int | None) -> None:
    """`probe_tokens` None: each prompt's own max_tokens (a workload's prompts are validated
    when it is loaded)."""
    if draft_len_max < 1:
        raise UsageError(
            f"the longest draft length (draft_len_max, --gamma-max) must be ≥ 1, got {draft_len_max}"
        )
    if probe_prompts < 1 or (probe_tokens is not None and probe_tokens < 2):
        raise UsageError("the probe needs at least 1 prompt and 2 new tokens per prompt")


def new_plan(rec: Recipe, backend: str, concurrency: list[int]) -> PlanResult:
    """The empty plan of a recipe whose backend resolves to `backend`."""
    mode = rec.speculative.mode
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
    return result


def bls_loop(rec: Recipe, backend: str) -> bool:
    """Whether the deployment speculates through the `tensorrt_llm_bls` draft-target loop (a draft
    model on the engine or reference repository; llmapi runs both models in one executor)."""
    return modes.info(rec.speculative.mode).two_model and rec.repository_layout(backend) != "llmapi"


def predict_from_probe(
    result: PlanResult,
    rec: Recipe,
    probe: Probe,
    *,
    draft_len_max: int,
    concurrency: list[int],
    twin: str | None,
) -> None:
    """The measured-basis predictions from a probe (reference runtime on this CPU). `twin`: the
    memory-bound twin's label (toolkit.membound), when the recipe pads its target."""
    spec = rec.speculative
    result.probe = probe
    alpha = probe.alpha_logits if probe.temperature > 0 else probe.alpha_greedy
    through_bls = bls_loop(rec, result.backend)
    result.predictions = predict_measured(
        probe,
        spec.mode,
        spec,
        draft_len_max=draft_len_max,
        concurrency=concurrency,
        alpha=alpha.point if alpha else None,
        bls_loop=through_bls,
        requests=result.requests,
    )
    result.basis = "measured (reference runtime on this CPU)"
    if twin:
        result.basis = f"measured (reference runtime on this CPU; {twin})"
    t = probe.timing
    if probe.prefill and not through_bls:  # the BLS loop prices every step at b rows
        n = result.requests or probe.prompts
        result.notes.append(
            f"speedup: what `sdtk bench --compare` reports (the mean per-request tok/s ratio), its closed "
            f"loop of {n} requests per level replayed in the in-flight batcher"
            + (f" (the {probe.prompts} probed ones in turn)" if n != probe.prompts else "")
        )
    if t.batch_points:
        result.notes.append(
            "batch dimension: speedup at concurrency b = speedup at 1 × (plain step growth from 1 to b "
            f"rows) ÷ (verify step growth), from batched target forwards at {', '.join(str(b) for b, _ in t.batch_points[1])} rows"
            + (f"; beyond max_batch_size {t.max_batch} requests queue" if t.max_batch else "")
        )


def add_serving_overhead(
    result: PlanResult,
    rec: Recipe,
    overhead: float,
    source: str,
    by_concurrency: dict[int, float] | None = None,
) -> None:
    """Re-predict the measured basis for a served deployment whose every step costs `overhead`
    seconds beyond its forwards (costmodel.served_speedup), measured once per deployment, e.g.
    by `tune` from its baseline run (served TPOT at concurrency 1 − the probe's plain step);
    `by_concurrency`: the same measured at other concurrency levels (tune: the baseline's TPOT
    there − the probe's plain step grown to that batch), used at those levels.
    Nothing changes without a probe or with overhead ≤ 0."""
    if result.probe is None or not result.predictions or overhead <= 0:
        return
    t = result.probe.timing
    t.serving_overhead, t.serving_source = overhead, source
    t.serving_by_concurrency = {c: o for c, o in (by_concurrency or {}).items() if o >= 0}
    alpha = result.probe.alpha_logits if result.probe.temperature > 0 else result.probe.alpha_greedy
    old_basis = result.basis
    result.predictions = predict_measured(
        result.probe,
        rec.speculative.mode,
        rec.speculative,
        draft_len_max=max(p.draft_len for p in result.predictions),
        concurrency=result.concurrency,
        alpha=alpha.point if alpha else None,
        bls_loop=bls_loop(rec, result.backend),
        requests=result.requests,
    )
    more = ", ".join(f"{o * 1e3:.2f} at c={c}" for c, o in sorted(t.serving_by_concurrency.items()) if c != 1)
    result.basis = (
        f"{old_basis}, served: + {overhead * 1e3:.2f} ms per step{f' ({more})' if more else ''} ({source})"
    )
    if result.recommendation is not None and result.recommendation.basis == old_basis:
        result.recommendation = recommend(result.predictions, result.mode, result.concurrency, result.basis)


def size_and_roofline(
    result: PlanResult,
    rec: Recipe,
    components: list[sz.Component],
    options: PlanOptions,
    *,
    target_dtype: str | None,
    concurrency: list[int],
) -> str:
    """GPU sizing, roofline-basis predictions and the assumed-α table; returns the GPU's name.
    `target_dtype`: the target checkpoint's own dtype when known (a recipe dtype `auto` takes it);
    `concurrency`: the checked levels."""
    gpu, context, tp = options.gpu, options.context, options.tp
    draft_len_max, assumed_alphas = options.draft_len_max, options.assumed_alphas
    spec = rec.speculative
    mode = spec.mode
    if gpu is None:
        gpu = "h100"
        result.notes.append("no --gpu given: sized for h100")
    gpu_obj = sz.get_gpu(gpu)
    dtype = sz.recipe_dtype(rec, target_dtype)
    tau, tau_src, draft_fw = None, None, 0
    if result.probe is not None and result.predictions:
        best_pred = max(result.predictions, key=lambda p: p.speedup[concurrency[0]])
        tau, tau_src = best_pred.expected_tokens, f"probe ({best_pred.label})"
        draft_fw = config_shape(mode, best_pred.settings, spec).draft_forwards
    elif mode != "none":
        # One depth for both: a chain's draft length, or an assumed tree depth of 4 (EAGLE-1/2's
        # num_eagle_layers default); a tree's token budget (EAGLE's max_draft_len, 63) is no depth.
        depth = spec.draft_len if mode in CHAIN_MODES else 4
        tau = cm.expected_tokens(0.8, depth)
        tau_src = "assumed α=0.8 (no probe)"
        draft_fw = draft_forwards(mode, depth)
    result.sizing = sz.size(
        components,
        gpu_obj,
        dtype=dtype,
        max_seq_len=rec.build.max_seq_len,
        context=context,
        kv_fraction=rec.serving.kv_cache_free_gpu_mem_fraction,
        step=sz.SpeculativeStep(tau, tau_src, draft_fw),
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
            assumed_alphas, max(draft_len_max, 10), concurrency, t_roof, d_roof, mode, spec
        )
    if not result.basis:
        result.basis = f"roofline ({gpu_obj.name}, tp={use_tp})"
    return gpu_obj.name


def recommend_plan(result: PlanResult, concurrency: list[int], gpu_name: str | None) -> None:
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


def check_concurrency(levels: Sequence[int]) -> list[int]:
    levels = list(levels)
    if not levels:
        raise UsageError("give at least one concurrency level")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(f"concurrency levels must be positive integers, got {c!r}")
    return sorted(set(levels))
