"""Requests to Triton's LLM-API `tensorrt_llm` model (TensorRT-LLM ≥ 1.0, PyTorch backend).

Its inputs are not the ensemble's: NVIDIA/TensorRT-LLM
`triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt` (0a71057) and `1/helpers.py`
`get_sampling_params_from_request` read `text_input`, `streaming`,
`sampling_param_{best_of,temperature,top_k,top_p,frequency_penalty,presence_penalty,max_tokens,seed,
exclude_input_from_output,return_perf_metrics,stop}` and `return_{finish,stop}_reason`,
`return_cumulative_logprob`; the docs' request is `{"text_input": ..., "sampling_param_max_tokens": 10}`
(tensorrtllm_backend docs/llmapi.md). Unknown `/generate` JSON fields are silently ignored there, so
sending the ensemble's `max_tokens` would generate with the LLM API's default length.

Which contract a model speaks is read from its own config (the inputs it declares), never guessed
from its name. Two behaviours of that model the client accounts for:
- `sampling_param_exclude_input_from_output` defaults to False there (the docs' sample output starts
  with the prompt); sdtk's client returns generated text only, so it sends True unless told otherwise;
- when streaming, each response carries the whole text so far (`RequestOutput.outputs[0].text`), so
  `delta_text` turns it into the new part before the shared collector joins the chunks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from toolkit.errors import GenerationError

if TYPE_CHECKING:
    from toolkit.client.types import GenerationRequest, ModelInfo

# GenerationRequest field → llmapi input.
FIELDS = {
    "max_tokens": "sampling_param_max_tokens",
    "temperature": "sampling_param_temperature",
    "top_k": "sampling_param_top_k",
    "top_p": "sampling_param_top_p",
    "seed": "sampling_param_seed",
    "exclude_input_in_output": "sampling_param_exclude_input_from_output",
    "return_perf_metrics": "sampling_param_return_perf_metrics",
}
# Ensemble-only request fields with no llmapi input.
UNSUPPORTED = {
    "end_id": "the LLM-API model takes no end id (the tokenizer's is used)",
    "num_draft_tokens": "draft-target on the llmapi backend drafts inside the LLM API (speculative_config)",
}


def is_llmapi(info: ModelInfo) -> bool:
    """The model declares the LLM-API inputs (and not the ensemble's `max_tokens`)."""
    return "sampling_param_max_tokens" in info.inputs and "max_tokens" not in info.inputs


def accepts(info: ModelInfo, field: str) -> bool:
    """Whether the model takes the GenerationRequest field `field` (under its own input name)."""
    if is_llmapi(info):
        return FIELDS.get(field) in info.inputs
    return field in info.inputs


def request_values(req: GenerationRequest, info: ModelInfo, stream: bool) -> dict[str, Any]:
    """Input name → value for one request to the llmapi model."""
    out: dict[str, Any] = {"text_input": req.prompt}
    for field, name in FIELDS.items():
        value = getattr(req, field)
        if field == "exclude_input_in_output" and value is None:
            value = True  # generated text only, as from the ensemble (see the module docstring)
        if value is not None:
            out[name] = value
    for field, why in UNSUPPORTED.items():
        if getattr(req, field) is not None:
            raise GenerationError(f"model '{info.name}' (LLM-API) has no input for {field}: {why}")
    out.update(req.extra_inputs)
    out["streaming"] = stream
    return out


def _delta(raw: dict[str, Any], seen: list[str]) -> dict[str, Any]:
    from toolkit.client.common import scalar

    if "text_output" not in raw:
        return raw
    text = scalar(raw["text_output"])
    text = "" if text is None else str(text)
    prev = seen[0]
    seen[0] = text
    new = text[len(prev) :] if text.startswith(prev) else text
    return {**raw, "text_output": new}


def delta_text(raw: Iterator[tuple[dict[str, Any], bool]]) -> Iterator[tuple[dict[str, Any], bool]]:
    """Streamed llmapi responses (whole text so far) → responses carrying only the new text."""
    seen = [""]
    for outputs, final in raw:
        yield _delta(outputs, seen), final


async def adelta_text(
    raw: AsyncIterator[tuple[dict[str, Any], bool]],
) -> AsyncIterator[tuple[dict[str, Any], bool]]:
    seen = [""]
    async for outputs, final in raw:
        yield _delta(outputs, seen), final
