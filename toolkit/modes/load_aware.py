"""The load-aware knobs of the modes TensorRT-LLM's LLM API serves with a drafter: speculation off
above a concurrency, a draft length per batch size, and sdtk's per-request adaptive draft length."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from toolkit.schema import FieldError, Strict


class LoadAware(Strict):
    """TensorRT-LLM LLM-API `DecodingBaseConfig` runtime knobs (tensorrt_llm/llmapi/llm_args.py;
    tensorrt_llm/_torch/speculative/drafter.py), honoured by the reference runtime too, and
    sdtk's per-request adaptive draft length."""

    max_concurrency: int | None = Field(
        None, ge=1, description="Speculation off while more requests than this are in the batch."
    )
    draft_len_schedule: dict[int, int] | None = Field(
        None,
        description="Batch size -> draft length (0 = off); the largest threshold <= the batch size "
        "applies. Must contain 1, mapped to max_draft_len; no value above max_draft_len.",
    )
    adaptive_draft_len: bool = Field(
        False,
        description="Reference backend: per request, shrink the draft length when the running "
        "acceptance falls and grow it back when drafts are fully accepted (sdtk, not upstream).",
    )

    @field_validator("draft_len_schedule", mode="before")
    @classmethod
    def _json_keys(cls, v: Any) -> Any:
        # JSON (the engine directory's config.json, --json reports) has only string keys: "1" -> 1.
        if isinstance(v, dict):
            return {int(k) if isinstance(k, str) and k.isdecimal() else k: x for k, x in v.items()}
        return v

    @model_validator(mode="after")
    def _schedule(self) -> LoadAware:
        v = self.draft_len_schedule
        top = getattr(self, "max_draft_len", None)
        if v is None:
            return self
        for batch, length in v.items():
            if batch < 1:
                raise FieldError("draft_len_schedule", f"batch size threshold must be >= 1, got {batch}")
            if length < 0:
                raise FieldError("draft_len_schedule", f"draft length must be >= 0, got {length}")
            if top is not None and length > top:
                raise FieldError(
                    "draft_len_schedule",
                    f"draft length {length} (batch size {batch}) exceeds max_draft_len={top}",
                )
        if 1 not in v:
            raise FieldError("draft_len_schedule", f"must contain batch size 1 (add 1: {top})")
        if top is not None and v[1] != top:
            raise FieldError("draft_len_schedule", f"entry 1 must equal max_draft_len={top}, got {v[1]}")
        self.draft_len_schedule = dict(sorted(v.items()))
        return self
