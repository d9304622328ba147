"""`sdtk bench` against one deployment (no A/B): the load generator plus reports."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from toolkit.bench.ab import DeployFn, resolve_side, side_endpoint
from toolkit.bench.errors import BenchAborted
from toolkit.bench.loadgen import (
    DEFAULT_TIMEOUT,
    BenchResult,
    Sampling,
    TritonEndpoint,
    check_levels,
    run_load,
)
from toolkit.bench.tokens import TokenCounter
from toolkit.bench.workloads import Workload, load_workload
from toolkit.errors import UsageError


def bench(
    target: str | Path,
    *,
    workload: str | Workload | None = "code",
    prompts_file: str | Path | None = None,
    concurrency: Sequence[int] | None = (1, 2, 4),
    rate: float | None = None,
    requests: int = 32,
    duration: float | None = None,
    warmup: int = 2,
    seed: int = 0,
    max_tokens: int | None = None,
    protocol: str = "grpc",
    model: str | None = None,
    temperature: float | None = None,
    num_draft_tokens: int | None = None,
    draft_len: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    deploy_fn: DeployFn | None = None,
    report_dir: str | Path | None = None,
    workdir: str | Path | None = None,
    progress: bool = True,
    tokenizer: str | None = None,
    allow_inexact: bool = False,
) -> BenchResult:
    """Benchmark one deployment (URL, workdir or recipe) at concurrency levels or a Poisson rate.

    Reports (bench.json, bench.csv, requests.jsonl) go to `report_dir` (default
    <workdir>/reports/bench-<time>); `result.report_dir` says where. A server that dies
    mid-run raises BenchAborted whose `.partial` is the BenchResult so far, reports written.
    `draft_len`: the deployment's γ, for the acceptance length when the target is a URL (a
    recipe or workdir target supplies it).
    Token counts: the server's num_output_tokens; else the deployment's tokenizer (`tokenizer`,
    or the recipe's); with neither the run is refused unless `allow_inexact`.
    Reports default to <workdir>/reports, where workdir is the given one, else the target's
    deployment directory, else ./workdir.
    """
    from toolkit.bench.report import default_report_dir, write_bench_reports

    check_levels(None if rate is not None else concurrency, rate)
    if protocol not in ("grpc", "http"):
        raise UsageError(f"protocol must be grpc or http, got '{protocol}'")
    side = resolve_side(target, label="target", protocol=protocol, model=model)
    wl = (
        workload
        if isinstance(workload, Workload)
        else load_workload(
            None if prompts_file else workload, prompts_file=prompts_file, max_tokens=max_tokens, seed=seed
        )
    )
    if isinstance(workload, Workload) and max_tokens is not None:
        wl = wl.with_max_tokens(max_tokens)
    out_dir = Path(report_dir) if report_dir else default_report_dir(workdir or side.workdir, "bench")
    tok = tokenizer or side.tokenizer
    sampling = Sampling(temperature=temperature, num_draft_tokens=num_draft_tokens)

    async def go(ep: TritonEndpoint) -> BenchResult:
        try:
            return await run_load(
                ep,
                wl,
                concurrency=None if rate is not None else concurrency,
                rate=rate,
                requests=requests,
                duration=duration,
                warmup=warmup,
                seed=seed,
                sampling=sampling,
                timeout=timeout,
                progress=progress,
                label="bench",
                draft_len=draft_len or side.draft_len,
                count_tokens=TokenCounter(tok) if tok else None,
                tokenizer=tok,
                allow_inexact=allow_inexact,
            )
        finally:
            await ep.close()

    try:
        with side_endpoint(
            side, protocol=protocol, deploy_fn=deploy_fn, timeout=timeout, workdir=workdir
        ) as ep:
            result = asyncio.run(go(ep))
    except BenchAborted as e:
        write_bench_reports(e.partial, out_dir)
        e.partial.report_dir = out_dir
        raise BenchAborted(
            e.message, partial=e.partial, report_dir=out_dir, cause=e.cause, hint=e.hint
        ) from None
    result.report_dir = out_dir
    result.report_files = write_bench_reports(result, out_dir)
    return result
