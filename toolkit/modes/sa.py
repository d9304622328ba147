"""Mode `sa`: suffix-automaton speculation, model-free: the continuation of the first occurrence
of the longest repeated suffix of the request's prompt and output (TensorRT-LLM's PyTorch-backend
`SADecodingConfig`, decoding_type SA, the 1.3 line). Also the enhancer's options
(`SAEnhancerConfig`, `sa_config` on EAGLE-3 / MTP / PARD).

Upstream: NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @0004396 (SADecodingConfig,
SAEnhancerConfig); PR #11434 (SA), #12130 (global pool). docs/methods.md has the details."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from toolkit.modes.core import (
    EngineArgs,
    Finding,
    LlmapiCall,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    batched,
    no_support,
)
from toolkit.modes.load_aware import LoadAware
from toolkit.schema import FieldError, Strict

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

SA = "sa"
# The first TensorRT-LLM release whose LLM API has decoding_type SA: the 1.3.0rc line (PR #11434,
# reviewed 2026-02; the exact rc is unverified, 1.3.0rc27's API reference lists SADecodingConfig).
SA_SINCE = "1.3.0rc0"
# SADecodingConfig: with the global pool, max_matching_ngram_size is -1 or in [1, 64].
POOL_NGRAM_MAX = 64

INFO = ModeInfo(
    SA,
    source=None,
    # The reference backend's tensorrt_llm `decoding_mode` parameter: the served model speculates
    # with the mode its engine directory was built for when this names it.
    decoding_mode=SA,
    chain=True,
    engine_name=None,
    llmapi_types=("SA",),
    draft_len_rule="max_draft_len",
    engine=no_support(
        "SA decoding is a PyTorch-backend feature of TensorRT-LLM's 1.3 line (supports_backend: pytorch only)",
        "use backend: llmapi with TensorRT-LLM >= 1.3, or backend: reference on CPU",
    ),
    llmapi=Support(
        True, "speculative_config decoding_type SA (TensorRT-LLM's 1.3 line)", min_version=SA_SINCE
    ),
    reference=batched("chain verification"),
    # Model-free: the tiny target alone, the longest match (upstream's default) drafting 4 tokens.
    selftest=SelfTest(paths=("llmapi",), section=(("max_draft_len", 4),)),
)


class SAEnhancerConfig(Strict):
    """`sa_config` of a model drafter (TensorRT-LLM SAEnhancerConfig: exactly these two fields):
    SA's draft replaces the drafter's where its match is at least `threshold` tokens long."""

    threshold: int = Field(
        4, ge=1, description="Minimum suffix match length for SA's draft to replace the drafter's."
    )
    enable_global_pool: bool = Field(False, description="Also match other requests' automata.")


class SuffixAutomatonSpec(LoadAware):
    """Suffix automaton: propose the continuation of the longest earlier match of the text's suffix."""

    mode: Literal["sa"]
    max_draft_len: int = Field(4, ge=1, le=256, description="Tokens proposed per step.")
    max_matching_ngram_size: int = Field(
        -1,
        ge=-1,
        le=1024,
        description="-1: the longest match; N > 0: match at most the last N tokens. 0 is invalid.",
    )
    enable_global_pool: bool = Field(
        False, description="Also match the automata of other requests (active, and recently completed)."
    )
    global_pool_size: int | None = Field(
        None,
        ge=1,
        description="Automata kept in the global pool; default max(64, max_batch_size). Needs enable_global_pool.",
    )

    @model_validator(mode="after")
    def _upstream_rules(self) -> SuffixAutomatonSpec:
        """SADecodingConfig.validate_sa_config's rules, with its messages' meaning."""
        n = self.max_matching_ngram_size
        if n == 0:
            raise FieldError(
                "max_matching_ngram_size", "must be > 0 (fixed n-gram) or -1 (longest match), got 0"
            )
        if self.enable_global_pool and n > POOL_NGRAM_MAX:
            raise FieldError(
                "max_matching_ngram_size",
                f"must be -1 (longest match) or in [1, {POOL_NGRAM_MAX}] when enable_global_pool is true, got {n}",
            )
        if self.global_pool_size is not None and not self.enable_global_pool:
            raise FieldError("global_pool_size", "requires enable_global_pool: true")
        return self

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = SuffixAutomatonSpec


def triton_parameters(spec: SuffixAutomatonSpec, backend: str, model: str) -> dict[str, str]:
    return {}


def serving_checks(spec: SuffixAutomatonSpec, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: SuffixAutomatonSpec, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: SuffixAutomatonSpec, call: LlmapiCall) -> dict[str, Any] | None:
    """SADecodingConfig's keys; upstream's defaults (-1, false, unset) are left out, as a schema
    that forbids extra keys accepts them either way."""
    out: dict[str, Any] = {"decoding_type": call.decoding_type, "max_draft_len": spec.max_draft_len}
    if spec.max_matching_ngram_size != -1:
        out["max_matching_ngram_size"] = spec.max_matching_ngram_size
    if spec.enable_global_pool:
        out["enable_global_pool"] = True
        if spec.global_pool_size is not None:
            out["global_pool_size"] = spec.global_pool_size
    return out


def enhancer_config(sa_config: SAEnhancerConfig) -> dict[str, Any]:
    """The `sa_config` value of a model drafter's speculative_config (1.3.0rc27 and later)."""
    return {"threshold": sa_config.threshold, "enable_global_pool": sa_config.enable_global_pool}


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return []


def draft_forwards(draft_len: int) -> int:
    return 0  # walks an automaton: no model behind it


# What `tune` tries besides the draft length: the longest match (upstream's default), and matches
# capped at N tokens (N = 3 is n-gram's shipped window; docs/methods.md, "SA against n-gram").
MATCH_SIZES = (-1, 3, 8)
# The enhancer's threshold (match length at which SA's draft replaces the drafter's): tune's values.
THRESHOLDS = (2, 4, 8)


def proposer(spec: SuffixAutomatonSpec) -> ProposerFacts:
    return ProposerFacts(knob=("max_matching_ngram_size", MATCH_SIZES))
