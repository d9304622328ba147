"""`sdtk plan`, run: look the recipe's models up, probe them in process when this machine can,
and hand the measurements to the decisions (toolkit.bench.decide.plan).

The I/O of a plan lives here: the hub look-ups behind sizing, the backend `auto` resolves to,
the memory-bound twin's label, and the probe itself (orchestrate.probe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.bench.decide import plan as plan_mod
from toolkit.bench.decide import sizing as sz
from toolkit.bench.decide.plan import PlanOptions
from toolkit.bench.decide.predict import PlanResult
from toolkit.bench.measure.inprocess import probe_possible, torch_threads
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.orchestrate.probe import run_probe
from toolkit.errors import UsageError
from toolkit.generate import reference_threads
from toolkit.membound import recipe_label
from toolkit.modes import SOURCES
from toolkit.progress import Step

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

_ROLES = SOURCES  # the mode sources besides the target (toolkit.modes)


def run_plan(
    rec: Recipe,
    wl: Workload,
    options: PlanOptions,
    *,
    temperature: float = 0.0,
    seed: int = 0,
    runtime: Any = None,
    requests: int | None = None,
    progress: Step,
) -> PlanResult:
    """Probe acceptance and costs, size the GPU, and recommend a speculative configuration
    for a loaded recipe `rec` on workload `wl` (toolkit.bench.api.plan resolves both), as
    `options` says (PlanOptions; its serving_overhead is the caller's to add).
    `requests`: per level, those of the `sdtk bench --compare` run the measured predictions are
    for (its closed loop is replayed with that many; None: the probed prompts)."""
    gpu, probe, draft_len_max, fetch = options.gpu, options.probe, options.draft_len_max, options.fetch
    plan_mod.check_plan(draft_len_max, options.probe_prompts, options.probe_tokens)
    levels = plan_mod.check_concurrency(options.concurrency)
    mode = rec.speculative.mode
    result = plan_mod.new_plan(rec, resolved_backend(rec), levels)
    result.requests = requests
    components: list[sz.Component] = []
    try:
        components = recipe_components(rec, fetch=fetch)
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
        # As the deployment's model instance runs (one thread unless SDTK_REFERENCE_THREADS):
        # how a step's cost grows with its tokens and rows depends on the thread count.
        threads = options.threads if options.threads is not None else reference_threads()
        with torch_threads(threads):
            measured = run_probe(
                rec, wl, options, runtime=runtime, temperature=temperature, seed=seed, progress=progress
            )
        measured.threads = threads
        plan_mod.predict_from_probe(
            result, rec, measured, draft_len_max=draft_len_max, concurrency=levels, twin=recipe_label(rec)
        )
    gpu_name = None
    if components and (gpu is not None or not do_probe):
        gpu_name = plan_mod.size_and_roofline(
            result, rec, components, options, target_dtype=target_dtype(rec), concurrency=levels
        )
    plan_mod.recommend_plan(result, levels, gpu_name or gpu)
    return result


def recipe_components(recipe: Recipe, *, fetch: str = "metadata") -> list[sz.Component]:
    """Target plus the draft/heads a recipe deploys, with facts from the hub or the catalogue."""
    from toolkit import hub

    sources = [("target", recipe.models.target)] + [
        (role, getattr(recipe.models, role)) for role in _ROLES if getattr(recipe.models, role) is not None
    ]
    out = []
    for role, src in sources:
        r = hub.resolve(src, role=role, recipe=recipe, fetch=fetch)  # type: ignore[arg-type]
        out.append(sz.component_from_facts(role, src.describe(), r.facts))
    return out


def target_dtype(rec: Recipe) -> str | None:
    """The target checkpoint's dtype from what is known offline (None: unknown)."""
    from toolkit import hub

    try:
        return hub.resolve(rec.models.target, role="target", recipe=rec, fetch="none").facts.dtype
    except Exception:  # noqa: BLE001 - dtype falls back to bfloat16
        return None


def resolved_backend(rec: Recipe) -> str:
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
