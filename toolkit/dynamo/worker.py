"""sdtk's reference runtime served as a Dynamo worker (CPU): `python -m toolkit.dynamo.worker`.

Registered through Dynamo's low-level runtime API, as its own TensorRT-LLM worker does
(ai-dynamo 1.6.1, `dynamo/trtllm/workers/llm_worker.py` 771, 983-1001, 1096):
`DistributedRuntime(loop, "file", "tcp", event_plane="zmq")` → `runtime.endpoint(NS.backend.generate)`
→ `register_model(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, ...)` →
`endpoint.serve_endpoint(handler)`. The frontend tokenizes (and applies the chat template) with
the registered Hugging Face directory; the handler gets `request["token_ids"]` and
`request["stop_conditions"]` and yields `{"token_ids": [...], "index": 0}` chunks, the last with
`finish_reason` (`stop | length | cancelled`) and `completion_usage`
(`dynamo/trtllm/request_handlers/handler_base.py` 1401-1514).

Requests run in threads against the runtime's in-flight batcher (toolkit.reference.batching), as
the Triton reference model drives it. A client that goes away (`context.is_stopped()` /
`is_killed()`, or the frontend dropping the stream) stops its generation at the next step.

With `--publish-kv-events` (`--router-mode kv`) the worker publishes its live requests' prompt
blocks as KV events and its block load (toolkit.dynamo.kvevents), so that Dynamo's KV router
routes by prefix.

Dynamo exports no speculative-decoding acceptance metric; each worker serves sdtk's `sdtk_spec_*`
families (toolkit.ops.spec_metrics) and per-position acceptance on its own /metrics
(`--metrics-port`, 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from toolkit.dynamo.kvevents import KvBlocks, dynamo_kv_blocks

COMPONENT = "backend"
ENDPOINT = "generate"
KV_BLOCK_SIZE = 16  # the router's block size (the reference runtime's KV is per sequence, not in blocks)
ENGINE_DATA_KEY = "sdtk_spec"  # the response's nvext.engine_data.sdtk_spec: this request's acceptance
ACCEPTANCE_KEYS = (
    "steps",
    "draft_tokens",
    "accepted_tokens",
    "acceptance_rate",
    "acceptance_length",
    "per_position_proposed",
    "per_position_accepted",
)
POSITION_FAMILIES = (
    ("sdtk_spec_position_drafted_total", "draft tokens proposed at each draft position (1 = first)"),
    ("sdtk_spec_position_accepted_total", "draft tokens accepted at each draft position (1 = first)"),
)


def request_acceptance(stats: Any) -> dict[str, Any]:
    """One request's speculation counts (toolkit.reference.stats.SpecStats), for the final chunk's
    `engine_data`: Dynamo's frontend forwards a chunk's `engine_data` to the response's
    `nvext.engine_data` when the request asks for it with `"nvext": {"extra_fields":
    ["engine_data"]}` (ai-dynamo 1.6.1 `dynamo/common/backend/engine.py` GenerateChunk,
    `dynamo/frontend/utils.py` nvext_extra_field_requested)."""
    d = stats.to_dict()
    return {k: d[k] for k in ACCEPTANCE_KEYS}


class Cancelled(Exception):
    """The request's client went away: generation stops at its next step."""


def finish_reason(result_reason: str, stopped: bool) -> str:
    """Dynamo's finish reason for a reference GenerationResult's (`eos` | `length`)."""
    if stopped:
        return "cancelled"
    return "stop" if result_reason == "eos" else "length"


class Metrics:
    """sdtk_spec_* (toolkit.ops.monitor.SpecMetrics) plus per-position acceptance counters,
    served on 127.0.0.1:`port`."""

    def __init__(self, model: str, port: int):
        import prometheus_client as pc

        from toolkit.ops.monitor import SpecMetrics

        self.spec = SpecMetrics()
        self.sink = self.spec.sink(model)
        self.model = model
        self._pos = {
            name: pc.Counter(name, text, ["model", "position"], registry=self.spec.registry)
            for name, text in POSITION_FAMILIES
        }
        self.server = self.spec.serve(port, addr="127.0.0.1") if port >= 0 else None

    def observe(self, stats: Any, output_tokens: int) -> None:
        self.sink.observe(
            accepted=stats.accepted_tokens,
            drafted=stats.draft_tokens,
            output_tokens=output_tokens,
            steps=stats.steps,
        )
        for (name, _), counts in zip(
            POSITION_FAMILIES, (stats.per_position_proposed, stats.per_position_accepted), strict=True
        ):
            for i, n in enumerate(counts):
                if n:
                    self._pos[name].labels(self.model, str(i + 1)).inc(n)


class Handler:
    """Dynamo's `generate(request, context)` over one ReferenceRuntime with batching enabled."""

    def __init__(
        self,
        runtime: Any,
        spec: Any,
        metrics: Metrics | None,
        max_tokens: int,
        prefix: list[int] | None = None,
        max_seq_len: int | None = None,
        kv: KvBlocks | None = None,
    ):
        self.kv = kv  # --publish-kv-events: the blocks of the live requests, for the KV router
        self.max_seq_len = max_seq_len  # prompt + output: a longer max_tokens is cut to fit (length)
        self.rt = runtime
        self.spec = spec
        self.metrics = metrics
        self.max_tokens = max_tokens
        self.prefix = prefix or []  # special_prefix(): prepended unless the prompt starts with it

    def _sampling(self, request: dict[str, Any]) -> Any:
        from toolkit.reference import SamplingParams

        opts = request.get("sampling_options") or {}
        temperature = opts.get("temperature")
        return SamplingParams(
            temperature=float(temperature or 0.0),
            top_k=int(opts.get("top_k") or 0) if (opts.get("top_k") or 0) > 0 else 0,
            top_p=float(opts.get("top_p") or 1.0),
            seed=opts.get("seed"),
        )

    async def generate(self, request: dict[str, Any], context: Any) -> AsyncIterator[dict[str, Any]]:
        from dynamo.common.utils.token_ids import token_ids_to_list

        routed = prompt = token_ids_to_list(request.get("token_ids")) or []  # routed: the router's tokens
        if self.prefix and prompt[: len(self.prefix)] != self.prefix:
            prompt = self.prefix + prompt
        stops = request.get("stop_conditions") or {}
        max_new = int(stops.get("max_tokens") or self.max_tokens)
        if self.max_seq_len is not None:
            max_new = min(max_new, max(0, self.max_seq_len - len(prompt)))
        if max_new <= 0 or not prompt:
            yield self._final([], "length", len(prompt), 0)
            return
        end_id = -1 if stops.get("ignore_eos") else None
        sampling = self._sampling(request)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def on_tokens(tokens: list[int]) -> None:
            if stop.is_set():
                raise Cancelled()
            loop.call_soon_threadsafe(chunks.put_nowait, ("tokens", list(tokens)))

        def work() -> None:
            from toolkit.reference import PLAIN

            try:
                result = self.rt.generate(
                    prompt,
                    max_new,
                    sampling=sampling,
                    spec=self.spec if self.spec is not None else PLAIN,
                    end_id=end_id,
                    on_tokens=on_tokens,
                )
                loop.call_soon_threadsafe(chunks.put_nowait, ("done", result))
            except BaseException as e:  # handed to the request's coroutine
                loop.call_soon_threadsafe(chunks.put_nowait, ("error", e))

        thread = threading.Thread(target=work, name="sdtk-dynamo-generate", daemon=True)
        held = self.kv.acquire(routed) if self.kv is not None else []
        thread.start()
        produced = 0
        finished = False
        eos = self.rt.eos_token_id if end_id is None else None
        try:
            while True:
                try:
                    kind, value = await asyncio.wait_for(chunks.get(), timeout=0.25)
                except asyncio.TimeoutError:
                    if context.is_stopped() or context.is_killed():
                        stop.set()
                        yield self._final([], "cancelled", len(prompt), produced)
                        return
                    continue
                if kind == "tokens":
                    if context.is_stopped() or context.is_killed():
                        stop.set()
                        yield self._final([], "cancelled", len(prompt), produced)
                        return
                    tokens = [t for t in value if t != eos]  # the end id is not text
                    produced += len(tokens)
                    if tokens:
                        yield {"token_ids": tokens, "index": 0}
                elif kind == "done":
                    if self.metrics is not None:
                        self.metrics.observe(value.stats, produced)
                    finished = True
                    final = self._final([], finish_reason(value.finish_reason, False), len(prompt), produced)
                    final["engine_data"] = {ENGINE_DATA_KEY: request_acceptance(value.stats)}
                    yield final
                    return
                else:
                    raise value
        finally:  # the frontend dropped the stream, or we are done: the sequence leaves the batch
            stop.set()
            await asyncio.to_thread(thread.join)
            if self.kv is not None:
                self.kv.release(held)
            if not finished:
                print(f"request {context.id()}: cancelled after {produced} token(s)", flush=True)

    def _final(self, tokens: list[int], reason: str, prompt_len: int, produced: int) -> dict[str, Any]:
        return {
            "token_ids": tokens,
            "index": 0,
            "finish_reason": reason,
            "completion_usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": produced,
                "total_tokens": prompt_len + produced,
            },
        }


def special_prefix(tokenizer: Any) -> list[int]:
    """The ids the tokenizer puts before a text when it adds special tokens (a BOS), [] if none.

    Dynamo 1.6.1's frontend tokenizes a completion's prompt without them (measured: 9 ids for
    'def fibonacci(n):' where the tiny target's tokenizer gives <s> + 9), so the worker adds them,
    as Triton's preprocessing does with `add_special_tokens` (serving.add_special_tokens). A chat
    template that writes the BOS itself is left as it is: the prompt already starts with it."""
    text = "a"
    with_special = list(tokenizer(text)["input_ids"])
    plain = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    n = len(with_special) - len(plain)
    if n > 0 and with_special[n:] == plain:
        return with_special[:n]
    return []


def load(engine_dir: Path, max_batch_size: int, capacity: int) -> tuple[Any, Any]:
    """The engine directory's reference runtime with in-flight batching, and its speculative
    config (None: plain decoding)."""
    from toolkit.generate import set_torch_threads
    from toolkit.reference import ReferenceRuntime

    set_torch_threads()
    runtime = ReferenceRuntime.from_engine_dir(engine_dir)
    runtime.enable_batching(max_batch_size, capacity=capacity)
    spec = runtime.spec if getattr(runtime.spec, "mode", "none") != "none" else None
    return runtime, spec


async def serve(args: argparse.Namespace, ready: Callable[[], None] = lambda: None) -> None:
    from dynamo.llm import ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model
    from dynamo.runtime import DistributedRuntime

    runtime, spec = load(Path(args.engine_dir), args.max_batch_size, args.max_seq_len + 72)
    metrics = Metrics(args.served_model_name, args.metrics_port) if args.metrics_port >= 0 else None
    loop = asyncio.get_running_loop()
    drt = DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
    endpoint = drt.endpoint(f"{args.namespace}.{COMPONENT}.{ENDPOINT}")
    cfg = ModelRuntimeConfig()
    cfg.context_length = args.max_seq_len
    cfg.max_num_seqs = args.max_batch_size
    # The in-flight batch's KV capacity in router blocks: max_batch_size sequences of max_seq_len.
    cfg.total_kv_blocks = args.max_batch_size * -(-args.max_seq_len // KV_BLOCK_SIZE)
    await register_model(
        ModelInput.Tokens,
        ModelType.Chat | ModelType.Completions,
        endpoint,
        args.model_path,
        args.served_model_name,
        worker_type=WorkerType.Aggregated,
        kv_cache_block_size=KV_BLOCK_SIZE,
        runtime_config=cfg,
        custom_template_path=args.chat_template or None,
    )
    prefix = special_prefix(runtime.tokenizer) if args.add_special_tokens else []
    kv = await dynamo_kv_blocks(endpoint, KV_BLOCK_SIZE) if args.publish_kv_events else None
    handler = Handler(runtime, spec, metrics, args.max_tokens, prefix, args.max_seq_len, kv)
    print(
        f"sdtk dynamo worker {args.worker_name}: serving '{args.served_model_name}' "
        f"({getattr(runtime.spec, 'mode', 'none')}) pid {os.getpid()} at {time.strftime('%H:%M:%S')}",
        flush=True,
    )
    ready()
    await endpoint.serve_endpoint(handler.generate)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m toolkit.dynamo.worker", description=__doc__.split("\n")[0])
    p.add_argument("--engine-dir", required=True, help="the reference engine directory (sdtk build)")
    p.add_argument("--model-path", required=True, help="Hugging Face directory: tokenizer, config")
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--worker-name", default="worker-0")
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=64, help="when a request gives no max_tokens")
    p.add_argument("--metrics-port", type=int, default=-1, help="sdtk_spec_* on 127.0.0.1 (-1: off)")
    p.add_argument(
        "--no-add-special-tokens",
        dest="add_special_tokens",
        action="store_false",
        help="do not prepend the tokenizer's special prefix (BOS) to prompts the frontend tokenized",
    )
    p.add_argument(
        "--publish-kv-events",
        action="store_true",
        help="publish the live requests' prompt blocks as KV events (Dynamo's --router-mode kv)",
    )
    p.add_argument(
        "--chat-template", default="", help="a Jinja chat template file (default: the tokenizer's)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import uvloop

    uvloop.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
