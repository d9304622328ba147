"""The reference tensorrt_llm model's generation, independent of Triton: a request's inputs
(numpy arrays) in, its responses (dicts of numpy arrays) out, on sdtk's reference runtime
(toolkit.reference), which batches the steps of concurrent requests in flight."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from toolkit import modes

from . import triton as st

INT32_MAX = 2**31 - 1
# The perf outputs' KV-cache counters, in sdtk's accounting: the reference runtime keeps each
# sequence's cache contiguous and reuses nothing, so a request reports the 64-token blocks its
# prompt + output span as allocated (all new) and 0 reused. Clients that read the counters
# (upstream's end_to_end_grpc_client.py --return-perf-metrics reads `[0][0]` of each) get them.
TOKENS_PER_BLOCK = 64
LOOKAHEAD = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
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
        spec, speculative = self._request_spec(inputs, i)
        row = Row(self, inputs, i, sequence=sequence, spec=spec, speculative=speculative)
        return row.responses(stream, cancelled)

    def _request_spec(self, inputs: dict[str, np.ndarray], i: int):
        """(spec, speculative) for one request: per-request lookahead sizes override the model's."""
        if not any(k in inputs for k in LOOKAHEAD):
            return self.spec, self.spec is not None
        if self.spec is None or self.spec.mode != modes.LOOKAHEAD:
            raise st.BadRequest(
                "per-request lookahead_* inputs need a deployment with decoding_mode lookahead"
            )
        from toolkit.reference.runtime import parse_speculative

        if not all(k in inputs for k in LOOKAHEAD):
            raise st.BadRequest("per-request lookahead needs all of " + ", ".join(LOOKAHEAD))
        w, n, g = (int(st.scalar(inputs, k, 0, i)) for k in LOOKAHEAD)
        spec = self.spec.model_dump()
        spec.update(window=w, ngram=n, verification_set=g, max_draft_len=None)
        parsed = parse_speculative(spec)
        if parsed.draft_len == 0:  # e.g. (1, 1, 0): no draft tokens, speculation off
            return None, False
        limit = (self.spec.window, self.spec.ngram, self.spec.verification_set)
        if w > limit[0] or n > limit[1] or g > limit[2]:
            raise st.BadRequest(f"per-request lookahead ({w}, {n}, {g}) exceeds the deployment's {limit}")
        return parsed, True


class Row:
    """One request row: its settings read from the inputs, the tokens kept so far and the
    acceptance counters, for one of its num_return_sequences (`sequence`)."""

    def __init__(self, gen: Generator, inputs: dict[str, np.ndarray], i: int, *, sequence, spec, speculative):
        from toolkit.reference.processors import Trace

        self.gen, self.rt = gen, gen.rt
        self.arrival = time.time_ns()
        length = int(st.scalar(inputs, "input_lengths", inputs["input_ids"].shape[1], i))
        self.prompt = inputs["input_ids"][i, :length].astype(np.int64).tolist()
        self.max_new = int(st.scalar(inputs, "request_output_len", 0, i))
        gen._check_lengths(length, self.max_new, loop=st.BLS_LOOP in inputs)
        end_id = int(st.scalar(inputs, "end_id", -2, i))
        if end_id == -2:  # not given: the tokenizer's; a negative end id means none
            end_id = self.rt.eos_token_id if self.rt.eos_token_id is not None else -1
        self.end_id = end_id
        self.sampling = _sampling(inputs, i, sequence)
        self.processors = _processors(inputs, i, end_id, length)
        log_probs = bool(st.scalar(inputs, "return_log_probs", False, i))
        gen_logits = bool(st.scalar(inputs, "return_generation_logits", False, i))
        self.trace = (
            Trace(log_probs=log_probs, normalize=gen.normalize_log_probs, logits=gen_logits)
            if log_probs or gen_logits
            else None
        )
        self.sequence = sequence
        self.numbered = (
            "num_return_sequences" in inputs and int(st.scalar(inputs, "num_return_sequences", 1) or 1) > 1
        )
        self.exclude = bool(st.scalar(inputs, "exclude_input_in_output", gen.exclude_input_in_output, i))
        self.stops = st.word_lists(inputs["stop_words_list"][i]) if "stop_words_list" in inputs else []
        self.perf = bool(st.scalar(inputs, "return_perf_metrics", False, i))
        self.count_in = bool(st.scalar(inputs, "return_num_input_tokens", False, i))
        self.count_out = bool(st.scalar(inputs, "return_num_output_tokens", False, i))
        self.draft = (
            inputs["draft_input_ids"][i].astype(np.int64).tolist() if "draft_input_ids" in inputs else None
        )
        self.spec, self.speculative = spec, speculative
        self.state = {"first": 0, "drafted": 0, "accepted": 0, "steps": 0, "done": False}
        self.out: list[int] = []
        self.stream = False

    def keep(self, tokens: list[int]) -> list[int]:
        """Append generated tokens, cutting at the end id (left out) or a stop word (kept)."""
        state, out = self.state, self.out
        if state["done"] or not tokens:
            return []
        start = len(out)
        if self.end_id >= 0 and self.end_id in tokens:
            tokens, state["done"] = tokens[: tokens.index(self.end_id)], True
        out.extend(tokens[: self.max_new - start])
        hit = st.stop_at(out, self.stops, start=start)
        if hit is not None:
            del out[hit:]
            state["done"] = True
        if len(out) > start and not state["first"]:
            state["first"] = time.time_ns()
        return out[start:]

    def run(self, on_tokens) -> None:
        if self.max_new <= 0:
            return
        if self.draft is None and self.gen.spec is not None:
            from toolkit.reference import PLAIN

            result = self.rt.generate(
                self.prompt,
                self.max_new,
                sampling=self.sampling,
                spec=self.spec if self.speculative else PLAIN,
                end_id=self.end_id,
                on_tokens=on_tokens,
                processors=self.processors,
                trace=self.trace,
            )
            self.state["drafted"], self.state["accepted"] = (
                result.stats.draft_tokens,
                result.stats.accepted_tokens,
            )
            self.state["steps"] = result.stats.steps
            return
        self._verify(on_tokens)

    def _verify(self, on_tokens) -> None:
        """TensorRT-LLM draft_tokens_external: verify the draft, then decode plainly up to
        request_output_len (the BLS asks for len(draft) + 1) unless the end id comes. A model
        without speculation (the BLS's draft model, a baseline) takes the same path. The plain
        steps are verify_draft calls without a draft: they extend the cache kept from the
        previous request instead of prefilling the whole sequence again, as generate() would."""
        state = self.state
        ids, produced, proposal = list(self.prompt), 0, self.draft or []
        # One batch membership (and KV slot) for the whole request, not one per step.
        with self.rt.hold(ids):
            while produced < self.max_new:
                verified = self.rt.verify_draft(
                    ids,
                    proposal,
                    sampling=self.sampling,
                    end_id=self.end_id,
                    processors=self.processors,
                    trace=self.trace,
                )
                state["steps"] += 1
                new = verified.new_tokens[: self.max_new - produced]
                if proposal:
                    # A load-aware schedule may verify fewer draft tokens than the BLS sent.
                    drafted = min(len(proposal), verified.drafted)
                    state["drafted"], state["accepted"] = drafted, min(verified.accepted, drafted)
                    proposal = []
                on_tokens(new)
                ids += new
                produced += len(new)
                if not new or self.end_id in new:
                    break

    def run_and_observe(self, on_tokens) -> None:
        try:
            self.run(on_tokens)
        finally:  # a cancelled request counts the tokens it did generate
            if self.gen.metrics is not None:
                self.gen.metrics.observe(
                    accepted=self.state["accepted"],
                    drafted=self.state["drafted"],
                    output_tokens=len(self.out),
                    steps=self.state["steps"],
                )

    def outputs(self, tokens: list[int], span: tuple[int, int], final: bool = True) -> dict[str, np.ndarray]:
        """The response for `tokens`, which carry generated tokens out[first:first + n] (`span`)."""
        result = {
            "output_ids": np.array(tokens, dtype=np.int32).reshape(1, 1, len(tokens)),
            "sequence_length": np.array([[len(tokens)]], dtype=np.int32),
        }
        if self.numbered:
            result["sequence_index"] = np.array([[self.sequence]], dtype=np.int32)
        if self.trace is not None:
            self._traced(result, span)
        if self.count_out:  # per response: the tokens it carries (a closing chunk: 0)
            n = len(tokens) if self.stream else len(self.out)
            result["num_output_tokens"] = np.array([[n]], dtype=np.int32)
        if not final:
            return result
        if self.perf:
            self._perf(result)
        if self.count_in:
            result["num_input_tokens"] = np.array([[len(self.prompt)]], dtype=np.int32)
        return result

    def _traced(self, result: dict[str, np.ndarray], span: tuple[int, int]) -> None:
        """Generated tokens only (not the prompt), as TensorRT-LLM's executor returns them:
        output_log_probs [1, beams, tokens], cum_log_probs [1, beams] (the total so far),
        generation_logits [1, beams, tokens, vocab]."""
        trace = self.trace
        if trace is None:
            return
        first, n = span
        if trace.log_probs:
            lp = trace.token_log_probs[first : first + n]
            result["output_log_probs"] = np.array(lp, dtype=np.float32).reshape(1, 1, n)
            total = float(np.sum(trace.token_log_probs[: first + n], dtype=np.float64))
            result["cum_log_probs"] = np.array([[total]], dtype=np.float32)
        if trace.logits:
            rows = trace.token_logits[first : first + n]
            vocab = self.rt.target.config.vocab_size
            stacked = np.stack([r.numpy() for r in rows]) if rows else np.zeros((0, vocab), np.float32)
            result["generation_logits"] = stacked.astype(np.float32).reshape(1, 1, n, vocab)

    def _perf(self, result: dict[str, np.ndarray]) -> None:
        """The perf outputs: acceptance, the KV-cache blocks in sdtk's accounting, the timestamps."""
        now = time.time_ns()
        drafted, accepted = self.state["drafted"], self.state["accepted"]
        result["acceptance_rate"] = np.array([[accepted / drafted if drafted else 0.0]], dtype=np.float32)
        result["total_accepted_draft_tokens"] = np.array([[accepted]], dtype=np.int32)
        result["total_draft_tokens"] = np.array([[drafted]], dtype=np.int32)
        blocks = -(-(len(self.prompt) + len(self.out)) // TOKENS_PER_BLOCK)
        result["kv_cache_alloc_new_blocks"] = np.array([[blocks]], dtype=np.int32)
        result["kv_cache_reused_blocks"] = np.array([[0]], dtype=np.int32)
        result["kv_cache_alloc_total_blocks"] = np.array([[blocks]], dtype=np.int32)
        for name, value in (
            ("arrival_time_ns", self.arrival),
            ("first_scheduled_time_ns", self.arrival),
            ("first_token_time_ns", self.state["first"] or now),
            ("last_token_time_ns", now),
        ):
            result[name] = np.array([[value]], dtype=np.int64)

    def responses(self, stream: bool, cancelled):
        """This row's responses: one, or (`stream`) one per chunk as it comes."""
        self.stream = stream
        out = self.out
        if not stream:

            def keep_unless_cancelled(tokens: list[int]) -> list[int]:
                if cancelled():
                    raise st.Cancelled()
                return self.keep(tokens)

            self.run_and_observe(keep_unless_cancelled)
            yield self.outputs(out if self.exclude else self.prompt + out, (0, len(out)))
            return
        # Chunks go out as they come; the totals (known when generation ends) follow in a last,
        # empty chunk, sent when asked for or when nothing else was.
        sent = False
        for tokens in _in_thread(self.run_and_observe):
            if cancelled():
                raise st.Cancelled()
            chunk = self.keep(tokens)
            if chunk:
                yield self.outputs(chunk, (len(out) - len(chunk), len(chunk)), final=False)
                sent = True
        if self.perf or self.count_in or self.count_out or not sent:
            yield self.outputs([], (len(out), 0))


def _processors(inputs: dict[str, np.ndarray], i: int, end_id: int, length: int):
    """TensorRT-LLM's penalty kernel's settings for row `i` (toolkit/reference/processors.py)."""
    from toolkit.reference.processors import Processors

    bad = st.word_lists(inputs["bad_words_list"][i]) if "bad_words_list" in inputs else []
    return Processors(
        repetition_penalty=float(st.scalar(inputs, "repetition_penalty", 1.0, i)),
        presence_penalty=float(st.scalar(inputs, "presence_penalty", 0.0, i)),
        frequency_penalty=float(st.scalar(inputs, "frequency_penalty", 0.0, i)),
        min_tokens=_min_tokens(inputs, i),
        end_id=end_id if end_id >= 0 else None,
        bad_words=tuple(tuple(w) for w in bad),
        prompt_len=length,
    )
