"""Mode `eagle`: EAGLE-1/EAGLE-2 (engine path only), a feature-level draft head converted into the
target engine, with a static tree or EAGLE-2's dynamic one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from toolkit import trees as tree
from toolkit.modes.core import (
    EAGLE,
    EAGLE3,
    ENGINE_ONLY_FIX,
    LLM_MODEL,
    NO_DRAFT_MODEL_FIX,
    EagleName,
    EngineArgs,
    EngineLimits,
    Finding,
    LlmapiCall,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    Support,
    no_support,
)
from toolkit.modes.medusa import check_tree
from toolkit.schema import FieldError, Strict

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

INFO = ModeInfo(
    EAGLE,
    source="eagle_head",
    instead_of_engine="use mode: eagle3 on backend llmapi (an EAGLE-3 head; the 1.3 line converts Eagle configs "
    f"to Eagle3), or {NO_DRAFT_MODEL_FIX}",
    engine_limits=EngineLimits("EAGLE", pipeline_parallel=False, max_batch_size=512),
    decoding_mode=EAGLE3,
    engine_decoding_mode=EAGLE,
    heads_in_engine=True,
    engine_converter=EAGLE,  # examples/eagle/convert_checkpoint.py
    engine_build_args=("--use_paged_context_fmha", "enable"),  # examples/eagle/README.md
    chain=False,
    engine_name="eagle",
    llmapi_types=(),
    draft_len_rule="len(eagle_choices), else max_draft_len",
    engine=Support(
        True,
        "EagleForCausalLM subclasses LLaMAForCausalLM (NVIDIA/TensorRT-LLM issue #10396); no pipeline parallelism",
        "EAGLE-1/2 engines need a Llama-architecture base (e.g. Vicuna); for other families use eagle3 on "
        "llmapi",
        ("llama",),
    ),
    llmapi=no_support(
        "the PyTorch backend supports only EAGLE-3; EAGLE-1/2 checkpoints are incompatible",
        "train or pick an EAGLE-3 head and use mode: eagle3, or " + ENGINE_ONLY_FIX,
    ),
    reference=no_support(
        "the reference runtime implements EAGLE-3 heads; EAGLE-1/2 feature-regression heads are not "
        "implemented",
        "use mode: eagle3 with an EAGLE-3 head on reference, or backend: engine for EAGLE-1/2",
    ),
)


class Eagle(Strict):
    """EAGLE-1/EAGLE-2 (engine path only): a feature-level draft head with a static or dynamic tree."""

    mode: EagleName
    max_draft_len: int = Field(
        63, ge=1, le=256, description="Draft-token budget (converter `--max_draft_len`)."
    )
    num_eagle_layers: int = Field(
        4, ge=1, le=16, description="Maximum tree depth (converter `--num_eagle_layers`)."
    )
    max_non_leaves_per_layer: int = Field(10, ge=1, description="Converter `--max_non_leaves_per_layer`.")
    eagle_choices: list[list[int]] | None = Field(
        None, description="Static tree; default: TRT-LLM's built-in."
    )
    use_dynamic_tree: bool = Field(False, description="EAGLE-2 dynamic tree instead of `eagle_choices`.")
    dynamic_tree_max_top_k: int | None = Field(None, ge=1, description="EAGLE-2 expansion top-k.")
    posterior_threshold: float | None = Field(
        None, gt=0, lt=1, description="Typical-acceptance threshold (lossy); default: greedy acceptance."
    )

    @model_validator(mode="after")
    def _tree(self) -> Eagle:
        check_tree(self.eagle_choices, "eagle_choices")
        if self.use_dynamic_tree:
            if self.eagle_choices is not None:
                raise FieldError(
                    "eagle_choices", "is a static tree; it cannot be combined with use_dynamic_tree"
                )
            if self.dynamic_tree_max_top_k is None:
                raise FieldError("dynamic_tree_max_top_k", "is required when use_dynamic_tree is true")
        elif self.dynamic_tree_max_top_k is not None:
            raise FieldError("dynamic_tree_max_top_k", "applies only with use_dynamic_tree: true")
        if self.eagle_choices is not None:
            ch = self.eagle_choices
            if tree.depth(ch) > self.num_eagle_layers:
                raise FieldError(
                    "eagle_choices",
                    f"tree depth {tree.depth(ch)} exceeds num_eagle_layers={self.num_eagle_layers}",
                )
            if tree.max_non_leaves_per_level(ch) > self.max_non_leaves_per_layer:
                raise FieldError(
                    "eagle_choices",
                    f"{tree.max_non_leaves_per_level(ch)} non-leaf nodes on one level exceed "
                    f"max_non_leaves_per_layer={self.max_non_leaves_per_layer}",
                )
            if len(ch) > self.max_draft_len:
                raise FieldError(
                    "eagle_choices", f"{len(ch)} nodes exceed max_draft_len={self.max_draft_len}"
                )
        return self

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = Eagle


def triton_parameters(spec: Eagle, backend: str, model: str) -> dict[str, str]:
    if model != LLM_MODEL:
        return {}
    return {"eagle_choices": tree.to_triton_string(spec.eagle_choices) if spec.eagle_choices else ""}


def serving_checks(spec: Eagle, backend: str, engine_draft_len: int | None) -> list[Finding]:
    if backend != "engine":
        return []
    if spec.use_dynamic_tree:
        return [
            Finding(
                "the Triton tensorrt_llm model takes only a static EAGLE tree (eagle_choices); "
                "speculative.use_dynamic_tree cannot be served",
                "set speculative.use_dynamic_tree: false (optionally with eagle_choices)",
            )
        ]
    if spec.posterior_threshold is not None:
        return [
            Finding(
                "speculative.posterior_threshold is not a Triton tensorrt_llm parameter; the deployment uses "
                "greedy acceptance",
                fatal=False,
            )
        ]
    return []


def engine_args(spec: Eagle, ctx: BuildContext, role: str) -> EngineArgs:
    """examples/eagle/convert_checkpoint.py: the head converts with the target."""
    if role != "target":
        return EngineArgs()
    return EngineArgs(
        ("--eagle_model_dir", ctx.source_arg("eagle_head")),
        (
            "--max_draft_len", str(spec.max_draft_len),
            "--num_eagle_layers", str(spec.num_eagle_layers),
            "--max_non_leaves_per_layer", str(spec.max_non_leaves_per_layer),
        ),
    )  # fmt: skip


def llmapi_config(spec: Eagle, call: LlmapiCall) -> dict[str, Any] | None:
    raise AssertionError("eagle (EAGLE-1/2) has no llmapi form (compat refuses it)")


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return [checks.head_fit(ctx, "eagle_head")]


def draft_forwards(draft_len: int) -> int:
    return draft_len  # the head runs once per tree level: pass the depth, not the token budget


def proposer(spec: Eagle) -> ProposerFacts:
    return ProposerFacts(
        tree=("eagle_choices", spec.eagle_choices) if spec.eagle_choices is not None else None
    )
