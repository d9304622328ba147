"""Mode `lookahead`: Jacobi lookahead decoding with a window W, n-gram size N and verification set
G (TensorRT-LLM `examples/lookahead/README.md`); no draft model, no heads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from toolkit.checks import FAILED, PASSED, Check
from toolkit.modes.core import (
    ENGINE_ONLY_FIX,
    LLM_MODEL,
    LOOKAHEAD,
    NO_DRAFT_MODEL_FIX,
    EngineArgs,
    Finding,
    LlmapiCall,
    LookaheadName,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    batched,
    no_support,
)
from toolkit.schema import FieldError, Strict

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

# Lookahead's (W, N, G) recipe fields, in that order.
LOOKAHEAD_FIELDS: tuple[str, str, str] = ("window", "ngram", "verification_set")

INFO = ModeInfo(
    LOOKAHEAD,
    source=None,
    instead_of_engine=f"use {NO_DRAFT_MODEL_FIX}, on backend llmapi",
    selftest=SelfTest(paths=("engine",), section=tuple(zip(LOOKAHEAD_FIELDS, (3, 3, 2), strict=True))),
    decoding_mode=LOOKAHEAD,
    chain=False,
    engine_name="lookahead_decoding",
    llmapi_types=(),
    draft_len_rule="(N-2 if N>1 else 0) + (W-1+G)*(N-1) from (window, ngram, verification_set)",
    engine=Support(True, "--speculative_decoding_mode lookahead_decoding with max_draft_len from (W,N,G)"),
    llmapi=no_support("the PyTorch backend has no Lookahead decoding (engine path only)", ENGINE_ONLY_FIX),
    reference=batched("verification and Jacobi branch (per-row masks); the n-gram pool per sequence"),
)


def lookahead_max_draft_len(window: int, ngram: int, verification_set: int) -> int:
    """TRT-LLM `examples/lookahead/README.md`: (0 if N==1 else N-2) + (W-1+G)*(N-1)."""
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification_set) * (ngram - 1)


class Lookahead(Strict):
    """Lookahead decoding: a Jacobi window W, n-gram size N and verification set G."""

    mode: LookaheadName
    window: int = Field(4, ge=1, le=64, description="W: lookahead window size.")
    ngram: int = Field(3, ge=1, le=16, description="N: n-gram size.")
    verification_set: int = Field(4, ge=0, le=64, description="G: n-grams verified per step.")
    max_draft_len: int | None = Field(
        None,
        ge=0,
        description="Engine `--max_draft_len`; must equal (N-2 if N>1 else 0)+(W-1+G)*(N-1) when given.",
    )

    @model_validator(mode="after")
    def _formula(self) -> Lookahead:
        need = self.draft_len
        if self.max_draft_len is not None and self.max_draft_len != need:
            raise FieldError(
                "max_draft_len",
                f"{self.max_draft_len} does not match (W={self.window}, N={self.ngram}, G={self.verification_set}): "
                f"(N-2 if N>1 else 0) + (W-1+G)*(N-1) = {need}; set max_draft_len: {need} or drop it",
            )
        return self

    @property
    def draft_len(self) -> int:
        return lookahead_max_draft_len(self.window, self.ngram, self.verification_set)


SPEC = Lookahead


def triton_parameters(spec: Lookahead, backend: str, model: str) -> dict[str, str]:
    if model != LLM_MODEL:
        return {}
    return {
        "lookahead_window_size": str(spec.window),
        "lookahead_ngram_size": str(spec.ngram),
        "lookahead_verification_set_size": str(spec.verification_set),
    }


def serving_checks(spec: Lookahead, backend: str, engine_draft_len: int | None) -> list[Finding]:
    need = spec.draft_len
    if backend == "engine" and engine_draft_len != need:
        return [
            Finding(
                f"build_config.max_draft_len is {engine_draft_len}, but lookahead (W={spec.window}, "
                f"N={spec.ngram}, G={spec.verification_set}) needs exactly {need}; the C++ backend would "
                f"fail at load (tensorrtllm_backend#710)",
                "rebuild the engine for these lookahead sizes",
                on_engine=True,
            )
        ]
    return []


def engine_args(spec: Lookahead, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: Lookahead, call: LlmapiCall) -> dict[str, Any] | None:
    raise AssertionError("lookahead has no llmapi form (compat refuses it)")


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return [check_draft_len(ctx.recipe.spec_as(Lookahead))]


def check_draft_len(spec: Lookahead) -> CheckResult:
    """The engine's --max_draft_len must equal the server's lookahead config (W, N, G)."""
    need = spec.draft_len
    if spec.max_draft_len is not None and spec.max_draft_len != need:
        return Check(
            "lookahead-draft-len",
            FAILED,
            f"speculative.max_draft_len {spec.max_draft_len} does not match (W={spec.window}, N={spec.ngram}, "
            f"G={spec.verification_set}): (N-2 if N>1 else 0) + (W-1+G)*(N-1) = {need}; the engine's "
            "--max_draft_len must equal the server's lookahead config",
            f"set speculative.max_draft_len: {need} or drop it",
        )
    return Check(
        "lookahead-draft-len",
        PASSED,
        f"max_draft_len {need} for (W,N,G)=({spec.window},{spec.ngram},{spec.verification_set})",
    )


def draft_forwards(draft_len: int) -> int:
    return 0  # the Jacobi branch rides in the target's own forward


def proposer(spec: Lookahead) -> ProposerFacts:
    return ProposerFacts(window=(spec.window, spec.ngram, spec.verification_set))
