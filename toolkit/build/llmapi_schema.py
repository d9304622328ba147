"""Stand-ins for TensorRT-LLM's own check of `speculative_config`, per release line.

TensorRT-LLM cannot be installed here (no GPU, no wheel for this platform), so `LLM(**args)`'s
argument check cannot run. These closed pydantic models transcribe the decoding configs of
NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` (field names, types, bounds, the validators
that reject a config, and the exclusivity rules), one set per release line. They are a stand-in: they
accept what upstream's models accept as far as the transcription goes, and `UNVERIFIED` lists what
could not be pinned to a release. `validate(version, speculative_config)` is run on every rendered
YAML by `sdtk build` (preflight `llmapi-fields`) and by the tests, as `model_config_pb2` parses every
rendered config.pbtxt.

Sources (read 2026-12-07; the file at the release tags could not be read here: the TensorRT-LLM
snapshot is over the 500 MiB fetch limit, so each line names the state it was transcribed from):
- 1.2 line: an undated `llm_args.py` from before PR #10860 (lower-bound draft_len_schedule,
  `acceptance_window` / `acceptance_length_threshold`, `Eagle3DecodingConfig(EagleDecodingConfig)`
  with `eagle3_one_model`, `MTPDecodingConfig.num_nextn_predict_layers`, PARD), the state of the 1.2.x release line; that the
  1.2.1 tag has exactly it: UNVERIFIED.
- 1.3 line: NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @0004396 (and the 1.3.0rc27 API pages):
  upper-bound draft_len_schedule (PR #10860, merged 2026-03-13), `max_concurrency` and
  `draft_len_schedule` mutually exclusive, cut-offs `acceptance_rate_window_size` /
  `acceptance_rate_threshold` in [0, 1], `use_rejection_sampling`, SA (standalone, and the
  `sa_config: SAEnhancerConfig` enhancer on Eagle3 / MTP / PARD), PARD, DFlash, DSpark, AUTO; no
  Medusa or Lookahead; `Eagle3DecodingConfig` without `eagle3_one_model` (1.3.0rc27 API page).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

LINES = ("1.2", "1.3")


class _Upstream(BaseModel):
    # upstream: `class StrictBaseModel(BaseModel): model_config = ConfigDict(extra="forbid")`
    model_config = ConfigDict(extra="forbid")


def _check_values(v: dict[int, int], top: int | None) -> None:
    for batch, length in v.items():
        if batch < 1:
            raise ValueError(f"draft_len_schedule: batch size threshold must be >= 1, got {batch}")
        if length < 0:
            raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {length}")
        if top is not None and length > top:
            raise ValueError(
                f"draft_len_schedule: all draft lengths must be <= max_draft_len. Got draft_len={length} "
                f"for batch_size={batch}, but max_draft_len={top}."
            )


# ----------------------------------------------------------------------------------------- 1.2 line


class _BaseFields(_Upstream):
    """The `DecodingBaseConfig` fields and draft_len_schedule check both lines share; each line's base
    adds its own fields and `_schedule_first` (which key must map to max_draft_len)."""

    max_draft_len: NonNegativeInt | None = None
    max_total_draft_tokens: int | None = None
    speculative_model: str | None = Field(
        None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir")
    )
    max_concurrency: NonNegativeInt | None = None
    draft_len_schedule: dict[int, int] | None = None
    load_format: str | None = None

    @staticmethod
    def _schedule_first(v: dict[int, int], top: int | None) -> None:
        raise NotImplementedError

    @field_validator("draft_len_schedule")
    @classmethod
    def _schedule(cls, v: dict[int, int] | None, info: Any) -> dict[int, int] | None:
        if v is None:
            return v
        top = info.data.get("max_draft_len")
        _check_values(v, top)
        cls._schedule_first(v, top)
        return dict(sorted(v.items()))


class Base12(_BaseFields):
    """`DecodingBaseConfig`, 1.2 line (pre-PR #10860)."""

    acceptance_window: NonNegativeInt | None = None
    acceptance_length_threshold: NonNegativeFloat | None = None
    allow_advanced_sampling: bool = False

    @staticmethod
    def _schedule_first(v: dict[int, int], top: int | None) -> None:
        # validate_draft_len_schedule_and_sort: keys are lower bounds ("batch_size >= 4 uses ...").
        if 1 not in v:
            raise ValueError("draft_len_schedule must include batch_size=1")
        if top is not None and v[1] != top:
            raise ValueError(
                f"draft_len_schedule[1] must equal max_draft_len. Got {v[1]}, max_draft_len={top}"
            )


def _positive_draft(m: Any, what: str) -> None:
    if m.max_draft_len is None or m.max_draft_len <= 0:
        raise ValueError(f"max_draft_len must be > 0 for {what}")


def _eagle_checks(m: Any) -> None:
    _positive_draft(m, "Eagle")
    if m.speculative_model is None:
        raise ValueError("Draft model must be provided for EAGLE")
    if m.eagle_choices is not None and m.use_dynamic_tree:
        raise ValueError("If eagle_choices is provided, use_dynamic_tree should be False")
    if m.use_dynamic_tree:
        if m.dynamic_tree_max_topK is None or m.dynamic_tree_max_topK <= 0:
            raise ValueError("dynamic_tree_max_topK should be provided")
        total = m.max_total_draft_tokens
        if total is not None and not (m.max_draft_len <= total <= m.dynamic_tree_max_topK * m.max_draft_len):
            raise ValueError(
                f"max_total_draft_tokens ({total}) must lie in [max_draft_len, dynamic_tree_max_topK * max_draft_len]"
            )


# The decoding configs both lines declare alike. Each is listed before its line's base
# (`class NGram12(_NGram, Base12)`) so that, as upstream, the base's fields and validators come first.


class _NGram(_Upstream):
    decoding_type: Literal["NGram"] = "NGram"
    max_matching_ngram_size: PositiveInt = 2
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    @model_validator(mode="after")
    def _ngram(self) -> Any:
        _positive_draft(self, "NGram")
        return self


class _DraftTarget(_Upstream):
    decoding_type: Literal["Draft_Target"] = "Draft_Target"

    @model_validator(mode="after")
    def _dt(self) -> Any:
        _positive_draft(self, "DraftTarget")
        if getattr(self, "speculative_model", None) is None:
            raise ValueError("speculative_model must be specified for DraftTarget")
        return self


class _SaveState(_Upstream):
    decoding_type: Literal["SaveState"] = "SaveState"
    output_directory: str
    write_interval: int = 20
    file_prefix: str = "data"
    eagle3_layers_to_capture: set[int] | None = None


class _Auto(_Upstream):
    decoding_type: Literal["AUTO"] = "AUTO"


class _EagleFields(_Upstream):
    eagle_choices: list[list[int]] | None = None
    greedy_sampling: bool | None = True
    posterior_threshold: float | None = None
    use_dynamic_tree: bool | None = False
    dynamic_tree_max_topK: int | None = None
    num_eagle_layers: int | None = None
    max_non_leaves_per_layer: int | None = None
    eagle3_layers_to_capture: set[int] | None = None
    eagle3_model_arch: Literal["llama3", "mistral_large3"] = "llama3"


class Eagle12(Base12, _EagleFields):
    decoding_type: Literal["Eagle"] = "Eagle"
    eagle3_one_model: bool | None = True

    @model_validator(mode="after")
    def _eagle(self) -> Eagle12:
        _eagle_checks(self)
        return self


class Eagle3_12(Eagle12):  # noqa: N801 - upstream's name with the line appended
    decoding_type: Literal["Eagle3"] = "Eagle3"  # type: ignore[assignment]


class NGram12(_NGram, Base12):
    pass


class DraftTarget12(_DraftTarget, Base12):
    pass


class MTP12(Base12):
    decoding_type: Literal["MTP"] = "MTP"
    num_nextn_predict_layers: PositiveInt = 1
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: int = 1
    relaxed_delta: float = 0.0
    use_mtp_vanilla: bool = False
    mtp_eagle_one_model: bool = True
    begin_thinking_phase_token: int = 128798
    end_thinking_phase_token: int = 128799


class PARD12(Base12):
    decoding_type: Literal["PARD"] = "PARD"
    mask_token_id: int | None = None


class SaveState12(_SaveState, Base12):
    pass


class Auto12(_Auto, Base12):
    pass


# ----------------------------------------------------------------------------------------- 1.3 line


class SAEnhancerConfig(_Upstream):
    """`sa_config` on Eagle3 / MTP / PARD (status beta): SA drafts override the neural ones when the
    suffix match is at least `threshold` tokens long."""

    threshold: PositiveInt = 4
    enable_global_pool: bool = False


class Base13(_BaseFields):
    """`DecodingBaseConfig`, 1.3 line (@0004396)."""

    max_concurrency: PositiveInt | None = None
    acceptance_rate_window_size: NonNegativeInt | None = None
    acceptance_rate_threshold: float | None = Field(None, ge=0.0, le=1.0)
    use_rejection_sampling: bool = False
    allow_advanced_sampling: bool = False  # deprecated no-op (warns)

    @staticmethod
    def _schedule_first(v: dict[int, int], top: int | None) -> None:
        # PR #10860: keys are upper bounds ({4: 4, 8: 2, 32: 1}: 1-4 -> 4, 5-8 -> 2, 9-32 -> 1,
        # 33+ -> 0); the smallest key maps to max_draft_len.
        smallest = min(v)
        if top is not None and v[smallest] != top:
            raise ValueError(
                f"draft_len_schedule[{smallest}] must equal max_draft_len because it is the smallest "
                f"batch-size key. Got {v[smallest]}, max_draft_len={top}."
            )

    @model_validator(mode="after")
    def _exclusive(self) -> Base13:
        if self.max_concurrency is not None and self.draft_len_schedule is not None:
            raise ValueError("max_concurrency and draft_len_schedule are mutually exclusive")
        if self.use_rejection_sampling and getattr(self, "sa_config", None) is not None:
            # An explicit True with sa_config is kept by validate_rejection_sampling_config so that
            # TorchLlmArgs.validate_speculative_config rejects the combination (its docstring, llm_args.py @0004396).
            raise ValueError("use_rejection_sampling cannot be combined with sa_config")
        return self


class Eagle3_13(Base13, _EagleFields):  # noqa: N801
    decoding_type: Literal["Eagle3"] = "Eagle3"
    sa_config: SAEnhancerConfig | None = None

    @model_validator(mode="after")
    def _eagle(self) -> Eagle3_13:
        _eagle_checks(self)
        return self


class NGram13(_NGram, Base13):
    pass


class SA13(Base13):
    """Standalone suffix-automaton drafting (PR #11434)."""

    decoding_type: Literal["SA"] = "SA"
    max_matching_ngram_size: int = -1
    enable_global_pool: bool = False
    global_pool_size: PositiveInt | None = None

    @model_validator(mode="after")
    def _sa(self) -> SA13:
        n = self.max_matching_ngram_size
        if n == 0:
            raise ValueError(
                "max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match). Got 0."
            )
        if self.enable_global_pool and n != -1 and not 1 <= n <= 64:
            raise ValueError(
                "max_matching_ngram_size must be -1 or in [1, 64] when enable_global_pool is True"
            )
        _positive_draft(self, "SA")
        if self.global_pool_size is not None and not self.enable_global_pool:
            raise ValueError("global_pool_size requires enable_global_pool=True")
        return self


class DraftTarget13(_DraftTarget, Base13):
    pass


class MTP13(Base13):
    decoding_type: Literal["MTP"] = "MTP"
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: PositiveInt = 1
    relaxed_delta: NonNegativeFloat = 0.0
    use_mtp_vanilla: bool = False
    mtp_eagle_one_model: bool = True  # False is ignored with a warning
    use_dynamic_tree: bool = False
    dynamic_tree_max_topK: int | None = None
    sa_config: SAEnhancerConfig | None = None
    begin_thinking_phase_token: NonNegativeInt = 128798
    end_thinking_phase_token: NonNegativeInt = 128799

    @model_validator(mode="before")
    @classmethod
    def _remap(cls, data: Any) -> Any:
        # num_nextn_predict_layers is deprecated: remapped to max_draft_len (with a warning).
        if isinstance(data, dict) and "num_nextn_predict_layers" in data:
            data = dict(data)
            n = data.pop("num_nextn_predict_layers")
            data.setdefault("max_draft_len", n)
        return data

    @model_validator(mode="after")
    def _mtp(self) -> MTP13:
        if self.max_draft_len is not None and self.max_draft_len <= 0:
            raise ValueError("max_draft_len must be > 0 for MTP")
        return self


class PARD13(Base13):
    decoding_type: Literal["PARD"] = "PARD"
    mask_token_id: int | None = None
    sa_config: SAEnhancerConfig | None = None


class DFlash13(Base13):
    decoding_type: Literal["DFlash"] = "DFlash"
    mask_token_id: int | None = None
    target_layer_ids: list[int] | None = None


class DSpark13(Base13):
    """Only the base fields: DSpark's own fields could not be read (UNVERIFIED)."""

    decoding_type: Literal["DSpark"] = "DSpark"


class SaveState13(_SaveState, Base13):
    pass


class Auto13(_Auto, Base13):
    pass


# ---------------------------------------------------------------------------------- per line facts

ScheduleReader = Callable[[dict[int, int], int], int]


def read_lower_bounds(schedule: dict[int, int], batch: int) -> int:
    """1.2 line (Drafter.get_draft_len_for_batch_size before PR #10860): the entry of the largest
    key <= batch."""
    fits = [k for k in schedule if k <= batch]
    return schedule[max(fits)] if fits else 0


def read_upper_bounds(schedule: dict[int, int], batch: int) -> int:
    """1.3 line (PR #10860): the entry of the smallest key >= batch; above the largest key, 0."""
    fits = [k for k in schedule if k >= batch]
    return schedule[min(fits)] if fits else 0


@dataclass(frozen=True)
class Line:
    """One release line's stand-in."""

    name: str
    types: dict[str, type[BaseModel]]  # YAML decoding_type -> model (aliases included)
    aliases: dict[str, str]  # accepted spelling -> the canonical Literal
    read_schedule: ScheduleReader
    schedule_keys: str  # "lower bounds" | "upper bounds"
    exclusive_limit: bool  # max_concurrency and draft_len_schedule mutually exclusive
    cutoffs: tuple[str, str]  # (window, threshold) field names
    eagle3_one_model: bool  # Eagle3DecodingConfig declares it
    serve_flag: str  # trtllm-serve's preferred options-file flag
    engine_only: tuple[str, ...]  # decoding types llm_args.py declares only for the TensorRT backend
    source: str
    unverified: tuple[str, ...]

    def field_names(self, decoding_type: str) -> set[str]:
        model = self.types[self.aliases.get(decoding_type, decoding_type)]
        names: set[str] = set()
        for name, f in model.model_fields.items():
            alias = f.validation_alias
            names |= {str(c) for c in alias.choices} if isinstance(alias, AliasChoices) else {name}
        if model is MTP13:
            names.add("num_nextn_predict_layers")
        return names


_DT_ALIAS = {"DraftTarget": "Draft_Target"}  # the documented YAML spelling (docs speculative-decoding.md)

LINE_1_2 = Line(
    "1.2",
    {
        "Eagle": Eagle12,
        "Eagle3": Eagle3_12,
        "NGram": NGram12,
        "Draft_Target": DraftTarget12,
        "MTP": MTP12,
        "PARD": PARD12,
        "SaveState": SaveState12,
        "AUTO": Auto12,
    },
    _DT_ALIAS,
    read_lower_bounds,
    "lower bounds",
    False,
    ("acceptance_window", "acceptance_length_threshold"),
    True,
    "--extra_llm_api_options",
    ("Medusa", "Lookahead"),
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, 1.2-era state before PR #10860 (commit not "
    "pinned to the v1.2.1 tag)",
    (
        "the v1.2.1 tag's llm_args.py was not read: transcribed from a pre-PR-#10860 state of the file",
        "draft_len_schedule keys as lower bounds in 1.2.x (PR #10860, upper bounds, merged 2026-03-13 on "
        "main; whether a 1.2.x release took it is not known): sdtk renders a schedule that reads the same "
        "under both rules",
        "whether max_concurrency and draft_len_schedule are exclusive in 1.2.x: sdtk never writes both",
        "PARD in 1.2.x (release notes date it to 1.3.0rc7)",
        "trtllm-serve --config in 1.2.x (PR #9104): sdtk writes --extra_llm_api_options, accepted by every "
        "version",
    ),
)

LINE_1_3 = Line(
    "1.3",
    {
        "Eagle3": Eagle3_13,
        "Eagle": Eagle3_13,  # converted to Eagle3 with a warning
        "NGram": NGram13,
        "SA": SA13,
        "Draft_Target": DraftTarget13,
        "MTP": MTP13,
        "PARD": PARD13,
        "DFlash": DFlash13,
        "DSpark": DSpark13,
        "SaveState": SaveState13,
        "AUTO": Auto13,
    },
    _DT_ALIAS,
    read_upper_bounds,
    "upper bounds",
    True,
    ("acceptance_rate_window_size", "acceptance_rate_threshold"),
    False,
    "--config",
    (),
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @0004396 (1.3.0rc line); Eagle3 fields as on the "
    "1.3.0rc27 API page",
    (
        "whether a final 1.3.0 exists, and which 1.3.0rc first has each fact",
        "the cut-off names acceptance_rate_window_size / acceptance_rate_threshold (an earlier 1.3-line "
        "llm_args.py still names them acceptance_window / acceptance_length_threshold)",
        "Eagle3DecodingConfig without eagle3_one_model (1.3.0rc27 API page; earlier 1.3.0rcs declare it)",
        "DSpark's own fields (only the base fields are transcribed)",
        "sa_config (SAEnhancerConfig) rather than the flat use_sa_spec / sa_spec_threshold of early SA builds",
        "the llmapi config.pbtxt's lora_* and image_url inputs (PRs #14079, #18381)",
    ),
)


def line(version: str | None) -> Line | None:
    """The stand-in for TensorRT-LLM `version` (None: the newest line); None below 1.2 (the 1.0 / 1.1
    option names are checked against tests/contracts/trtllm-1.{0,1}.json)."""
    if version is None:
        return LINE_1_3
    try:
        v = Version(version)
    except InvalidVersion:
        return LINE_1_3
    if v.release < (1, 2):
        return None
    return LINE_1_2 if v.release < (1, 3) else LINE_1_3


class StandinError(ValueError):
    """A speculative_config the version's stand-in refuses: `problems` as (dotted field, message)."""

    def __init__(self, line_name: str, problems: list[tuple[str, str]]):
        self.problems = problems
        text = "; ".join(f"speculative_config.{f}: {m}" if f else m for f, m in problems)
        super().__init__(f"TensorRT-LLM {line_name} stand-in: {text}")


def validate(version: str | None, config: dict[str, Any]) -> BaseModel | None:
    """Parse `config` (a rendered speculative_config) as TensorRT-LLM `version` would; raise
    StandinError naming each refused field. None where there is no stand-in (below 1.2)."""
    ln = line(version)
    if ln is None:
        return None
    kind = config.get("decoding_type")
    if kind in ln.engine_only:
        raise StandinError(
            ln.name, [("decoding_type", f"{kind} is declared only for the TensorRT engine backend")]
        )
    canonical = ln.aliases.get(str(kind), str(kind))
    model = ln.types.get(canonical)
    if model is None:
        known = sorted({*ln.types, *ln.aliases})
        raise StandinError(ln.name, [("decoding_type", f"{kind!r} is not one of {', '.join(known)}")])
    # upstream maps an accepted alias (DraftTarget, Eagle on 1.3) onto the class's own Literal
    data = {**config, "decoding_type": model.model_fields["decoding_type"].default}
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"not a field of {re.sub(r'_?1[23]$', '', model.__name__)}DecodingConfig in {ln.name}"
            problems.append((where, msg))
        raise StandinError(ln.name, problems) from None
