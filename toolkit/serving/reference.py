"""The reference tensorrt_llm model: the official `tensorrt_llm` tensor contract, served by
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
The generation is `generator`'s, the Triton calls after execute() `responder`'s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from toolkit import modes
from toolkit.ops.spec_metrics import TritonSpecMetrics

from . import triton as st
from .generator import LOOKAHEAD, UNSUPPORTED, Generator
from .responder import Responder

__all__ = ["Generator", "ReferenceModel", "Responder", "load_runtime", "resolve_spec"]

PLAIN = ("top_k", "top_p", "top_k_top_p")


def served_modes() -> dict[str, str]:
    """decoding_mode value → the mode it selects, from the mode registry: each mode the reference
    backend serves, under its own Triton name and the engine backend's (`eagle` for eagle3, as
    TensorRT-LLM's C++ backend names it). Plain decoding and the modes that speculate outside
    this model (draft_target's BLS loop, the built mode's empty decoding_mode) are not listed."""
    out: dict[str, str] = {}
    for info in modes.REGISTRY:
        if not info.reference.supported:
            continue
        for name in (info.triton_decoding_mode("reference"), info.triton_decoding_mode("engine")):
            if name and name not in PLAIN:
                out.setdefault(name, info.name)
    return out


MODES = served_modes()
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
        mode = None if built_mode in (modes.NONE, modes.DRAFT_TARGET) else built_mode
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
    choices_key = {modes.MEDUSA: "medusa_choices", modes.EAGLE3: "eagle_choices"}.get(mode)
    choices = st.param_str(params, choices_key) if choices_key else None
    if choices_key and choices:
        spec[choices_key] = from_triton_string(choices)
    if mode == modes.LOOKAHEAD:
        sizes = [st.param_int(params, k, None) for k in LOOKAHEAD]
        if any(s is not None for s in sizes):
            if None in sizes:
                raise ValueError("decoding_mode lookahead needs all of " + ", ".join(LOOKAHEAD))
            spec.update(window=sizes[0], ngram=sizes[1], verification_set=sizes[2])
            spec.pop("max_draft_len", None)  # derived from (W, N, G)
    return spec


def build_limits(engine_dir: Path) -> tuple[int | None, int | None]:
    """(max_input_len, max_seq_len) of the engine directory's build_config."""
    build = json.loads((engine_dir / "config.json").read_text()).get("build_config") or {}
    return build.get("max_input_len") or None, build.get("max_seq_len") or None


def build_batch_size(engine_dir: Path, default: int) -> int:
    """build_config.max_batch_size: the most sequences one iteration batches (the recipe's
    build.max_batch_size, as TensorRT-LLM's executor uses the engine's)."""
    build = json.loads((engine_dir / "config.json").read_text()).get("build_config") or {}
    return int(build.get("max_batch_size") or default)


def load_runtime(engine_dir: Path):
    """The reference runtime for an engine directory, and its built speculative section.

    A draft-target engine directory loads its checkpoint alone: the draft runs as its own model
    (tensorrt_llm_draft) and the BLS drives the loop.
    """
    from toolkit.reference import ReferenceRuntime

    cfg = json.loads((engine_dir / "config.json").read_text())
    ref = cfg.get("reference") or {}
    built = ref.get("speculative") or {"mode": "none"}
    if built.get("mode") == modes.DRAFT_TARGET:
        tokenizer = ref.get("tokenizer")
        # The memory-bound twin (toolkit.membound); absent or 1: the target as it is.
        extra: dict[str, Any] = {"inflate": int(ref["inflate"])} if int(ref.get("inflate") or 1) > 1 else {}
        if ref.get("embedding_from"):  # a draft stored without its embedding takes the target's
            extra["embedding_from"] = Path(ref["embedding_from"])  # (toolkit.build.reference)
        runtime = ReferenceRuntime.load(
            target=Path(ref["checkpoint"]),
            dtype=str(cfg.get("pretrained_config", {}).get("dtype", "float32")),
            tokenizer=Path(tokenizer) if tokenizer else None,
            **extra,
        )
    else:
        runtime = ReferenceRuntime.from_engine_dir(engine_dir)
    return runtime, built


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


class ReferenceModel:
    """The reference tensorrt_llm model's Triton side (its model.py's TritonPythonModel)."""

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
        if built.get("mode") == modes.DRAFT_TARGET:
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
        st.announce_initialized(args)

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
