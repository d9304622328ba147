"""Mode `eagle3`: EAGLE-3 (llmapi and reference), a head on fused low/mid/high target features
that drafts a chain by default, or a static tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from toolkit import trees as tree
from toolkit.modes.core import (
    EAGLE,
    EAGLE3,
    LLM_MODEL,
    Eagle3Name,
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
from toolkit.modes.medusa import check_tree
from toolkit.modes.sa import THRESHOLDS, SAEnhancerConfig, enhancer_config
from toolkit.schema import FieldError

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

INFO = ModeInfo(
    EAGLE3,
    training=Training("eagle_head", EAGLE3),
    source="eagle_head",
    selftest=SelfTest(paths=("llmapi",), section=(("max_draft_len", 3),), capture_key="layers_to_capture"),
    modelopt_mode="eagle",  # modelopt/torch/speculative: its eagle mode trains EAGLE-3 heads
    decoding_mode=EAGLE3,
    engine_decoding_mode=EAGLE,
    chain=True,
    engine_name="eagle3",
    # Accepted spellings: "Eagle3" (1.2+) and "Eagle" (1.0/1.1-era llm_args.py from_dict, kept as an
    # alias later: NVIDIA/TensorRT-LLM llm_args.py, PR #10124). Which one: toolkit.build.llmapi.schema_for.
    llmapi_types=("Eagle3", "Eagle"),
    llmapi_fields_since_1_1=(
        "eagle_choices",
        "use_dynamic_tree",
        "max_total_draft_tokens",
        "layers_to_capture",
    ),
    draft_len_rule="len(eagle_choices) for a static tree, else max_total_draft_tokens or max_draft_len",
    engine=no_support(
        "EAGLE-3 exists only in the PyTorch backend (_torch/speculative/eagle3.py)",
        "use backend: llmapi (TensorRT-LLM >= 1.0) or backend: reference",
    ),
    llmapi=Support(
        True,
        # No decoding_type here: it depends on the version (Eagle up to 1.1, Eagle3 from 1.2), and
        # toolkit.build.llmapi.schema_for names it where the plan is written, as the YAML does.
        "speculative_config (EAGLE-3); verified pairs include Llama-3.1-8B, Llama-4 Maverick, gpt-oss, Qwen3",
    ),
    reference=batched(
        "chain and static-tree verification (per-row tree masks); the head drafts per sequence"
    ),
)


class Eagle3(LoadAware):
    """EAGLE-3 (llmapi path): fused low/mid/high features, chain by default, optional tree."""

    mode: Eagle3Name
    max_draft_len: int = Field(3, ge=1, le=64, description="Draft depth per step (chain length).")
    eagle_choices: list[list[int]] | None = Field(None, description="Static tree; default: a chain.")
    use_dynamic_tree: bool = Field(False, description="TRT-LLM dynamic tree (`dynamic_tree_max_topK`).")
    dynamic_tree_max_top_k: int | None = Field(None, ge=1, description="Dynamic-tree expansion top-k.")
    max_total_draft_tokens: int | None = Field(
        None,
        ge=1,
        description="Tree size budget; max_draft_len ≤ it ≤ top_k*max_draft_len for dynamic trees.",
    )
    eagle3_one_model: bool = Field(
        True,
        description="TRT-LLM one-model EAGLE-3 (default and faster). Written up to TensorRT-LLM 1.2; the 1.3 "
        "line has no such field (two-model path removed), so it is left out there and `false` is refused.",
    )
    sa_config: SAEnhancerConfig | None = Field(
        None,
        description="The suffix-automaton enhancer (TensorRT-LLM SAEnhancerConfig, 1.3 line): where the "
        "request's text repeats a suffix at least `threshold` tokens long, SA's draft replaces the head's.",
    )
    layers_to_capture: list[int] | None = Field(
        None,
        description="Target layers whose outputs feed the head (TRT-LLM/ModelOpt convention: outputs of "
        "{1, L//2-1, L-4}); default: read from the head's config.",
    )

    @model_validator(mode="after")
    def _tree(self) -> Eagle3:
        check_tree(self.eagle_choices, "eagle_choices")
        if self.eagle_choices is not None:
            if self.use_dynamic_tree:
                raise FieldError(
                    "eagle_choices", "is a static tree; it cannot be combined with use_dynamic_tree"
                )
            if tree.depth(self.eagle_choices) > self.max_draft_len:
                raise FieldError(
                    "eagle_choices",
                    f"tree depth {tree.depth(self.eagle_choices)} exceeds max_draft_len={self.max_draft_len}",
                )
            if (
                self.max_total_draft_tokens is not None
                and len(self.eagle_choices) > self.max_total_draft_tokens
            ):
                raise FieldError(
                    "eagle_choices",
                    f"{len(self.eagle_choices)} nodes exceed max_total_draft_tokens={self.max_total_draft_tokens}",
                )
        if self.use_dynamic_tree:
            if self.dynamic_tree_max_top_k is None:
                raise FieldError("dynamic_tree_max_top_k", "is required when use_dynamic_tree is true")
            total = self.max_total_draft_tokens
            hi = self.dynamic_tree_max_top_k * self.max_draft_len
            if total is not None and not (self.max_draft_len <= total <= hi):
                raise FieldError(
                    "max_total_draft_tokens",
                    f"{total} must lie in [max_draft_len, top_k*max_draft_len] = [{self.max_draft_len}, {hi}]",
                )
        elif self.dynamic_tree_max_top_k is not None:
            raise FieldError("dynamic_tree_max_top_k", "applies only with use_dynamic_tree: true")
        if self.adaptive_draft_len and (self.eagle_choices is not None or self.use_dynamic_tree):
            raise FieldError("adaptive_draft_len", "applies to a chain (no eagle_choices, no dynamic tree)")
        if self.layers_to_capture is not None:
            if len(self.layers_to_capture) != 3 or len(set(self.layers_to_capture)) != 3:
                raise FieldError("layers_to_capture", "needs three distinct layer ids (low, mid, high)")
            if min(self.layers_to_capture) < 0:
                raise FieldError("layers_to_capture", "layer ids must be ≥ 0")
        return self

    @property
    def draft_len(self) -> int:
        if self.eagle_choices is not None:
            return len(self.eagle_choices)
        return self.max_total_draft_tokens or self.max_draft_len


SPEC = Eagle3


def triton_parameters(spec: Eagle3, backend: str, model: str) -> dict[str, str]:
    if model != LLM_MODEL:
        return {}
    return {"eagle_choices": tree.to_triton_string(spec.eagle_choices) if spec.eagle_choices else ""}


def serving_checks(spec: Eagle3, backend: str, engine_draft_len: int | None) -> list[Finding]:
    if backend == "reference" and spec.use_dynamic_tree:
        return [
            Finding(
                "the reference runtime does not implement EAGLE-3 dynamic trees",
                "use a static tree (speculative.eagle_choices) or the default chain",
            )
        ]
    return []


def engine_args(spec: Eagle3, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: Eagle3, call: LlmapiCall) -> dict[str, Any] | None:
    cfg: dict[str, Any] = {
        "decoding_type": call.decoding_type,
        "max_draft_len": spec.max_draft_len,
        call.model_key: call.model,
        "eagle3_one_model": spec.eagle3_one_model,
    }
    if spec.eagle_choices is not None:
        cfg["eagle_choices"] = spec.eagle_choices
    if spec.use_dynamic_tree:
        cfg["use_dynamic_tree"] = True
        cfg["dynamic_tree_max_topK"] = spec.dynamic_tree_max_top_k
    if spec.max_total_draft_tokens is not None:
        cfg["max_total_draft_tokens"] = spec.max_total_draft_tokens
    if spec.layers_to_capture is not None:
        cfg["eagle3_layers_to_capture"] = sorted(spec.layers_to_capture)
    if spec.sa_config is not None:
        cfg["sa_config"] = enhancer_config(spec.sa_config)
    return cfg


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return [checks.head_fit(ctx, "eagle_head"), checks.eagle3_vocab_map(ctx), checks.eagle3_layers(ctx)]


def draft_forwards(draft_len: int) -> int:
    return draft_len  # the head runs once per chain position


def proposer(spec: Eagle3) -> ProposerFacts:
    return ProposerFacts(
        tree=("eagle_choices", spec.eagle_choices) if spec.eagle_choices is not None else None,
        # The SA enhancer's threshold, which tune sweeps beside the draft length.
        knob=("sa_config.threshold", THRESHOLDS) if spec.sa_config is not None else None,
    )
