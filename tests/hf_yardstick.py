"""transformers as the yardstick for TensorRT-LLM's sampling knobs: the logits processors that do
what TensorRT-LLM's penalty kernel does (tests/reference/test_processors.py, the served tests)."""

from __future__ import annotations

from typing import Any

import torch

from toolkit.reference.processors import Processors


def hf_processors(proc: Processors, prompt_len: int, eos: int, temperature: float | None = None) -> Any:
    """The transformers processors that do what TensorRT-LLM's penalty kernel does: temperature
    first (when sampling), then repetition, presence, frequency (over prompt and output), then the
    min-length mask; bad words as transformers bans them."""
    from transformers import (
        LogitsProcessor,
        LogitsProcessorList,
        MinNewTokensLengthLogitsProcessor,
        NoBadWordsLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
    )

    class PresenceFrequency(LogitsProcessor):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            counts = torch.zeros_like(scores).scatter_add_(
                1, input_ids, torch.ones_like(input_ids, dtype=scores.dtype)
            )
            return scores - proc.presence_penalty * (counts > 0) - proc.frequency_penalty * counts

    out = LogitsProcessorList()
    if temperature is not None:
        out.append(TemperatureLogitsWarper(temperature))
    out.append(RepetitionPenaltyLogitsProcessor(proc.repetition_penalty))
    out.append(PresenceFrequency())
    out.append(MinNewTokensLengthLogitsProcessor(prompt_len, proc.min_tokens, eos))
    if proc.bad_words:
        out.append(NoBadWordsLogitsProcessor([list(w) for w in proc.bad_words], eos_token_id=eos))
    return out
