"""One measurement of one deployment: `measure_side(side, workload, opts)`.

bench, compare and tune each measure a side through it: a recipe side is deployed (through the
deploy function) for the length of the run and stopped afterwards, a URL or workdir side is
measured where it runs. `Load` says how the side is loaded: concurrency levels or a Poisson
rate, and per-request draft lengths (tune's per-request method, through the BLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.bench.measure.loadgen import BenchResult, LoadSpec, Sampling, TritonEndpoint, run_with
from toolkit.bench.measure.openai import OpenAIEndpoint
from toolkit.bench.measure.records import count_steps_from_chunks
from toolkit.bench.measure.workloads import Workload
from toolkit.bench.options import RunOptions
from toolkit.bench.targets import DeployFn, Side, side_address
from toolkit.errors import UsageError

BLS_MODEL = "tensorrt_llm_bls"


@dataclass(frozen=True)
class Load:
    """How a side is loaded: concurrency levels (or a request rate), and per-request settings."""

    concurrency: Sequence[int] | None = (1,)
    rate: float | None = None  # a Poisson request rate instead of levels
    num_draft_tokens: int | None = None  # per-request draft length (BLS draft-target: tune)
    bls: bool = False  # send to the model that takes num_draft_tokens (the BLS), if the served one does not
    count_tokens: Callable[[str], int] | None = None  # a shared token counter (tune loads its tokenizer once)
    # Only requests [start, stop) of the run's sample, with their own indices and seeds: one round
    # of an A/B level (orchestrate.compare).
    part: tuple[int, int] | None = None


def measure_side(
    side: Side,
    wl: Workload,
    opts: RunOptions,
    load: Load | None = None,
    *,
    deploy_fn: DeployFn | None = None,
    label: str | None = None,
) -> BenchResult:
    """Run `wl` against one side (deployed under `opts.workdir` when it is a recipe) with `load`.

    The run is labelled `label` (default `side.label`); `side.draft_len` turns the server's draft counts into an
    acceptance length; token counts fall back to `opts.tokenizer`, else the side's tokenizer.
    A server that dies mid-run raises BenchAborted whose `.partial` is the run so far."""
    with side_address(side, protocol=opts.protocol, deploy_fn=deploy_fn, workdir=opts.workdir) as (
        url,
        model,
    ):
        result = load_at(side, url, model, wl, opts, load or Load(), label=label or side.label)
        result.twin = side.twin
        if side.steps_from_chunks:
            count_steps_from_chunks(result)
        return result


@contextlib.contextmanager
def live_side(
    side: Side, *, protocol: str, deploy_fn: DeployFn | None, workdir: Path | str | None = None
) -> Iterator[Side]:
    """The side as a running server for the length of the block (a recipe side deployed once,
    under `workdir` when given): a URL side to measure several times (tune's per-request method,
    compare's rounds)."""
    with side_address(side, protocol=protocol, deploy_fn=deploy_fn, workdir=workdir) as (url, model):
        yield dataclasses.replace(side, kind="url", url=url, model=model, overrides=None)


def load_at(
    side: Side, url: str, model: str, wl: Workload, opts: RunOptions, load: Load, *, label: str
) -> BenchResult:
    """The load generator against `model` at `url` (where `side` answers), the endpoint closed
    afterwards. The side's protocol (a Dynamo deployment's `openai`), else the run's; its
    workers' /metrics (sdtk_spec_* counters), read around each level for its acceptance; its
    draft length; `opts.tokenizer`, else the side's, to count tokens."""
    draft_len, tokenizer = side.draft_len, opts.tokenizer or side.tokenizer
    protocol, metrics_urls = side.protocol, side.metrics_urls
    sampling = Sampling(temperature=opts.temperature, num_draft_tokens=load.num_draft_tokens)
    proto = protocol or opts.protocol

    async def go() -> BenchResult:
        ep: TritonEndpoint | OpenAIEndpoint
        if proto == "openai":
            if load.bls or load.num_draft_tokens is not None:
                raise UsageError("per-request draft lengths need Triton's BLS; the OpenAI API has none")
            ep = OpenAIEndpoint(url, model=model, timeout=opts.timeout, metrics_urls=metrics_urls or ())
        else:
            ep = TritonEndpoint(url, model=model, protocol=proto, timeout=opts.timeout)
        if load.bls and isinstance(ep, TritonEndpoint):
            try:
                ep = await bls_endpoint(ep, url, opts.protocol, opts.timeout)
            except BaseException:
                await ep.close()
                raise
        spec = LoadSpec(
            concurrency=load.concurrency,
            rate=load.rate,
            sampling=sampling,
            label=label,
            draft_len=draft_len,
            tokenizer=tokenizer,
            count_tokens=load.count_tokens,
            part=load.part,
        )
        return await run_with(ep, wl, opts, spec)

    return asyncio.run(go())


async def bls_endpoint(ep: TritonEndpoint, url: str, protocol: str, timeout: float) -> TritonEndpoint:
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
