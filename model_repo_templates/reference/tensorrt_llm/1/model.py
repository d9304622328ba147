"""sdtk reference tensorrt_llm model: the official `tensorrt_llm` tensor contract, served by
sdtk's PyTorch reference runtime (toolkit.reference) in Triton's Python backend.

Rendered as `tensorrt_llm` (the target) and, for draft-target, `tensorrt_llm_draft`, from the same
config.pbtxt template as the engine backend; this model reads the same parameters:

- `gpt_model_path`: the engine directory; its config.json `reference` section names the
  checkpoint, tokenizer, heads and the recipe's speculative section.
- `decoding_mode`: empty = the mode the engine directory was built for; `top_k`, `top_p`,
  `top_k_top_p` = plain decoding (speculation off, no rebuild); `medusa`, `eagle3` (alias
  `eagle`), `lookahead`, `ngram` = that mode, which must be the one built.
- `medusa_choices` / `eagle_choices` (Triton's "{0, 0}, {0, 1}" form) and `lookahead_window_size`,
  `lookahead_ngram_size`, `lookahead_verification_set_size` override the built values.
- `exclude_input_in_output`, `max_beam_width` (must be 1).

Requests follow the C++ backend of the TensorRT-LLM version the repository was rendered for: it
reads whatever that config.pbtxt declares (`seed`/`min_tokens`, or `random_seed`/`min_length` up
to 0.19; `num_*_tokens` only where declared), and Triton core refuses any input or output the
config does not declare, as it does in front of the C++ backend.
`input_ids`/`input_lengths`/`request_output_len`, `end_id`
(the end token is left out of the output), `temperature`/`runtime_top_k`/`runtime_top_p`/`seed`
(with TensorRT-LLM's defaults: neither top_k nor top_p is greedy, no seed is 0; `_sampling`),
`streaming` (decoupled deployments only; each chunk carries the new tokens as they come, and the
perf outputs follow in a last, empty chunk), `stop_words_list`,
`exclude_input_in_output`, `return_perf_metrics` (acceptance, timing and KV-cache block outputs),
`return_num_input_tokens`/`return_num_output_tokens`, per-request `lookahead_*` (speculation
is off when they give no draft tokens, e.g. (1, 1, 0)). With `draft_input_ids` (the BLS
draft-target loop) the target verifies the draft (`ReferenceRuntime.verify_draft`) and, like
TensorRT-LLM, continues plainly until `request_output_len` tokens or the end id; draft logits are
not needed (and are ignored).
`repetition_penalty`/`presence_penalty`/`frequency_penalty`, `min_tokens` (`min_length`) and
`bad_words_list` follow TensorRT-LLM's penalty kernel (toolkit/reference/processors.py), applied to
every verification row with its own prefix, so speculation stays lossless;
`return_log_probs` gives `output_log_probs` [1, 1, generated] and `cum_log_probs` [1, 1] (the
`normalize_log_probs` parameter as upstream: true, the default, gives greedy tokens 0),
`return_generation_logits` the raw target logits [1, 1, generated, vocab]; `num_return_sequences`
> 1 (decoupled deployments) sends each sequence as its own response with `sequence_index`, as the
C++ backend does. Features the reference runtime lacks (beam search, context logits, LoRA, prompt
tables, embedding bias) are refused per request.

In-flight batching: execute() hands each request to its own thread and returns; the runtime
(toolkit/reference/batching.py) batches the steps of all running requests into one forward per
iteration, up to the engine's max_batch_size sequences, and requests that arrive meanwhile join
at the next iteration. One `Responder` thread does every Triton call after execute() (sending,
is_cancelled() at most every CANCEL_CHECK_S per request, the sdtk_spec_* metrics); the
generation threads only exchange numpy dicts and Events with it. Decoupled or not, as the C++
backend: not decoupled, each request gets one response through its response sender (the Python
backend's default mode, Triton ≥ 24.06), so requests of separate execute() calls (e.g. the
iterations of concurrent draft-target BLS loops) share the batch too.

sdtk's own code; needs sdtk (toolkit.reference) in the Python that runs Triton's Python backend.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
import sdtk_triton as st
import triton_python_backend_utils as pb_utils

from toolkit.ops.spec_metrics import Sink, TritonSpecMetrics

INT32_MAX = 2**31 - 1
# The perf outputs' KV-cache counters, in sdtk's accounting: the reference runtime keeps each
# sequence's cache contiguous and reuses nothing, so a request reports the 64-token blocks its
# prompt + output span as allocated (all new) and 0 reused. Clients that read the counters
# (upstream's end_to_end_grpc_client.py --return-perf-metrics reads `[0][0]` of each) get them.
TOKENS_PER_BLOCK = 64
PLAIN = ("top_k", "top_p", "top_k_top_p")
MODES = {
    "medusa": "medusa",
    "eagle": "eagle3",
    "eagle3": "eagle3",
    "lookahead": "lookahead",
    "ngram": "ngram",
    "sa": "sa",
}
LOOKAHEAD = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
INPUTS = (
    "input_ids",
    "input_lengths",
    "request_output_len",
    "draft_input_ids",
    "end_id",
    "stop_words_list",
    "bad_words_list",
    "embedding_bias",
    "beam_width",
    "num_return_sequences",
    "temperature",
    "runtime_top_k",
    "runtime_top_p",
    "seed",
    "random_seed",  # the seed's name up to TensorRT-LLM 0.19 (the config declares one of the two)
    "min_tokens",
    "min_length",  # min_tokens' name up to 0.19
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "return_log_probs",
    "return_context_logits",
    "return_generation_logits",
    "return_perf_metrics",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "exclude_input_in_output",
    "streaming",
    "stop",
    *LOOKAHEAD,
)
UNSUPPORTED = (
    "encoder_input_features",
    "prompt_embedding_table",
    "lora_task_id",
    "lora_weights",
    "lora_config",
    "guided_decoding_guide",
    "context_phase_params",
    "cross_attention_mask",
    "mrope_rotary_cos_sin",
    "retention_token_range_starts",
)
# Per-request knobs the reference runtime does not implement, with the values that mean "off".
NEUTRAL = {
    "beam_width": (1, 0),
    "return_context_logits": (False,),
}


def resolve_spec(built: dict, params: dict[str, str]) -> dict | None:
    """The speculative section generation uses (None: plain decoding), from the section the
    engine directory was built with and the config.pbtxt parameters."""
    from toolkit.trees import from_triton_string

    built_mode = built.get("mode", "none")
    decoding_mode = (st.param_str(params, "decoding_mode") or "").lower()
    if decoding_mode in PLAIN:
        return None
    if decoding_mode == "":
        # draft_target speculates in the BLS loop (draft_input_ids), never inside this model.
        mode = None if built_mode in ("none", "draft_target") else built_mode
    elif decoding_mode in MODES:
        mode = MODES[decoding_mode]
        if mode != built_mode:
            raise ValueError(
                f"decoding_mode {decoding_mode} needs an engine directory built for {mode}; "
                f"this one was built for {built_mode}"
            )
    else:
        raise ValueError(
            f"decoding_mode {decoding_mode!r} is not supported by the reference backend "
            f"(use one of {', '.join([*PLAIN, *MODES])}, or leave it empty)"
        )
    if mode is None:
        return None
    spec = dict(built)
    choices_key = {"medusa": "medusa_choices", "eagle3": "eagle_choices"}.get(mode)
    if choices_key and st.param_str(params, choices_key):
        spec[choices_key] = from_triton_string(st.param_str(params, choices_key))
    if mode == "lookahead":
        sizes = [st.param_int(params, k, None) for k in LOOKAHEAD]
        if any(s is not None for s in sizes):
            if None in sizes:
                raise ValueError("decoding_mode lookahead needs all of " + ", ".join(LOOKAHEAD))
            spec.update(window=sizes[0], ngram=sizes[1], verification_set=sizes[2])
            spec.pop("max_draft_len", None)  # derived from (W, N, G)
    return spec


def _seed(inputs: dict[str, np.ndarray], i: int) -> int:
    """The request's seed, under the name its version's config declares (`random_seed` up to 0.19);
    TensorRT-LLM's default is 0 (layers/defaultDecodingParams.h `getSeed`): a request without one
    samples the same way every time (NVIDIA/TensorRT-LLM issue #1000, maintainer's answer)."""
    for name in ("seed", "random_seed"):
        if name in inputs:
            return int(st.scalar(inputs, name, 0, i))
    return 0


def _sampling(inputs: dict[str, np.ndarray], i: int, sequence: int = 0):
    """The request's sampling, with TensorRT-LLM's defaults (defaultDecodingParams.h: temperature 1,
    top_k 0, top_p 0): top_k 0 with top_p 0 is greedy whatever the temperature, as is top_k 1 or
    temperature 0 (the sampling kernels' `k == 0 && p == 0 -> k = 1`; "if you don't set topk/topp,
    the default setting is greedy search", tensorrtllm_backend issue #221); top_p 0 with top_k > 0
    means top_p 1."""
    from toolkit.reference import SamplingParams

    temperature = float(st.scalar(inputs, "temperature", 1.0, i))
    top_k = int(st.scalar(inputs, "runtime_top_k", 0, i))
    top_p = float(st.scalar(inputs, "runtime_top_p", 0.0, i))
    if temperature <= 0 or top_k == 1 or (top_k <= 0 and top_p <= 0):
        return SamplingParams()
    return SamplingParams(
        temperature=temperature,
        top_k=max(top_k, 0),
        top_p=min(top_p, 1.0) if top_p > 0 else 1.0,
        seed=_sequence_seed(_seed(inputs, i), sequence),
    )


def _min_tokens(inputs: dict[str, np.ndarray], i: int) -> int:
    """The request's min_tokens, under the name its version's config declares (`min_length` up to 0.19)."""
    for name in ("min_tokens", "min_length"):
        if name in inputs:
            return int(st.scalar(inputs, name, 0, i))
    return 0


def _sequence_seed(seed: int, k: int) -> int:
    """The seed of a request's k-th return sequence: the request's for the first, distinct ones after."""
    if k == 0:
        return seed
    return (seed + k * 0x9E3779B97F4A7C15) % 2**63


def build_limits(engine_dir: Path) -> tuple[int | None, int | None]:
    """(max_input_len, max_seq_len) of the engine directory's build_config."""
    build = json.loads((engine_dir / "config.json").read_text()).get("build_config") or {}
    return build.get("max_input_len") or None, build.get("max_seq_len") or None


def build_batch_size(engine_dir: Path, default: int) -> int:
    """build_config.max_batch_size: the most sequences one iteration batches (the recipe's
    build.max_batch_size, as TensorRT-LLM's executor uses the engine's)."""
    build = json.loads((engine_dir / "config.json").read_text()).get("build_config") or {}
    return int(build.get("max_batch_size") or default)


class Responder(Sink):
    """The one thread that touches Triton objects after execute() has handed a request over:
    it sends what the generation threads produce, asks `is_cancelled()` for every request in
    flight at most once per CANCEL_CHECK_S, and makes every custom-metric call of the stub: the
    sdtk_spec_* observations and, every `batch_metrics.period` seconds, the batch gauges.

    Generation threads (one per request, batched by the runtime) only put numpy dicts on the
    outbox and read an Event, so Triton's objects are never used from two threads at once, and
    each request's objects are released on this thread. Custom-metric calls made from several
    threads at once crash tritonserver 2.51 (Signal 11 in libtriton_python; reproduced with four
    concurrent BLS instances calling a non-decoupled tensorrt_llm; tests/stress/test_served.py runs
    such traffic).

    Not decoupled (`single`), a request gets exactly one response, its last output with the
    final flag (the Python backend's default mode with a response sender, Triton ≥ 24.06)."""

    def __init__(self, name: str, metrics=None, batch_metrics=None, faults=None):
        self.name = name
        self.metrics = metrics
        self.batch_metrics = batch_metrics
        self.faults = faults if faults is not None else st.Faults()
        self._flushed = 0.0
        self.outbox: queue.Queue = queue.Queue()
        # key -> (sender, stop Event, cancel probe, request id, single response, in-band faults)
        self.flight: dict[int, tuple] = {}
        self.last: dict[int, dict] = {}  # a `single` request's latest output, sent with its end
        self.stopped: set[int] = set()  # keys a `stop` request cancelled
        self.failed: dict[int, BaseException] = {}  # keys stopped because a response failed
        self._next = 0
        self.thread = threading.Thread(target=self._loop, name="sdtk-reference-respond", daemon=True)
        self.thread.start()

    def start(self, sender, work, request_id: str = "", single: bool = False, inband: bool = False) -> None:
        """Run `work(cancelled)` (an iterable of output dicts) in its own thread; stream its
        outputs through `sender` (`single`: only the last, as the request's one response).
        `request_id`: what a `stop` request names to cancel it; `inband`: a failure is sent as
        a st.fault_chunk (sdtk's BLS asks for it: Triton 2.51 loses its errors, see `_fail`).

        The sender goes to the loop thread only once the request's thread runs: when the thread
        cannot start (RuntimeError "can't start new thread" in an exhausted address space) this
        raises and the loop never saw the sender, so the caller answers the request before
        execute() returns. (A loop holding the sender of a request whose execute() raised made
        tritonserver 2.51 segfault in TRITONBACKEND_ResponseFactoryIsCancelled: the Python
        backend closes the senders of a failed execute() and frees their response factories.)"""
        self._next += 1
        key, stop, go = self._next, threading.Event(), threading.Event()
        handed: list[bool] = []

        def run():
            go.wait()
            if not handed:  # start() failed after the thread started: the caller answers
                return
            try:
                for out in work(stop.is_set):
                    self.outbox.put(("out", key, out))
                self.outbox.put(("final", key, None))
            except Exception as e:  # sent as the request's error response
                self.outbox.put(("error", key, e))

        try:
            self.faults.check("thread_start")
            threading.Thread(target=run, name=f"sdtk-reference-request-{key}", daemon=True).start()
            # is_cancelled() at most every CANCEL_CHECK_S, never in a request's first CANCEL_CHECK_S.
            probe = st.every(st.CANCEL_CHECK_S, sender.is_cancelled)
            self.outbox.put(("open", key, (sender, stop, probe, request_id, single, inband)))
            handed.append(True)
        finally:
            go.set()

    def cancel(self, request_id: str) -> None:
        """Stop the requests in flight with this request id (TensorRT-LLM's `stop` input: how a
        BLS cancels its sub-request, which Triton 2.51 cannot cancel otherwise)."""
        self.outbox.put(("cancel", 0, request_id))

    def record(self, obs) -> None:  # Sink: the loop thread hands it to the Triton metrics
        self.outbox.put(("metrics", 0, obs))

    def _loop(self) -> None:
        while True:
            try:
                kind, key, value = self.outbox.get(timeout=st.CANCEL_CHECK_S)
            except queue.Empty:
                kind, key, value = None, 0, None
            if kind == "close":
                return
            try:
                self._step(kind, key, value)
            except Exception as e:  # noqa: BLE001 - the loop serves every later request: never lose it
                print(f"sdtk {self.name}: responder: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _step(self, kind, key: int, value) -> None:
        if self.batch_metrics is not None and time.monotonic() - self._flushed >= self.batch_metrics.period:
            self._flushed = time.monotonic()
            self.batch_metrics.flush()
        if kind == "open":
            self.flight[key] = value
        elif kind == "metrics":
            if self.metrics is not None:
                self.metrics.record(value)
        elif kind == "cancel":
            for k, (_, stop, _, request_id, _, _) in self.flight.items():
                if request_id == value:
                    stop.set()
                    self.stopped.add(k)
        elif kind is not None and key in self.flight:
            self._deliver(kind, key, value)
        for k, (_, stop, probe, *_) in list(self.flight.items()):
            if stop.is_set():
                continue
            try:
                if probe():
                    stop.set()
            except Exception as e:  # noqa: BLE001 - the request ends with this error
                self.failed.setdefault(k, e)
                stop.set()

    def _response(self, outputs: dict):
        self.faults.check("alloc")
        return st.response(outputs)

    def _deliver(self, kind: str, key: int, value) -> None:
        """One output ("out"), or the end ("final", "error") of request `key`. A chunk that cannot
        be sent (no memory for it, or the client has gone) stops the generation, and the request
        then ends with that error: a stream cut short is never closed as if it were complete."""
        sender, stop, _, _, single, inband = self.flight[key]
        if kind == "out":
            if single:
                self.last[key] = value
                return
            if key in self.failed:  # a chunk was lost: nothing after it goes out
                return
            try:
                sender.send(self._response(value))
            except Exception as e:  # noqa: BLE001 - recorded; the request ends with it
                self.failed.setdefault(key, e)
                stop.set()
            return
        # The request ends here, whatever the sends below do.
        del self.flight[key]
        out = self.last.pop(key, None)
        failed = self.failed.pop(key, None)
        stopped = key in self.stopped
        self.stopped.discard(key)
        if failed is None and kind == "error" and not (stopped and isinstance(value, st.Cancelled)):
            failed = value
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            if failed is not None:
                self._fail(sender, failed, single, inband)
            elif kind == "final" and single:
                response = (
                    self._response(out)
                    if out is not None
                    else st.failure(self.name, RuntimeError("no output"))
                )
                sender.send(response, flags=final)
            else:
                # Complete, or ended by a `stop` request: a plain final response, as TensorRT-LLM's
                # backend ends a cancelled request (the caller, a BLS, reads to the end).
                sender.send(flags=final)
        except Exception as e:  # noqa: BLE001 - e.g. no memory for the response: end it with the error
            st.last_word(sender, self.name, e)

    def _fail(self, sender, e: BaseException, single: bool, inband: bool) -> None:
        """End a request with the error `e`. Not decoupled, one response carries the error and
        the FINAL flag. Decoupled, the error goes out as a response of its own, then an empty
        FINAL: Triton 2.51 loses an error response sent after the first response of a decoupled
        BLS sub-request, and with it the FINAL flag it carries (the BLS then waits for ever).
        For sdtk's BLS (`inband`) the error is a data response (st.fault_chunk), which arrives."""
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if single:
            sender.send(st.failure(self.name, e), flags=final)
            return
        if inband:
            message = st.failure(self.name, e).error().message()
            sender.send(st.response(st.fault_chunk(message)))
        else:
            sender.send(st.failure(self.name, e))
        sender.send(flags=final)

    def idle(self) -> bool:
        return not self.flight and self.outbox.empty()

    def close(self) -> None:
        self.outbox.put(("close", 0, None))
        self.thread.join(timeout=5)


def load_runtime(engine_dir: Path):
    """The reference runtime for an engine directory, and its built speculative section.

    A draft-target engine directory loads its checkpoint alone: the draft runs as its own model
    (tensorrt_llm_draft) and the BLS drives the loop.
    """
    from toolkit.reference import ReferenceRuntime

    cfg = json.loads((engine_dir / "config.json").read_text())
    ref = cfg.get("reference") or {}
    built = ref.get("speculative") or {"mode": "none"}
    if built.get("mode") == "draft_target":
        tokenizer = ref.get("tokenizer")
        runtime = ReferenceRuntime.load(
            target=Path(ref["checkpoint"]),
            dtype=str(cfg.get("pretrained_config", {}).get("dtype", "float32")),
            tokenizer=Path(tokenizer) if tokenizer else None,
            # The memory-bound twin (toolkit.membound); absent or 1: the target as it is.
            **({"inflate": int(ref["inflate"])} if int(ref.get("inflate") or 1) > 1 else {}),
        )
    else:
        runtime = ReferenceRuntime.from_engine_dir(engine_dir)
    return runtime, built


def _in_thread(run):
    """Run `run(on_tokens)` in a worker thread and yield each list of tokens it reports, so that a
    decoupled response can go out while generation continues.

    Neither thread touches Triton objects (the Responder does). When the consumer stops early
    (the client cancelled, a send failed), the worker is told to stop at its next step and is
    joined: the request's sequence has left the batch before the request ends."""
    chunks: queue.Queue = queue.Queue()
    stop = threading.Event()

    def on_tokens(tokens):
        if stop.is_set():
            raise st.Cancelled()
        chunks.put(("tokens", list(tokens)))

    def worker():
        try:
            run(on_tokens)
            chunks.put(("done", None))
        except BaseException as e:  # re-raised in the consumer
            chunks.put(("error", e))

    thread = threading.Thread(target=worker, name="sdtk-reference-generate", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = chunks.get()
            if kind == "tokens":
                yield value
            elif kind == "done":
                return
            else:
                raise value
    finally:
        stop.set()
        thread.join()


class Generator:
    """The model's logic, independent of Triton: a runtime plus the deployment's settings."""

    def __init__(
        self,
        runtime,
        spec,
        *,
        exclude_input_in_output: bool,
        decoupled: bool,
        metrics=None,
        max_input_len: int | None = None,
        max_seq_len: int | None = None,
        normalize_log_probs: bool = True,
    ):
        self.rt = runtime
        self.normalize_log_probs = normalize_log_probs  # the config parameter; upstream's default is true
        self.max_input_len = max_input_len  # the engine's build limits (None: unchecked)
        self.max_seq_len = max_seq_len
        self.spec = spec  # typed speculative section, or None for plain decoding
        self.exclude_input_in_output = exclude_input_in_output
        self.decoupled = decoupled
        self.metrics = metrics  # sdtk_spec_* counters on Triton's /metrics, when available

    def __call__(self, inputs: dict[str, np.ndarray], cancelled=lambda: False):
        """Yield output dicts: one for a plain request, one per chunk when streaming.

        `cancelled()` says whether the client has gone; generation asks it between steps and
        stops with `Cancelled`. Calls may run concurrently (one thread per request): the runtime
        batches their steps in flight."""
        self._check(inputs)
        batch = inputs["input_ids"].shape[0]
        stream = bool(st.scalar(inputs, "streaming", False))
        if stream and not self.decoupled:
            raise st.BadRequest("Streaming is only supported if model is deployed using decoupled mode.")
        if st.scalar(inputs, "stop", False):  # a cancellation: nothing to generate
            yield {
                "output_ids": np.zeros((batch, 1, 0), np.int32),
                "sequence_length": np.zeros((batch, 1), np.int32),
            }
            return
        if stream and batch > 1:
            raise st.BadRequest(f"streaming needs batch size 1, got {batch}")
        sequences = int(st.scalar(inputs, "num_return_sequences", 1) or 1)
        if sequences > 1:
            # The C++ backend sends each sequence as its own response (with sequence_index), which
            # only a decoupled model can do.
            if not self.decoupled:
                raise st.BadRequest(
                    "num_return_sequences > 1 needs a decoupled deployment (each sequence is its own response)"
                )
            if batch > 1:
                raise st.BadRequest(f"num_return_sequences > 1 needs batch size 1, got {batch}")
            for k in range(sequences):
                yield from self._row(inputs, 0, stream, cancelled, sequence=k)
            return
        if batch == 1:
            yield from self._row(inputs, 0, stream, cancelled)
            return
        rows = [list(self._row(inputs, i, False, cancelled))[-1] for i in range(batch)]
        yield {n: st.stack_rows([r[n] for r in rows]) for n in rows[0]}

    @staticmethod
    def _check(inputs: dict[str, np.ndarray]) -> None:
        for name in UNSUPPORTED:
            if name in inputs:
                raise st.BadRequest(f"input {name} is not supported by the reference backend")
        for name, neutral in NEUTRAL.items():
            if name in inputs and st.scalar(inputs, name, neutral[0]) not in neutral:
                raise st.BadRequest(
                    f"{name} other than {neutral[0]} is not supported by the reference backend"
                )
        if int(st.scalar(inputs, "num_return_sequences", 1) or 1) < 0:
            raise st.BadRequest("num_return_sequences must be positive")
        if "embedding_bias" in inputs and np.any(inputs["embedding_bias"]):
            raise st.BadRequest("embedding_bias is not supported by the reference backend")
        if "input_ids" not in inputs or "request_output_len" not in inputs:
            raise st.BadRequest("input_ids and request_output_len are required")

    def _check_lengths(self, length: int, max_new: int, loop: bool = False) -> None:
        """Refuse what TensorRT-LLM's executor refuses, naming the input (and the ensemble's
        name for it): the engine's build limits bound every request. `loop`: a sub-request of
        the BLS draft-target loop (input_ids is the sequence so far; the BLS checked the prompt)."""
        if max_new < 1:
            raise st.BadRequest(
                f"request_output_len (max_tokens) must be between 1 and {INT32_MAX}, got {max_new}"
                + (" (a value beyond int32 wraps around)" if max_new < 0 else "")
            )
        if self.max_input_len and not loop and length > self.max_input_len:
            raise st.BadRequest(
                f"input_lengths (the prompt's tokens, text_input) is {length}, over the engine's "
                f"max_input_len {self.max_input_len} (build.max_input_len)"
            )
        if self.max_seq_len and length + max_new > self.max_seq_len:
            raise st.BadRequest(
                f"input_lengths {length} + request_output_len (max_tokens) {max_new} = {length + max_new} "
                f"is over the engine's max_seq_len {self.max_seq_len} (build.max_seq_len)"
            )

    def _row(self, inputs: dict[str, np.ndarray], i: int, stream: bool, cancelled, sequence: int = 0):
        """One request row's responses; `sequence`: which of its num_return_sequences this is."""
        from toolkit.reference.processors import Processors, Trace

        arrival = time.time_ns()
        length = int(st.scalar(inputs, "input_lengths", inputs["input_ids"].shape[1], i))
        prompt = inputs["input_ids"][i, :length].astype(np.int64).tolist()
        max_new = int(st.scalar(inputs, "request_output_len", 0, i))
        self._check_lengths(length, max_new, loop=st.BLS_LOOP in inputs)
        end_id = int(st.scalar(inputs, "end_id", -2, i))
        if end_id == -2:  # not given: the tokenizer's; a negative end id means none
            end_id = self.rt.eos_token_id if self.rt.eos_token_id is not None else -1
        sampling = _sampling(inputs, i, sequence)
        processors = Processors(
            repetition_penalty=float(st.scalar(inputs, "repetition_penalty", 1.0, i)),
            presence_penalty=float(st.scalar(inputs, "presence_penalty", 0.0, i)),
            frequency_penalty=float(st.scalar(inputs, "frequency_penalty", 0.0, i)),
            min_tokens=_min_tokens(inputs, i),
            end_id=end_id if end_id >= 0 else None,
            bad_words=tuple(
                tuple(w)
                for w in (st.word_lists(inputs["bad_words_list"][i]) if "bad_words_list" in inputs else [])
            ),
            prompt_len=length,
        )
        log_probs = bool(st.scalar(inputs, "return_log_probs", False, i))
        gen_logits = bool(st.scalar(inputs, "return_generation_logits", False, i))
        trace = (
            Trace(log_probs=log_probs, normalize=self.normalize_log_probs, logits=gen_logits)
            if log_probs or gen_logits
            else None
        )
        numbered = (
            "num_return_sequences" in inputs and int(st.scalar(inputs, "num_return_sequences", 1) or 1) > 1
        )
        exclude = bool(st.scalar(inputs, "exclude_input_in_output", self.exclude_input_in_output, i))
        stops = st.word_lists(inputs["stop_words_list"][i]) if "stop_words_list" in inputs else []
        perf = bool(st.scalar(inputs, "return_perf_metrics", False, i))
        count_in = bool(st.scalar(inputs, "return_num_input_tokens", False, i))
        count_out = bool(st.scalar(inputs, "return_num_output_tokens", False, i))
        draft = (
            inputs["draft_input_ids"][i].astype(np.int64).tolist() if "draft_input_ids" in inputs else None
        )
        spec, speculative = self._request_spec(inputs, i)
        state = {"first": 0, "drafted": 0, "accepted": 0, "steps": 0, "done": False}
        out: list[int] = []

        def keep(tokens: list[int]) -> list[int]:
            """Append generated tokens, cutting at the end id (left out) or a stop word (kept)."""
            if state["done"] or not tokens:
                return []
            start = len(out)
            if end_id >= 0 and end_id in tokens:
                tokens, state["done"] = tokens[: tokens.index(end_id)], True
            out.extend(tokens[: max_new - start])
            hit = st.stop_at(out, stops, start=start)
            if hit is not None:
                del out[hit:]
                state["done"] = True
            if len(out) > start and not state["first"]:
                state["first"] = time.time_ns()
            return out[start:]

        def run(on_tokens) -> None:
            if max_new <= 0:
                return
            if draft is None and self.spec is not None:
                from toolkit.reference.runtime import PLAIN

                result = self.rt.generate(
                    prompt,
                    max_new,
                    sampling=sampling,
                    spec=spec if speculative else PLAIN,
                    end_id=end_id,
                    on_tokens=on_tokens,
                    processors=processors,
                    trace=trace,
                )
                state["drafted"], state["accepted"] = result.stats.draft_tokens, result.stats.accepted_tokens
                state["steps"] = result.stats.steps
                return
            # TensorRT-LLM draft_tokens_external: verify the draft, then decode plainly up to
            # request_output_len (the BLS asks for len(draft) + 1) unless the end id comes. A model
            # without speculation (the BLS's draft model, a baseline) takes the same path. The plain
            # steps are verify_draft calls without a draft: they extend the cache kept from the
            # previous request instead of prefilling the whole sequence again, as generate() would.
            ids, produced, proposal = list(prompt), 0, draft or []
            # One batch membership (and KV slot) for the whole request, not one per step.
            with self.rt.hold(ids):
                while produced < max_new:
                    verified = self.rt.verify_draft(
                        ids, proposal, sampling=sampling, end_id=end_id, processors=processors, trace=trace
                    )
                    state["steps"] += 1
                    new = verified.new_tokens[: max_new - produced]
                    if proposal:
                        # A load-aware schedule may verify fewer draft tokens than the BLS sent.
                        drafted = min(len(proposal), verified.drafted)
                        state["drafted"], state["accepted"] = drafted, min(verified.accepted, drafted)
                        proposal = []
                    on_tokens(new)
                    ids += new
                    produced += len(new)
                    if not new or end_id in new:
                        break

        def run_and_observe(on_tokens) -> None:
            try:
                run(on_tokens)
            finally:  # a cancelled request counts the tokens it did generate
                if self.metrics is not None:
                    self.metrics.observe(
                        accepted=state["accepted"],
                        drafted=state["drafted"],
                        output_tokens=len(out),
                        steps=state["steps"],
                    )

        def outputs(tokens: list[int], span: tuple[int, int], final: bool = True) -> dict[str, np.ndarray]:
            """The response for `tokens`, which carry generated tokens out[first:first + n] (`span`)."""
            result = {
                "output_ids": np.array(tokens, dtype=np.int32).reshape(1, 1, len(tokens)),
                "sequence_length": np.array([[len(tokens)]], dtype=np.int32),
            }
            if numbered:
                result["sequence_index"] = np.array([[sequence]], dtype=np.int32)
            if trace is not None:
                # Generated tokens only (not the prompt), as TensorRT-LLM's executor returns them:
                # output_log_probs [1, beams, tokens], cum_log_probs [1, beams] (the total so far),
                # generation_logits [1, beams, tokens, vocab].
                first, n = span
                if trace.log_probs:
                    lp = trace.token_log_probs[first : first + n]
                    result["output_log_probs"] = np.array(lp, dtype=np.float32).reshape(1, 1, n)
                    total = float(np.sum(trace.token_log_probs[: first + n], dtype=np.float64))
                    result["cum_log_probs"] = np.array([[total]], dtype=np.float32)
                if trace.logits:
                    rows = trace.token_logits[first : first + n]
                    vocab = self.rt.target.config.vocab_size
                    stacked = (
                        np.stack([r.numpy() for r in rows]) if rows else np.zeros((0, vocab), np.float32)
                    )
                    result["generation_logits"] = stacked.astype(np.float32).reshape(1, 1, n, vocab)
            if count_out:  # per response: the tokens it carries (a closing chunk: 0)
                n = len(tokens) if stream else len(out)
                result["num_output_tokens"] = np.array([[n]], dtype=np.int32)
            if not final:
                return result
            if perf:
                now = time.time_ns()
                drafted, accepted = state["drafted"], state["accepted"]
                result["acceptance_rate"] = np.array(
                    [[accepted / drafted if drafted else 0.0]], dtype=np.float32
                )
                result["total_accepted_draft_tokens"] = np.array([[accepted]], dtype=np.int32)
                result["total_draft_tokens"] = np.array([[drafted]], dtype=np.int32)
                blocks = -(-(len(prompt) + len(out)) // TOKENS_PER_BLOCK)
                result["kv_cache_alloc_new_blocks"] = np.array([[blocks]], dtype=np.int32)
                result["kv_cache_reused_blocks"] = np.array([[0]], dtype=np.int32)
                result["kv_cache_alloc_total_blocks"] = np.array([[blocks]], dtype=np.int32)
                for name, value in (
                    ("arrival_time_ns", arrival),
                    ("first_scheduled_time_ns", arrival),
                    ("first_token_time_ns", state["first"] or now),
                    ("last_token_time_ns", now),
                ):
                    result[name] = np.array([[value]], dtype=np.int64)
            if count_in:
                result["num_input_tokens"] = np.array([[len(prompt)]], dtype=np.int32)
            return result

        if not stream:

            def keep_unless_cancelled(tokens: list[int]) -> list[int]:
                if cancelled():
                    raise st.Cancelled()
                return keep(tokens)

            run_and_observe(keep_unless_cancelled)
            yield outputs(out if exclude else prompt + out, (0, len(out)))
            return
        # Chunks go out as they come; the totals (known when generation ends) follow in a last,
        # empty chunk, sent when asked for or when nothing else was.
        sent = False
        for tokens in _in_thread(run_and_observe):
            if cancelled():
                raise st.Cancelled()
            chunk = keep(tokens)
            if chunk:
                yield outputs(chunk, (len(out) - len(chunk), len(chunk)), final=False)
                sent = True
        if perf or count_in or count_out or not sent:
            yield outputs([], (len(out), 0))

    def _request_spec(self, inputs: dict[str, np.ndarray], i: int):
        """(spec, speculative) for one request: per-request lookahead sizes override the model's."""
        if not any(k in inputs for k in LOOKAHEAD):
            return self.spec, self.spec is not None
        if self.spec is None or self.spec.mode != "lookahead":
            raise st.BadRequest(
                "per-request lookahead_* inputs need a deployment with decoding_mode lookahead"
            )
        from toolkit.recipe import lookahead_max_draft_len
        from toolkit.reference.runtime import parse_speculative

        if not all(k in inputs for k in LOOKAHEAD):
            raise st.BadRequest("per-request lookahead needs all of " + ", ".join(LOOKAHEAD))
        w, n, g = (int(st.scalar(inputs, k, 0, i)) for k in LOOKAHEAD)
        if lookahead_max_draft_len(w, n, g) == 0:  # e.g. (1, 1, 0): no draft tokens, speculation off
            return None, False
        limit = (self.spec.window, self.spec.ngram, self.spec.verification_set)
        if w > limit[0] or n > limit[1] or g > limit[2]:
            raise st.BadRequest(f"per-request lookahead ({w}, {n}, {g}) exceeds the deployment's {limit}")
        spec = self.spec.model_dump()
        spec.update(window=w, ngram=n, verification_set=g, max_draft_len=None)
        return parse_speculative(spec), True


def _spec_metrics(model: str):
    """Acceptance counters (sdtk_spec_*) through Triton's custom-metrics API, on its own /metrics."""
    if not hasattr(pb_utils, "MetricFamily"):
        return None
    return TritonSpecMetrics(pb_utils, model=model)


def _batch_metrics(model: str, batcher):
    """nv_trt_llm_request_metrics & co. for the in-flight batcher, as the TRT-LLM backend exports them."""
    if batcher is None or not hasattr(pb_utils, "MetricFamily"):
        return None
    from toolkit.ops.batch_metrics import BatchMetrics

    return BatchMetrics(pb_utils, model=model, batcher=batcher, thread=False)  # the Responder flushes


class TritonPythonModel:
    def initialize(self, args):
        from toolkit.generate import set_torch_threads
        from toolkit.reference.runtime import parse_speculative

        set_torch_threads()  # one stub process per model instance: no oversubscription

        config, params = st.model_config(args)
        name = config.get("name", "tensorrt_llm")
        engine_dir = st.param_str(params, "gpt_model_path")
        if engine_dir is None:
            raise ValueError(f"{name}: parameter gpt_model_path (the engine directory) is empty")
        if (st.param_int(params, "max_beam_width", 1) or 1) > 1:
            raise ValueError(
                f"{name}: the reference backend does not do beam search (max_beam_width must be 1)"
            )
        runtime, built = load_runtime(Path(engine_dir))
        spec = resolve_spec(built, params)
        self.name = name
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        limits = build_limits(Path(engine_dir))
        # In-flight batching: requests run in their own threads and the runtime batches their
        # steps, up to the engine's max_batch_size sequences per iteration, first come first
        # served. Both batch_scheduler_policy values admit alike here: the KV slots of the
        # whole batch are allocated up front, so nothing is ever evicted.
        self.max_batch_size = build_batch_size(Path(engine_dir), int(config.get("max_batch_size") or 8))
        self.scheduler_policy = st.param_str(params, "batch_scheduler_policy") or "guaranteed_no_evict"
        runtime.enable_batching(self.max_batch_size, capacity=(limits[1] or 1024) + 72)
        self.batch_metrics = _batch_metrics(name, getattr(runtime, "batcher", None))
        if built.get("mode") == "draft_target":
            runtime.verify_spec = parse_speculative(built)  # its draft_len_schedule bounds verify_draft
        # The draft of a draft-target deployment never speculates, and each of its requests is one
        # BLS iteration: sdtk_spec_* would count iterations as requests, at a round trip apiece.
        metrics = None if name == "tensorrt_llm_draft" else _spec_metrics(name)
        # Both modes: every custom-metric call goes through the responder's one thread.
        self.responder = Responder(name, metrics, self.batch_metrics, faults=st.Faults.from_env())
        self.generate = Generator(
            runtime,
            parse_speculative(spec) if spec is not None else None,
            exclude_input_in_output=st.param_bool(params, "exclude_input_in_output", False),
            decoupled=self.decoupled,
            metrics=self.responder,
            normalize_log_probs=st.param_bool(params, "normalize_log_probs", True),
            **dict(zip(("max_input_len", "max_seq_len"), limits, strict=True)),
        )

    @staticmethod
    def _inputs(request) -> dict[str, np.ndarray]:
        inputs = st.inputs_of(request, INPUTS + UNSUPPORTED)
        if st.request_parameters(request).get(st.BLS_LOOP):
            inputs[st.BLS_LOOP] = np.array([True])
        return inputs

    def execute(self, requests):
        # Hand each request to its own generation thread and return at once, so that requests
        # arriving meanwhile join the running batch at its next iteration: TensorRT-LLM's C++
        # backend batches in flight whether or not the model is decoupled (each draft-target BLS
        # iteration is a new, non-decoupled request, and concurrent BLS loops share the target's
        # forwards). Not decoupled, each request gets one response (Responder `single`).
        #
        # execute() never raises once a request of the batch went to the Responder: the Python
        # backend answers an execute() that raises by closing every request's sender and freeing
        # its response factory, under a Responder that may still use them. A request that cannot
        # be handed over (no thread, no memory) is answered here with its own error.
        handed = False
        for request in requests:
            try:
                handed = self._hand_over(request) or handed
            except Exception as e:  # noqa: BLE001 - this request alone fails
                print(
                    f"sdtk {self.name}: a request failed before it started: {e!r}",
                    file=sys.stderr,
                    flush=True,
                )
                if not self._answer(request, e) and not handed:
                    raise  # nothing could answer it: Triton ends the batch with this error
        return None

    def _answer(self, request, e: BaseException) -> bool:
        """Answer a request that was not handed over with the error `e`; whether it could be."""
        try:
            sender = request.get_response_sender()
        except Exception:  # noqa: BLE001 - no sender, no answer
            return False
        return st.last_word(sender, self.name, e)

    def _hand_over(self, request) -> bool:
        """Start one request (or answer a `stop` without id); whether the Responder took it."""
        inputs = self._inputs(request)
        request_id = request.request_id()
        if st.scalar(inputs, "stop", False):
            # TensorRT-LLM's `stop`: cancel the running requests of this request id.
            if not request_id:
                request.get_response_sender().send(
                    st.error_response(
                        f"{self.name}: a request id must be provided for request cancellation",
                        bad=True,
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                return False
            self.responder.cancel(request_id)
            request_id = ""  # the stop request itself is not cancellable by that id
        self.responder.start(
            request.get_response_sender(),
            lambda cancelled, inputs=inputs: self.generate(inputs, cancelled),
            request_id,
            single=not self.decoupled,
            inband=bool(st.request_parameters(request).get(st.BLS_STREAM)),
        )
        return True

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Whether every handed-over request has sent its final response (for tests)."""
        deadline = time.monotonic() + timeout
        while not self.responder.idle():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def finalize(self):
        self.responder.close()
        metrics, self.responder.metrics, self.responder.batch_metrics = self.responder.metrics, None, None
        if self.batch_metrics is not None:
            self.batch_metrics.close()
            self.batch_metrics = None
        batcher = getattr(self.generate.rt, "batcher", None)
        if batcher is not None:
            batcher.close()
        # Drop the custom-metric objects while the stub can still talk to the server: left to
        # interpreter exit, their destructors run after the stub is torn down.
        if metrics is not None:
            metrics.close()
        self.generate.metrics = None
