"""The tensorrt_llm_bls model: preprocessing → tensorrt_llm → postprocessing in Python, and the
draft-target loop.

Serves the tensor contract of the official inflight_batcher_llm `tensorrt_llm_bls` model:

- Plain generation (`num_draft_tokens` 0): one call of the LLM model (`tensorrt_llm_model_name`),
  streamed chunk by chunk when the request sets `stream` (which needs a decoupled deployment);
  `accumulate_tokens` makes every streamed chunk carry the whole text so far.
- Draft-target (`num_draft_tokens` > 0), as upstream's loop: call the draft model
  (`tensorrt_llm_draft_model_name`) for k tokens, call the target with them as `draft_input_ids`
  and `request_output_len` k+1, append the target's new tokens, repeat until `max_tokens`, the end
  id, a stop word, or no progress. k = min(num_draft_tokens, tokens left - 1).

Differences from upstream, all deliberate:
- Acceptance outputs (`acceptance_rate`, `total_accepted_draft_tokens`, `total_draft_tokens`)
  cover the WHOLE request: the sums over every loop iteration. Upstream returns the last
  target call's metrics, i.e. the last iteration only.
- A decoupled deployment may stream the draft-target loop: each iteration's accepted tokens go
  out as one chunk (upstream rejects streaming with speculative decoding).
- A request without `num_draft_tokens` / `use_draft_logits` uses the parameters
  `default_num_draft_tokens` / `default_use_draft_logits` (upstream: 0 / false), so that plain
  clients get the recipe's speculation; send `num_draft_tokens` 0 to switch it off per request.
- Requests with batch size > 1 are served row by row (not streamed).

The LLM models are called with this model's own transaction policy: toolkit.repo renders the
BLS, tensorrt_llm and tensorrt_llm_draft with the same `decoupled` value (false for draft-target,
as upstream's example).

Per TensorRT-LLM version: the BLS asks the LLM models only for outputs every version's
tensorrt_llm declares (LLM_OUTPUTS; Triton core refuses a request for an undeclared output,
"unexpected inference output", triton-inference-server/core src/infer_request.cc `Normalize`),
and passes the min-length and seed inputs under the name its own config declares, which is the
name tensorrt_llm declares at the same version (min_length / random_seed up to 0.19). Token
counts (`num_input_tokens`, `num_output_tokens`) are counted here, never asked of the LLM
models: tensorrt_llm declares them only from TensorRT-LLM 1.2.

`text_output` has upstream's shape: postprocessing's OUTPUT as it comes, one entry per beam
([beams]; upstream's clients read `output[0]`).

sdtk's own code (not upstream's model.py); it needs numpy only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import triton as st

# BLS input → preprocessing input (the ensemble's first step, by name).
PRE_INPUTS = {
    "text_input": "QUERY",
    "decoder_text_input": "DECODER_QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
    "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID",
}
# Preprocessing output → LLM input.
PRE_OUTPUTS = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "BAD_WORDS_IDS": "bad_words_list",
    "STOP_WORDS_IDS": "stop_words_list",
    "EMBEDDING_BIAS": "embedding_bias",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids",
    "DECODER_INPUT_ID": "decoder_input_ids",
    "REQUEST_DECODER_INPUT_LEN": "decoder_input_lengths",
}
# BLS input → LLM input, passed through (renamed as the ensemble renames them).
PASSTHROUGH = {
    "exclude_input_in_output": "exclude_input_in_output",
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "temperature": "temperature",
    "length_penalty": "len_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens",  # TensorRT-LLM >= 0.20
    "min_length": "min_length",  # <= 0.19: the name both configs declare then
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",  # >= 0.20
    "random_seed": "random_seed",  # <= 0.19
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "return_perf_metrics": "return_perf_metrics",
    "num_return_sequences": "num_return_sequences",
    "beam_width": "beam_width",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}
MATRIX_INPUTS = ("prompt_embedding_table", "lora_weights", "lora_config")  # not [1]-shaped
# Token counts: the BLS's own inputs and outputs (it counts; the LLM models are never asked).
COUNT_INPUTS = ("return_num_input_tokens", "return_num_output_tokens")
BLS_INPUTS = (*PRE_INPUTS, *PASSTHROUGH, *COUNT_INPUTS, "stream", "num_draft_tokens", "use_draft_logits")
MULTIMODAL_INPUTS = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")
# LLM outputs the BLS asks for and returns under the same name: those tensorrt_llm declares at every
# supported version (tests/contracts/trtllm-*.json), so no version is asked for an undeclared output.
LLM_OUTPUTS = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
)
KV_OUTPUTS = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks")
# The draft model sees the ids and the sampling settings only. The seed under either name: the one
# this BLS's config declares is tensorrt_llm's at the same version (random_seed up to 0.19).
DRAFT_INPUTS = ("end_id", "pad_id", "temperature", "runtime_top_k", "runtime_top_p", "seed", "random_seed")
# Inputs the draft-target loop sets itself on every target call.
LOOP_INPUTS = (
    "input_ids",
    "input_lengths",
    "request_output_len",
    "streaming",
    "exclude_input_in_output",
    "return_perf_metrics",
)


def _int32(*values) -> np.ndarray:
    return np.array([list(values)], dtype=np.int32)


def _flag(value: bool) -> np.ndarray:
    return np.array([[bool(value)]], dtype=np.bool_)


def _ids(tokens: list[int]) -> dict[str, np.ndarray]:
    return {"input_ids": _int32(*tokens), "input_lengths": _int32(len(tokens))}


def _tokens_of(out: dict[str, np.ndarray]) -> list[int]:
    """Beam 0 of an LLM response, up to its sequence length."""
    if out["output_ids"].size == 0:  # [1, 1, 0]: e.g. a draft model that ended at once
        return []
    n = int(out["sequence_length"].reshape(-1)[0])
    return (
        out["output_ids"]
        .reshape(out["output_ids"].shape[0], -1, out["output_ids"].shape[-1])[0, 0, :n]
        .tolist()
    )


def _prefix_len(new: list[int], draft: list[int]) -> int:
    n = 0
    while n < min(len(new), len(draft)) and new[n] == draft[n]:
        n += 1
    return n


@dataclass
class Bls:
    """The model's logic. `call(model, inputs, outputs, decoupled)` runs one Triton model and
    yields its responses as dicts; injected so that the logic runs without a server in tests.
    The other fields are the model's parameters (keyword-only)."""

    call: Callable[..., Any]
    _: KW_ONLY
    decoupled: bool
    target: str = "tensorrt_llm"
    draft: str | None = None
    accumulate_tokens: bool = False
    default_num_draft_tokens: int = 0
    default_use_draft_logits: bool = False
    exclude_input_in_output: bool = False
    max_input_len: int | None = None
    max_seq_len: int | None = None

    # ------------------------------------------------------------------ entry point

    def __call__(self, inputs: dict[str, np.ndarray], cancelled=lambda: False):
        """Yield output dicts: one for a plain request, one per chunk for a streamed one.

        `cancelled()` says whether the client has gone; the draft-target loop asks it before
        every iteration and stops with `Cancelled`."""
        self.cancelled = cancelled
        if "text_input" not in inputs or "max_tokens" not in inputs:
            raise st.BadRequest("text_input and max_tokens are required")
        batch = inputs["text_input"].shape[0]
        stream = bool(st.scalar(inputs, "stream", False))
        if stream and not self.decoupled:
            raise st.BadRequest(
                "Streaming is only supported if model is deployed using decoupled mode "
                "(re-render with serving.decoupled: true)"
            )
        max_tokens = int(st.scalar(inputs, "max_tokens", 0))
        if max_tokens < 1:
            raise st.BadRequest(
                f"max_tokens must be between 1 and {2**31 - 1}, got {max_tokens}"
                + (" (a value beyond int32 wraps around)" if max_tokens < 0 else "")
            )
        num_draft = int(st.scalar(inputs, "num_draft_tokens", self.default_num_draft_tokens))
        if num_draft < 0:
            raise st.BadRequest(f"num_draft_tokens must be >= 0, got {num_draft}")
        if batch == 1:
            yield from self._one(inputs, stream, num_draft)
            return
        if stream:
            raise st.BadRequest(f"streaming needs batch size 1, got {batch}")
        rows = [
            list(self._one({k: st.row(v, i) for k, v in inputs.items()}, False, num_draft))[-1]
            for i in range(batch)
        ]
        names = [n for n in rows[0] if all(n in r for r in rows)]
        out = {n: st.stack_rows([r[n] for r in rows]) for n in names if n != "text_output"}
        # Upstream's postprocessing OUTPUT for a batch: every row's beams in one flat list.
        yield {"text_output": np.concatenate([r["text_output"].reshape(-1) for r in rows]), **out}

    def _one(self, inputs: dict[str, np.ndarray], stream: bool, num_draft: int):
        llm = self._preprocess(inputs)
        self._check_lengths(int(llm["input_lengths"][0, 0]), int(llm["request_output_len"][0, 0]))
        counts = {k: bool(st.scalar(inputs, k, False)) for k in COUNT_INPUTS}
        for bls_name, llm_name in PASSTHROUGH.items():
            if bls_name in inputs:
                value = inputs[bls_name]
                llm[llm_name] = value if bls_name in MATRIX_INPUTS else value.reshape(1, 1)
        llm.setdefault("exclude_input_in_output", _flag(self.exclude_input_in_output))
        if num_draft > 0:
            yield from self._speculate(inputs, llm, num_draft, stream)
        else:
            yield from self._plain(llm, stream, counts)

    def _check_lengths(self, length: int, max_new: int) -> None:
        """The engine's limits, checked on the client's prompt before any LLM call."""
        if self.max_input_len and length > self.max_input_len:
            raise st.BadRequest(
                f"text_input is {length} tokens, over the engine's max_input_len {self.max_input_len}"
            )
        if self.max_seq_len and length + max_new > self.max_seq_len:
            raise st.BadRequest(
                f"text_input ({length} tokens) + max_tokens ({max_new}) = {length + max_new} is over "
                f"the engine's max_seq_len {self.max_seq_len}"
            )

    # ------------------------------------------------------------------ steps

    def _preprocess(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        pre_in = {PRE_INPUTS[k]: v for k, v in inputs.items() if k in PRE_INPUTS}
        out = list(self.call("preprocessing", pre_in, list(PRE_OUTPUTS), False))[-1]
        n = int(out["REQUEST_INPUT_LEN"].reshape(-1)[0])
        llm = {
            "input_ids": out["INPUT_ID"][:, :n].astype(np.int32),
            "input_lengths": _int32(n),
            "request_output_len": out["REQUEST_OUTPUT_LEN"].astype(np.int32).reshape(1, 1),
            "end_id": out["OUT_END_ID"].astype(np.int32).reshape(1, 1),
            "pad_id": out["OUT_PAD_ID"].astype(np.int32).reshape(1, 1),
        }
        for name in ("BAD_WORDS_IDS", "STOP_WORDS_IDS", "EMBEDDING_BIAS", "OUT_PROMPT_TABLE_EXTRA_IDS"):
            if name in out and out[name].size > 0:
                llm[PRE_OUTPUTS[name]] = out[name]
        if "decoder_text_input" in inputs:
            llm["decoder_input_ids"] = out["DECODER_INPUT_ID"]
            llm["decoder_input_lengths"] = out["REQUEST_DECODER_INPUT_LEN"].reshape(1, 1)
        return llm

    def _detokenize(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Token ids [1, beams, L] and lengths [1, beams] → text [beams], by postprocessing (whose
        OUTPUT is upstream's: one entry per beam)."""
        if tokens.size == 0:  # e.g. the closing chunk of a stream: no tokens, no text
            beams = max(1, int(np.prod(lengths.shape[1:])) if lengths.ndim > 1 else 1)
            return np.full((beams,), b"", dtype=object)
        post_in = {
            "TOKENS_BATCH": tokens.astype(np.int32).reshape(1, -1, tokens.shape[-1]),
            "SEQUENCE_LENGTH": lengths.astype(np.int32).reshape(1, -1),
        }
        return list(self.call("postprocessing", post_in, ["OUTPUT"], False))[-1]["OUTPUT"]

    def _text(self, ids: list[int]) -> np.ndarray:
        return self._detokenize(np.array(ids, dtype=np.int32).reshape(1, 1, len(ids)), _int32(len(ids)))

    def _run(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One non-streaming LLM call (through this deployment's transaction policy)."""
        requested = ["output_ids", "sequence_length", *LLM_OUTPUTS]
        outs = list(self.call(model, inputs, requested, self.decoupled, {st.BLS_LOOP: True}))
        if not outs:
            raise RuntimeError(f"{model} returned no response")
        return outs[-1]

    def _plain(self, llm: dict[str, np.ndarray], stream: bool, counts: dict[str, bool]):
        llm["streaming"] = _flag(stream)
        prompt_len = int(llm["input_lengths"].reshape(-1)[0])
        # Without the prompt, a response's beam-0 sequence length is the tokens it carries (a
        # streamed chunk: its new tokens); with it, the prompt comes first.
        prompt_in_output = not stream and not bool(llm["exclude_input_in_output"].reshape(-1)[0])
        so_far: list[int] = []
        requested = ["output_ids", "sequence_length", *LLM_OUTPUTS]
        # `cancelled`: the call stops the LLM request itself when the client has gone (a
        # decoupled call: `stop` with the sub-request's id, as TensorRT-LLM's backend takes it).
        # BLS_STREAM: sdtk's reference model then reports a failure after the first chunk
        # in-band (a fault chunk), since Triton 2.51 loses such an error response.
        stream_params = {st.BLS_STREAM: True} if self.decoupled else None
        for out in self.call(
            self.target, llm, requested, self.decoupled, stream_params, cancelled=self.cancelled
        ):
            if stream and self.accumulate_tokens:  # one beam when streaming
                so_far += _tokens_of(out)
                text = self._text(so_far)
            else:
                text = self._detokenize(out["output_ids"], out["sequence_length"])
            result = {"text_output": text, **{k: out[k] for k in LLM_OUTPUTS if k in out}}
            if counts["return_num_input_tokens"]:
                result["num_input_tokens"] = _int32(prompt_len)
            if counts["return_num_output_tokens"]:
                n = int(out["sequence_length"].reshape(-1)[0]) if out["output_ids"].size else 0
                result["num_output_tokens"] = _int32(max(0, n - prompt_len) if prompt_in_output else n)
            yield result

    def _propose(
        self, model: str, draft_base: dict[str, np.ndarray], tokens: list[int], k: int, use_logits: bool
    ) -> tuple[list[int], np.ndarray | None]:
        """One call of the draft `model` for `k` tokens after `tokens`: the draft, and its logits
        when `use_logits` asks for them (and the draft model returns them)."""
        d_in = {
            **draft_base,
            **_ids(tokens),
            "request_output_len": _int32(k),
            "exclude_input_in_output": _flag(True),
            "streaming": _flag(False),
        }
        if use_logits:
            d_in["return_generation_logits"] = _flag(True)
        d = self._run(model, d_in)
        draft = _tokens_of(d)
        if use_logits and "generation_logits" in d and draft:  # no draft (it ended): no logits
            logits = d["generation_logits"]
            return draft, logits.reshape(1, -1, logits.shape[-1])[:, : len(draft)]
        return draft, None

    def _check_speculation(self, inputs: dict[str, np.ndarray]) -> str:
        """The draft model's name, once the request is one the draft-target loop serves."""
        if not self.draft:
            raise ValueError(
                "cannot perform speculative decoding without draft model "
                "(parameter tensorrt_llm_draft_model_name is empty)"
            )
        for name, what in (
            ("return_context_logits", "context logits"),
            ("return_generation_logits", "generation logits"),
            ("return_log_probs", "log probabilities"),
        ):
            if st.scalar(inputs, name, False):
                raise st.BadRequest(f"{what} are not supported with speculative decoding")
        if (
            int(st.scalar(inputs, "beam_width", 1)) > 1
            or int(st.scalar(inputs, "num_return_sequences", 1)) > 1
        ):
            raise st.BadRequest(
                "beam search and several return sequences are not supported with speculative decoding"
            )
        return self.draft

    def _speculate(
        self, inputs: dict[str, np.ndarray], llm: dict[str, np.ndarray], num_draft: int, stream: bool
    ):
        draft_model = self._check_speculation(inputs)
        use_logits = bool(st.scalar(inputs, "use_draft_logits", self.default_use_draft_logits))
        perf = bool(st.scalar(inputs, "return_perf_metrics", False))
        exclude = bool(st.scalar(inputs, "exclude_input_in_output", self.exclude_input_in_output))
        count_in, count_out = (bool(st.scalar(inputs, k, False)) for k in COUNT_INPUTS)

        prompt = llm["input_ids"][0].tolist()
        max_new = int(llm["request_output_len"].reshape(-1)[0])
        end_id = int(llm["end_id"].reshape(-1)[0])
        stops = st.word_lists(llm["stop_words_list"][0]) if "stop_words_list" in llm else []
        base = {k: v for k, v in llm.items() if k not in LOOP_INPUTS}
        draft_base = {k: llm[k] for k in DRAFT_INPUTS if k in llm}
        stats = {"arrival": time.time_ns(), "first": 0, "drafted": 0, "accepted": 0}
        kv_blocks: dict[str, np.ndarray] = {}  # the last target call's KV-cache counters, as upstream

        def outputs(ids: list[int], count: int) -> dict[str, np.ndarray]:
            """`count`: the tokens this response carries (num_output_tokens is per response)."""
            out = {"text_output": self._text(ids)}
            if perf:
                now = time.time_ns()
                drafted, accepted = stats["drafted"], stats["accepted"]
                out["acceptance_rate"] = np.array(
                    [[accepted / drafted if drafted else 0.0]], dtype=np.float32
                )
                out["total_accepted_draft_tokens"] = _int32(accepted)
                out["total_draft_tokens"] = _int32(drafted)
                out.update(kv_blocks)
                for name, value in (
                    ("arrival_time_ns", stats["arrival"]),
                    ("first_scheduled_time_ns", stats["arrival"]),
                    ("first_token_time_ns", stats["first"] or now),
                    ("last_token_time_ns", now),
                ):
                    out[name] = np.array([[value]], dtype=np.int64)
            if count_in:
                out["num_input_tokens"] = _int32(len(prompt))
            if count_out:
                out["num_output_tokens"] = _int32(count)
            return out

        tokens, generated = list(prompt), list[int]()
        while len(generated) < max_new:
            if self.cancelled():
                raise st.Cancelled()
            k = min(num_draft, max_new - len(generated) - 1)
            draft, draft_logits = (
                self._propose(draft_model, draft_base, tokens, k, use_logits) if k > 0 else ([], None)
            )
            t_in = {
                **base,
                **_ids(tokens),
                "request_output_len": _int32(len(draft) + 1),
                "exclude_input_in_output": _flag(True),
                "return_perf_metrics": _flag(True),
                "streaming": _flag(False),
            }
            if draft:
                t_in["draft_input_ids"] = _int32(*draft)
                if draft_logits is not None:
                    t_in["draft_logits"] = draft_logits
            t = self._run(self.target, t_in)
            kv_blocks.update({k: t[k] for k in KV_OUTPUTS if k in t})
            new = _tokens_of(t)
            if "total_accepted_draft_tokens" in t:
                accepted = int(t["total_accepted_draft_tokens"].reshape(-1)[0])
            else:
                accepted = _prefix_len(new, draft)
            stats["drafted"] += len(draft)
            stats["accepted"] += min(accepted, len(draft))
            # The target stops short of k+1 tokens only at its end id (which it leaves out).
            finished = len(new) < len(draft) + 1
            if end_id in new:
                new, finished = new[: new.index(end_id)], True
            hit = st.stop_at(generated + new, stops, start=len(generated))
            if hit is not None:
                new, finished = (generated + new)[len(generated) : hit], True
            new = new[: max_new - len(generated)]
            tokens += new
            generated += new
            if new and not stats["first"]:
                stats["first"] = time.time_ns()
            if stream and new:  # totals so far: the last chunk carries the whole request's
                yield outputs(list(generated) if self.accumulate_tokens else new, len(new))
            if finished or not new:
                break
        if not stream:
            yield outputs(generated if exclude else prompt + generated, len(generated))
        elif not generated:
            yield outputs([], 0)


# Finished decoupled BLS response iterators, kept referenced until it is safe to drop them.
#
# Why (the stub crash under load, python_backend r24.10 = Triton 2.51): when a decoupled BLS
# iterator yields its last response it queues a clean-up message, and the stub's stub→parent
# thread then erases the iterator from the stub's map WITHOUT holding the GIL. If Python has
# already dropped the iterator, that erase is the last reference: the iterator, its responses and
# their numpy arrays are freed on that thread while the interpreter runs here, corrupting the heap
# (`malloc(): unaligned fastbin chunk detected`, segfaults in libpython/libc). The same thread
# answers is_cancelled() in FIFO order, so after an is_cancelled() round trip every clean-up queued
# before it is done, and dropping our references frees the iterators here, under the GIL.
# Reproduced by tests/stress/bls_repro (a BLS of a few lines); see docs/benchmarks.md.
_RETIRED: list = []


def poll_cancelled(probe) -> bool:
    """`probe()` (is_cancelled() of the request or its sender), releasing the iterators retired
    before it once it has made its round trip through the stub→parent thread."""
    retired = _RETIRED[:]
    del _RETIRED[: len(retired)]
    cancelled = bool(probe())
    if cancelled:  # a cached True makes no round trip: keep them until the next probe
        _RETIRED[:0] = retired
    return cancelled


RETIRED_MAX = 64  # iterators held at most before a probe is forced to release them


def cancel_check(probe):
    """The BLS loop's `cancelled()` for one request: `probe` (is_cancelled()) through
    poll_cancelled. It frees what earlier requests retired at once (a request of the plain path
    never asks), then probes at most every CANCEL_CHECK_S (a round trip per iteration would
    cost more than a short iteration's work) or when RETIRED_MAX iterators wait."""
    if _RETIRED:
        poll_cancelled(probe)
    timed = st.every(st.CANCEL_CHECK_S, lambda: poll_cancelled(probe))

    def check() -> bool:
        return poll_cancelled(probe) if len(_RETIRED) >= RETIRED_MAX else timed()

    return check


WATCH = st.StubWatch()  # the sub-requests' models' stubs (this stub's parent is the server)


_SUB_IDS = itertools.count(1)


def _request(model: str, inputs: dict[str, np.ndarray], outputs: list[str], **kwargs):
    if hasattr(pb_utils, "PreferredMemory"):
        kwargs["preferred_memory"] = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
    return pb_utils.InferenceRequest(
        model_name=model,
        inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
        requested_output_names=list(outputs),
        **kwargs,
    )


def stop_request(model: str, inputs: dict[str, np.ndarray], request_id: str) -> None:
    """Cancel the running request `request_id` of a decoupled LLM model: a request with `stop`
    true and that id, as TensorRT-LLM's backend (and sdtk's reference model) take it. Triton
    2.51's BLS cannot cancel a sub-request itself (InferenceResponseIterator.cancel() comes
    with python_backend#398). The stop request's responses are read here and retired."""
    names = ("input_ids", "input_lengths", "request_output_len")
    stop: dict[str, np.ndarray] = {k: inputs[k] for k in names if k in inputs}
    stop["stop"] = np.array([[True]], dtype=np.bool_)
    responses = _request(model, stop, ["output_ids"], request_id=request_id).exec(decoupled=True)
    for _ in responses:
        pass
    _RETIRED.append(responses)


def triton_call(
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    decoupled: bool,
    parameters: dict | None = None,
    cancelled=None,
):
    """Run `model` through BLS and yield each response's output tensors (CPU numpy arrays).

    `cancelled()`: whether the caller's client has gone. A decoupled call then stops the
    sub-request (stop_request) and raises Cancelled; a call that is not decoupled cannot be
    stopped midway and runs to its end."""
    kwargs: dict = {"parameters": parameters} if parameters else {}
    interrupt = None
    if decoupled and cancelled is not None:
        kwargs["request_id"] = request_id = f"sdtk-bls-{os.getpid()}-{next(_SUB_IDS)}"
        interrupt = (cancelled, lambda: stop_request(model, inputs, request_id))
    request = _request(model, inputs, outputs, **kwargs)
    # WATCH runs the call on a worker while it watches the model's stubs: a dead one raises
    # ModelDown instead of waiting forever. It reads to the final response even when the caller
    # stops early or a response carries an error (an unfinished iterator is never cleaned up by
    # the stub, and r24.10 cannot cancel a BLS sub-request), then retires the iterator.
    if not decoupled:
        yield from _outputs(model, WATCH.wait(model, lambda: [request.exec()]))
        return
    responses = WATCH.wait(model, lambda: request.exec(decoupled=True), keep=_RETIRED, interrupt=interrupt)
    yield from _outputs(model, responses)


def _outputs(model: str, responses):
    """Each response's output tensors; a response that says the request failed (an error, or
    sdtk's reference model's fault chunk) raises, once the rest of the responses is read.

    The called model has ended a failed request itself (an error response is its last, a fault
    chunk is followed by the FINAL flag): reading to the end, not stopping early, keeps
    StubWatch.wait from sending it a `stop` request, a request of its own that could fail as
    well (no thread or memory left) and that would only cost a round trip."""
    for response in responses:
        tensors, failed = _read(model, response)
        if failed is not None:
            with contextlib.suppress(st.Cancelled):  # the failure is the news, not the cancel
                for _ in responses:
                    pass
            raise failed
        if tensors:
            yield tensors


def _read(model: str, response) -> tuple[dict, Exception | None]:
    """A response's tensors, or the exception its failure raises in the BLS."""
    if response.has_error():
        # A sub-model's refusal of the request stays a refusal (HTTP 400), not a BLS failure;
        # a dead sub-model is a server fault (UNAVAILABLE).
        if st.is_model_down(response.error()):
            return {}, st.ModelDown(model, f"model '{model}' is down: {response.error().message()}")
        kind = st.BadRequest if st.is_bad_request(response.error()) else RuntimeError
        return {}, kind(f"{model}: {response.error().message()}")
    tensors = {t.name(): t.as_numpy() for t in response.output_tensors()}
    fault = st.fault_of(tensors)
    if fault is not None:  # sdtk's reference model failed midway (st.BLS_STREAM)
        return {}, st.Unavailable(f"{model}: {fault}")
    return tensors, None


class BlsModel:
    """The BLS model's Triton side (its model.py's TritonPythonModel)."""

    def initialize(self, args):
        config, params = st.model_config(args)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.bls = Bls(
            triton_call,
            decoupled=self.decoupled,
            target=st.param_str(params, "tensorrt_llm_model_name", "tensorrt_llm"),
            draft=st.param_str(params, "tensorrt_llm_draft_model_name"),
            accumulate_tokens=st.param_bool(params, "accumulate_tokens", False),
            default_num_draft_tokens=st.param_int(params, "default_num_draft_tokens", 0),
            default_use_draft_logits=st.param_bool(params, "default_use_draft_logits", False),
            exclude_input_in_output=st.param_bool(params, "exclude_input_in_output", False),
            max_input_len=st.param_int(params, "max_input_len", None),
            max_seq_len=st.param_int(params, "max_seq_len", None),
        )
        st.announce_initialized(args)

    def _inputs(self, request) -> dict[str, np.ndarray]:
        if st.inputs_of(request, MULTIMODAL_INPUTS):
            raise st.BadRequest("multimodal inputs are not supported by sdtk's BLS")
        return st.inputs_of(request, BLS_INPUTS)

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                sender = request.get_response_sender()
                try:
                    outputs = self.bls(
                        self._inputs(request),
                        cancelled=cancel_check(sender.is_cancelled),
                    )
                except Exception as e:
                    sender.send(
                        st.failure("tensorrt_llm_bls", e), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    )
                    continue
                st.send_all(sender, outputs, "tensorrt_llm_bls")
            return None
        responses = []
        for request in requests:
            try:
                outputs = self.bls(
                    self._inputs(request),
                    cancelled=cancel_check(request.is_cancelled),
                )
                responses.append(st.response(list(outputs)[-1]))
            except Exception as e:
                responses.append(st.failure("tensorrt_llm_bls", e))
        return responses

    def finalize(self):
        # The stub is still up: free what BLS left referenced here, under the GIL.
        del _RETIRED[:]
