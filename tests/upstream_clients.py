"""Requests shaped exactly as NVIDIA's own Triton clients send them, read as those clients read them.

Not a copy of upstream's scripts: each function sends the same inputs (names, dtypes, shapes, the
flags' defaults) and reads the same outputs the same way (`output[0].decode()`, `[0][0]`), so that a
shape or name the real client would trip on fails here too. Sources, tensorrtllm_backend tag v0.19.0
(c1e1963), `inflight_batcher_llm/client/`:

- `end_to_end_grpc_client.py`: `prepare_inputs` and `run_inference` (defaults: temperature 1.0,
  beam_width 1, exclude_input_in_output sent as False unless `--exclude-input-in-output`, stream
  False unless `--streaming`; always through a gRPC stream: start_stream, async_stream_infer,
  stop_stream), then `output[0].decode("utf-8")` of `text_output` and, with
  `--return-perf-metrics`, `result.as_numpy(name)[0][0]` of eleven perf outputs; with
  `--return-log-probs` it sends `return_log_probs` and asks for `cum_log_probs` and
  `output_log_probs`; `--repetition-penalty`, `--presence-penalty`, `--frequency-penalty`,
  `--bad-words` and `--num-return-sequences` add those inputs (the last also asks for
  `sequence_index` and reads each response's `[0][0]` of it);
- `e2e_grpc_speculative_decoding_client.py`: `run_speculative_inference`: ModelInfer (not a stream)
  on preprocessing, the draft and the target `tensorrt_llm` models and postprocessing, with the
  draft/target loop in the client; it relies on `output_ids` carrying the prompt (the deployment's
  `exclude_input_in_output` is not sent);
- `inflight_batcher_llm_client.py --streaming`: token ids straight to `tensorrt_llm` (`input_ids`,
  `input_lengths`, `request_output_len`, `beam_width`, `temperature`, `streaming`, `end_id`,
  `pad_id`, `runtime_top_k` 1, `runtime_top_p` 0.0), each chunk read as `output_ids[0][0]` when
  `sequence_length[0][0] > 0`.
"""

from __future__ import annotations

import queue
from typing import Any

import numpy as np

PERF_OUTPUTS = (  # end_to_end_grpc_client.py, --return-perf-metrics
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


def _tensor(name: str, array: np.ndarray) -> Any:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    t = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    t.set_data_from_numpy(array)
    return t


def _stream(url: str, model: str, inputs: list[Any], outputs: list[str]) -> list[Any]:
    """One request through a gRPC stream; every result, errors raised."""
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url=url)
    try:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        client.async_stream_infer(
            model, inputs, outputs=[grpcclient.InferRequestedOutput(n) for n in outputs], request_id="1"
        )
        client.stop_stream()  # waits for the server to close the stream
    finally:
        client.close()
    out = []
    while not results.empty():
        r = results.get()
        if isinstance(r, Exception):
            raise r
        out.append(r)
    return out


def end_to_end(
    url: str,
    model: str,
    prompt: str,
    *,
    output_len: int = 16,
    streaming: bool = False,
    exclude_input_in_output: bool = False,
    perf: bool = False,
    log_probs: bool = False,
    penalties: dict[str, float] | None = None,
    bad_words: list[str] | None = None,
    num_return_sequences: int | None = None,
    results: list[Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """end_to_end_grpc_client.py: (the text as the client assembles it, perf values read [0][0]).
    `penalties`: {"repetition_penalty": …} as its --*-penalty flags send them; `results`: filled
    with every raw result (log probs, sequence_index)."""
    inputs = {
        "text_input": np.array([[prompt]]).astype(object),
        "max_tokens": np.ones_like([[prompt]]).astype(np.int32) * output_len,
        "stream": np.array([[streaming]], dtype=bool),
        "beam_width": np.array([[1]], dtype=np.int32),
        "temperature": np.array([[1.0]], dtype=np.float32),
        "exclude_input_in_output": np.array([[exclude_input_in_output]], dtype=bool),
    }
    if num_return_sequences is not None:
        inputs["num_return_sequences"] = np.array([[num_return_sequences]], dtype=np.int32)
    if bad_words:
        inputs["bad_words"] = np.array([bad_words], dtype=object)
    for name, value in (penalties or {}).items():
        inputs[name] = np.array([[value]], dtype=np.float32)
    if log_probs:
        inputs["return_log_probs"] = np.array([[True]], dtype=bool)
    if perf:
        inputs["return_perf_metrics"] = np.array([[True]], dtype=bool)
    outputs = ["text_output"]
    if log_probs:
        outputs += ["cum_log_probs", "output_log_probs"]
    if num_return_sequences is not None and num_return_sequences > 1:
        outputs.append("sequence_index")
    outputs += PERF_OUTPUTS if perf else ()
    text, metrics = "", {}
    for result in _stream(url, model, [_tensor(k, v) for k, v in inputs.items()], outputs):
        if results is not None:
            results.append(result)
        output = result.as_numpy("text_output")
        piece = output[0].decode("utf-8")  # the client's own read: [beams] of bytes
        text = text + piece if streaming else piece
        if perf:
            metrics = {name: result.as_numpy(name)[0][0] for name in PERF_OUTPUTS}
    return text, metrics


def _infer(client: Any, model: str, inputs: dict[str, np.ndarray]) -> Any:
    return client.infer(model, [_tensor(k, v) for k, v in inputs.items()], request_id="1")


def speculative(
    url: str,
    prompt: str,
    *,
    output_len: int = 16,
    num_draft_tokens: int = 5,
    draft: str = "tensorrt_llm_draft",
    target: str = "tensorrt_llm",
) -> str:
    """e2e_grpc_speculative_decoding_client.py `run_speculative_inference` (temperature 1.0, beam 1,
    no stop/bad words): ModelInfer on each model, the draft/target loop here."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=url)
    try:
        pre = _infer(
            client,
            "preprocessing",
            {
                "QUERY": np.array([[prompt]]).astype(object),
                "REQUEST_OUTPUT_LEN": np.ones_like([[prompt]]).astype(np.int32) * output_len,
            },
        )
        prompt_ids = np.squeeze(pre.as_numpy("INPUT_ID").astype(np.int32), axis=0)
        bad = pre.as_numpy("BAD_WORDS_IDS").astype(np.int32)
        stop = pre.as_numpy("STOP_WORDS_IDS").astype(np.int32)
        end_id = pre.as_numpy("OUT_END_ID").astype(np.int32)[0][0]
        pad_id = pre.as_numpy("OUT_PAD_ID").astype(np.int32)[0][0]

        def llm_inputs(ids: np.ndarray, out_len: int, tokens: np.ndarray | None) -> dict[str, np.ndarray]:
            d = {
                "input_ids": np.expand_dims(ids, axis=0),
                "input_lengths": np.array([[len(ids)]], dtype=np.int32),
                "request_output_len": np.array([[out_len]], dtype=np.int32),
                "bad_words_list": bad,
                "stop_words_list": stop,
                "beam_width": np.array([[1]], dtype=np.int32),
                "temperature": np.array([[1.0]], dtype=np.float32),
                "end_id": np.array([[end_id]], dtype=np.int32),
                "pad_id": np.array([[pad_id]], dtype=np.int32),
            }
            if tokens is not None:
                d["draft_input_ids"] = np.array([tokens], dtype=np.int32)
            return d

        def ids_of(result: Any) -> tuple[np.ndarray, int]:
            seq = result.as_numpy("sequence_length").astype(np.int32)
            assert seq.shape[:2] == (1, 1)  # the client asserts both
            return np.squeeze(result.as_numpy("output_ids").astype(np.int32), axis=(0, 1)), int(seq[0, 0])

        input_ids, draft_ids = prompt_ids, None
        for _ in range(4 * output_len):  # the client loops until a stop criterion; bounded here
            k = min(num_draft_tokens, len(prompt_ids) + output_len - len(input_ids) - 1)
            tokens = None
            if k > 0:
                draft_ids, draft_len = ids_of(_infer(client, draft, llm_inputs(input_ids, k, None)))
                tokens = draft_ids[len(input_ids) : draft_len]
            n = len(tokens) + 1 if k > 0 and tokens is not None else 1
            target_ids, _ = ids_of(
                _infer(client, target, llm_inputs(input_ids, n, tokens if k > 0 else None))
            )
            last, input_ids = input_ids, target_ids
            if (
                len(input_ids) >= len(prompt_ids) + output_len
                or (draft_ids is not None and np.array_equal(draft_ids, target_ids))
                or np.array_equal(last, input_ids)
            ):
                break
        else:
            raise AssertionError("the speculative client's loop never met its stop criteria")
        post = _infer(
            client,
            "postprocessing",
            {
                "TOKENS_BATCH": np.expand_dims(input_ids, axis=(0, 1)),
                "SEQUENCE_LENGTH": np.array([[len(input_ids)]], dtype=np.int32),
            },
        )
        return post.as_numpy("OUTPUT")[0].decode("utf8")
    finally:
        client.close()


def inflight_streaming(
    url: str,
    input_ids: list[int],
    *,
    end_id: int,
    pad_id: int,
    output_len: int = 16,
    model: str = "tensorrt_llm",
) -> list[int]:
    """inflight_batcher_llm_client.py --streaming: the token ids its chunks carry, in order."""
    inputs = {
        "input_ids": np.array([input_ids], dtype=np.int32),
        "input_lengths": np.array([[len(input_ids)]], dtype=np.int32),
        "request_output_len": np.array([[output_len]], dtype=np.int32),
        "beam_width": np.array([[1]], dtype=np.int32),
        "temperature": np.array([[1.0]], dtype=np.float32),
        "streaming": np.array([[True]], dtype=bool),
        "end_id": np.array([[end_id]], dtype=np.int32),
        "pad_id": np.array([[pad_id]], dtype=np.int32),
        "runtime_top_k": np.array([[1]], dtype=np.int32),
        "runtime_top_p": np.array([[0.0]], dtype=np.float32),
    }
    tokens: list[int] = []
    for result in _stream(url, model, [_tensor(k, v) for k, v in inputs.items()], []):
        if result.get_output("output_ids") is None:
            continue
        lengths = result.as_numpy("sequence_length")
        if lengths is None or lengths[0][0] > 0:
            tokens += [int(t) for t in result.as_numpy("output_ids")[0][0]]
    return tokens
