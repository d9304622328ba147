"""The load-aware knobs of the modes TensorRT-LLM's LLM API serves with a drafter: speculation off
above a concurrency, a draft length per batch size, acceptance cut-offs, rejection sampling, and
sdtk's per-request adaptive draft length.

sdtk's meaning of a draft-length schedule (one meaning, whatever the TensorRT-LLM version):
a step function from the batch size (requests in the batch) to a draft length, 0 = speculation off.
A recipe writes it in either of two forms, both stored as the canonical map below:

- ranges (explicit, recommended): `[{max_batch: 3, draft_len: 3}, {max_batch: 16, draft_len: 1},
  {draft_len: 0}]`: batch 1-3 -> 3, 4-16 -> 1, 17+ -> 0. Ranges ascend; `max_batch` may be left out
  on the last range only (no upper end); above the last `max_batch`, speculation is off.
- map (sdtk's earlier form, kept): `{1: 3, 4: 1, 17: 0}`: each key is the FIRST batch size its draft
  length applies to (a lower bound, TensorRT-LLM 1.2's reading); it must contain 1.

TensorRT-LLM 1.3 reads a map's keys as upper bounds (PR #10860), so the same map means something
else there: toolkit.build.llmapi renders the function into a map that both readings agree on, and
tests read the rendered YAML back under each version's rule (toolkit.build.llmapi_schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from toolkit.schema import FieldError, Strict

SCHEDULE_DOC = (
    "Draft length by batch size (0 = speculation off). Ranges (recommended): "
    "[{max_batch: 3, draft_len: 3}, {max_batch: 16, draft_len: 1}] = batch 1-3 -> 3, 4-16 -> 1, "
    "17+ -> off; max_batch may be left out on the last range (no upper end). Or a map whose keys are "
    "the FIRST batch size each length applies to (lower bounds): {1: 3, 4: 1, 17: 0}; it must "
    "contain 1. Entry 1 equals max_draft_len. sdtk renders this meaning into each TensorRT-LLM "
    "version's own reading (1.3 reads a map's keys as upper bounds)."
)

# The forms the field accepts before validation (`sdtk recipes schema`, for editors): the ranges
# (_from_ranges) and the map; the stored value is always the map.
SCHEDULE_JSON_FORMS: list[Any] = [
    {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "properties": {
                "max_batch": {"type": "integer", "minimum": 1},
                "draft_len": {"type": "integer", "minimum": 0},
            },
            "required": ["draft_len"],
            "additionalProperties": False,
        },
    },
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "null"},
]


def _from_ranges(ranges: list[Any]) -> dict[int, int]:
    """Explicit batch ranges -> the canonical map (first batch size -> draft length)."""
    out: dict[int, int] = {}
    start = 1
    for i, r in enumerate(ranges):
        if not isinstance(r, dict) or not set(r) <= {"max_batch", "draft_len"} or "draft_len" not in r:
            raise FieldError(
                f"draft_len_schedule.{i}",
                f"a range is {{max_batch: N, draft_len: K}} (max_batch optional on the last), got {r!r}",
            )
        top = r.get("max_batch")
        if top is None and i != len(ranges) - 1:
            raise FieldError(f"draft_len_schedule.{i}.max_batch", "may be left out on the last range only")
        if top is not None and (not isinstance(top, int) or top < start):
            raise FieldError(
                f"draft_len_schedule.{i}.max_batch",
                f"ranges ascend: expected an integer >= {start}, got {top!r}",
            )
        out[start] = r["draft_len"]
        if top is None:
            return out
        start = top + 1
    out[start] = 0  # above the last max_batch: speculation off
    return out


def to_ranges(schedule: dict[int, int]) -> list[dict[str, int]]:
    """The canonical map as explicit ranges (the recommended recipe form)."""
    keys = sorted(schedule)
    out: list[dict[str, int]] = []
    for k, nxt in zip(keys, [*keys[1:], None], strict=True):
        out.append(
            {"draft_len": schedule[k]} if nxt is None else {"max_batch": nxt - 1, "draft_len": schedule[k]}
        )
    return out


def draft_len_at(schedule: dict[int, int] | None, max_concurrency: int | None, batch: int) -> int | None:
    """sdtk's draft length at `batch` requests (None: no limit): 0 above max_concurrency, else the
    schedule's entry with the largest first-batch-size <= batch."""
    if max_concurrency is not None and batch > max_concurrency:
        return 0
    if schedule:
        fits = [k for k in schedule if k <= batch]
        return schedule[max(fits)] if fits else 0
    return None


def render_schedule(schedule: dict[int, int] | None, limit: int | None, max_batch: int) -> dict[int, int]:
    """sdtk's draft-length function over batch sizes 1..max_batch (toolkit.modes.load_aware:
    `schedule` in sdtk's meaning, speculation off above `limit`) as a `draft_len_schedule` map
    that TensorRT-LLM reads the same whether its keys are lower bounds (1.2) or upper bounds (1.3,
    PR #10860): every run of equal draft lengths gets a key at its first and at its last batch size.
    Key 1 maps to max_draft_len (both lines' rule); the last run ends at max_batch, so 1.3 keeps
    speculating up to the LLM's max_batch_size where sdtk does."""
    out: dict[int, int] = {}
    start = 1
    lengths = [draft_len_at(schedule, limit, b) or 0 for b in range(1, max_batch + 1)]
    for b in range(1, max_batch + 1):
        if b == max_batch or lengths[b] != lengths[b - 1]:
            out[start] = out[b] = lengths[b - 1]
            start = b + 1
    return out


class LoadAware(Strict):
    """TensorRT-LLM LLM-API `DecodingBaseConfig` runtime knobs (tensorrt_llm/llmapi/llm_args.py;
    tensorrt_llm/_torch/speculative/drafter.py), honoured by the reference runtime too, and
    sdtk's per-request adaptive draft length."""

    max_concurrency: int | None = Field(
        None, ge=1, description="Speculation off while more requests than this are in the batch."
    )
    draft_len_schedule: dict[int, int] | None = Field(
        None, description=SCHEDULE_DOC, json_schema_extra={"anyOf": SCHEDULE_JSON_FORMS}
    )
    acceptance_window: int | None = Field(
        None,
        ge=1,
        description="LLM API: completed requests in the rolling acceptance average that can turn "
        "speculation off for good (1.2: acceptance_window; 1.3: acceptance_rate_window_size). The "
        "reference runtime does not apply it.",
    )
    acceptance_length_threshold: float | None = Field(
        None,
        ge=0.0,
        description="TensorRT-LLM 1.2 only: speculation off once the rolling average acceptance LENGTH "
        "falls below this (needs acceptance_window).",
    )
    acceptance_rate_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="TensorRT-LLM 1.3 only: speculation off once the rolling acceptance RATE in [0, 1] "
        "falls below this (needs acceptance_window).",
    )
    use_rejection_sampling: bool | None = Field(
        None,
        description="TensorRT-LLM 1.3 only (prototype): rejection sampling instead of exact-match "
        "verification for non-greedy batches on one-model paths. Unset: upstream's default.",
    )
    llmapi_check: Literal["refuse", "warn"] = Field(
        "refuse",
        description="What sdtk build does when the rendered speculative_config fails the declared "
        "TensorRT-LLM version's stand-in (toolkit/build/llmapi_schema.py): refuse, or warn for a "
        "TensorRT-LLM build whose schema is known to differ.",
    )
    adaptive_draft_len: bool = Field(
        False,
        description="Reference backend: per request, shrink the draft length when the running "
        "acceptance falls and grow it back when drafts are fully accepted (sdtk, not upstream).",
    )

    @field_validator("draft_len_schedule", mode="before")
    @classmethod
    def _json_keys(cls, v: Any) -> Any:
        if isinstance(v, list):
            return _from_ranges(v)
        # JSON (the engine directory's config.json, --json reports) has only string keys: "1" -> 1.
        if isinstance(v, dict):
            return {int(k) if isinstance(k, str) and k.isdecimal() else k: x for k, x in v.items()}
        return v

    @model_validator(mode="after")
    def _schedule(self) -> LoadAware:
        if (self.acceptance_length_threshold is not None or self.acceptance_rate_threshold is not None) and (
            self.acceptance_window is None
        ):
            raise FieldError("acceptance_window", "is needed with an acceptance threshold")
        if self.acceptance_length_threshold is not None and self.acceptance_rate_threshold is not None:
            raise FieldError(
                "acceptance_rate_threshold",
                "TensorRT-LLM 1.2 takes acceptance_length_threshold and 1.3 acceptance_rate_threshold: set one",
            )
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
            ranges, last = [], 0
            for k in sorted(v):  # the map read as upper bounds (TensorRT-LLM 1.3's reading)
                ranges.append(f"{{max_batch: {k}, draft_len: {v[k]}}}")
                last = k
            raise FieldError(
                "draft_len_schedule",
                "a map's keys are the first batch size each draft length applies to and must include 1 "
                f"(add 1: {top}). Did you mean TensorRT-LLM 1.3's reading (keys as upper bounds)? Then "
                f"write ranges: [{', '.join(ranges)}] (batch {last + 1}+ -> off)",
            )
        if top is not None and v[1] != top:
            raise FieldError("draft_len_schedule", f"entry 1 must equal max_draft_len={top}, got {v[1]}")
        self.draft_len_schedule = dict(sorted(v.items()))
        return self

    def draft_len_at(self, batch: int) -> int | None:
        """sdtk's draft length at `batch` requests in the batch (None: no load-aware limit)."""
        return draft_len_at(self.draft_len_schedule, self.max_concurrency, batch)
