"""The commands `sdtk bench`, `bench --compare`, `plan` and `tune`: thin entry points.

Each one takes one RunOptions (toolkit.bench.options; its fields may be given as keyword
arguments instead), checks its arguments, resolves its targets (toolkit.bench.targets), runs
them (toolkit.bench.orchestrate: measurements through `measure_side`, then the pure decisions of
toolkit.bench.decide), and writes the reports (toolkit.bench.report), the partial ones too when
a server dies mid-run (`_reported`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from toolkit.bench.decide import plan as plan_mod
from toolkit.bench.decide import tune as tune_mod
from toolkit.bench.decide.plan import PlanOptions as PlanOptions  # re-exported
from toolkit.bench.decide.predict import PlanResult
from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure.loadgen import check_levels
from toolkit.bench.measure.workloads import Workload, workload_for
from toolkit.bench.options import CompareOptions as CompareOptions  # re-exported
from toolkit.bench.options import RunOptions as RunOptions  # re-exported: the CLI builds one
from toolkit.bench.options import TuneOptions as TuneOptions  # re-exported
from toolkit.bench.options import split_changes
from toolkit.bench.orchestrate.compare import run_compare
from toolkit.bench.orchestrate.plan import run_plan
from toolkit.bench.orchestrate.side import Load, measure_side
from toolkit.bench.orchestrate.tune import run_tune
from toolkit.bench.report import write_reports
from toolkit.bench.results import ABResult, BenchResult, TuneResult
from toolkit.bench.targets import DeployFn, deployment_recipe, load_recipe_any, resolve_side
from toolkit.errors import UsageError
from toolkit.hub import chat, gguf

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

R = TypeVar("R", BenchResult, ABResult, TuneResult)


def _reported(run: Callable[[], R], out_dir: Path, *, plots: bool = True) -> R:
    """Run, then write the result's reports into `out_dir`. A run that aborts (BenchAborted with
    its partial result) gets its partial reports written, and the error re-raised naming them."""
    try:
        result = run()
    except BenchAborted as e:
        partial = e.partial
        if partial is None:
            raise
        partial.report_dir = out_dir
        partial.report_files = write_reports(partial, out_dir, plots=plots)
        raise BenchAborted(
            e.message, partial=partial, report_dir=out_dir, cause=e.cause, hint=e.hint
        ) from None
    result.report_dir = out_dir
    result.report_files = write_reports(result, out_dir, plots=plots)
    return result


def bench(
    target: str | Path,
    opts: RunOptions | None = None,
    *,
    concurrency: Sequence[int] | None = (1, 2, 4),
    rate: float | None = None,
    model: str | None = None,
    num_draft_tokens: int | None = None,
    draft_len: int | None = None,
    deploy_fn: DeployFn | None = None,
    **changes: Any,
) -> BenchResult:
    """Benchmark one deployment (URL, workdir or recipe) at concurrency levels or a Poisson rate.

    `opts`: the run options (workload, requests, protocol, reports ...); keyword arguments named
    after RunOptions fields change them (`bench(url, requests=8)`).
    Reports (bench.json, bench.csv, requests.jsonl) go to `opts.report_dir` (default
    <workdir>/reports/bench-<time>); `result.report_dir` says where. A server that dies
    mid-run raises BenchAborted whose `.partial` is the BenchResult so far, reports written.
    `draft_len`: the deployment's γ, for the acceptance length when the target is a URL (a
    recipe or workdir target supplies it).
    Token counts: the server's num_output_tokens; else the deployment's tokenizer
    (`opts.tokenizer`, or the recipe's); with neither the run is refused unless `allow_inexact`.
    Reports default to <workdir>/reports, where workdir is the given one, else the target's
    deployment directory, else ./workdir.
    """
    opts = RunOptions.of(opts, **changes)
    check_levels(None if rate is not None else concurrency, rate)
    side = resolve_side(target, label="target", protocol=opts.protocol, model=model)
    side = dataclasses.replace(side, draft_len=draft_len or side.draft_len)
    wl = as_sent(workload_for(opts), side.recipe)
    load = Load(None if rate is not None else concurrency, rate, num_draft_tokens=num_draft_tokens)
    return _reported(
        lambda: measure_side(side, wl, opts, load, deploy_fn=deploy_fn, label="bench"),
        opts.out_dir("bench", side.workdir),
    )


def as_sent(wl: Workload, recipe: Recipe | None) -> Workload:
    """The workload's prompts as a client of `recipe`'s deployment sends them: through the chat
    template when the recipe applies one (serving.chat_template), with the report lines saying
    so, and where a GGUF target's weights came from."""
    fmt = chat.for_recipe(recipe)
    notes = [fmt.label] + [n for n in (gguf.weights_note(recipe),) if n]
    return wl.rendered(fmt.render, notes)


def compare(
    baseline: str | Path,
    speculative: str | Path,
    opts: RunOptions | None = None,
    options: CompareOptions | None = None,
    *,
    deploy_fn: DeployFn | None = None,
    **changes: Any,
) -> ABResult:
    """Benchmark both sides on one workload and compare them, as `options` says (CompareOptions;
    keyword arguments named after its fields, or after RunOptions fields, change `options` or
    `opts`). Recipe sides are deployed under `opts.workdir` (through `deploy_fn(recipe,
    workdir=...)`). Reports go to `opts.report_dir` (default <workdir>/reports/compare-<time>). A
    dead server raises BenchAborted whose `.partial` is the ABResult so far (its reports already
    written).

    Token counts per side: the server's, else that side's tokenizer (its recipe, or
    `opts.tokenizer` for URL sides); without either the run is refused unless `allow_inexact`."""
    own, run_changes = split_changes(changes, CompareOptions)
    options = dataclasses.replace(options or CompareOptions(), **own)
    opts = RunOptions.of(opts, **run_changes)
    levels = check_levels(options.concurrency, None)
    if options.resamples < 1 or not 0 < options.confidence < 1:
        raise UsageError("resamples must be ≥ 1 and confidence in (0, 1)")
    sides = [
        resolve_side(baseline, label="baseline", protocol=opts.protocol, model=options.baseline_model),
        resolve_side(
            speculative, label="speculative", protocol=opts.protocol, model=options.speculative_model
        ),
    ]
    wl = as_sent(workload_for(opts), sides[1].recipe or sides[0].recipe)
    if options.speculative_draft_len is not None:
        sides[1].draft_len = options.speculative_draft_len
    return _reported(
        lambda: run_compare(sides, wl, opts, options, levels=levels, deploy_fn=deploy_fn),
        opts.out_dir("compare"),
        plots=options.plots,
    )


def plan(
    recipe: Recipe | str | Path,
    opts: RunOptions | None = None,
    options: PlanOptions | None = None,
    *,
    overrides: Sequence[str] = (),
    runtime: Any = None,
    **changes: Any,
) -> PlanResult:
    """Probe acceptance and costs, size the GPU, and recommend a speculative configuration.

    `options`: what to probe, size and predict (PlanOptions); keyword arguments named after its
    fields, or after RunOptions fields, change `options` or `opts` (`plan(recipe, draft_len_max=4)`).
    From `opts` the probe takes the workload, seed, temperature (default greedy) and progress
    (its step messages), and the predictions the requests per level of the `bench --compare` run
    they are for (`requests`, `sdtk bench`'s default unless given: its closed loop is replayed
    with that many). `runtime`: a loaded reference runtime to probe (default: the recipe's).
    `serving_overhead` (PlanOptions): the measured predictions become served ones.
    """
    plan_changes, run_changes = split_changes(changes, PlanOptions)
    options = dataclasses.replace(options or PlanOptions(), **plan_changes)
    opts = RunOptions.of(opts, **run_changes)
    plan_mod.check_plan(options.draft_len_max, options.probe_prompts, options.probe_tokens)
    plan_mod.check_concurrency(options.concurrency)
    rec = load_recipe_any(recipe, overrides)
    wl = as_sent(workload_for(opts), rec)
    result = run_plan(
        rec,
        wl,
        options,
        temperature=opts.temperature or 0.0,
        seed=opts.seed,
        runtime=runtime,
        requests=opts.requests,
        progress=opts.steps("plan"),
    )
    if options.serving_overhead:
        plan_mod.add_serving_overhead(result, rec, options.serving_overhead, "given")
    return result


def _split(changes: dict[str, Any], cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """`changes` as (those named after `cls`'s fields, the rest)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in changes.items() if k in names}, {
        k: v for k, v in changes.items() if k not in names
    }


TUNE_REQUESTS = 16  # per configuration and level: a sweep runs many of them


def tune(
    target: str | Path,
    opts: RunOptions | None = None,
    options: TuneOptions | None = None,
    *,
    deploy_fn: DeployFn | None = None,
    **changes: Any,
) -> TuneResult:
    """Measure speedup per configuration × concurrency and write the best settings.

    `target`: URL, workdir or recipe of the speculative deployment. `options` (TuneOptions):
    `recipe`, the recipe it was deployed from (needed with a URL/workdir target for the sweep,
    the overlay and predictions); `method`: per-request (draft_target via the BLS), redeploy
    (needs deploy_fn), or auto; `check`: with redeploy on the reference backend, also deploy the
    tuned draft_len_schedule and measure it against the best fixed draft length at every
    concurrency, that setting deployed and measured again beside it (`schedule_check`).
    `opts`: the run options (default: TUNE_REQUESTS requests per level). Keyword arguments named
    after TuneOptions or RunOptions fields change `options` or `opts`.
    """
    own, run_changes = split_changes(changes, TuneOptions)
    options = dataclasses.replace(options or TuneOptions(), **own)
    opts = RunOptions.of(opts or RunOptions(requests=TUNE_REQUESTS), **run_changes)
    levels = check_levels(options.concurrency, None)
    side = resolve_side(target, label="target", protocol=opts.protocol, model=options.model)
    if (side.protocol or opts.protocol) == "openai":
        # Both methods need Triton: per-request draft lengths are the BLS's num_draft_tokens, and
        # redeploy deploys each configuration as a Triton deployment (toolkit.deploy.deployed).
        raise UsageError(
            f"sdtk tune measures Triton deployments, not an OpenAI endpoint ({side.ref}): its "
            "per-request method needs Triton's BLS and its redeploy method deploys Triton",
            hint="tune the recipe (`sdtk tune RECIPE`): sdtk's Dynamo workers run the same reference "
            "engine, so the tuned speculative settings hold for them; then compare the Dynamo "
            "deployments with `sdtk bench --compare`",
        )
    rec, rec_path = deployment_recipe(side, options.recipe)
    if rec.mode == "none":
        raise UsageError(f"recipe {rec.display_name} has no speculation to tune (mode none)")
    method = tune_mod.pick_method(
        options.method, rec.mode, live=side.kind != "recipe", can_deploy=deploy_fn is not None
    )
    configs = tune_mod.sweep_configs(rec, options.draft_lens)
    wl = as_sent(workload_for(opts), rec)
    result = tune_mod.new_result(
        side.describe(), rec, method, configs, wl, opts, levels=levels, resamples=options.resamples
    )
    return _reported(
        lambda: run_tune(side, rec, result, wl, opts, options, deploy_fn=deploy_fn, recipe_path=rec_path),
        opts.out_dir("tune", side.workdir),
    )
