"""`sdtk tune`, run: one measurement per configuration (and the baseline), each through
measure_side, then the decisions of toolkit.bench.decide.tune over them.

Two ways to change the draft length:

- per-request (draft-target through `tensorrt_llm_bls`): one deployment, each request sends
  `num_draft_tokens` = γ; γ = 0 is the baseline (the BLS then decodes plainly);
- redeploy: one deployment per configuration through `deploy_fn(recipe, overrides)` with
  `--set speculative.max_draft_len=γ` (or lookahead W/N/G, or a Medusa/EAGLE tree), and the
  baseline as the same recipe with speculation off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.bench.decide import tune as tune_mod
from toolkit.bench.decide.plan import PlanOptions, add_serving_overhead
from toolkit.bench.decide.predict import valid_schedule
from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure.inprocess import probe_possible
from toolkit.bench.measure.records import BenchResult
from toolkit.bench.measure.tokens import TokenCounter, recipe_tokenizer
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import RunOptions, TuneOptions
from toolkit.bench.orchestrate.plan import run_plan
from toolkit.bench.orchestrate.side import Load, live_side, measure_side
from toolkit.bench.results import TuneResult
from toolkit.bench.targets import DeployFn, Side, steps_from_chunks
from toolkit.modes import CHAIN_MODES

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


class Sweep:
    """One tune run's measurements: the same workload, options and token counter for each."""

    def __init__(
        self,
        result: TuneResult,
        wl: Workload,
        opts: RunOptions,
        rec: Recipe,
        *,
        deploy_fn: DeployFn | None,
        model: str | None,
        recipe_path: Path | str,
    ):
        self.result = result
        self.wl = wl
        # Each configuration is deployed into a temporary directory of its own (no `workdir`).
        self.opts = dataclasses.replace(opts, workdir=None)
        # Counts tokens where the server does not: the given tokenizer, else the recipe's.
        self.tokenizer = opts.tokenizer or recipe_tokenizer(rec)
        self.count_tokens = TokenCounter(self.tokenizer) if self.tokenizer else None  # loaded once, shared
        self.deploy_fn = deploy_fn
        self.model = model
        self.recipe_path = Path(recipe_path)
        # n-gram on the reference backend proposes fewer than γ now and then: its steps are
        # counted from the stream, not estimated as drafts ÷ γ (targets.Side.steps_from_chunks).
        self.steps_from_chunks = steps_from_chunks(rec)

    def config(self, overrides: list[str]) -> Side:
        """The recipe with `overrides`, a side to deploy (the redeploy method)."""
        path = self.recipe_path
        return Side(
            "target",
            str(path),
            "recipe",
            recipe_path=path,
            model=self.model,
            overrides=overrides,
            steps_from_chunks=self.steps_from_chunks,
        )

    def measure(
        self,
        side: Side,
        *,
        label: str,
        num_draft_tokens: int | None = None,
        bls: bool = False,
        draft_len: int | None = None,
        levels: list[int] | None = None,
    ) -> BenchResult:
        """One measurement of `side` at every level, or at `levels` (deployed for it when it is
        a recipe)."""
        side = dataclasses.replace(side, draft_len=draft_len, tokenizer=self.tokenizer, twin=None)
        load = Load(
            levels or self.result.concurrency,
            num_draft_tokens=num_draft_tokens,
            bls=bls,
            count_tokens=self.count_tokens,
        )
        return measure_side(side, self.wl, self.opts, load, deploy_fn=self.deploy_fn, label=label)


def run_tune(
    side: Side,
    rec: Recipe,
    result: TuneResult,
    wl: Workload,
    opts: RunOptions,
    options: TuneOptions,
    *,
    deploy_fn: DeployFn | None,
    recipe_path: Path | str,
) -> TuneResult:
    """Measure speedup per configuration × concurrency into `result` (made by toolkit.bench.api).

    A dead server raises BenchAborted whose `.partial` is the result so far. Without a
    `options.plan_result`, `options.predict` runs `plan` for chain modes (when this machine can
    probe the recipe). `recipe_path`: what the redeploy method deploys.
    """
    model, resamples, plan_result = options.model, options.resamples, options.plan_result
    predict, check = options.predict, options.check
    sweep = Sweep(result, wl, opts, rec, deploy_fn=deploy_fn, model=model, recipe_path=recipe_path)
    try:
        if result.method == "per-request":
            _per_request(sweep, side)
        else:
            _redeploy(sweep, rec)
    except BenchAborted as e:
        result.partial, result.error = True, e.cause or e.message
        tune_mod.finish(result, resamples, opts.seed, plan_result)
        raise BenchAborted(
            f"tune stopped: {result.error}", partial=result, cause=e.cause, hint=e.hint
        ) from None
    if plan_result is None and predict and result.mode in CHAIN_MODES and probe_possible(rec)[0]:
        gmax = max(c["draft_len"] for c in result.configs)
        # The probe runs the very requests the sweep serves: the same prompts in the same order
        # (Workload.sample with the run's seed), each to its own max_tokens.
        plan_options = PlanOptions(
            draft_len_max=gmax, concurrency=result.concurrency, probe_prompts=opts.requests, probe_tokens=None
        )
        plan_result = run_plan(
            rec, wl, plan_options, seed=opts.seed, requests=opts.requests, progress=opts.steps("plan")
        )
    if plan_result is not None and rec.backend == "reference":
        by_level = tune_mod.serving_overheads(result.baselines, plan_result)
        overhead = by_level.get(1)
        if overhead is not None:
            result.settings["serving_overhead_ms"] = round(overhead * 1e3, 3)
            result.settings["serving_overhead_ms_by_concurrency"] = {
                c: round(o * 1e3, 3) for c, o in by_level.items()
            }
            add_serving_overhead(
                plan_result,
                rec,
                overhead,
                "served baseline TPOT − in-process plain step, per concurrency",
                by_concurrency=by_level,
            )
    tune_mod.finish(result, resamples, opts.seed, plan_result)
    if check and result.method == "redeploy" and rec.backend == "reference" and len(result.concurrency) > 1:
        _check_schedule(sweep, resamples, opts.seed)
    return result


def _per_request(sweep: Sweep, side: Side) -> None:
    """One deployment; each configuration's requests send its draft length (the BLS)."""
    with live_side(side, protocol=sweep.opts.protocol, deploy_fn=sweep.deploy_fn) as live:
        _sweep(
            sweep,
            lambda: sweep.measure(live, label="γ=0 (baseline)", num_draft_tokens=0, bls=True),
            lambda cfg: sweep.measure(live, label=cfg["label"], num_draft_tokens=cfg["draft_len"], bls=True),
        )


def _redeploy(sweep: Sweep, rec: Recipe) -> None:
    """One deployment per configuration, and the baseline as the recipe with speculation off."""
    chain = tune_mod.chain_sweep(sweep.result.configs)
    base = sweep.config(tune_mod.baseline_overrides(rec))
    _sweep(
        sweep,
        lambda: sweep.measure(base, label="baseline"),
        lambda cfg: sweep.measure(
            sweep.config(cfg["overrides"]), label=cfg["label"], draft_len=cfg["draft_len"] if chain else None
        ),
    )


def _sweep(
    sweep: Sweep, baseline: Callable[[], BenchResult], configuration: Callable[[dict[str, Any]], BenchResult]
) -> None:
    """Every configuration in order, with the baseline before the first, after the last and
    between every few (tune_mod.baseline_due), each configuration labelled with the two runs
    that bracket it."""
    result = sweep.result
    for i, cfg in enumerate(result.configs):
        if tune_mod.baseline_due(i):
            result.baselines.append(baseline())
        cfg["baselines"] = tune_mod.bracket(i)
        result.runs[cfg["label"]] = configuration(cfg)
    result.baselines.append(baseline())


def _check_schedule(sweep: Sweep, resamples: int, seed: int) -> None:
    """Redeploy with the tuned schedule (the reference runtime follows it per batch size, as
    TensorRT-LLM's drafter does) and measure it against the best fixed draft length at every
    level, that configuration deployed and measured again after it: the sweep chose it as the
    highest of noisy cells, so its sweep figure is not a fair yardstick (decide.tune.check_schedule)."""
    result = sweep.result
    sched = valid_schedule(result.schedule)
    if not sched or not tune_mod.chain_sweep(result.configs):
        return
    side = sweep.config(tune_mod.schedule_overrides(sched))
    try:
        run = sweep.measure(side, label="draft_len_schedule", draft_len=sched[1])
    except BenchAborted as e:
        result.partial, result.error = True, f"schedule check: {e.cause or e.message}"
        return
    # Each level's winner again, at the levels it won, right after the schedule (a paired ratio
    # over the same requests; the two runs one deployment apart in time).
    again: dict[str, BenchResult] = {}
    for label, levels in tune_mod.best_fixed_levels(result).items():
        cfg = next(c for c in result.configs if c["label"] == label)
        try:
            again[label] = result.runs[f"{label} (again)"] = sweep.measure(
                sweep.config(cfg["overrides"]),
                label=f"{label} (again)",
                draft_len=cfg["draft_len"],
                levels=levels,
            )
        except BenchAborted as e:  # its levels keep the sweep's cell; the others are measured still
            result.partial = True
            result.error = result.error or f"schedule check, {label} again: {e.cause or e.message}"
    tune_mod.check_schedule(result, run, resamples, seed, again)
