"""Mode `ngram`: prompt lookup, proposing the continuation of an earlier match of the last tokens
(TensorRT-LLM's PyTorch-backend NGram drafter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from toolkit.modes.core import (
    NGRAM,
    EngineArgs,
    Finding,
    LlmapiCall,
    ModeInfo,
    NGramName,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    batched,
    no_support,
)
from toolkit.modes.load_aware import LoadAware

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

INFO = ModeInfo(
    NGRAM,
    source=None,
    selftest=SelfTest(paths=("llmapi",), section=(("max_draft_len", 4), ("max_matching_ngram_size", 3))),
    decoding_mode=NGRAM,
    chain=True,
    engine_name="ngram",
    llmapi_types=("NGram",),
    llmapi_disable_overlap=True,
    draft_len_rule="max_draft_len",
    engine=no_support(
        "NGram decoding is a PyTorch-backend feature (supports_backend: pytorch only)",
        "use backend: llmapi (TensorRT-LLM >= 1.0), or lookahead on the engine path",
    ),
    llmapi=Support(True, "speculative_config decoding_type NGram"),
    reference=batched("chain verification"),
)


class NGram(LoadAware):
    """Prompt lookup: propose the continuation of an earlier match of the last tokens."""

    mode: NGramName
    max_draft_len: int = Field(4, ge=1, le=256, description="Tokens proposed per step.")
    max_matching_ngram_size: int = Field(
        2, ge=1, le=32, description="Longest suffix matched against the context."
    )
    is_keep_all: bool = Field(
        True, description="TRT-LLM NGram pool: keep all candidates, not only the newest."
    )
    is_use_oldest: bool = Field(True, description="TRT-LLM NGram pool: prefer the oldest match.")
    is_public_pool: bool = Field(True, description="TRT-LLM NGram pool: share the pool across requests.")

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = NGram


def triton_parameters(spec: NGram, backend: str, model: str) -> dict[str, str]:
    return {}


def serving_checks(spec: NGram, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: NGram, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: NGram, call: LlmapiCall) -> dict[str, Any] | None:
    return {
        "decoding_type": call.decoding_type,
        "max_draft_len": spec.max_draft_len,
        "max_matching_ngram_size": spec.max_matching_ngram_size,
        "is_keep_all": spec.is_keep_all,
        "is_use_oldest": spec.is_use_oldest,
        "is_public_pool": spec.is_public_pool,
    }


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return []


def draft_forwards(draft_len: int) -> int:
    return 0  # looks tokens up: no model behind it


def proposer(spec: NGram) -> ProposerFacts:
    return ProposerFacts()
