"""`sdtk tune`: sweep the draft length × concurrency on a live deployment and keep the best.

Two ways to change the draft length:

- per-request (draft-target through `tensorrt_llm_bls`): one deployment, each request sends
  `num_draft_tokens` = γ; γ = 0 is the baseline (the BLS then decodes plainly);
- redeploy: one deployment per configuration through `deploy_fn(recipe, overrides)` with
  `--set speculative.max_draft_len=γ` (or lookahead W/N/G, or a Medusa/EAGLE tree), and the
  baseline as the same recipe with speculation off.

Measured speedups (paired bootstrap, as in `compare`) are set against `plan`'s predictions,
and the best settings become a recipe overlay plus a TRT-LLM `draft_len_schedule`
({concurrency: draft_len}, 0 = off) and `max_concurrency` (written by toolkit.bench.report).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.bench.decide.compare import compare_levels
from toolkit.bench.decide.plan import add_serving_overhead, plan
from toolkit.bench.decide.predict import config_draft_len, valid_schedule
from toolkit.bench.decide.probe import probe_candidates
from toolkit.bench.errors import BenchAborted
from toolkit.bench.measure.inprocess import probe_possible
from toolkit.bench.measure.loadgen import BenchResult, Sampling, TritonEndpoint, run_with
from toolkit.bench.measure.tokens import TokenCounter, recipe_tokenizer
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import RunOptions
from toolkit.bench.proposers import DRAFT_MODEL_MODES, has_draft_model, is_chain
from toolkit.bench.results import Cell, TuneResult
from toolkit.bench.targets import DeployFn, Side, deploy, side_address
from toolkit.errors import UsageError
from toolkit.modes import CHAIN_MODES, MODE_SOURCES

BLS_MODEL = "tensorrt_llm_bls"
SCHEDULE_GOAL = 0.95  # the schedule must reach this share of the best fixed setting's speedup


# --------------------------------------------------------------------------- configurations


def sweep_configs(recipe: Any, draft_lens: Sequence[int] | None) -> list[dict[str, Any]]:
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
        ]
    if draft_lens:
        raise UsageError(f"mode {mode} has no single draft length to sweep", hint="leave out --draft-lens")
    out = []
    for label, settings in probe_candidates(recipe, 8):
        ov = [f"speculative.{k}={_yaml_scalar(v)}" for k, v in settings.items()]
        out.append({"label": label, "draft_len": config_draft_len(mode, settings, spec), "overrides": ov})
    return out


def _yaml_scalar(v: Any) -> str:
    return "null" if v is None else json.dumps(v) if isinstance(v, list) else str(v)


def baseline_overrides(recipe: Any) -> list[str]:
    """The recipe with speculation off: mode none and no draft/heads."""
    ov = ["speculative={mode: none}"]
    src = MODE_SOURCES.get(recipe.mode)
    if src:
        ov.append(f"models.{src}=")
    return ov


def pick_method(method: str, mode: str, side: Side, deploy_fn: DeployFn | None) -> str:
    """auto → per-request for a live deployment with a draft model (BLS num_draft_tokens), else redeploy."""
    if method == "auto":
        method = "per-request" if has_draft_model(mode) and side.kind != "recipe" else "redeploy"
    if method not in ("per-request", "redeploy"):
        raise UsageError(f"method must be per-request, redeploy or auto, got '{method}'")
    if method == "per-request" and not has_draft_model(mode):
        raise UsageError(
            f"per-request draft lengths exist only for {', '.join(DRAFT_MODEL_MODES)} (BLS num_draft_tokens), "
            f"not {mode}",
            hint="use method redeploy with a deploy function",
        )
    if method == "redeploy" and deploy_fn is None:
        raise UsageError(
            "method redeploy needs a deploy function", hint="run it through `sdtk tune`, which provides one"
        )
    return method


def new_result(
    side: Side,
    rec: Any,
    method: str,
    configs: list[dict[str, Any]],
    wl: Workload,
    opts: RunOptions,
    *,
    levels: list[int],
    resamples: int,
) -> TuneResult:
    """The empty result of a sweep: what it will measure, and with which settings."""
    return TuneResult(
        target=side.describe(),
        method=method,
        mode=rec.mode,
        workload=wl.to_dict(),
        settings={
            "requests": opts.requests,
            "warmup": opts.warmup,
            "seed": opts.seed,
            "protocol": opts.protocol,
            "temperature": opts.temperature,
            "timeout": opts.timeout,
            "resamples": resamples,
            "recipe": rec.display_name,
        },
        concurrency=levels,
        draft_lens=[c["draft_len"] for c in configs],
        configs=configs,
    )


# --------------------------------------------------------------------------- the sweep


class Sweep:
    """One tune run's measurements: the same workload, options and token counter for each."""

    def __init__(self, result: TuneResult, wl: Workload, opts: RunOptions, tokenizer: str | None):
        self.result = result
        self.wl = wl
        self.opts = opts
        self.tokenizer = tokenizer
        self.count_tokens = TokenCounter(tokenizer) if tokenizer else None  # loaded once, shared

    def measure(
        self,
        url: str,
        model: str,
        *,
        label: str,
        num_draft_tokens: int | None = None,
        bls: bool = False,
        draft_len: int | None = None,
    ) -> BenchResult:
        opts = self.opts
        sampling = Sampling(temperature=opts.temperature, num_draft_tokens=num_draft_tokens)

        async def go() -> BenchResult:
            ep = TritonEndpoint(url, model=model, protocol=opts.protocol, timeout=opts.timeout)
            if bls:
                try:
                    ep = await _bls_endpoint(ep, url, opts.protocol, opts.timeout)
                except BaseException:
                    await ep.close()
                    raise
            return await run_with(
                ep,
                self.wl,
                opts,
                concurrency=self.result.concurrency,
                sampling=sampling,
                label=label,
                draft_len=draft_len,
                tokenizer=self.tokenizer,
                count_tokens=self.count_tokens,
            )

        return asyncio.run(go())


def tune(
    side: Side,
    rec: Any,
    result: TuneResult,
    wl: Workload,
    opts: RunOptions,
    *,
    deploy_fn: DeployFn | None,
    model: str | None,
    resamples: int,
    plan_result: Any,
    predict: bool,
    check: bool,
    recipe_path: Path | str,
) -> TuneResult:
    """Measure speedup per configuration × concurrency into `result` (made by toolkit.bench.api).

    A dead server raises BenchAborted whose `.partial` is the result so far. Without a
    `plan_result`, `predict` runs `plan` for chain modes (when this machine can probe the recipe).
    `recipe_path`: what the redeploy method deploys.
    """
    configs = result.configs
    levels = result.concurrency
    chain_sweep = all(c["overrides"][0].startswith("speculative.max_draft_len") for c in configs)
    sweep = Sweep(result, wl, opts, recipe_tokenizer(rec))  # counts tokens where the server does not
    path = recipe_path
    try:
        if result.method == "per-request":
            with side_address(side, protocol=opts.protocol, deploy_fn=deploy_fn) as (url, mdl):
                result.baseline = sweep.measure(
                    url, mdl, label="γ=0 (baseline)", num_draft_tokens=0, bls=True
                )
                for cfg in configs:
                    result.runs[cfg["label"]] = sweep.measure(
                        url, mdl, label=cfg["label"], num_draft_tokens=cfg["draft_len"], bls=True
                    )
        else:
            with deploy(deploy_fn, path, baseline_overrides(rec), protocol=opts.protocol) as (url, mdl):
                result.baseline = sweep.measure(url, model or mdl, label="baseline")
            for cfg in configs:
                with deploy(deploy_fn, path, cfg["overrides"], protocol=opts.protocol) as (url, mdl):
                    result.runs[cfg["label"]] = sweep.measure(
                        url,
                        model or mdl,
                        label=cfg["label"],
                        draft_len=cfg["draft_len"] if chain_sweep else None,
                    )
    except BenchAborted as e:
        result.partial, result.error = True, e.cause or e.message
        finish(result, resamples, opts.seed, plan_result)
        raise BenchAborted(
            f"tune stopped: {result.error}", partial=result, cause=e.cause, hint=e.hint
        ) from None
    if plan_result is None and predict and result.mode in CHAIN_MODES and probe_possible(rec)[0]:
        gmax = max(c["draft_len"] for c in configs)
        plan_result = plan(
            rec, wl, gamma_max=gmax, concurrency=levels, seed=opts.seed, progress=opts.progress
        )
    if plan_result is not None and rec.backend == "reference":
        overhead = serving_overhead(result.baseline, plan_result)
        if overhead is not None:
            result.settings["serving_overhead_ms"] = round(overhead * 1e3, 3)
            add_serving_overhead(
                plan_result, rec, overhead, "served baseline TPOT at c=1 − in-process plain step"
            )
    finish(result, resamples, opts.seed, plan_result)
    sched = valid_schedule(result.schedule)
    if (
        check
        and result.method == "redeploy"
        and chain_sweep
        and rec.backend == "reference"
        and sched
        and len(levels) > 1
    ):
        # Redeploy with the schedule (the reference runtime follows it per batch size, as
        # TensorRT-LLM's drafter does) and measure it against every fixed draft length.
        flow = "{" + ", ".join(f"{c}: {g}" for c, g in sched.items()) + "}"
        ov = [f"speculative.max_draft_len={sched[1]}", f"speculative.draft_len_schedule={flow}"]
        try:
            with deploy(deploy_fn, path, ov, protocol=opts.protocol) as (url, mdl):
                run = sweep.measure(url, model or mdl, label="draft_len_schedule", draft_len=sched[1])
        except BenchAborted as e:
            result.partial, result.error = True, f"schedule check: {e.cause or e.message}"
        else:
            check_schedule(result, run, resamples, opts.seed)
    return result


def serving_overhead(baseline: BenchResult | None, plan_result: Any) -> float | None:
    """What a served step costs beyond the forwards, once per deployment: the baseline's median
    TPOT at concurrency 1 minus the probe's in-process plain step (None when either is missing,
    e.g. a deployment that does not stream, or when the difference is not positive)."""
    probe = getattr(plan_result, "probe", None)
    level = baseline.level(1) if baseline is not None else None
    if probe is None or level is None:
        return None
    tpot = level.summary()["tpot_s"]["p50"]
    if tpot is None:
        return None
    o = float(tpot) - probe.timing.t_base
    return o if o > 0 else None


async def _bls_endpoint(ep: TritonEndpoint, url: str, protocol: str, timeout: float) -> TritonEndpoint:
    """Per-request draft lengths need the model with a `num_draft_tokens` input (the BLS)."""
    await ep.check()
    if "num_draft_tokens" in ep.inputs:
        return ep
    if ep.model != BLS_MODEL:
        await ep.close()
        ep = TritonEndpoint(url, model=BLS_MODEL, protocol=protocol, timeout=timeout)
        with contextlib.suppress(Exception):  # reported below, with the fix
            await ep.check()
        if "num_draft_tokens" in ep.inputs:
            return ep
    raise UsageError(
        f"neither the served model nor {BLS_MODEL} at {url} takes num_draft_tokens",
        hint="per-request draft lengths need a draft_target deployment (BLS); use method redeploy",
    )


def finish(result: TuneResult, resamples: int, seed: int, plan_result: Any) -> None:
    base = result.baseline
    if base is not None:
        for cfg in result.configs:
            run = result.runs.get(cfg["label"])
            if run is None:
                continue
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
    if plan_result is not None:
        for p in plan_result.predictions:
            g = p.draft_len
            if g in result.draft_lens:
                result.predicted[g] = {
                    c: p.speedup.get(c, p.speedup[min(p.speedup)]) for c in result.concurrency
                }
        errs = [
            abs(result.predicted[c.draft_len][c.concurrency] - c.speedup.point)
            for c in result.cells
            if c.draft_len in result.predicted and c.speedup.point is not None
        ]
        result.prediction_error = statistics.median(errs) if errs else None
    chain = result.mode in CHAIN_MODES and all(
        c["overrides"][0].startswith("speculative.max_draft_len") for c in result.configs
    )
    for conc in result.concurrency:
        cells = [c for c in result.cells if c.concurrency == conc and c.speedup.point is not None]
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
            result.llmapi_fragment = {
                "speculative_config": {
                    "max_draft_len": sched[1],
                    "draft_len_schedule": sched,
                    "max_concurrency": result.max_concurrency,
                }
            }


def _point(cell: Cell) -> float:
    """A cell's speedup point estimate; cells without one are left out before ranking."""
    assert cell.speedup.point is not None
    return cell.speedup.point


def check_schedule(result: TuneResult, run: BenchResult, resamples: int, seed: int) -> None:
    """Compare the deployment running the tuned schedule with the best fixed draft length
    measured at each concurrency (same baseline, same requests)."""
    assert result.baseline is not None
    result.schedule_run = run
    for lc in compare_levels(result.baseline, run, resamples=resamples, seed=seed):
        cells = [c for c in result.cells if c.concurrency == lc.concurrency and c.speedup.point is not None]
        if not cells or lc.speedup.point is None:
            continue
        best = max(cells, key=_point)
        result.schedule_check[lc.concurrency] = {
            "scheduled": lc.speedup.point,
            "scheduled_ci": lc.speedup.to_dict(),
            "best_fixed": best.speedup.point,
            "best_fixed_label": best.label,
            "ratio": lc.speedup.point / best.speedup.point if best.speedup.point else None,
        }
    ratios = [v["ratio"] for v in result.schedule_check.values() if v["ratio"] is not None]
    result.schedule_holds = bool(ratios) and min(ratios) >= SCHEDULE_GOAL


def _overlay(overrides: list[str]) -> dict[str, Any]:
    """--set overrides → the nested mapping a recipe overlay holds."""
    from toolkit.recipe import apply_overrides  # pydantic: only once there is an overlay to write

    return apply_overrides({}, overrides)
