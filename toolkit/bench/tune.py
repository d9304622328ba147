"""`sdtk tune`: sweep the draft length × concurrency on a live deployment and keep the best.

Two ways to change the draft length:

- per-request (draft-target through `tensorrt_llm_bls`): one deployment, each request sends
  `num_draft_tokens` = γ; γ = 0 is the baseline (the BLS then decodes plainly);
- redeploy: one deployment per configuration through `deploy_fn(recipe, overrides)` with
  `--set speculative.max_draft_len=γ` (or lookahead W/N/G, or a Medusa/EAGLE tree), and the
  baseline as the same recipe with speculation off.

Measured speedups (paired bootstrap, as in `compare`) are set against `plan`'s predictions,
and the best settings are written as a recipe overlay plus a TRT-LLM `draft_len_schedule`
({concurrency: draft_len}, 0 = off) and `max_concurrency`.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.bench.ab import DeployFn, compare_levels, deployed_address, deployed_recipe, resolve_side
from toolkit.bench.errors import BenchAborted
from toolkit.bench.loadgen import (
    DEFAULT_TIMEOUT,
    BenchResult,
    Sampling,
    TritonEndpoint,
    check_levels,
    run_load,
)
from toolkit.bench.metrics import Interval
from toolkit.bench.plan import valid_schedule
from toolkit.bench.tokens import TokenCounter, recipe_tokenizer
from toolkit.bench.workloads import Workload, load_workload
from toolkit.errors import UsageError
from toolkit.modes import CHAIN_MODES

BLS_MODEL = "tensorrt_llm_bls"


@dataclass
class Cell:
    label: str
    draft_len: int
    concurrency: int
    speedup: Interval
    tpot_speedup: Interval
    acceptance_rate: float | None
    acceptance_length: float | None
    output_tok_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "draft_len": self.draft_len,
            "concurrency": self.concurrency,
            "speedup": self.speedup.to_dict(),
            "tpot_speedup": self.tpot_speedup.to_dict(),
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "output_tok_s": self.output_tok_s,
        }


@dataclass
class TuneResult:
    target: str
    method: str  # per-request | redeploy
    mode: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    concurrency: list[int]
    draft_lens: list[int]
    configs: list[dict[str, Any]] = field(default_factory=list)  # label, draft_len, overrides
    cells: list[Cell] = field(default_factory=list)
    baseline: BenchResult | None = None
    runs: dict[str, BenchResult] = field(default_factory=dict)
    predicted: dict[int, dict[int, float]] = field(default_factory=dict)  # draft_len → concurrency → S
    prediction_error: float | None = None  # median |predicted − measured|
    best: dict[str, Any] | None = None  # the configuration to use at the lowest concurrency
    schedule: dict[int, int] = field(default_factory=dict)
    max_concurrency: int | None = None
    overlay: dict[str, Any] = field(default_factory=dict)
    llmapi_fragment: dict[str, Any] = field(default_factory=dict)
    overlay_path: Path | None = None
    # The tuned draft_len_schedule deployed and measured: concurrency -> {scheduled, best_fixed,
    # best_fixed_label, ratio}; `schedule_holds`: ratio >= SCHEDULE_GOAL at every level.
    schedule_check: dict[int, dict[str, Any]] = field(default_factory=dict)
    schedule_holds: bool | None = None
    schedule_run: BenchResult | None = None
    report_dir: Path | None = None
    report_files: list[Path] = field(default_factory=list)
    partial: bool = False
    error: str | None = None

    def cell(self, draft_len: int, concurrency: int) -> Cell | None:
        return next(
            (c for c in self.cells if c.draft_len == draft_len and c.concurrency == concurrency), None
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "tune",
            "target": self.target,
            "method": self.method,
            "mode": self.mode,
            "workload": self.workload,
            "settings": self.settings,
            "concurrency": self.concurrency,
            "draft_lens": self.draft_lens,
            "configs": self.configs,
            "cells": [c.to_dict() for c in self.cells],
            "predicted": {str(g): {str(c): s for c, s in v.items()} for g, v in self.predicted.items()},
            "prediction_error": self.prediction_error,
            "best": self.best,
            "schedule": {str(k): v for k, v in self.schedule.items()},
            "max_concurrency": self.max_concurrency,
            "overlay": self.overlay,
            "llmapi_fragment": self.llmapi_fragment,
            "overlay_path": str(self.overlay_path) if self.overlay_path else None,
            "schedule_check": {str(c): v for c, v in self.schedule_check.items()},
            "schedule_holds": self.schedule_holds,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "report_files": [str(p) for p in self.report_files],
            "partial": self.partial,
            "error": self.error,
            "runs": {k: v.to_dict() for k, v in self.runs.items()},
            "baseline_run": self.baseline.to_dict() if self.baseline else None,
        }

    def render(self) -> str:
        from toolkit.bench.report import render_tune

        return render_tune(self)


# --------------------------------------------------------------------------- configurations


def sweep_configs(recipe: Any, draft_lens: Sequence[int] | None) -> list[dict[str, Any]]:
    """(label, draft_len, overrides) for each configuration to measure."""
    spec = recipe.speculative
    mode = spec.mode
    if mode in CHAIN_MODES and not (mode == "eagle3" and spec.eagle_choices is not None):
        lens = list(draft_lens) if draft_lens else list(range(1, 9))
        for g in lens:
            if isinstance(g, bool) or not isinstance(g, int) or g < 1:
                raise UsageError(f"draft lengths must be positive integers, got {g!r}")
        return [
            {"label": f"γ={g}", "draft_len": g, "overrides": [f"speculative.max_draft_len={g}"]} for g in lens
        ]
    if draft_lens:
        raise UsageError(f"mode {mode} has no single draft length to sweep", hint="leave out --draft-lens")
    from toolkit.bench.plan import _draft_len, probe_candidates

    out = []
    for label, settings in probe_candidates(recipe, 8):
        ov = [f"speculative.{k}={_yaml_scalar(v)}" for k, v in settings.items()]
        out.append({"label": label, "draft_len": _draft_len(mode, settings, spec), "overrides": ov})
    return out


def _yaml_scalar(v: Any) -> str:
    import json

    return "null" if v is None else json.dumps(v) if isinstance(v, list) else str(v)


def baseline_overrides(recipe: Any) -> list[str]:
    """The recipe with speculation off: mode none and no draft/heads."""
    from toolkit.recipe import MODE_SOURCES

    ov = ["speculative={mode: none}"]
    src = MODE_SOURCES.get(recipe.mode)
    if src:
        ov.append(f"models.{src}=")
    return ov


# --------------------------------------------------------------------------- the command


def tune(
    target: str | Path,
    *,
    recipe: str | Path | None = None,
    method: str = "auto",
    draft_lens: Sequence[int] | None = None,
    concurrency: Sequence[int] | None = (1, 2, 4),
    workload: str | Workload | None = "code",
    prompts_file: str | Path | None = None,
    requests: int = 16,
    warmup: int = 2,
    seed: int = 0,
    max_tokens: int | None = None,
    protocol: str = "grpc",
    model: str | None = None,
    temperature: float | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    resamples: int = 2000,
    deploy_fn: DeployFn | None = None,
    plan_result: Any = None,
    predict: bool = True,
    report_dir: str | Path | None = None,
    workdir: str | Path | None = None,
    progress: bool = True,
    check: bool = True,
) -> TuneResult:
    """Measure speedup per configuration × concurrency and write the best settings.

    `target`: URL, workdir or recipe of the speculative deployment. `recipe`: the recipe it was
    deployed from (needed with a URL/workdir target for the sweep, the overlay and predictions).
    method: per-request (draft_target via the BLS), redeploy (needs deploy_fn), or auto.
    `check`: with redeploy on the reference backend, also deploy the tuned draft_len_schedule
    and measure it against the best fixed draft length at every concurrency (`schedule_check`).
    """
    from toolkit.bench.plan import load_recipe_any
    from toolkit.bench.report import default_report_dir

    levels = check_levels(concurrency, None)
    side = resolve_side(target, label="target", protocol=protocol, model=model)
    rec_ref: Any = recipe if recipe is not None else side.recipe_path
    if rec_ref is None and side.workdir is not None:
        rec_ref = deployed_recipe(side.workdir)  # what `sdtk deploy` saved next to state.json
    if rec_ref is None:
        raise UsageError(
            "tune needs the recipe the deployment was made from",
            hint="pass --recipe RECIPE (it defines the mode, the draft lengths and the overlay)",
        )
    rec = load_recipe_any(rec_ref)
    mode = rec.mode
    if mode == "none":
        raise UsageError(f"recipe {rec.display_name} has no speculation to tune (mode none)")
    if method == "auto":
        method = "per-request" if mode == "draft_target" and side.kind != "recipe" else "redeploy"
    if method not in ("per-request", "redeploy"):
        raise UsageError(f"method must be per-request, redeploy or auto, got '{method}'")
    if method == "per-request" and mode != "draft_target":
        raise UsageError(
            f"per-request draft lengths exist only for draft_target (BLS num_draft_tokens), not {mode}",
            hint="use method redeploy with a deploy function",
        )
    if method == "redeploy" and deploy_fn is None:
        raise UsageError(
            "method redeploy needs a deploy function", hint="run it through `sdtk tune`, which provides one"
        )
    configs = sweep_configs(rec, draft_lens)
    chain_sweep = all(c["overrides"][0].startswith("speculative.max_draft_len") for c in configs)
    wl = (
        workload
        if isinstance(workload, Workload)
        else load_workload(
            None if prompts_file else workload, prompts_file=prompts_file, max_tokens=max_tokens, seed=seed
        )
    )
    if isinstance(workload, Workload) and max_tokens is not None:
        wl = wl.with_max_tokens(max_tokens)
    result = TuneResult(
        target=side.describe(),
        method=method,
        mode=mode,
        workload=wl.to_dict(),
        settings={
            "requests": requests,
            "warmup": warmup,
            "seed": seed,
            "protocol": protocol,
            "temperature": temperature,
            "timeout": timeout,
            "resamples": resamples,
            "recipe": rec.display_name,
        },
        concurrency=levels,
        draft_lens=[c["draft_len"] for c in configs],
        configs=configs,
    )
    out_dir = Path(report_dir) if report_dir else default_report_dir(workdir or side.workdir, "tune")
    tok = recipe_tokenizer(rec)  # counts tokens where the server does not
    kw = dict(
        levels=levels,
        requests=requests,
        warmup=warmup,
        seed=seed,
        timeout=timeout,
        progress=progress,
        tokenizer=tok,
        count_tokens=TokenCounter(tok) if tok else None,
    )
    try:
        if method == "per-request":
            with _endpoint_for(side, protocol, timeout, deploy_fn) as url_model:
                url, mdl = url_model
                result.baseline = _measure(
                    url,
                    mdl,
                    protocol,
                    wl,
                    Sampling(temperature=temperature, num_draft_tokens=0),
                    label="γ=0 (baseline)",
                    bls=True,
                    **kw,
                )
                for cfg in configs:
                    s = Sampling(temperature=temperature, num_draft_tokens=cfg["draft_len"])
                    result.runs[cfg["label"]] = _measure(
                        url, mdl, protocol, wl, s, label=cfg["label"], bls=True, **kw
                    )
        else:
            path = rec.source_path or Path(str(rec_ref))
            with deploy_fn(path, baseline_overrides(rec)) as deployed:
                url, mdl = deployed_address(deployed, protocol)
                result.baseline = _measure(
                    url, model or mdl, protocol, wl, Sampling(temperature=temperature), label="baseline", **kw
                )
            for cfg in configs:
                with deploy_fn(path, cfg["overrides"]) as deployed:
                    url, mdl = deployed_address(deployed, protocol)
                    result.runs[cfg["label"]] = _measure(
                        url,
                        model or mdl,
                        protocol,
                        wl,
                        Sampling(temperature=temperature),
                        label=cfg["label"],
                        draft_len=cfg["draft_len"] if chain_sweep else None,
                        **kw,
                    )
    except BenchAborted as e:
        result.partial, result.error = True, e.cause or e.message
        _finish(result, resamples, seed, plan_result)
        result.report_dir = out_dir
        result.report_files = write_tune_reports(result, out_dir)
        raise BenchAborted(
            f"tune stopped: {result.error}", partial=result, report_dir=out_dir, cause=e.cause, hint=e.hint
        ) from None
    if plan_result is None and predict and mode in CHAIN_MODES:
        plan_result = _try_plan(rec, wl, levels, configs, seed, progress)
    _finish(result, resamples, seed, plan_result)
    sched = valid_schedule(result.schedule)
    if (
        check
        and method == "redeploy"
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
            with deploy_fn(path, ov) as deployed:
                url, mdl = deployed_address(deployed, protocol)
                run = _measure(
                    url, model or mdl, protocol, wl, Sampling(temperature=temperature),
                    label="draft_len_schedule", draft_len=sched[1], **kw,
                )  # fmt: skip
        except BenchAborted as e:
            result.partial, result.error = True, f"schedule check: {e.cause or e.message}"
        else:
            check_schedule(result, run, resamples, seed)
    result.report_dir = out_dir
    result.report_files = write_tune_reports(result, out_dir)
    return result


@contextlib.contextmanager
def _endpoint_for(
    side: Any, protocol: str, timeout: float, deploy_fn: DeployFn | None
) -> Iterator[tuple[str, str]]:
    if side.kind != "recipe":
        yield side.url, side.model
        return
    if deploy_fn is None:
        raise UsageError(
            "the target is a recipe but no deploy function was given",
            hint="deploy it first (`sdtk deploy --detach`) and pass its workdir",
        )
    with deploy_fn(side.recipe_path) as deployed:
        url, mdl = deployed_address(deployed, protocol)
        yield url, side.model or mdl


def _measure(
    url: str,
    model: str,
    protocol: str,
    wl: Workload,
    sampling: Sampling,
    *,
    label: str,
    levels: list[int],
    requests: int,
    warmup: int,
    seed: int,
    timeout: float,
    progress: bool,
    bls: bool = False,
    draft_len: int | None = None,
    tokenizer: str | None = None,
    count_tokens: Any = None,
) -> BenchResult:
    async def go() -> BenchResult:
        ep = TritonEndpoint(url, model=model, protocol=protocol, timeout=timeout)
        try:
            if bls:
                ep = await _bls_endpoint(ep, url, protocol, timeout)
            return await run_load(
                ep,
                wl,
                concurrency=levels,
                requests=requests,
                warmup=warmup,
                seed=seed,
                sampling=sampling,
                timeout=timeout,
                progress=progress,
                label=label,
                draft_len=draft_len,
                tokenizer=tokenizer,
                count_tokens=count_tokens,
            )
        finally:
            await ep.close()

    return asyncio.run(go())


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


def _try_plan(
    rec: Any, wl: Workload, levels: list[int], configs: list[dict[str, Any]], seed: int, progress: bool
) -> Any:
    from toolkit.bench.plan import plan, probe_possible

    ok, _ = probe_possible(rec)
    if not ok:
        return None
    gmax = max(c["draft_len"] for c in configs)
    return plan(rec, workload=wl, gamma_max=gmax, concurrency=levels, seed=seed, progress=progress)


def _finish(result: TuneResult, resamples: int, seed: int, plan_result: Any) -> None:
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
        top = max(cells, key=lambda c: (c.speedup.point, -c.draft_len))
        result.schedule[conc] = top.draft_len if top.speedup.point > 1 else 0
    if result.schedule:
        c0 = min(result.schedule)
        cells0 = [c for c in result.cells if c.concurrency == c0 and c.speedup.point is not None]
        top0 = max(cells0, key=lambda c: (c.speedup.point, -c.draft_len))
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


SCHEDULE_GOAL = 0.95  # the schedule must reach this share of the best fixed setting's speedup


def check_schedule(result: TuneResult, run: BenchResult, resamples: int, seed: int) -> None:
    """Compare the deployment running the tuned schedule with the best fixed draft length
    measured at each concurrency (same baseline, same requests)."""
    assert result.baseline is not None
    result.schedule_run = run
    for lc in compare_levels(result.baseline, run, resamples=resamples, seed=seed):
        cells = [c for c in result.cells if c.concurrency == lc.concurrency and c.speedup.point is not None]
        if not cells or lc.speedup.point is None:
            continue
        best = max(cells, key=lambda c: c.speedup.point)
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
    from toolkit.recipe import apply_overrides

    return apply_overrides({}, overrides)


def write_tune_reports(result: TuneResult, out_dir: Path) -> list[Path]:
    import yaml

    from toolkit.bench.report import _atomic_write, write_csv, write_json

    out_dir = Path(out_dir)
    paths = [write_json(out_dir / "tune.json", result.to_dict())]
    rows = [
        [
            c.label,
            c.draft_len,
            c.concurrency,
            c.speedup.point,
            c.speedup.lo,
            c.speedup.hi,
            c.tpot_speedup.point,
            c.acceptance_rate,
            c.acceptance_length,
            c.output_tok_s,
            result.predicted.get(c.draft_len, {}).get(c.concurrency),
        ]
        for c in result.cells
    ]
    paths.append(
        write_csv(
            out_dir / "tune.csv",
            [
                "config",
                "draft_len",
                "concurrency",
                "speedup",
                "ci_lo",
                "ci_hi",
                "tpot_speedup",
                "acceptance_rate",
                "acceptance_length",
                "output_tok_s",
                "predicted",
            ],
            rows,
        )
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if result.overlay:
        head = (
            f"# sdtk tune {stamp}: best measured setting for {result.settings.get('recipe')} at concurrency "
            f"{min(result.concurrency)} on workload {result.workload['name']}.\n"
            f"# Apply with: sdtk deploy RECIPE "
            + " ".join(f"--set {o}" for o in (result.best or {}).get("overrides", []))
            + "\n"
        )
        result.overlay_path = _atomic_write(
            out_dir / "recipe-overlay.yaml", head + yaml.safe_dump(result.overlay, sort_keys=False)
        )
        paths.append(result.overlay_path)
    if result.llmapi_fragment:
        head = (
            f"# sdtk tune {stamp}: TensorRT-LLM LLM-API speculative_config fragment (model.yaml / --config):\n"
            "# draft_len_schedule maps concurrency to draft length (0 = speculation off);\n"
            "# max_concurrency turns speculation off above it.\n"
        )
        paths.append(
            _atomic_write(
                out_dir / "llmapi-speculative.yaml",
                head + yaml.safe_dump(result.llmapi_fragment, sort_keys=False),
            )
        )
    paths.append(_atomic_write(out_dir / "tune.txt", result.render() + "\n"))
    return paths
