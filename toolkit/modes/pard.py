"""Mode `pard`: a parallel draft model (PARD, arXiv 2504.18583) reads the context plus k-1 mask
tokens and proposes k tokens in one forward; the target verifies them as a chain (TensorRT-LLM's
PyTorch-backend `PARDDecodingConfig`, decoding_type PARD, from 1.3.0rc7).

Upstream: AMD-AGI/PARD pard/pard_infer.py @8a0d2bd (inference), pard/pard_train.py (mask-token
training); NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/pard.py @051edeb (PARDWorker) and
tensorrt_llm/llmapi/llm_args.py @0004396 (PARDDecodingConfig). docs/methods.md, "PARD"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from toolkit.modes.core import (
    EngineArgs,
    Finding,
    LlmapiCall,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    Training,
    batched,
    no_support,
)
from toolkit.modes.load_aware import LoadAware

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

PARD = "pard"
# The first TensorRT-LLM release whose LLM API has decoding_type PARD (release notes of
# 1.3.0rc7, 2026-03-10: "Support PARD ... (#11438)").
PARD_SINCE = "1.3.0rc7"

INFO = ModeInfo(
    PARD,
    training=Training("draft", PARD),
    source="draft",  # a PARD checkpoint is a plain causal LM sharing the target's tokenizer
    # The served reference model speculates with the mode its engine directory was built for.
    decoding_mode="",
    chain=True,
    engine_name=None,
    llmapi_types=("PARD",),
    draft_len_rule="max_draft_len (k: the draft reads k-1 mask tokens after the context)",
    engine=no_support(
        "PARD is a PyTorch-backend feature of TensorRT-LLM's 1.3 line (supports_backend: pytorch only)",
        "use backend: llmapi with TensorRT-LLM >= 1.3.0rc7, or backend: reference on CPU",
    ),
    llmapi=Support(
        True, "speculative_config decoding_type PARD (one-model PARDWorker)", min_version=PARD_SINCE
    ),
    reference=batched("chain verification; the draft's one forward per step is batched too"),
    # The self-test's random Llama draft as the PARD draft; its mask token is the tokenizer's <pad>
    # (id 2, never a greedy choice: toolkit/selftest/checkpoints.py SPECIAL_TOKENS), given as
    # mask_token_id, which TensorRT-LLM reads before the draft's config.json pard_token.
    selftest=SelfTest(paths=("llmapi",), section=(("max_draft_len", 4), ("mask_token_id", 2))),
)


class Pard(LoadAware):
    """A parallel draft model proposes k tokens in one forward (context + k-1 mask tokens)."""

    mode: Literal["pard"]
    max_draft_len: int = Field(4, ge=1, le=64, description="Tokens proposed per step (k).")
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="The mask token id; default: the draft's config.json `pard_token` (or `mask_token_id`).",
    )

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = Pard


def triton_parameters(spec: Pard, backend: str, model: str) -> dict[str, str]:
    return {}


def serving_checks(spec: Pard, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: Pard, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: Pard, call: LlmapiCall) -> dict[str, Any] | None:
    out: dict[str, Any] = {
        "decoding_type": call.decoding_type,
        "max_draft_len": spec.max_draft_len,
        call.model_key: call.model,
    }
    if spec.mask_token_id is not None:
        out["mask_token_id"] = spec.mask_token_id
    return out


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return checks.draft_target(ctx)  # the same draft/target pairing checks (tokenizer, vocabulary)


def draft_forwards(draft_len: int) -> int:
    return 1  # one draft forward proposes all k tokens


def proposer(spec: Pard) -> ProposerFacts:
    return ProposerFacts()
