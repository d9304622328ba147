"""Mode `draft_target`: a separate small draft model proposes γ tokens that the target verifies
(Leviathan et al.; Chen et al.). On Triton the tensorrt_llm_bls loop drives the two models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from toolkit.modes.core import (
    BLS_MODEL,
    DRAFT_TARGET,
    DraftTargetName,
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
    triton_bool,
)
from toolkit.modes.load_aware import LoadAware

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

# A draft stored without its tied embedding: config.json sets this key to true, the weight file holds
# the decoder layers and the final norm, and every loader takes the embedding (which is also the LM
# head) from the target the draft serves (toolkit.reference.draft_target.load_draft_lm; a reference
# build records the target in the draft's engine directory). For a small draft of a large-vocabulary
# target the embedding is most of the bytes (SmolLM2-135M: 28.3 M of a 2-layer draft's 35.4 M
# parameters). Such a draft loads only next to its target: the reference backend, not TensorRT-LLM.
EMBEDDING_FROM_TARGET = "sdtk_embedding_from_target"
EMBEDDING_KEY = "model.embed_tokens.weight"  # Llama-style checkpoints' key
EMBEDDING_KEYS = frozenset({EMBEDDING_KEY, "lm_head.weight"})  # what such a draft does not store

INFO = ModeInfo(
    DRAFT_TARGET,
    training=Training("draft", "draft"),
    source="draft",
    instead_of_engine="use backend: llmapi (decoding_type DraftTarget), with the same draft model",
    selftest=SelfTest(paths=("engine", "llmapi"), section=(("max_draft_len", 4),)),
    two_model=True,
    decoding_mode="",
    engine_build_args=("--use_paged_context_fmha", "enable"),  # examples/draft_target_model
    chain=True,
    engine_name="draft_tokens_external",
    llmapi_types=("DraftTarget",),
    llmapi_disable_overlap=True,
    draft_len_rule="max_draft_len (γ)",
    engine=Support(
        True,
        "two engines: the target with draft_tokens_external, served through the tensorrt_llm_bls loop",
    ),
    llmapi=Support(True, "speculative_config decoding_type DraftTarget (two-model)"),
    reference=batched("target verification (BLS draft_input_ids) and the draft model's steps"),
)


class DraftTarget(LoadAware):
    """A separate small draft model proposes tokens that the target verifies (Leviathan/Chen)."""

    mode: DraftTargetName
    max_draft_len: int = Field(4, ge=1, le=256, description="Draft tokens proposed per step (γ).")
    use_draft_logits: bool = Field(
        False,
        description="Engine path: pass draft logits for probabilistic acceptance (needs generation logits).",
    )

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = DraftTarget


def draft_logits(spec: DraftTarget, backend: str) -> bool:
    """Whether the deployment passes draft logits (engine only: trtllm-build
    --gather_generation_logits on both engines, the BLS's use_draft_logits)."""
    return backend == "engine" and spec.use_draft_logits


def triton_parameters(spec: DraftTarget, backend: str, model: str) -> dict[str, str]:
    if model != BLS_MODEL:
        return {}
    return {
        "default_num_draft_tokens": str(spec.max_draft_len),
        "default_use_draft_logits": triton_bool(draft_logits(spec, backend)),
    }


def serving_checks(spec: DraftTarget, backend: str, engine_draft_len: int | None) -> list[Finding]:
    out = []
    if backend == "engine" and engine_draft_len is not None and engine_draft_len < spec.max_draft_len:
        out.append(
            Finding(
                f"the target engine accepts at most {engine_draft_len} draft tokens "
                f"(build_config.max_draft_len), fewer than speculative.max_draft_len {spec.max_draft_len} "
                "(tensorrtllm_backend#473)",
                "rebuild the target with --max_draft_len ≥ speculative.max_draft_len, or lower it",
                on_engine=True,
            )
        )
    if backend == "reference" and spec.use_draft_logits:
        out.append(
            Finding(
                "speculative.use_draft_logits is ignored on the reference backend: its verification needs "
                "no draft logits",
                fatal=False,
            )
        )
    return out


def engine_args(spec: DraftTarget, ctx: BuildContext, role: str) -> EngineArgs:
    # Draft logits for acceptance: both engines gather generation logits.
    return EngineArgs(build=("--gather_generation_logits",) if spec.use_draft_logits else ())


def llmapi_config(spec: DraftTarget, call: LlmapiCall) -> dict[str, Any] | None:
    return {
        "decoding_type": call.decoding_type,
        "max_draft_len": spec.max_draft_len,
        call.model_key: call.model,
    }


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return checks.draft_target(ctx)


def draft_forwards(draft_len: int) -> int:
    return draft_len  # the draft model runs once per proposed token


def proposer(spec: DraftTarget) -> ProposerFacts:
    return ProposerFacts()
