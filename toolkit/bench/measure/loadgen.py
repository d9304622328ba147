"""The load generator: streams requests at fixed concurrency levels or a Poisson rate.

- Closed loop: at concurrency C, C workers each send their next request as soon as the
  previous one finishes. Open loop: arrivals at a seeded Poisson rate, however slow the server.
- Reproducible: prompt order comes from (workload, seed); request i carries sampling seed
  seed+i, so the same request gets the same seed on both sides of an A/B.
- Never hangs: every request has a deadline; a connection failure triggers a liveness check
  and, if the server is gone, the run stops and raises BenchAborted carrying the partial result.

The transport is `Endpoint`: `TritonEndpoint` wraps toolkit.client.AsyncTritonClient (gRPC
stream or HTTP generate_stream); tests plug in their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolkit.bench.errors import BenchAborted, InexactCounts
from toolkit.bench.measure.metrics import RequestRecord
from toolkit.bench.measure.records import BenchResult as BenchResult  # re-exported: scripts and tests
from toolkit.bench.measure.records import LevelResult as LevelResult
from toolkit.bench.measure.workloads import Prompt, Workload
from toolkit.bench.options import DEFAULT_TIMEOUT, RunOptions, bars_enabled, split_changes
from toolkit.errors import ServerError, UsageError
from toolkit.progress import Bars

CONNECT_TIMEOUT = 3.0
CHECK_TIMEOUT = 15.0  # the preflight (model config + readiness) must answer within this
MAX_CONSECUTIVE_FAILURES = 8
INEXACT_REASON = (
    "the server sent responses without num_output_tokens and no tokenizer is known, so token "
    "counts would be estimates"
)
INEXACT_HINT = "pass --tokenizer PATH_OR_ID, or --allow-inexact to report estimates marked INEXACT"
INEXACT_WARNING = (
    "INEXACT token counts: one token per chunk was assumed (no server counts, no tokenizer); "
    "tok/s, TPOT and ITL are underestimated by the tokens per chunk"
)

NOT_STREAMED_WARNING = (
    "{endpoint} is not decoupled (as draft-target's BLS on the GPU path), so each response came whole: "
    "TTFT is the whole latency there, and TPOT/ITL are not measured"
)


# --------------------------------------------------------------------------- transport


@dataclass
class Chunk:
    """One streamed response as the load generator needs it."""

    time: float  # client monotonic seconds at receipt
    text: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sampling:
    """Per-request sampling settings; None = the server's default (greedy on TRT-LLM and the reference)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_draft_tokens: int | None = None  # BLS draft-target only (tune)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class Endpoint(Protocol):
    name: str  # for reports: "grpc://127.0.0.1:8001/ensemble"
    # False for a model that is not decoupled (e.g. draft-target's BLS, as on the GPU path): each
    # request then comes back whole, as one chunk, and no per-token timing exists for it.
    streams: bool

    async def check(self) -> None:
        """Raise a ServerError quickly if the server or model is not there."""

    async def alive(self) -> bool:
        """Is the server still answering (a cheap readiness probe)?"""

    def stream(self, prompt: Prompt, *, seed: int, sampling: Sampling) -> AsyncIterator[Chunk]:
        """Send one streaming request; yield its chunks; raise ClientError subclasses on failure."""

    async def close(self) -> None: ...


class TritonEndpoint:
    """Streaming requests through toolkit.client.AsyncTritonClient; whole ones (one chunk each) to
    a model that is not decoupled, which cannot stream."""

    def __init__(
        self,
        url: str,
        *,
        model: str = "ensemble",
        protocol: str = "grpc",
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ):
        from toolkit.client import AsyncTritonClient

        if protocol not in ("grpc", "http"):
            raise UsageError(f"protocol must be grpc or http, got '{protocol}'")
        self.url = url
        self.model = model
        self.protocol = protocol
        self.client = AsyncTritonClient(
            url, protocol=protocol, model=model, timeout=timeout, connect_timeout=connect_timeout
        )
        self.name = f"{protocol}://{self.client.url.split('://')[-1]}/{model}"
        self._inputs: set[str] = set()
        self.streams = True

    async def check(self) -> None:
        info = await self.client.model_info()
        self._inputs = set(info.inputs)
        # Not decoupled ("Streaming is only supported if model is deployed using decoupled mode"):
        # measured whole; TTFT is then the whole latency and TPOT/ITL do not exist.
        self.streams = info.decoupled
        if not await self.client.is_ready():
            raise ServerError(f"model '{self.model}' at {self.url} is not ready", hint="check `sdtk status`")

    @property
    def inputs(self) -> set[str]:
        return self._inputs

    async def alive(self) -> bool:
        return await self.client.is_ready()

    async def stream(self, prompt: Prompt, *, seed: int, sampling: Sampling) -> AsyncIterator[Chunk]:
        from toolkit.client import GenerationRequest
        from toolkit.client.llmapi import FIELDS as LLMAPI_FIELDS

        has = self._inputs
        extra: dict[str, Any] = {}
        if "return_num_output_tokens" in has:
            extra["return_num_output_tokens"] = True
        if "return_num_input_tokens" in has:
            extra["return_num_input_tokens"] = True
        sampled = sampling.temperature is not None and sampling.temperature > 0

        def takes(field: str) -> bool:
            # the LLM-API model names these inputs sampling_param_* (toolkit/client/llmapi.py)
            return field in has or LLMAPI_FIELDS.get(field) in has

        req = GenerationRequest(
            prompt.text,
            prompt.max_tokens,
            temperature=sampling.temperature if takes("temperature") else None,
            top_k=sampling.top_k if takes("top_k") else None,
            top_p=sampling.top_p if takes("top_p") else None,
            seed=seed if (sampled and takes("seed")) else None,
            exclude_input_in_output=True if takes("exclude_input_in_output") else None,
            return_perf_metrics=True if takes("return_perf_metrics") else None,
            num_draft_tokens=sampling.num_draft_tokens,
            extra_inputs=extra,
        )
        if not self.streams:
            r = await self.client.generate(req)
            yield Chunk(time=time.monotonic(), text=r.text, outputs=r.outputs)
            return
        s = await self.client.stream(req)
        try:
            async for c in s:
                yield Chunk(time=c.time_ns / 1e9, text=c.text, outputs=c.outputs)
        finally:
            await s.aclose()

    async def close(self) -> None:
        await self.client.close()


# --------------------------------------------------------------------------- per-request accounting


COUNT_SOURCES = ("server", "tokenizer", "estimate")


def chunk_token_counts(
    chunks: Sequence[Chunk], count_tokens: Callable[[str], int] | None = None
) -> tuple[list[int], str]:
    """Tokens carried by each chunk, and where the counts come from (COUNT_SOURCES).

    1. "server": every chunk carries `num_output_tokens`, the tokens of that response
       (docs/contracts.md: per response, a closing empty chunk 0); exact.
    2. "tokenizer": `count_tokens` over the *cumulative* text (BPE merges cross chunk
       boundaries, so chunks are not counted one by one): chunk i carries
       count(text[:i+1]) − count(text[:i]); the total is the tokenizer count of the whole text.
    3. "estimate": one token per non-empty chunk; inexact, and flagged as such everywhere.
    """
    vals = [c.outputs.get("num_output_tokens") for c in chunks]
    if chunks and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return [max(0, int(v)) for v in vals if isinstance(v, int)], "server"
    if count_tokens is not None:
        return cumulative_counts([c.text for c in chunks], count_tokens), "tokenizer"
    return [1 if c.text else 0 for c in chunks], "estimate"


def cumulative_counts(texts: Sequence[str], count_tokens: Callable[[str], int]) -> list[int]:
    """Per-chunk tokens from the token counts of the growing text.

    A prefix can tokenize to more tokens than a longer one (a merge completes later), so the
    running counts are made non-decreasing from the end (suffix minimum): no chunk gets a
    negative count and the total stays the count of the whole text.
    """
    cum: list[int] = []
    text = ""
    for t in texts:
        text += t
        cum.append(count_tokens(text) if text else 0)
    for i in range(len(cum) - 2, -1, -1):
        cum[i] = min(cum[i], cum[i + 1])
    return [b - a for a, b in zip([0, *cum], cum, strict=False)]


def classify(e: BaseException) -> str:
    from toolkit.client import ConnectionLost, ResponseTimeout, ServerUnreachable

    if isinstance(e, (ServerUnreachable, ConnectionLost)):
        return "connection"
    if isinstance(e, (ResponseTimeout, asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(e, asyncio.CancelledError):
        return "cancelled"
    if isinstance(e, ServerError):
        return "server"
    return "error"


async def run_request(
    endpoint: Endpoint,
    index: int,
    prompt: Prompt,
    *,
    seed: int,
    sampling: Sampling,
    timeout: float,
    concurrency: int | None = None,
    sink: list[RequestRecord] | None = None,
) -> RequestRecord:
    """One streamed request, bounded by `timeout` seconds overall; never raises for request errors.

    The record also goes to `sink` when given, even if the request is cancelled mid-stream (an
    aborted run keeps what its in-flight requests had received).
    """
    rec = RequestRecord(
        index=index,
        start=time.monotonic(),
        category=prompt.category,
        concurrency=concurrency,
        max_tokens=prompt.max_tokens,
        draft_len=sampling.num_draft_tokens,
        streamed=getattr(endpoint, "streams", True),
    )
    chunks: list[Chunk] = []

    async def consume() -> None:
        async for c in endpoint.stream(prompt, seed=seed, sampling=sampling):
            chunks.append(c)
        if not chunks:  # a stream cut before its first response is a failure, not an empty success
            from toolkit.client import ConnectionLost

            raise ConnectionLost(f"{endpoint.name}: the request ended without any response")

    try:
        await asyncio.wait_for(consume(), timeout)
        rec.end = time.monotonic()
    except asyncio.CancelledError:
        rec.error, rec.error_kind = "cancelled: the run was aborted", "cancelled"
        _fill(rec, chunks)
        if sink is not None:
            sink.append(rec)
        raise
    except ServerError as e:  # the client's own errors, its ResponseTimeout (a TimeoutError) included
        rec.error, rec.error_kind = f"{type(e).__name__}: {e}", classify(e)
    except asyncio.TimeoutError:
        rec.error, rec.error_kind = f"no complete response within {timeout:g}s", "timeout"
    except Exception as e:  # noqa: BLE001 - every failure is recorded, none escapes
        rec.error, rec.error_kind = f"{type(e).__name__}: {e}", classify(e)
    _fill(rec, chunks)
    if sink is not None:
        sink.append(rec)
    return rec


def _fill(rec: RequestRecord, chunks: list[Chunk]) -> None:
    """Times and server outputs of one request. Token counts: the server's now; else the chunk
    texts are kept for `count_records` (tokenizing here would stall the other requests)."""
    rec.chunk_times = [c.time for c in chunks]
    counts, source = chunk_token_counts(chunks)
    rec.chunk_tokens, rec.token_count_source = counts, source
    rec.token_counts_exact = source != "estimate"
    rec.chunk_texts = None if source == "server" else [c.text for c in chunks]
    last: dict[str, Any] = {}
    for c in chunks:
        last.update({k: v for k, v in c.outputs.items() if v is not None})
    rec.accepted_draft_tokens = last.get("total_accepted_draft_tokens")
    rec.draft_tokens = last.get("total_draft_tokens")
    rec.input_tokens = last.get("num_input_tokens")
    rec.steps = last.get("spec_steps")  # an OpenAI response's per-request counts (measure.openai)
    rec.per_position_proposed = last.get("per_position_proposed")
    rec.per_position_accepted = last.get("per_position_accepted")
    rec.server_arrival_ns = last.get("arrival_time_ns")
    rec.server_first_token_ns = last.get("first_token_time_ns")
    rec.server_last_token_ns = last.get("last_token_time_ns")


def count_records(records: Sequence[RequestRecord], count_tokens: Callable[[str], int] | None) -> None:
    """Replace estimated chunk counts by tokenizer counts of the cumulative text (after a level)."""
    if count_tokens is None:
        return
    for rec in records:
        if rec.token_count_source == "estimate" and rec.chunk_texts is not None:
            rec.chunk_tokens = cumulative_counts(rec.chunk_texts, count_tokens)
            rec.token_count_source, rec.token_counts_exact = "tokenizer", True
        rec.chunk_texts = None


# --------------------------------------------------------------------------- the run


class _Aborted(Exception):
    """Internal: a level stopped early; carries what it measured."""

    def __init__(self, reason: str, level: LevelResult):
        super().__init__(reason)
        self.reason = reason
        self.level = level


async def _run_level(
    endpoint: Endpoint,
    prompts: list[Prompt],
    opts: RunOptions,
    spec: LoadSpec,
    *,
    concurrency: int | None,
    rate: float | None,
    progress: Bars,
    first: int = 0,
) -> LevelResult:
    """One level at `concurrency` (or `rate`): `prompts` are the level's requests `first`,
    `first + 1`, ... of the run's sample (their index and seed)."""
    duration, seed, timeout, allow_inexact = opts.duration, opts.seed, opts.timeout, opts.allow_inexact
    sampling, count_tokens, draft_len = spec.sampling or Sampling(), spec.count_tokens, spec.draft_len
    records: list[RequestRecord] = []
    t0 = time.monotonic()
    deadline = t0 + duration if duration else None
    state = {"consecutive": 0, "errors": 0}
    abort: asyncio.Future = asyncio.get_running_loop().create_future()

    async def one(i: int, p: Prompt) -> None:
        rec = await run_request(
            endpoint,
            i,
            p,
            seed=seed + i,
            sampling=sampling,
            timeout=timeout,
            concurrency=concurrency,
            sink=records,
        )
        if rec.draft_len is None:
            rec.draft_len = draft_len
        if rec.ok:
            state["consecutive"] = 0
        else:
            state["errors"] += 1
            state["consecutive"] += 1
        progress.advance(state["errors"])
        inexact = rec.ok and not rec.token_counts_exact and count_tokens is None
        if inexact and not allow_inexact and not abort.done():
            abort.set_result(INEXACT_REASON)
        if not rec.ok and not abort.done():
            if rec.error_kind in ("connection", "timeout") and not await endpoint.alive():
                if not abort.done():
                    abort.set_result(f"the server stopped answering ({rec.error})")
            elif state["consecutive"] >= MAX_CONSECUTIVE_FAILURES and not abort.done():
                abort.set_result(f"{state['consecutive']} requests failed in a row; last: {rec.error}")

    tasks: list[asyncio.Task] = []
    if concurrency is not None:
        queue = list(enumerate(prompts, first))
        queue.reverse()

        async def worker() -> None:
            while queue and not abort.done() and (deadline is None or time.monotonic() < deadline):
                i, p = queue.pop()
                await one(i, p)

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    else:
        assert rate is not None
        rng = random.Random(seed)

        async def schedule() -> None:
            t_next = time.monotonic()
            inflight = []
            for i, p in enumerate(prompts, first):
                t_next += rng.expovariate(rate)
                delay = t_next - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if abort.done() or (deadline is not None and time.monotonic() >= deadline):
                    break
                inflight.append(asyncio.create_task(one(i, p)))
            if inflight:
                await asyncio.gather(*inflight)

        tasks = [asyncio.create_task(schedule())]

    done_all = asyncio.ensure_future(asyncio.gather(*tasks))
    await asyncio.wait([done_all, abort], return_when=asyncio.FIRST_COMPLETED)
    if abort.done() and not done_all.done():
        done_all.cancel()
        # Cancelled requests record themselves (error_kind "cancelled") before re-raising.
        await asyncio.gather(done_all, return_exceptions=True)
    else:
        await done_all  # re-raises a bug in this module; request failures never raise
    level = LevelResult(concurrency, rate, sorted(records, key=lambda r: r.index), time.monotonic() - t0)
    count_records(level.records, count_tokens)
    if abort.done():
        level.partial = True
        raise _Aborted(abort.result(), level)
    return level


def check_levels(concurrency: Sequence[int] | None, rate: float | None) -> list[int]:
    if rate is not None:
        if concurrency:
            raise UsageError("give either concurrency levels or a request rate, not both")
        if not rate > 0:
            raise UsageError(f"the request rate must be > 0 requests/s, got {rate}")
        return []
    levels = list(concurrency or [])
    if not levels:
        raise UsageError("give at least one concurrency level (e.g. 1,2,4) or a request rate")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(
                f"concurrency must be a positive integer, got {c!r}", hint="e.g. --concurrency 1,2,4"
            )
    return levels


def _check_run(requests: int, duration: float | None, warmup: int, timeout: float) -> None:
    if requests < 1:
        raise UsageError(f"requests must be ≥ 1, got {requests}")
    if duration is not None and duration <= 0:
        raise UsageError(f"duration must be > 0 seconds, got {duration}")
    if warmup < 0:
        raise UsageError(f"warmup must be ≥ 0, got {warmup}")
    if timeout <= 0:
        raise UsageError(f"timeout must be > 0 seconds, got {timeout}")


async def _preflight(
    endpoint: Endpoint,
    result: BenchResult,
    count_tokens: Callable[[str], int] | None,
    allow_inexact: bool,
) -> None:
    """The endpoint answers, and its token counts can be exact (else refused or marked INEXACT)."""
    try:
        await asyncio.wait_for(endpoint.check(), CHECK_TIMEOUT)
    except asyncio.TimeoutError:
        raise ServerError(
            f"{endpoint.name} did not answer within {CHECK_TIMEOUT:g}s",
            hint="is the address right and the server up? `sdtk status`",
        ) from None
    if not getattr(endpoint, "streams", True):
        result.warnings.append(NOT_STREAMED_WARNING.format(endpoint=endpoint.name))
    inputs = getattr(endpoint, "inputs", None)
    if inputs is not None and "return_num_output_tokens" not in inputs and count_tokens is None:
        if not allow_inexact:
            raise InexactCounts(
                f"{endpoint.name} does not return token counts (its model has no "
                "return_num_output_tokens input) and no tokenizer is known, so per-token metrics "
                "(tok/s, TPOT, ITL) cannot be exact",
                hint="pass --tokenizer PATH_OR_ID (the deployment's tokenizer), or --allow-inexact "
                "to estimate one token per chunk (every report then says INEXACT)",
            )
        result.warnings.append(INEXACT_WARNING)
    elif inputs is not None and "return_num_output_tokens" not in inputs:
        load = getattr(count_tokens, "load", None)
        if load is not None:
            load()  # the tokenizer will count every request: fail now, not after a level


async def _warm_up(
    endpoint: Endpoint,
    workload: Workload,
    bar: Bars,
    *,
    warmup: int,
    seed: int,
    sampling: Sampling,
    timeout: float,
    refuse_inexact: bool,
) -> None:
    """`warmup` requests, not recorded: first requests pay for lazy initialisation and cache
    warm-up. `refuse_inexact`: an estimated count stops the run (no tokenizer, no --allow-inexact)."""
    bar.level("warm-up", warmup)
    for i, p in enumerate(workload.sample(warmup, seed + 7919)):
        rec = await run_request(endpoint, -1 - i, p, seed=seed, sampling=sampling, timeout=timeout)
        bar.advance(0 if rec.ok else 1)
        if rec.ok and not rec.token_counts_exact and refuse_inexact:
            raise InexactCounts(INEXACT_REASON, hint=INEXACT_HINT)
        if not rec.ok and rec.error_kind in ("connection", "timeout") and not await endpoint.alive():
            raise _Aborted(
                f"the server stopped answering during warm-up ({rec.error})",
                LevelResult(None, None, [], 0.0, True),
            )


def _aborted(endpoint: Endpoint, result: BenchResult, e: _Aborted) -> BenchAborted:
    """The BenchAborted of a run stopped by `e`, carrying what it measured."""
    if e.level.records:
        result.levels.append(e.level)
    result.partial = True
    result.error = e.reason
    return BenchAborted(
        f"benchmark of {endpoint.name} stopped: {e.reason}",
        partial=result,
        cause=e.reason,
        hint=INEXACT_HINT
        if e.reason == INEXACT_REASON
        else "the partial results are kept; check the server with `sdtk status` / `sdtk logs`",
    )


def _check_outcome(endpoint: Endpoint, result: BenchResult) -> None:
    """Mark estimated counts; refuse a run without one success (nothing to measure)."""
    if not result.token_counts_exact and INEXACT_WARNING not in result.warnings:
        result.warnings.append(INEXACT_WARNING)
    done = [r for lv in result.levels for r in lv.records]
    if done and not any(r.ok for r in done):
        # A run without one success has nothing to measure (a model error, a bad input):
        # stop here with the reason instead of reporting empty statistics.
        result.partial = True
        result.error = f"every request failed; first error: {done[0].error}"
        raise BenchAborted(
            f"benchmark of {endpoint.name}: {result.error}",
            partial=result,
            cause=result.error,
            hint="try one request with `sdtk infer`; the server log (`sdtk logs`) has the model's side",
        )


@dataclass(frozen=True)
class LoadSpec:
    """One run's load and how it is counted: closed-loop `concurrency` levels or a Poisson
    `rate`, the `sampling` of every request, the report's `label`, the deployment's `draft_len`
    (γ, when known, to turn the server's draft counts into an acceptance length; a per-request
    `sampling.num_draft_tokens` wins), `count_tokens` (the deployment's tokenizer over the
    cumulative text, named `tokenizer` in the report) and `part` (start, stop): only those
    requests of the sample, with their own indices and seeds (one round of an A/B's level:
    toolkit.bench.orchestrate.compare)."""

    concurrency: Sequence[int] | None = (1,)
    rate: float | None = None
    sampling: Sampling | None = None
    label: str = "bench"
    draft_len: int | None = None
    tokenizer: str | None = None
    count_tokens: Callable[[str], int] | None = None
    part: tuple[int, int] | None = None


async def run_load(
    endpoint: Endpoint,
    workload: Workload,
    opts: RunOptions | None = None,
    spec: LoadSpec | None = None,
    /,
    **changes: Any,
) -> BenchResult:
    """Run every level against one endpoint. Raises BenchAborted (with .partial) if the server dies.

    `opts`: requests, duration, warmup, seed, timeout, progress, allow_inexact (RunOptions);
    `spec`: the load and its counting (LoadSpec); keyword arguments named after either's fields
    change them (`run_load(ep, wl, concurrency=[1, 2], requests=8)`).
    Token counts: the server's `num_output_tokens` when the model has `return_num_output_tokens`,
    else `spec.count_tokens`. With neither, the run is refused (InexactCounts) unless
    `allow_inexact`; then one token per chunk is assumed and every report says INEXACT.
    `progress`: a Step (toolkit.progress), or a bool; the bars are off for False or `quiet`.
    """
    own, run_changes = split_changes(changes, LoadSpec)
    spec = dataclasses.replace(spec or LoadSpec(), **own)
    opts = RunOptions.of(opts, **run_changes)
    concurrency, rate, label, part = spec.concurrency, spec.rate, spec.label, spec.part
    draft_len, tokenizer, count_tokens = spec.draft_len, spec.tokenizer, spec.count_tokens
    requests, duration, warmup, seed = opts.requests, opts.duration, opts.warmup, opts.seed
    timeout, progress, allow_inexact = opts.timeout, opts.progress, opts.allow_inexact
    levels = check_levels(concurrency, rate)
    _check_run(requests, duration, warmup, timeout)
    sampling = spec.sampling or Sampling()
    spec = dataclasses.replace(spec, sampling=sampling)
    prompts = workload.sample(requests, seed)
    first, stop = part if part is not None else (0, requests)
    if not 0 <= first < stop <= requests:
        raise UsageError(f"requests [{first}, {stop}) are not a part of the {requests} sampled")
    prompts = prompts[first:stop]
    result = BenchResult(
        endpoint=endpoint.name,
        workload=workload.to_dict(),
        settings={
            "concurrency": levels or None,
            "rate": rate,
            "requests": requests,
            "duration": duration,
            "warmup": warmup,
            "seed": seed,
            "timeout": timeout,
            "sampling": sampling.to_dict(),
            "draft_len": draft_len,
            "tokenizer": tokenizer,
            "allow_inexact": allow_inexact,
        },
        warnings=list(workload.warnings),
    )
    await _preflight(endpoint, result, count_tokens, allow_inexact)
    with Bars(bars_enabled(progress), label) as bar:
        try:
            if warmup:
                refuse = count_tokens is None and not allow_inexact
                await _warm_up(
                    endpoint,
                    workload,
                    bar,
                    warmup=warmup,
                    seed=seed,
                    sampling=sampling,
                    timeout=timeout,
                    refuse_inexact=refuse,
                )
            steps: list[int | None] = [*levels] if levels else [None]  # None: one level at `rate`
            for lvl in steps:
                bar.level(f"c={lvl}" if lvl is not None else f"rate={rate:g}/s", len(prompts))
                if (begin := getattr(endpoint, "begin_level", None)) is not None:  # reads server counters
                    await begin()
                result.levels.append(
                    await _run_level(
                        endpoint,
                        prompts,
                        opts,
                        spec,
                        concurrency=lvl,
                        rate=rate if lvl is None else None,
                        progress=bar,
                        first=first,
                    )
                )
                if (end := getattr(endpoint, "end_level", None)) is not None:
                    await end(result.levels[-1])
        except _Aborted as e:
            raise _aborted(endpoint, result, e) from None
    _check_outcome(endpoint, result)
    return result


async def run_with(endpoint: Endpoint, workload: Workload, opts: RunOptions, spec: LoadSpec) -> BenchResult:
    """`run_load` with a run's options, closing the endpoint afterwards: how bench, compare and
    tune each measure one deployment. `spec.count_tokens` defaults to a TokenCounter of
    `spec.tokenizer`."""
    from toolkit.bench.measure.tokens import TokenCounter

    if spec.count_tokens is None and spec.tokenizer:
        spec = dataclasses.replace(spec, count_tokens=TokenCounter(spec.tokenizer))
    try:
        return await run_load(endpoint, workload, opts, spec)
    finally:
        await endpoint.close()
