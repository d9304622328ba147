"""The reference llmapi model: the tensor contract and behaviour of TensorRT-LLM's LLM-API Triton
model (`triton_backend/all_models/llmapi/tensorrt_llm/1/model.py`), served by sdtk's PyTorch reference
runtime (toolkit.reference) instead of `tensorrt_llm.LLM()`.

The repository is rendered from the same templates as the llmapi backend's: `config.pbtxt` (the
upstream inputs and outputs) and `1/model.yaml` (the LLM() arguments, `speculative_config`
included, and `triton_config`). This model reads model.yaml as LLM() would take it:
- `model` (the target checkpoint), `tokenizer`, `max_seq_len`;
- `speculative_config`: `decoding_type` Eagle3/Eagle (+ `speculative_model[_dir]`, `max_draft_len`,
  `eagle_choices`, `eagle3_layers_to_capture`), NGram (`max_matching_ngram_size`, `is_use_oldest`, ...),
  DraftTarget (`speculative_model[_dir]`) or any other mode's decoding_type from the registry (SA,
  PARD, MTP: the mode's own fields, under their names or its `llmapi_aliases`): the runtime
  speculates inside this one model;
  `max_concurrency` and `draft_len_schedule` bound its draft length by the batch (a schedule only
  where TensorRT-LLM 1.2's and 1.3's readings of its keys agree, see `load_aware`);
- `triton_config`: `decoupled` and `max_batch_size` (0), copied into the model config by
  `auto_complete_config` as upstream does.

Requests, as upstream's helpers.py reads them: `text_input` (one prompt; a batched text_input is
refused), `streaming` (decoupled only: "Streaming is only supported in decoupled mode."),
`sampling_param_{max_tokens,temperature,top_k,top_p,seed,exclude_input_from_output,
return_perf_metrics,stop,best_of,frequency_penalty,presence_penalty}`,
`return_{finish_reason,stop_reason,cumulative_logprob}`, `stop` (cancel by request id).

Responses, as upstream's `_create_response`:
- `text_output`: the request's whole text so far (streamed responses repeat it, growing), with the
  prompt in front unless `sampling_param_exclude_input_from_output` is true (default false);
- `finish_reason` / `stop_reason` / `cumulative_logprob` as strings when asked for (no log probs are
  computed, so cumulative_logprob is "None", as LLM() reports it without `logprobs`);
- with `sampling_param_return_perf_metrics`: `kv_cache_*`, `*_time_ns`, `acceptance_rate`,
  `total_accepted_draft_tokens`, `total_draft_tokens`, all as strings (upstream sends them with
  text_output's dtype; tensorrtllm_backend docs/llmapi.md shows `"acceptance_rate": "0.0"`). The
  reference runtime has no paged KV cache: the kv_cache_* values are 0.
- No output token count: the upstream contract has no such output (its `return_*` inputs are
  finish_reason, stop_reason and cumulative_logprob), so none is added here; clients count tokens
  with the tokenizer.

In-flight batching, as LLM() does: decoupled, execute() hands each request to its own thread and
returns; the runtime batches their steps, up to the LLM argument `max_batch_size` sequences per
iteration, and requests that arrive meanwhile join at the next one. Not decoupled, the requests of
one execute() call are answered in order.

Only the inputs and outputs the model's config.pbtxt declares are read and written (Triton passes
that config to `initialize`): the rendered config is TensorRT-LLM's for the recipe's declared version
(toolkit/repo/versions.py `llmapi_late_inputs`: no `image_url` or `lora_*` up to 1.2), so this model
reads exactly what that version's model would be sent.

Also checked per request, with an error naming the input: sampling_param_max_tokens < 1 or
> int32; prompt + sampling_param_max_tokens > max_seq_len. Cancellation (`request.is_cancelled()` /
the response sender's) is checked at every generation step. Features the reference runtime lacks
(best_of > 1, penalties, LoRA, images) are refused per request.

sdtk's own code (not upstream's); needs sdtk (toolkit.reference) in the Python that runs Triton's
Python backend.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

from toolkit import modes
from toolkit.modes.load_aware import LoadAware

from .triton import announce_initialized

INT32_MAX = 2**31 - 1
DEFAULT_MAX_TOKENS = 32  # tensorrt_llm SamplingParams.max_tokens default when the request sends none
# sampling_param_* inputs read as scalars (helpers.py get_sampling_params_from_request).
SCALARS = (
    "best_of",
    "temperature",
    "top_k",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "max_tokens",
    "seed",
    "exclude_input_from_output",
    "return_perf_metrics",
)
OUTPUT_FLAGS = {
    "return_finish_reason": "finish_reason",
    "return_stop_reason": "stop_reason",
    "return_cumulative_logprob": "cumulative_logprob",
}
UNSUPPORTED = ("image_url", "lora_id", "lora_name", "lora_path", "lora_ckpt_source")
PERF = (
    "kv_cache_reused_block",
    "kv_cache_hit_rate",
    "kv_cache_alloc_new_blocks",
    "kv_cache_alloc_total_blocks",
    "kv_cache_missed_block",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
)


class RequestError(ValueError):
    """A request the model refuses; the message names the input."""


class Cancelled(Exception):
    pass


def model_yaml() -> dict:
    # The model's version directory, where upstream's model.py reads it: this package sits in it.
    path = Path(__file__).parent.parent / os.environ.get("LLM_CONFIG_PATH", "model.yaml")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("triton_config"), dict):
        raise pb_utils.TritonModelException(
            f"'{path}' containing the LLM arguments and triton_config not found"
        )
    return data


def _read(schedule: dict, batch: int, upper: bool) -> int:
    keys = [k for k in schedule if (k >= batch if upper else k <= batch)]
    return schedule[(min if upper else max)(keys)] if keys else 0


def load_aware(spec: dict, max_batch: int) -> dict:
    """`max_concurrency` and `draft_len_schedule` as sdtk's speculative section takes them. A
    schedule is taken only where TensorRT-LLM 1.2's reading (keys are lower bounds) and 1.3's
    (upper bounds, PR #10860) give the same draft length at every batch size 1..max_batch, as sdtk
    renders it (toolkit/build/llmapi.py render_schedule); model.yaml does not say which version
    reads it, so any other schedule is refused rather than read one way."""
    out: dict = {}
    if spec.get("max_concurrency") is not None:
        out["max_concurrency"] = int(spec["max_concurrency"])
    schedule = spec.get("draft_len_schedule")
    if schedule:
        schedule = {int(k): int(v) for k, v in schedule.items()}
        for batch in range(1, max(max_batch, 1) + 1):
            if _read(schedule, batch, False) != _read(schedule, batch, True):
                raise ValueError(
                    f"speculative_config.draft_len_schedule {schedule} means draft length "
                    f"{_read(schedule, batch, False)} at batch size {batch} to TensorRT-LLM 1.2 (keys are lower "
                    f"bounds) but {_read(schedule, batch, True)} to 1.3 (upper bounds); give each run of equal "
                    "lengths a key at its first and its last batch size (sdtk build writes it so)"
                )
        out["draft_len_schedule"] = dict(sorted(schedule.items()))
    return out


def speculative_section(spec: dict | None, max_batch: int = 1) -> tuple[dict, str | None, str | None]:
    """LLM-API speculative_config → (sdtk speculative section, EAGLE-3 head dir, draft dir)."""
    if not spec:
        return {"mode": "none"}, None, None
    section, head, draft = _section(spec)
    return {**section, **load_aware(spec, max_batch)}, head, draft


def _section(spec: dict) -> tuple[dict, str | None, str | None]:
    kind = spec.get("decoding_type")
    model = spec.get("speculative_model") or spec.get("speculative_model_dir")
    n = spec.get("max_draft_len")
    if kind in ("Eagle3", "Eagle"):
        out = {"mode": modes.EAGLE3, "max_draft_len": n}
        if spec.get("eagle_choices"):
            out["eagle_choices"] = spec["eagle_choices"]
        if spec.get("eagle3_layers_to_capture"):
            out["layers_to_capture"] = list(spec["eagle3_layers_to_capture"])
        if spec.get("use_dynamic_tree"):
            raise ValueError("EAGLE-3 dynamic trees are not implemented by the reference runtime")
        return out, model, None
    if kind == "NGram":
        out = {"mode": modes.NGRAM, "max_draft_len": n}
        for key in ("max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"):
            if key in spec:
                out[key] = spec[key]
        return out, None, None
    if kind == "DraftTarget":
        return {"mode": modes.DRAFT_TARGET, "max_draft_len": n}, None, model
    return _registered(kind, spec, model)


def _registered(kind: Any, spec: dict, model: str | None) -> tuple[dict, str | None, str | None]:
    """Any other decoding_type, from the mode registry: the mode whose `llmapi_types` has it (SA,
    PARD, MTP), its own recipe fields read under their names or their `llmapi_aliases`, and the
    speculative model as the mode's source."""
    found = next((m for m in modes.REGISTRY if kind in m.llmapi_types), None)
    if found is None:
        raise ValueError(
            f"speculative_config decoding_type {kind!r} is not served by the reference llmapi model"
        )
    own = set(modes.mode(found.name).spec.model_fields) - set(LoadAware.model_fields) - {"mode"}
    aliases = dict(found.llmapi_aliases)
    out: dict[str, Any] = {"mode": found.name}
    for key, value in spec.items():
        name = aliases.get(key, key)
        if name in own and name not in out:
            out[name] = value
    if model is not None and found.source is None:
        raise ValueError(
            f"speculative_config.speculative_model with decoding_type {kind!r} (replacement heads) is not "
            "served by the reference llmapi model: it runs the target checkpoint's own layers"
        )
    sources = {found.source: model} if found.source else {}
    return out, sources.get("eagle_head"), sources.get("draft")


def load_runtime(args: dict):
    from toolkit.reference import ReferenceRuntime
    from toolkit.reference.runtime import parse_speculative

    spec, head, draft = speculative_section(
        args.get("speculative_config"), int(args.get("max_batch_size") or 1)
    )
    runtime = ReferenceRuntime.load(
        Path(args["model"]),
        {"draft": Path(draft) if draft else None, "eagle_head": Path(head) if head else None},
        spec=parse_speculative(spec),
        dtype=str(args.get("dtype") or "float32"),
        tokenizer=Path(args["tokenizer"]) if args.get("tokenizer") else None,
    )
    return runtime, spec["mode"] != "none"


class Declared:
    """The input and output names of the model's config.pbtxt (Triton's `model_config`)."""

    def __init__(self, model_config: dict):
        self.inputs = frozenset(t["name"] for t in model_config.get("input", []))
        self.outputs = frozenset(t["name"] for t in model_config.get("output", []))


def _input(request, declared: Declared, name: str):
    """The request's tensor `name`, read only if the config declares that input."""
    if name not in declared.inputs:
        return None
    return pb_utils.get_input_tensor_by_name(request, name)


def _scalar(request, declared: Declared, name: str):
    tensor = _input(request, declared, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    if array.size != 1:
        raise RequestError(f"Expected a scalar tensor for tensor {name}")
    value = array.item(0)
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _strings(request, declared: Declared, name: str) -> list[str]:
    tensor = _input(request, declared, name)
    if tensor is None:
        return []
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in tensor.as_numpy().reshape(-1)]


class Request:
    """One request's inputs, read and checked as upstream's _convert_request reads them."""

    def __init__(self, request, *, declared: Declared, max_seq_len: int | None, decoupled: bool):
        self.declared = declared
        text = _input(request, declared, "text_input")
        if text is None:
            raise RequestError("text_input is missing from the request")
        array = text.as_numpy()
        if len(array.shape) > 1:
            raise RequestError("The current implementation only supports text_input being a 1D tensor.")
        prompt = array.reshape(-1)[0]
        self.prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        for name in UNSUPPORTED:
            if _input(request, declared, name) is not None:
                raise RequestError(f"input {name} is not supported by the reference backend")
        p = {k: _scalar(request, declared, f"sampling_param_{k}") for k in SCALARS}
        self.max_tokens = DEFAULT_MAX_TOKENS if p["max_tokens"] is None else int(p["max_tokens"])
        if self.max_tokens < 1:
            raise RequestError(f"sampling_param_max_tokens must be at least 1, got {self.max_tokens}")
        if self.max_tokens > INT32_MAX:
            raise RequestError(
                f"sampling_param_max_tokens must be at most {INT32_MAX}, got {self.max_tokens}"
            )
        if (p["best_of"] or 1) != 1:
            raise RequestError(
                "sampling_param_best_of other than 1 is not supported by the reference backend"
            )
        for k in ("frequency_penalty", "presence_penalty"):
            if p[k]:
                raise RequestError(
                    f"sampling_param_{k} other than 0 is not supported by the reference backend"
                )
        self.temperature = float(p["temperature"] or 0.0)
        self.top_k = int(p["top_k"] or 0)
        self.top_p = float(p["top_p"]) if p["top_p"] is not None else 1.0
        self.seed = int(p["seed"]) if p["seed"] is not None else None
        self.exclude_input = bool(p["exclude_input_from_output"] or False)
        self.perf = bool(p["return_perf_metrics"] or False)
        self.stop_strings = [s for s in _strings(request, declared, "sampling_param_stop") if s]
        self.outputs = {flag: bool(_scalar(request, declared, flag) or False) for flag in OUTPUT_FLAGS}
        self.streaming = bool(_scalar(request, declared, "streaming") or False)
        if self.streaming and not decoupled:
            raise RequestError("Streaming is only supported in decoupled mode.")
        self.max_seq_len = max_seq_len


class Generation:
    """Runs one request on the reference runtime; yields (response dict, final) pairs, the dicts
    mapping output name → numpy array. Streamed responses are yielded as each step produces them;
    the step that ends the request is not streamed on its own: the final response carries it, as
    upstream sends the finished RequestOutput as the last (and only final) response."""

    def __init__(self, runtime, speculative: bool, req: Request, is_cancelled):
        self.rt = runtime
        self.speculative = speculative
        self.req = req
        self.is_cancelled = is_cancelled

    def __iter__(self):
        from toolkit.reference import SamplingParams

        req, rt = self.req, self.rt
        arrival = time.time_ns()
        prompt_ids = list(rt.tokenizer.encode(req.prompt, add_special_tokens=True))
        if req.max_seq_len is not None and len(prompt_ids) + req.max_tokens > req.max_seq_len:
            raise RequestError(
                f"text_input ({len(prompt_ids)} tokens) + sampling_param_max_tokens ({req.max_tokens}) = "
                f"{len(prompt_ids) + req.max_tokens} exceeds max_seq_len {req.max_seq_len} (model.yaml)"
            )
        end_id = rt.eos_token_id if rt.eos_token_id is not None else -1
        sampling = SamplingParams(
            temperature=req.temperature, top_k=req.top_k, top_p=req.top_p or 1.0, seed=req.seed
        )
        out: list[int] = []
        state = {"first": 0, "finish": "length", "stop_reason": None, "text": ""}
        pending: list[dict] = []

        def text_of(tokens: list[int]) -> str:
            ids = tokens if req.exclude_input else prompt_ids + tokens
            return rt.tokenizer.decode(ids, skip_special_tokens=True)

        def on_tokens(tokens) -> None:
            if self.is_cancelled():
                raise Cancelled
            tokens = [int(t) for t in tokens]
            if end_id >= 0 and end_id in tokens:
                tokens = tokens[: tokens.index(end_id)]
                state["finish"] = "stop"
            out.extend(tokens[: req.max_tokens - len(out)])
            if out and not state["first"]:
                state["first"] = time.time_ns()
            if req.stop_strings:
                generated = rt.tokenizer.decode(out, skip_special_tokens=True)
                hits = [(generated.find(s), s) for s in req.stop_strings if s in generated]
                if hits:
                    state["finish"], state["stop_reason"] = "stop", min(hits)[1]
                    raise _Stop
            last = state["finish"] == "stop" or len(out) >= req.max_tokens
            if req.streaming and tokens and not last:
                pending.append(self._response(text_of(out), state, final=False))

        result = None
        try:
            for streamed in self._run(prompt_ids, sampling, end_id, on_tokens, pending):
                yield streamed, False
            result = self._result
        except _Stop:
            pass
        text = text_of(out)
        if state["stop_reason"] is not None:  # the stop string and what follows are not returned
            generated = rt.tokenizer.decode(out, skip_special_tokens=True)
            generated = generated[: generated.find(state["stop_reason"])]
            text = generated if req.exclude_input else text_of([]) + generated
        now = time.time_ns()
        drafted = result.stats.draft_tokens if result is not None and self.speculative else 0
        accepted = result.stats.accepted_tokens if result is not None and self.speculative else 0
        final = self._response(text, state, final=True)
        if req.perf:
            values = {
                "kv_cache_reused_block": 0,
                "kv_cache_hit_rate": 0.0,
                "kv_cache_alloc_new_blocks": 0,
                "kv_cache_alloc_total_blocks": 0,
                "kv_cache_missed_block": 0,
                "arrival_time_ns": arrival,
                "first_scheduled_time_ns": arrival,
                "first_token_time_ns": state["first"] or now,
                "last_token_time_ns": now,
                "acceptance_rate": accepted / drafted if drafted else 0.0,
                "total_accepted_draft_tokens": accepted,
                "total_draft_tokens": drafted,
            }
            for name in PERF:
                if name in req.declared.outputs:
                    final[name] = np.asarray([values[name]], dtype=np.object_)
        yield final, True

    def _run(self, prompt_ids, sampling, end_id, on_tokens, pending):
        """Generate, yielding the streamed responses `on_tokens` queued after each step."""
        import threading

        done = threading.Event()
        error: list[BaseException] = []

        def worker():
            from toolkit.reference import PLAIN

            try:
                self._result = self.rt.generate(
                    prompt_ids,
                    self.req.max_tokens,
                    sampling=sampling,
                    spec=None if self.speculative else PLAIN,
                    end_id=end_id,
                    on_tokens=on_tokens,
                )
            except BaseException as e:  # re-raised below
                error.append(e)
            finally:
                done.set()

        self._result = None
        if not self.req.streaming:
            worker()
        else:
            thread = threading.Thread(target=worker, name="sdtk-reference-llmapi", daemon=True)
            thread.start()
            while not done.wait(0.005) or pending:
                while pending:
                    yield pending.pop(0)
            thread.join()
        if error:
            raise error[0]

    def _response(self, text: str, state: dict, *, final: bool) -> dict:
        out = {"text_output": np.asarray([text.encode("utf-8")], dtype=np.object_)}
        values = {
            "finish_reason": state["finish"] if final else None,
            "stop_reason": state["stop_reason"],
            "cumulative_logprob": None,
        }
        for flag, name in OUTPUT_FLAGS.items():
            if self.req.outputs[flag] and name in self.req.declared.outputs:
                out[name] = np.asarray([str(values[name]).encode("utf-8")], dtype=np.object_)
        return out


class _Stop(Exception):
    """A stop string was generated: end the generation."""


def _error(message: str, code=None) -> pb_utils.InferenceResponse:
    text = pb_utils.Tensor("text_output", np.asarray([b"N/A"], dtype=np.object_))
    err = pb_utils.TritonError(message, code) if code is not None else pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(output_tensors=[text], error=err)


def _code(e: Exception):
    """A refused request is INVALID_ARG (Triton's HTTP 400); anything else stays INTERNAL (500)."""
    return getattr(pb_utils.TritonError, "INVALID_ARG", None) if isinstance(e, RequestError) else None


def _cancelled() -> pb_utils.InferenceResponse:
    code = getattr(pb_utils.TritonError, "CANCELLED", None)
    return _error("Request cancelled by client", code)


def _tensors(outputs: dict) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


class LlmapiModel:
    """The reference llmapi model's Triton side (its model.py's TritonPythonModel)."""

    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        """Copy triton_config (decoupled, max_batch_size) from model.yaml, as upstream does."""
        triton = model_yaml()["triton_config"]
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=bool(triton["decoupled"])))
        auto_complete_model_config.set_max_batch_size(int(triton["max_batch_size"]))
        return auto_complete_model_config

    def initialize(self, args):
        from toolkit.generate import set_torch_threads

        set_torch_threads()
        self.declared = Declared(json.loads(args["model_config"]))
        data = model_yaml()
        triton = data["triton_config"]
        self.decoupled = bool(triton["decoupled"])
        llm_args = {k: v for k, v in data.items() if k != "triton_config"}
        self.max_seq_len = int(llm_args["max_seq_len"]) if llm_args.get("max_seq_len") else None
        self.runtime, self.speculative = load_runtime(llm_args)
        # LLM()'s in-flight batch: max_batch_size sequences (TensorRT-LLM's default 2048 is no size
        # for a CPU runtime that allocates every slot's KV cache up front).
        self.max_batch_size = int(llm_args.get("max_batch_size") or 8)
        self.runtime.enable_batching(
            self.max_batch_size, capacity=(self.max_seq_len or 1024) + 72, reuse_slots=0
        )
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        announce_initialized(args)

    def _generation(self, request, sender=None) -> Generation:
        def is_cancelled() -> bool:
            checks = [getattr(request, "is_cancelled", None), getattr(sender, "is_cancelled", None)]
            return any(c() for c in checks if c is not None)

        req = Request(request, declared=self.declared, max_seq_len=self.max_seq_len, decoupled=self.decoupled)
        return Generation(self.runtime, self.speculative, req, is_cancelled)

    def _stop(self, request):
        """`stop`: upstream cancels the running requests of that request id."""
        if not request.request_id():
            return _error("A request id must be provided for request cancellation")
        return _cancelled()

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                try:
                    if _scalar(request, self.declared, "stop"):
                        responses.append(self._stop(request))
                        continue
                    responses.append(_tensors(list(self._generation(request))[-1][0]))
                except Cancelled:
                    responses.append(_cancelled())
                except Exception as e:
                    responses.append(_error(f"Error generating request: {e}", _code(e)))
            return responses
        # A request whose thread cannot start (RuntimeError "can't start new thread" in an
        # exhausted address space) is answered here, alone: an execute() that raises makes the
        # Python backend close the sender of every request of the batch, under the threads of
        # those already started.
        for request in requests:
            thread = threading.Thread(
                target=self._serve, args=(request,), name="sdtk-reference-llmapi-request", daemon=True
            )
            with self._lock:
                self._threads.add(thread)
            try:
                thread.start()
            except Exception as e:  # noqa: BLE001 - this request alone fails
                with self._lock:
                    self._threads.discard(thread)
                self._refuse(request, e)
        return None

    @staticmethod
    def _refuse(request, e: Exception) -> None:
        """End a request that could not start with its error (UNAVAILABLE: retry later)."""
        code = getattr(pb_utils.TritonError, "UNAVAILABLE", None)
        try:
            request.get_response_sender().send(
                _error(f"Error generating request: out of threads or memory: {e}", code),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        except Exception as again:  # noqa: BLE001 - nothing more can be told to that client
            print(f"sdtk: could not answer a request that failed to start: {again!r}", flush=True)

    def _serve(self, request) -> None:
        """One decoupled request, in its own thread: every response through its sender."""
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        sender = request.get_response_sender()
        try:
            if _scalar(request, self.declared, "stop"):
                sender.send(self._stop(request), flags=final)
                return
            # each streamed step goes out at once (TTFT is the first step's time)
            for outputs, is_final in self._generation(request, sender):
                sender.send(_tensors(outputs), flags=final if is_final else 0)
        except Cancelled:
            sender.send(_cancelled(), flags=final)
        except Exception as e:
            sender.send(_error(f"Error generating request: {e}", _code(e)), flags=final)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def finalize(self):
        batcher = getattr(self.runtime, "batcher", None)
        if batcher is not None:
            batcher.close()  # generations still running end with an error response, not a hung unload
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)
        self.runtime = None
