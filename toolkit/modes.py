"""The speculative-decoding modes: one `ModeInfo` per mode, the one place a mode is described.

Everything that lists modes derives from `REGISTRY`: the recipe's mode names and required sources
(toolkit.recipe), the CLI's `--mode` choices, the compatibility cells (toolkit.compat), the
`trtllm-build` names (toolkit.build.context.SPEC_MODE_NAMES), the llmapi decoding types
(toolkit.repo.render) and bench's chain modes (toolkit.bench). Adding a mode is one entry here plus
its recipe class (toolkit.recipe) and its runtime; docs/contributing.md walks through it.

Upstream facts: /work/shared/reference/trtllm-speculative.md and gpu-paths-audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

# The mode names, for code that must name one (dispatch tables, head kinds, recipe discriminators);
# what a mode does is a ModeInfo attribute. A test checks no other module spells them out.
NONE: Final = "none"
DRAFT_TARGET: Final = "draft_target"
EAGLE3: Final = "eagle3"
EAGLE: Final = "eagle"
MEDUSA: Final = "medusa"
LOOKAHEAD: Final = "lookahead"
NGRAM: Final = "ngram"
# The recipe's discriminators (pydantic's tagged union needs Literal types).
NoneName = Literal["none"]
DraftTargetName = Literal["draft_target"]
Eagle3Name = Literal["eagle3"]
EagleName = Literal["eagle"]
MedusaName = Literal["medusa"]
LookaheadName = Literal["lookahead"]
NGramName = Literal["ngram"]
# The HF config model_type of Medusa head checkpoints (FasterDecoding/Medusa).
MEDUSA_HEAD_MODEL_TYPE: Final = "medusa"
# tensorrt_llm.models.modeling_utils.SpeculativeDecodingMode (IntFlag, auto() from 1), as
# trtllm-build writes it into build_config, → the --speculative_decoding_mode names.
ENGINE_MODE_FLAGS: dict[int, str] = {
    1: "none",
    2: "draft_tokens_external",
    4: "medusa",
    8: "lookahead_decoding",
    16: "explicit_draft_tokens",
    32: "eagle",
    64: "ngram",
}
# Lookahead's (W, N, G) recipe fields, in that order.
LOOKAHEAD_FIELDS: tuple[str, str, str] = ("window", "ngram", "verification_set")

# Where a recipe runs: engine (trtllm-build + Triton's tensorrtllm backend), llmapi (TRT-LLM's
# PyTorch backend), reference (sdtk's PyTorch implementation); auto picks one.
BACKENDS = ("auto", "engine", "llmapi", "reference")
ENGINE_MAX = "1.2"  # exclusive: verified through 1.1.x; 1.2 may have removed trtllm-build
LLMAPI_MIN = "1.0"

_ENGINE_ONLY_FIX = (
    "use backend: engine with TensorRT-LLM 1.1.x (NGC tritonserver:<yy.mm>-trtllm-python-py3), "
    "or backend: reference on CPU"
)
_REFERENCE = "sdtk's PyTorch implementation; CPU or any torch device"


@dataclass(frozen=True)
class Support:
    """Whether a backend serves the mode, why (or why not), and the fix when it does not."""

    supported: bool
    reason: str
    fix: str = ""
    families: tuple[str, ...] | None = None  # HF model_type values it is limited to; None = any


@dataclass(frozen=True)
class ModeInfo:
    name: str  # the recipe's speculative.mode
    source: str | None  # the models.<source> it needs besides the target (None: none)
    chain: bool  # proposes a linear chain whose length max_draft_len sets (bench tunes γ)
    engine_name: str | None  # trtllm-build --speculative_decoding_mode; sdtk's own where it has none
    llmapi_types: tuple[str, ...]  # speculative_config decoding_type: written first, accepted all
    draft_len_rule: str  # tokens proposed per step (the recipe class's `draft_len`)
    engine: Support
    llmapi: Support
    reference: Support = field(default_factory=lambda: Support(True, _REFERENCE))
    # The draft is a second model (its own engine, tensorrt_llm_draft) that the BLS loop drives.
    two_model: bool = False
    # tensorrt_llm's `decoding_mode` parameter ("" = the engine's own, for two-model verification).
    decoding_mode: str = "top_k_top_p"
    engine_decoding_mode: str | None = None  # where the C++ backend names it differently
    # The engine path compiles the drafting heads in: speculation cannot be switched off per deployment.
    heads_in_engine: bool = False
    # trtllm-build flags the mode needs besides --speculative_decoding_mode (upstream examples).
    engine_build_args: tuple[str, ...] = ()
    # `sdtk train-draft`: the modelopt.torch.speculative mode that trains its drafting heads
    # (mtsp.convert(model, [(modelopt_mode, config)])); None where ModelOpt trains nothing for it.
    modelopt_mode: str | None = None

    def triton_decoding_mode(self, backend: str) -> str:
        if backend == "engine" and self.engine_decoding_mode is not None:
            return self.engine_decoding_mode
        return self.decoding_mode

    def support(self, backend: str) -> Support:
        if backend == "engine":
            return self.engine
        if backend == "llmapi":
            return self.llmapi
        if backend == "reference":
            return self.reference
        raise KeyError(backend)


def _no(reason: str, fix: str) -> Support:
    return Support(False, reason, fix)


def _batched(what: str) -> Support:
    """The reference backend, with what its served model's one forward per iteration covers
    (in-flight batching, toolkit/reference/batching.py)."""
    return Support(True, f"{_REFERENCE}; in-flight batched: {what}")


REGISTRY: tuple[ModeInfo, ...] = (
    ModeInfo(
        NONE,
        source=None,
        chain=False,
        engine_name=None,
        llmapi_types=(),
        draft_len_rule="0: no speculation",
        engine=Support(True, "plain engine build"),
        llmapi=Support(True, "LLM API without speculative_config"),
        reference=_batched("decode steps of all sequences"),
    ),
    ModeInfo(
        DRAFT_TARGET,
        source="draft",
        two_model=True,
        decoding_mode="",
        engine_build_args=("--use_paged_context_fmha", "enable"),  # examples/draft_target_model
        chain=True,
        engine_name="draft_tokens_external",
        llmapi_types=("DraftTarget",),
        draft_len_rule="max_draft_len (γ)",
        engine=Support(
            True,
            "two engines: the target with draft_tokens_external, served through the tensorrt_llm_bls loop",
        ),
        llmapi=Support(True, "speculative_config decoding_type DraftTarget (two-model)"),
        reference=_batched("target verification (BLS draft_input_ids) and the draft model's steps"),
    ),
    ModeInfo(
        EAGLE3,
        source="eagle_head",
        modelopt_mode="eagle",  # modelopt/torch/speculative: its eagle mode trains EAGLE-3 heads
        decoding_mode=EAGLE3,
        engine_decoding_mode=EAGLE,
        chain=True,
        engine_name="eagle3",
        # Accepted spellings: "Eagle3" (1.2+) and "Eagle" (1.0/1.1-era llm_args.py from_dict, kept as an
        # alias later; gpu-paths-audit.md row 13). Which one is written: toolkit.build.llmapi.schema_for.
        llmapi_types=("Eagle3", "Eagle"),
        draft_len_rule="len(eagle_choices) for a static tree, else max_total_draft_tokens or max_draft_len",
        engine=_no(
            "EAGLE-3 exists only in the PyTorch backend (_torch/speculative/eagle3.py)",
            "use backend: llmapi (TensorRT-LLM >= 1.0) or backend: reference",
        ),
        llmapi=Support(
            True,
            # No decoding_type here: it depends on the version (Eagle up to 1.1, Eagle3 from 1.2), and
            # toolkit.build.llmapi.schema_for names it where the plan is written (issue 22, finding 4).
            "speculative_config (EAGLE-3); verified pairs include Llama-3.1-8B, Llama-4 Maverick, gpt-oss, Qwen3",
        ),
        reference=_batched(
            "chain and static-tree verification (per-row tree masks); the head drafts per sequence"
        ),
    ),
    ModeInfo(
        EAGLE,
        source="eagle_head",
        decoding_mode=EAGLE3,
        engine_decoding_mode=EAGLE,
        heads_in_engine=True,
        engine_build_args=("--use_paged_context_fmha", "enable"),  # examples/eagle/README.md
        chain=False,
        engine_name="eagle",
        llmapi_types=(),
        draft_len_rule="len(eagle_choices), else max_draft_len",
        engine=Support(
            True,
            "EagleForCausalLM subclasses LLaMAForCausalLM (TRT-LLM issue #10396); no pipeline parallelism",
            "EAGLE-1/2 engines need a Llama-architecture base (e.g. Vicuna); for other families use eagle3 on "
            "llmapi",
            ("llama",),
        ),
        llmapi=_no(
            "the PyTorch backend supports only EAGLE-3; EAGLE-1/2 checkpoints are incompatible",
            "train or pick an EAGLE-3 head and use mode: eagle3, or " + _ENGINE_ONLY_FIX,
        ),
        reference=_no(
            "the reference runtime implements EAGLE-3 heads; EAGLE-1/2 feature-regression heads are not "
            "implemented",
            "use mode: eagle3 with an EAGLE-3 head on reference, or backend: engine for EAGLE-1/2",
        ),
    ),
    ModeInfo(
        MEDUSA,
        source="medusa_heads",
        modelopt_mode=MEDUSA,  # modelopt/torch/speculative's medusa mode
        decoding_mode=MEDUSA,
        heads_in_engine=True,
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
        llmapi=_no(
            "the PyTorch backend has no Medusa (MedusaDecodingConfig supports the TensorRT backend only)",
            _ENGINE_ONLY_FIX,
        ),
        reference=_batched("tree verification (per-row tree masks); the heads run per sequence"),
    ),
    ModeInfo(
        LOOKAHEAD,
        source=None,
        decoding_mode=LOOKAHEAD,
        chain=False,
        engine_name="lookahead_decoding",
        llmapi_types=(),
        draft_len_rule="(N-2 if N>1 else 0) + (W-1+G)*(N-1) from (window, ngram, verification_set)",
        engine=Support(
            True, "--speculative_decoding_mode lookahead_decoding with max_draft_len from (W,N,G)"
        ),
        llmapi=_no("the PyTorch backend has no Lookahead decoding (engine path only)", _ENGINE_ONLY_FIX),
        reference=_batched("verification and Jacobi branch (per-row masks); the n-gram pool per sequence"),
    ),
    ModeInfo(
        NGRAM,
        source=None,
        decoding_mode=NGRAM,
        chain=True,
        engine_name="ngram",
        llmapi_types=("NGram",),
        draft_len_rule="max_draft_len",
        engine=_no(
            "NGram decoding is a PyTorch-backend feature (supports_backend: pytorch only)",
            "use backend: llmapi (TensorRT-LLM >= 1.0), or lookahead on the engine path",
        ),
        llmapi=Support(True, "speculative_config decoding_type NGram"),
        reference=_batched("chain verification"),
    ),
)

BY_NAME: dict[str, ModeInfo] = {m.name: m for m in REGISTRY}
MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY)
# Modes whose max_draft_len is a chain length γ (bench's plan and tune sweep it).
CHAIN_MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.chain)
LLMAPI_MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.llmapi.supported)
# Which model source each mode needs; the others must be absent.
MODE_SOURCES: dict[str, str | None] = {m.name: m.source for m in REGISTRY}
# trtllm-build's --speculative_decoding_mode names; sdtk's own for modes trtllm-build lacks.
SPEC_MODE_NAMES: dict[str, str | None] = {m.name: m.engine_name for m in REGISTRY}
LLMAPI_DECODING_TYPES: dict[str, tuple[str, ...]] = {
    m.name: m.llmapi_types for m in REGISTRY if m.llmapi_types
}


def info(name: str) -> ModeInfo:
    return BY_NAME[name]
