"""Mode `medusa`: Medusa heads on the target's last hidden state propose a tree in one pass, and
the target verifies it (greedy only). Engine path: the heads are converted into the target engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from toolkit import trees as tree
from toolkit.modes.core import (
    ENGINE_ONLY_FIX,
    LLM_MODEL,
    MEDUSA,
    NO_DRAFT_MODEL_FIX,
    EngineArgs,
    Finding,
    LlmapiCall,
    MedusaName,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    Training,
    batched,
    no_support,
)
from toolkit.schema import FieldError, Strict

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

INFO = ModeInfo(
    MEDUSA,
    training=Training("medusa_heads", MEDUSA),
    source="medusa_heads",
    instead_of_engine="use mode: eagle3 on backend llmapi (an EAGLE-3 head: `sdtk train-draft`), or "
    + NO_DRAFT_MODEL_FIX,
    selftest=SelfTest(
        paths=("engine",), section=(("num_medusa_heads", 2), ("medusa_choices", [[0], [0, 0], [1], [0, 1]]))
    ),
    modelopt_mode=MEDUSA,  # modelopt/torch/speculative's medusa mode
    decoding_mode=MEDUSA,
    heads_in_engine=True,
    engine_converter=MEDUSA,  # examples/medusa/convert_checkpoint.py
    chain=False,
    engine_name="medusa",
    llmapi_types=(),
    draft_len_rule="len(medusa_choices) (the tree size)",
    engine=Support(
        True,
        "examples/medusa/convert_checkpoint.py --model_type {llama,mixtral,qwen2}; greedy only",
        "Medusa heads convert only for Llama (Vicuna), Qwen2 and Mixtral bases",
        ("llama", "qwen2", "mixtral"),
    ),
    llmapi=no_support(
        "the PyTorch backend has no Medusa (MedusaDecodingConfig supports the TensorRT backend only)",
        ENGINE_ONLY_FIX,
    ),
    reference=batched("tree verification (per-row tree masks); the heads run per sequence"),
)


def check_tree(choices: list[list[int]] | None, field: str) -> None:
    if choices is not None and (why := tree.check_choices(choices)):
        raise FieldError(field, why)


class Medusa(Strict):
    """Medusa heads on the target's last hidden state, verified as a tree (greedy only)."""

    mode: MedusaName
    num_medusa_heads: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Heads to use; default: `medusa_num_heads` from the heads' config.json.",
    )
    medusa_choices: list[list[int]] | None = Field(
        None, description="Tree paths (list of lists of top-k indices); default: mc_sim_7b_63."
    )
    max_draft_len: int | None = Field(
        None, ge=1, le=1024, description="Engine draft-token budget (`--max_medusa_token_len`); ≥ tree size."
    )

    @model_validator(mode="after")
    def _tree(self) -> Medusa:
        check_tree(self.medusa_choices, "medusa_choices")
        ch = self.choices
        if self.num_medusa_heads is not None and tree.depth(ch) > self.num_medusa_heads:
            raise FieldError(
                "medusa_choices",
                f"tree depth {tree.depth(ch)} exceeds num_medusa_heads={self.num_medusa_heads}",
            )
        if self.max_draft_len is not None and self.max_draft_len < len(ch):
            raise FieldError("max_draft_len", f"{self.max_draft_len} is smaller than the tree size {len(ch)}")
        return self

    @property
    def choices(self) -> list[list[int]]:
        return self.medusa_choices if self.medusa_choices is not None else tree.MEDUSA_MC_SIM_7B_63

    @property
    def draft_len(self) -> int:
        return self.max_draft_len if self.max_draft_len is not None else len(self.choices)


SPEC = Medusa


def triton_parameters(spec: Medusa, backend: str, model: str) -> dict[str, str]:
    if model != LLM_MODEL:
        return {}
    return {"medusa_choices": tree.to_triton_string(spec.choices)}


def serving_checks(spec: Medusa, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: Medusa, ctx: BuildContext, role: str) -> EngineArgs:
    """examples/medusa/convert_checkpoint.py: the heads convert with the target."""
    if role != "target":
        return EngineArgs()
    convert: list[str] = []
    heads = spec.num_medusa_heads or ctx.sources["medusa_heads"].facts.medusa_num_heads
    if heads:
        convert += ["--num_medusa_heads", str(heads)]
    convert += ["--max_medusa_token_len", str(spec.draft_len)]
    family = ctx.sources["target"].facts.model_type
    if family in ("qwen2", "mixtral"):
        convert += ["--model_type", family]
    return EngineArgs(("--medusa_model_dir", ctx.source_arg("medusa_heads")), tuple(convert))


def llmapi_config(spec: Medusa, call: LlmapiCall) -> dict[str, Any] | None:
    raise AssertionError("medusa has no llmapi form (compat refuses it)")


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return [checks.head_fit(ctx, "medusa_heads"), checks.medusa_heads(ctx)]


def draft_forwards(draft_len: int) -> int:
    return 1  # the heads propose the whole tree in one pass


def proposer(spec: Medusa) -> ProposerFacts:
    return ProposerFacts(tree=("medusa_choices", spec.choices))
