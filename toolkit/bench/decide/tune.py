"""`sdtk tune`: sweep the draft length × concurrency on a live deployment and keep the best.

Two ways to change the draft length:

- per-request (draft-target through `tensorrt_llm_bls`): one deployment, each request sends
  `num_draft_tokens` = γ; γ = 0 is the baseline (the BLS then decodes plainly);
- redeploy: one deployment per configuration through `deploy_fn(recipe, overrides)` with
  `--set speculative.max_draft_len=γ` (or lookahead W/N/G, or a Medusa/EAGLE tree), and the
  baseline as the same recipe with speculation off.

Measured speedups (paired bootstrap, as in `compare`) are set against `plan`'s predictions,
and the best settings become a recipe overlay plus a TRT-LLM `draft_len_schedule`
({concurrency: draft_len}, 0 = off; keys are the first concurrency each length applies to) and
`max_concurrency` (written by toolkit.bench.report); the LLM-API fragment renders that schedule so
that TensorRT-LLM 1.2 and 1.3 read it alike (toolkit.modes.load_aware.render_schedule).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolkit.bench.decide.candidates import probe_candidates
from toolkit.bench.decide.compare import compare_levels
from toolkit.bench.decide.predict import PlanResult, config_draft_len, valid_schedule
from toolkit.bench.measure.records import BenchResult
from toolkit.bench.options import RunOptions
from toolkit.bench.proposers import DRAFT_MODEL_MODES, has_draft_model, is_chain, knob_of
from toolkit.bench.results import Cell, LevelComparison, TuneResult
from toolkit.errors import UsageError
from toolkit.modes import CHAIN_MODES, MODE_SOURCES
from toolkit.modes.load_aware import render_schedule

if TYPE_CHECKING:
    from toolkit.bench.measure.workloads import Workload
    from toolkit.recipe import Recipe

SCHEDULE_GOAL = 0.95  # the schedule must reach this share of the best fixed setting's speedup


# --------------------------------------------------------------------------- configurations


def sweep_configs(recipe: Recipe, draft_lens: Sequence[int] | None) -> list[dict[str, Any]]:
    """(label, draft_len, overrides) for each configuration to measure."""
    spec = recipe.speculative
    mode = spec.mode
    if is_chain(spec):
        lens = list(draft_lens) if draft_lens else list(range(1, 9))
        for g in lens:
            if isinstance(g, bool) or not isinstance(g, int) or g < 1:
                raise UsageError(f"draft lengths must be positive integers, got {g!r}")
        return [
            {"label": f"γ={g}", "draft_len": g, "overrides": [f"speculative.max_draft_len={g}"]} for g in lens
        ] + knob_configs(recipe)
    if draft_lens:
        raise UsageError(f"mode {mode} has no single draft length to sweep", hint="leave out --draft-lens")
    out = []
    for label, settings in probe_candidates(recipe, 8):
        ov = [f"speculative.{k}={_yaml_scalar(v)}" for k, v in settings.items()]
        out.append({"label": label, "draft_len": config_draft_len(mode, settings, spec), "overrides": ov})
    return out


def knob_configs(recipe: Recipe) -> list[dict[str, Any]]:
    """The mode's other knob (its proposer facts' `knob`: the SA enhancer's threshold, SA's match
    size), each value but the recipe's own at the recipe's own draft length. They take part in the
    best configuration and its overlay; the draft_len_schedule is the draft lengths' own (at the
    recipe's knob value), since TensorRT-LLM's schedule varies the draft length alone."""
    spec: Any = recipe.speculative
    knob = knob_of(spec)
    if knob is None:
        return []
    path, values = knob
    own: Any = spec
    for part in path.split("."):
        own = getattr(own, part)
    g = spec.max_draft_len
    return [
        {
            "label": f"{path.rsplit('.', 1)[-1]}={v} γ={g}",
            "draft_len": g,
            "overrides": [f"speculative.max_draft_len={g}", f"speculative.{path}={v}"],
            "knob": {path: v},
        }
        for v in values
        if v != own
    ]


def _draft_lens_only(result: TuneResult) -> set[str]:
    """The labels of the configurations that vary the draft length alone (no `knob`)."""
    return {c["label"] for c in result.configs if "knob" not in c}


def _yaml_scalar(v: Any) -> str:
    return "null" if v is None else json.dumps(v) if isinstance(v, list) else str(v)


def baseline_overrides(recipe: Recipe) -> list[str]:
    """The recipe with speculation off: mode none and no draft/heads."""
    ov = ["speculative={mode: none}"]
    src = MODE_SOURCES.get(recipe.mode)
    if src:
        ov.append(f"models.{src}=")
    return ov


def pick_method(method: str, mode: str, *, live: bool, can_deploy: bool) -> str:
    """auto → per-request for a `live` deployment (not a recipe to deploy) with a draft model (BLS
    num_draft_tokens), else redeploy (which needs a deploy function: `can_deploy`)."""
    if method == "auto":
        method = "per-request" if has_draft_model(mode) and live else "redeploy"
    if method not in ("per-request", "redeploy"):
        raise UsageError(f"method must be per-request, redeploy or auto, got '{method}'")
    if method == "per-request" and not has_draft_model(mode):
        raise UsageError(
            f"per-request draft lengths exist only for {', '.join(DRAFT_MODEL_MODES)} (BLS num_draft_tokens), "
            f"not {mode}",
            hint="use method redeploy with a deploy function",
        )
    if method == "redeploy" and not can_deploy:
        raise UsageError(
            "method redeploy needs a deploy function", hint="run it through `sdtk tune`, which provides one"
        )
    return method


def new_result(
    target: str,
    rec: Recipe,
    method: str,
    configs: list[dict[str, Any]],
    wl: Workload,
    opts: RunOptions,
    *,
    levels: list[int],
    resamples: int,
) -> TuneResult:
    """The empty result of a sweep of `target` (as described): what it will measure, and with
    which settings."""
    return TuneResult(
        target=target,
        method=method,
        mode=rec.mode,
        workload=wl.to_dict(),
        settings={**opts.settings(duration=False), "resamples": resamples, "recipe": rec.display_name},
        concurrency=levels,
        draft_lens=[c["draft_len"] for c in configs],
        configs=configs,
    )


# --------------------------------------------------------------------------- the decisions


def chain_sweep(configs: list[dict[str, Any]]) -> bool:
    """Whether the configurations sweep a chain's draft length (γ) alone."""
    return all(c["overrides"][0].startswith("speculative.max_draft_len") for c in configs)


def schedule_overrides(sched: dict[int, int]) -> list[str]:
    """The --set overrides that deploy a draft_len_schedule (predict.valid_schedule's)."""
    flow = "{" + ", ".join(f"{c}: {g}" for c, g in sched.items()) + "}"
    return [f"speculative.max_draft_len={sched[1]}", f"speculative.draft_len_schedule={flow}"]


def serving_overheads(baselines: Sequence[BenchResult], plan_result: PlanResult | None) -> dict[int, float]:
    """What a served step costs beyond its forwards at each concurrency level the baseline ran,
    measured once per deployment: its median TPOT there (the mean over its runs) minus the
    probe's plain step grown to that batch (StepTiming.growths; every row of a batch gets a
    response each step, so this grows with the batch). Levels without a TPOT (a deployment
    that does not stream), or where the difference is not positive, are left out; nothing
    without a probe."""
    probe = getattr(plan_result, "probe", None)
    if probe is None:
        return {}
    out: dict[int, float] = {}
    levels = sorted({lv.concurrency for b in baselines for lv in b.levels if lv.concurrency is not None})
    for c in levels:
        tpots = []
        for b in baselines:
            level = b.level(c)
            tpot = level.summary()["tpot_s"]["p50"] if level is not None else None
            if tpot is not None:
                tpots.append(float(tpot))
        if tpots:
            o = statistics.fmean(tpots) - probe.timing.t_base * probe.timing.growths(1, c)[0]
            if o > 0:
                out[c] = o
    return out


BASELINE_EVERY = 4  # configurations measured between two runs of the baseline


def bracket(index: int, every: int = BASELINE_EVERY) -> list[int]:
    """The baseline runs around configuration `index` (0-based, in run order), when the baseline
    runs before configuration 0, every, 2·every, ... and once more after the last: drift of the
    machine during the sweep then moves a configuration and its baseline alike."""
    k = index // every
    return [k, k + 1]


def baseline_due(index: int, every: int = BASELINE_EVERY) -> bool:
    """Whether the baseline runs before configuration `index` (and it runs again after the last)."""
    return index % every == 0


def finish(result: TuneResult, resamples: int, seed: int, plan_result: PlanResult | None) -> None:
    """Fill `result` from its runs: cells, predictions set against them, schedule, best, overlay."""
    if result.baselines:
        for cfg in result.configs:
            run = result.runs.get(cfg["label"])
            if run is None:
                continue
            base = result.baselines_of(cfg)
            for lc in compare_levels(base, run, resamples=resamples, seed=seed):
                acc = lc.speculative["acceptance"]
                result.cells.append(
                    Cell(
                        cfg["label"],
                        cfg["draft_len"],
                        lc.concurrency,
                        lc.speedup,
                        lc.tpot_speedup,
                        acc["rate"],
                        acc["length"],
                        lc.speculative["output_tok_s"],
                    )
                )
    plain = _draft_lens_only(result)
    if plan_result is not None:
        result.plan = plan_result.to_dict()
        for p in plan_result.predictions:
            g = p.draft_len
            if g in result.draft_lens:
                result.predicted[g] = {
                    c: p.speedup.get(c, p.speedup[min(p.speedup)]) for c in result.concurrency
                }
        errs = [  # plan predicts the recipe's own knob value: the draft lengths' cells only
            abs(result.predicted[c.draft_len][c.concurrency] - c.speedup.point)
            for c in result.cells
            if c.draft_len in result.predicted and c.speedup.point is not None and c.label in plain
        ]
        result.prediction_error = statistics.median(errs) if errs else None
    chain = result.mode in CHAIN_MODES and chain_sweep(result.configs)
    for conc in result.concurrency:
        cells = [
            c
            for c in result.cells
            if c.concurrency == conc and c.speedup.point is not None and c.label in plain
        ]
        if not cells:
            continue
        top = max(cells, key=lambda c: (_point(c), -c.draft_len))
        result.schedule[conc] = top.draft_len if _point(top) > 1 else 0
    if result.schedule:
        c0 = min(result.schedule)
        cells0 = [c for c in result.cells if c.concurrency == c0 and c.speedup.point is not None]
        top0 = max(cells0, key=lambda c: (_point(c), -c.draft_len))
        cfg = next(c for c in result.configs if c["label"] == top0.label)
        result.best = {
            "label": top0.label,
            "draft_len": top0.draft_len,
            "concurrency": c0,
            "speedup": top0.speedup.to_dict(),
            "overrides": cfg["overrides"],
        }
        on = [c for c, g in result.schedule.items() if g > 0]
        result.max_concurrency = max(on) if on else 0
        result.overlay = _overlay(cfg["overrides"])
        sched = valid_schedule(result.schedule)
        if chain and sched is not None:
            # For TensorRT-LLM itself: one draft_len_schedule (never with max_concurrency, which
            # 1.3 refuses beside it) that 1.2 (keys: lower bounds) and 1.3 (upper bounds, PR
            # #10860) read as sdtk's schedule up to the largest concurrency measured.
            largest = max(max(result.concurrency), max(sched))
            result.llmapi_fragment = {
                "speculative_config": {
                    "max_draft_len": sched[1],
                    "draft_len_schedule": render_schedule(sched, None, largest),
                }
            }


def _point(cell: Cell) -> float:
    """A cell's speedup point estimate; cells without one are left out before ranking."""
    assert cell.speedup.point is not None
    return cell.speedup.point


def _best_cell(result: TuneResult, concurrency: int) -> Cell | None:
    """The draft length with the highest measured speedup at this concurrency (None: none): what
    the schedule check sets the schedule against (knob configurations are not the schedule's)."""
    plain = _draft_lens_only(result)
    cells = [
        c
        for c in result.cells
        if c.concurrency == concurrency and c.speedup.point is not None and c.label in plain
    ]
    return max(cells, key=_point) if cells else None


def best_fixed_levels(result: TuneResult) -> dict[str, list[int]]:
    """label → the levels where that configuration won the sweep: what the schedule check
    measures again (each label once, in level order)."""
    out: dict[str, list[int]] = {}
    for c in result.concurrency:
        if (best := _best_cell(result, c)) is not None:
            out.setdefault(best.label, []).append(c)
    return out


def check_schedule(
    result: TuneResult,
    run: BenchResult,
    resamples: int,
    seed: int,
    again: dict[str, BenchResult] | None = None,
) -> None:
    """Compare the deployment running the tuned schedule with the best fixed draft length at
    each concurrency. `again`: the best fixed configurations measured afresh after the schedule
    (label → run at the levels it won, `best_fixed_levels`); the ratio is then the schedule's
    mean per-request rate over that run's on the same requests (paired bootstrap), with its CI
    (`ratio_source` "paired"). The sweep's own cell is the highest of several noisy ones (the
    winner's curse: its point is biased upward), so a level without a fresh run falls back on
    it (`ratio_source` "sweep": the schedule's speedup ÷ the cell's, each against its baseline
    runs), which leans against the schedule."""
    assert result.baselines
    result.schedule_run = run
    base = result.baselines[-1]  # the baseline run nearest in time

    def by_level(b: BenchResult, s: BenchResult) -> dict[int, LevelComparison]:
        return {lc.concurrency: lc for lc in compare_levels(b, s, resamples=resamples, seed=seed)}

    fresh = {label: (by_level(r, run), by_level(base, r)) for label, r in (again or {}).items()}
    for c, lc in by_level(base, run).items():
        best = _best_cell(result, c)
        if best is None or lc.speedup.point is None:
            continue
        pair, again_vs_base = fresh.get(best.label, ({}, {}))
        head = pair.get(c)
        entry: dict[str, Any] = {
            "scheduled": lc.speedup.point,
            "scheduled_ci": lc.speedup.to_dict(),
            "best_fixed": best.speedup.point,
            "best_fixed_label": best.label,
        }
        if head is not None and head.paired and head.speedup.point is not None:
            entry.update(
                best_fixed_again=again_vs_base[c].speedup.point,
                ratio=head.speedup.point,
                ratio_ci=head.speedup.to_dict(),
                ratio_source="paired",
            )
        else:
            ratio = lc.speedup.point / best.speedup.point if best.speedup.point else None
            entry.update(best_fixed_again=None, ratio=ratio, ratio_ci=None, ratio_source="sweep")
        result.schedule_check[c] = entry
    ratios = [v["ratio"] for v in result.schedule_check.values() if v["ratio"] is not None]
    result.schedule_holds = bool(ratios) and min(ratios) >= SCHEDULE_GOAL


def _overlay(overrides: list[str]) -> dict[str, Any]:
    """--set overrides → the nested mapping a recipe overlay holds."""
    from toolkit.recipe import apply_overrides  # pydantic: only once there is an overlay to write

    return apply_overrides({}, overrides)
