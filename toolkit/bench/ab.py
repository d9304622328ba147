"""`sdtk bench --compare`: baseline vs speculative on the same workload, with a verdict.

Each side is a URL of a running server, a workdir of a detached deployment (`state.json`),
or a recipe (deployed here through `deploy_fn`, one side at a time, so both get a fresh
server and neither competes with the other for the machine). Both sides get the same
prompts in the same order with the same per-request seeds.

Speedup (per concurrency level) = mean over requests of the per-request output rate
(output tokens ÷ e2e latency) with speculation ÷ the same without: the Spec-Bench
definition, what one user experiences. Its 95% interval is a seeded paired bootstrap over
requests (request i carries the same prompt on both sides). TPOT speedup (mean TPOT
baseline ÷ speculative) and the aggregate throughput ratio are reported alongside.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.bench.errors import BenchAborted
from toolkit.bench.loadgen import (
    DEFAULT_TIMEOUT,
    BenchResult,
    Sampling,
    TritonEndpoint,
    check_levels,
    run_load,
)
from toolkit.bench.metrics import Interval, RequestRecord, ratio_of_means_ci, request_metrics
from toolkit.bench.tokens import TokenCounter, recipe_tokenizer
from toolkit.bench.workloads import Workload, load_workload
from toolkit.errors import ServerError, UsageError

# deploy_fn(recipe_path, overrides=()) -> context manager yielding (url, model), or a server
# handle with grpc_url / http_url / model_name (toolkit.server's TritonServer or ServerState).
DeployFn = Callable[..., Any]

SPEEDUP_DEFINITION = (
    "mean per-request output tok/s (output tokens ÷ e2e) speculative ÷ baseline; 95% CI by paired "
    "bootstrap over requests"
)
_URL = re.compile(r"^([a-z]+://)?[A-Za-z0-9.\-\[\]:]+:\d+/?$")


# --------------------------------------------------------------------------- sides


@dataclass
class Side:
    label: str  # baseline | speculative
    ref: str  # as given
    kind: str  # url | workdir | recipe
    url: str | None = None
    model: str | None = None
    recipe_path: Path | None = None
    workdir: Path | None = None
    draft_len: int | None = None  # γ of a chain-mode deployment, when its recipe is known
    tokenizer: str | None = None  # the deployment's tokenizer, when its recipe is known

    def describe(self) -> str:
        return f"{self.ref} ({self.kind})"


def resolve_side(ref: str | Path, *, label: str, protocol: str = "grpc", model: str | None = None) -> Side:
    """A URL, a workdir with state.json, or a recipe (file or bundled name); clear errors otherwise."""
    text = str(ref)
    if "://" in text or _URL.match(text):
        url = text
        if "://" in text and protocol == "grpc" and text.startswith(("http://", "https://")):
            raise UsageError(
                f"{label}: '{text}' is an HTTP URL but the protocol is grpc",
                hint="pass --protocol http, or the gRPC address host:8001",
            )
        return Side(label, text, "url", url=url, model=model or "ensemble")
    p = Path(text).expanduser()
    if p.is_dir():
        from toolkit.server.state import find_deployment, read_state, server_status, state_path

        p = find_deployment(p)  # the deploy workdir or the deployment directory under it
        st = read_state(p)
        if st is None:
            raise UsageError(
                f"{label}: no running deployment in {p} (no {state_path(p).name} there or in one "
                "directory below it)",
                hint="deploy with `sdtk deploy RECIPE --detach --workdir DIR`, or pass a URL or a recipe",
            )
        status = server_status(p)
        if not status.running:
            raise ServerError(
                f"{label}: the deployment in {p} is not running (pid {st.pid})",
                hint="start it again with `sdtk deploy --detach`; `sdtk status` shows what is up",
            )
        url = st.grpc_url if protocol == "grpc" else st.http_url
        rec = deployed_recipe(p)
        return Side(
            label,
            text,
            "workdir",
            url=url,
            model=model or st.model_name,
            workdir=p,
            draft_len=_chain_draft_len(rec),
            tokenizer=recipe_tokenizer(rec),
        )
    from toolkit.recipe import resolve_recipe_path

    path = resolve_recipe_path(text)  # RecipeError with a did-you-mean when it is nothing known
    if not path.exists():
        raise UsageError(
            f"{label}: '{text}' is not a URL, a deployment workdir or a recipe file",
            hint="pass host:port (gRPC) / http://host:port, a workdir with state.json, or a recipe",
        )
    from toolkit.recipe import load_recipe

    rec = load_recipe(path)
    return Side(
        label,
        text,
        "recipe",
        recipe_path=path,
        model=model,
        draft_len=_chain_draft_len(rec),
        tokenizer=recipe_tokenizer(rec),
    )


def deployed_recipe(workdir: Path) -> Any:
    """The recipe `sdtk deploy` saved next to state.json (recipe.json), or None without one."""
    from toolkit.deploy import load_deployed_recipe
    from toolkit.server.state import find_deployment

    return load_deployed_recipe(find_deployment(Path(workdir)))


def _chain_draft_len(recipe: Any) -> int | None:
    """γ for chain modes (each step proposes γ drafts); None where a step's draft count varies."""
    if recipe is None:
        return None
    spec = recipe.speculative
    if spec.mode in ("draft_target", "ngram") or (spec.mode == "eagle3" and spec.eagle_choices is None):
        return spec.max_draft_len
    return None


@contextlib.contextmanager
def side_endpoint(
    side: Side,
    *,
    protocol: str,
    deploy_fn: DeployFn | None,
    timeout: float,
    workdir: Path | str | None = None,
) -> Iterator[TritonEndpoint]:
    """An endpoint for one side; deploys (and afterwards stops) a recipe through deploy_fn,
    under `workdir` (`<workdir>/<recipe name>`) when given."""
    if side.kind != "recipe":
        yield TritonEndpoint(
            side.url or "", model=side.model or "ensemble", protocol=protocol, timeout=timeout
        )
        return
    if deploy_fn is None:
        raise UsageError(
            f"{side.label}: '{side.ref}' is a recipe but no deploy function was given",
            hint="deploy it first (`sdtk deploy RECIPE --detach`) and pass its workdir or URL",
        )
    kwargs = {"workdir": Path(workdir)} if workdir is not None else {}
    with deploy_fn(side.recipe_path, **kwargs) as deployed:
        url, model = deployed_address(deployed, protocol)
        side.url, side.model = url, side.model or model
        yield TritonEndpoint(url, model=side.model, protocol=protocol, timeout=timeout)


def deployed_address(deployed: Any, protocol: str) -> tuple[str, str]:
    """(url, model) from what a deploy function yields: a pair, or a server handle."""
    if isinstance(deployed, tuple) and len(deployed) == 2:
        url, model = deployed
        if protocol == "grpc" and str(url).startswith(("http://", "https://")):
            raise UsageError(
                f"the deploy function gave the HTTP address {url} but the protocol is grpc",
                hint="have it yield the gRPC address (host:port), or benchmark with protocol http",
            )
        return str(url), str(model)
    url = getattr(deployed, "grpc_url" if protocol == "grpc" else "http_url", None)
    model = getattr(deployed, "model_name", None)
    if not url or not model:
        raise UsageError(
            f"the deploy function yielded {type(deployed).__name__}, not (url, model) or a server handle",
            hint="yield (url, model) or an object with grpc_url, http_url and model_name",
        )
    return str(url), str(model)


# --------------------------------------------------------------------------- comparison


@dataclass
class LevelComparison:
    concurrency: int
    speedup: Interval  # per-user output tok/s ratio
    tpot_speedup: Interval  # mean TPOT baseline ÷ speculative
    ttft_ratio: Interval  # mean TTFT speculative ÷ baseline (> 1: speculation delays the first token)
    throughput_ratio: float | None  # aggregate output tok/s speculative ÷ baseline
    pairs: int
    paired: bool
    baseline: dict[str, Any]
    speculative: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "speedup": self.speedup.to_dict(),
            "tpot_speedup": self.tpot_speedup.to_dict(),
            "ttft_ratio": self.ttft_ratio.to_dict(),
            "throughput_ratio": self.throughput_ratio,
            "pairs": self.pairs,
            "paired": self.paired,
            "baseline": self.baseline,
            "speculative": self.speculative,
        }


@dataclass
class ABResult:
    baseline_label: str
    speculative_label: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    baseline: BenchResult | None = None
    speculative: BenchResult | None = None
    levels: list[LevelComparison] = field(default_factory=list)
    verdict: str = ""
    break_even: int | None = None
    break_even_basis: str | None = None  # "ci" (CI upper bound < 1) | "point" (point estimate < 1)
    adopt_for: int | None = None  # speculation is significantly faster at every level ≤ this
    partial: bool = False
    error: str | None = None
    report_dir: Path | None = None
    report_files: list[Path] = field(default_factory=list)
    replayed: Any = None  # replay.ReplayedAcceptance: per-position acceptance of the speculative side
    definitions: dict[str, str] = field(
        default_factory=lambda: {
            "speedup": SPEEDUP_DEFINITION,
            "tpot_speedup": "mean TPOT baseline ÷ mean TPOT speculative, TPOT = (e2e − TTFT)/(tokens − 1)",
            "ttft_ratio": "mean TTFT speculative ÷ baseline",
            "throughput_ratio": "aggregate output tok/s speculative ÷ baseline (one run each, no CI)",
            "break_even": "first concurrency whose speedup CI upper bound is < 1 (else whose point estimate is < 1)",
            "adopt_for": "largest concurrency up to which every level's speedup CI lower bound is > 1",
        }
    )

    @property
    def token_counts_exact(self) -> bool:
        return all(r.token_counts_exact for r in (self.baseline, self.speculative) if r is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "compare",
            "baseline": self.baseline_label,
            "speculative": self.speculative_label,
            "token_counts_exact": self.token_counts_exact,
            "workload": self.workload,
            "settings": self.settings,
            "definitions": self.definitions,
            "levels": [lc.to_dict() for lc in self.levels],
            "verdict": self.verdict,
            "break_even": self.break_even,
            "break_even_basis": self.break_even_basis,
            "adopt_for": self.adopt_for,
            "partial": self.partial,
            "error": self.error,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "report_files": [str(p) for p in self.report_files],
            "replayed_acceptance": self.replayed.to_dict() if self.replayed else None,
            "runs": {
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "speculative": self.speculative.to_dict() if self.speculative else None,
            },
        }

    def render(self) -> str:
        from toolkit.bench.report import render_compare

        return render_compare(self)


def _metric_pairs(
    base: list[RequestRecord], spec: list[RequestRecord], attr: str
) -> tuple[list[float], list[float], bool]:
    """Values of one per-request metric on both sides, paired by request index when possible."""
    bm = {r.index: getattr(request_metrics(r), attr) for r in base if r.ok}
    sm = {r.index: getattr(request_metrics(r), attr) for r in spec if r.ok}
    common = sorted(i for i in bm.keys() & sm.keys() if bm[i] is not None and sm[i] is not None)
    if len(common) >= 2:
        return [bm[i] for i in common], [sm[i] for i in common], True
    return [v for v in bm.values() if v is not None], [v for v in sm.values() if v is not None], False


def compare_levels(
    baseline: BenchResult,
    speculative: BenchResult,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[LevelComparison]:
    out = []
    for blv in baseline.levels:
        slv = speculative.level(blv.concurrency) if blv.concurrency is not None else None
        if slv is None:
            continue
        b_tok, s_tok, paired = _metric_pairs(blv.records, slv.records, "user_tok_s")
        b_tpot, s_tpot, p2 = _metric_pairs(blv.records, slv.records, "tpot")
        b_ttft, s_ttft, p3 = _metric_pairs(blv.records, slv.records, "ttft")
        kw = dict(resamples=resamples, seed=seed, confidence=confidence)
        bs, ss = blv.summary(), slv.summary()
        thr = (ss["output_tok_s"] / bs["output_tok_s"]) if bs["output_tok_s"] and ss["output_tok_s"] else None
        out.append(
            LevelComparison(
                concurrency=blv.concurrency,
                speedup=ratio_of_means_ci(s_tok, b_tok, paired=paired, **kw),
                tpot_speedup=ratio_of_means_ci(b_tpot, s_tpot, paired=p2, **kw),
                ttft_ratio=ratio_of_means_ci(s_ttft, b_ttft, paired=p3, **kw),
                throughput_ratio=thr,
                pairs=len(b_tok) if paired else 0,
                paired=paired,
                baseline=bs,
                speculative=ss,
            )
        )
    return out


def verdict(levels: Sequence[LevelComparison]) -> tuple[str, int | None, str | None, int | None]:
    """(one-line verdict, break-even concurrency, its basis, adopt-for concurrency)."""
    lv = [lc for lc in levels if lc.speedup.point is not None]
    if not lv:
        return "no comparable measurements (every request failed on one side?)", None, None, None
    be, basis = None, None
    for lc in lv:
        if lc.speedup.hi is not None and lc.speedup.hi < 1:
            be, basis = lc.concurrency, "ci"
            break
    if be is None:
        for lc in lv:
            if lc.speedup.point < 1:
                be, basis = lc.concurrency, "point"
                break
    adopt = None
    for lc in lv:
        if lc.speedup.lo is not None and lc.speedup.lo > 1:
            adopt = lc.concurrency
        else:
            break
    first = lv[0]
    sp = first.speedup
    ci = f"[{sp.lo:.2f}, {sp.hi:.2f}]" if sp.lo is not None and sp.hi is not None else "[no CI]"
    if sp.lo is not None and sp.lo > 1:
        head = f"speculative is {sp.point:.2f}× faster {ci} at concurrency {first.concurrency}"
    elif sp.hi is not None and sp.hi < 1:
        head = f"speculative is slower: {sp.point:.2f}× {ci} at concurrency {first.concurrency}"
    else:
        head = f"no significant difference at concurrency {first.concurrency} ({sp.point:.2f}× {ci})"
    top = lv[-1].concurrency
    if be is not None:
        tail = f"break-even at {be}" + (" (point estimate)" if basis == "point" else "")
    else:
        tail = f"no break-even up to concurrency {top}"
    rec = f"adopt for ≤{adopt}" if adopt is not None else "do not adopt"
    return f"{head}; {tail}; {rec}", be, basis, adopt


def compare(
    baseline: str | Path,
    speculative: str | Path,
    *,
    workload: str | Workload | None = "code",
    prompts_file: str | Path | None = None,
    concurrency: Sequence[int] | None = (1, 2, 4),
    requests: int = 32,
    duration: float | None = None,
    warmup: int = 2,
    seed: int = 0,
    max_tokens: int | None = None,
    protocol: str = "grpc",
    baseline_model: str | None = None,
    speculative_model: str | None = None,
    speculative_draft_len: int | None = None,
    temperature: float | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    resamples: int = 2000,
    confidence: float = 0.95,
    deploy_fn: DeployFn | None = None,
    report_dir: str | Path | None = None,
    workdir: str | Path | None = None,
    plots: bool = True,
    progress: bool = True,
    tokenizer: str | None = None,
    allow_inexact: bool = False,
    replay: bool = True,
) -> ABResult:
    """Benchmark both sides on one workload and compare them. Recipe sides are deployed under
    `workdir` (through `deploy_fn(recipe, workdir=...)`). Reports go to `report_dir` (default
    <workdir>/reports/compare-<time>). A dead server raises BenchAborted whose `.partial` is
    the ABResult so far (its reports already written).

    Token counts per side: the server's, else that side's tokenizer (its recipe, or
    `tokenizer` for URL sides); without either the run is refused unless `allow_inexact`."""
    from toolkit.bench.report import default_report_dir, write_compare_reports

    levels = check_levels(concurrency, None)
    if protocol not in ("grpc", "http"):
        raise UsageError(f"protocol must be grpc or http, got '{protocol}'")
    if resamples < 1 or not 0 < confidence < 1:
        raise UsageError("resamples must be ≥ 1 and confidence in (0, 1)")
    sides = [
        resolve_side(baseline, label="baseline", protocol=protocol, model=baseline_model),
        resolve_side(speculative, label="speculative", protocol=protocol, model=speculative_model),
    ]
    wl = (
        workload
        if isinstance(workload, Workload)
        else load_workload(
            None if prompts_file else workload, prompts_file=prompts_file, max_tokens=max_tokens, seed=seed
        )
    )
    if isinstance(workload, Workload) and max_tokens is not None:
        wl = wl.with_max_tokens(max_tokens)
    settings = {
        "concurrency": levels,
        "requests": requests,
        "duration": duration,
        "warmup": warmup,
        "seed": seed,
        "protocol": protocol,
        "temperature": temperature,
        "timeout": timeout,
        "resamples": resamples,
        "confidence": confidence,
        "allow_inexact": allow_inexact,
    }
    if speculative_draft_len is not None:
        sides[1].draft_len = speculative_draft_len
    ab = ABResult(sides[0].describe(), sides[1].describe(), wl.to_dict(), settings)
    out_dir = Path(report_dir) if report_dir else default_report_dir(workdir, "compare")
    sampling = Sampling(temperature=temperature)
    runs: dict[str, BenchResult] = {}
    current = sides[0]
    try:
        for side in sides:
            current = side
            with side_endpoint(
                side, protocol=protocol, deploy_fn=deploy_fn, timeout=timeout, workdir=workdir
            ) as ep:
                tok = tokenizer or side.tokenizer
                runs[side.label] = asyncio.run(
                    _bench(
                        ep,
                        wl,
                        draft_len=side.draft_len,
                        tokenizer=tok,
                        allow_inexact=allow_inexact,
                        levels=levels,
                        requests=requests,
                        duration=duration,
                        warmup=warmup,
                        seed=seed,
                        sampling=sampling,
                        timeout=timeout,
                        progress=progress,
                        label=side.label,
                    )
                )
    except BenchAborted as e:
        runs[current.label] = e.partial
        _finish(ab, runs, resamples, seed, confidence)
        ab.partial, ab.error = True, f"{current.label}: {e.cause or e.message}"
        ab.verdict = "PARTIAL (server stopped): " + ab.verdict
        ab.report_dir = out_dir
        ab.report_files = write_compare_reports(ab, out_dir, plots=plots)
        raise BenchAborted(
            f"comparison stopped: {ab.error}", partial=ab, report_dir=out_dir, cause=e.cause, hint=e.hint
        ) from None
    _finish(ab, runs, resamples, seed, confidence)
    if replay:
        ab.replayed = _replay(sides[1], wl, requests, seed, temperature, ab.speculative, progress)
    ab.report_dir = out_dir
    ab.report_files = write_compare_reports(ab, out_dir, plots=plots)
    return ab


def _replay(
    side: Side, wl: Workload, requests: int, seed: int, temperature: float | None, run: Any, progress: bool
) -> Any:
    """Per-position acceptance of a greedy reference-backend speculative side (see bench.replay)."""
    from toolkit.bench import replay

    if side.kind == "recipe":
        from toolkit.recipe import load_recipe

        rec = load_recipe(side.recipe_path)
    else:
        rec = deployed_recipe(side.workdir) if side.kind == "workdir" else None
    if not replay.replayable(rec, temperature):
        return None
    if progress:
        print(
            "speculative: replaying the requests in process for acceptance per draft position",
            file=sys.stderr,
        )
    first = run.levels[0].records if run is not None and run.levels else None
    return replay.replay_acceptance(rec, wl.sample(requests, seed), first)


def _finish(ab: ABResult, runs: dict[str, BenchResult], resamples: int, seed: int, confidence: float) -> None:
    ab.baseline, ab.speculative = runs.get("baseline"), runs.get("speculative")
    if ab.baseline is not None and ab.speculative is not None:
        ab.levels = compare_levels(
            ab.baseline, ab.speculative, resamples=resamples, seed=seed, confidence=confidence
        )
    ab.verdict, ab.break_even, ab.break_even_basis, ab.adopt_for = verdict(ab.levels)
    if not ab.token_counts_exact:
        ab.verdict = "INEXACT token counts: " + ab.verdict


async def _bench(
    ep: TritonEndpoint,
    wl: Workload,
    *,
    levels: list[int],
    requests: int,
    duration: float | None,
    warmup: int,
    seed: int,
    sampling: Sampling,
    timeout: float,
    progress: bool,
    label: str,
    draft_len: int | None = None,
    tokenizer: str | None = None,
    allow_inexact: bool = False,
) -> BenchResult:
    try:
        return await run_load(
            ep,
            wl,
            concurrency=levels,
            requests=requests,
            duration=duration,
            warmup=warmup,
            seed=seed,
            sampling=sampling,
            timeout=timeout,
            progress=progress,
            label=label,
            draft_len=draft_len,
            count_tokens=TokenCounter(tokenizer) if tokenizer else None,
            tokenizer=tokenizer,
            allow_inexact=allow_inexact,
        )
    finally:
        await ep.close()
