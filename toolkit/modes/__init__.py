"""The speculative-decoding modes: one home per mode, toolkit/modes/<mode>.py.

Each mode module holds its registry entry (`INFO`, a `ModeInfo`), its recipe class (`SPEC`, the
`speculative:` variant toolkit.recipe builds its tagged union from) and its hooks (`ModeHooks`:
Triton parameters, llmapi config, preflight checks, cost shape for plan, proposer facts for
bench). `register` checks each plug-in when this package is imported. A mode the reference
backend runs has its proposer in toolkit/reference/<mode>.py (its speculator and the loading of
its weights), which the reference runtime chooses by the mode's name (toolkit.reference.proposers).

Everything that lists modes derives from `REGISTRY`: the recipe's mode names and required sources
(toolkit.recipe), the CLI's `--mode` choices, the compatibility cells (toolkit.compat), the
`trtllm-build` names (toolkit.build.context.SPEC_MODE_NAMES), the llmapi decoding types
(toolkit.build.llmapi) and bench's chain modes (toolkit.bench). Code asks a mode (`mode(name)`'s
hooks, or `info(name)`'s facts); nothing outside this package branches on a mode's recipe class.
docs/contributing.md walks through adding one.

Upstream facts: each mode module cites the NVIDIA/TensorRT-LLM files (examples/<mode>/README.md,
tensorrt_llm/llmapi/llm_args.py) it follows.
"""

from __future__ import annotations

from toolkit.errors import CompatError
from toolkit.modes import draft_target, eagle, eagle3, lookahead, medusa, mtp, ngram, none, pard, sa
from toolkit.modes.core import (
    BACKENDS,
    BLS_MODEL,
    DRAFT_TARGET,
    EAGLE,
    EAGLE3,
    ENGINE_MAX,
    ENGINE_MODE_FLAGS,
    HOOKS,
    LLM_MODEL,
    LLMAPI_MIN,
    LOOKAHEAD,
    MEDUSA,
    MEDUSA_HEAD_MODEL_TYPE,
    NGRAM,
    NONE,
    DraftTargetName,
    Eagle3Name,
    EagleName,
    Finding,
    LlmapiCall,
    LookaheadName,
    MedusaName,
    Mode,
    ModeHooks,
    ModeInfo,
    NGramName,
    NoneName,
    ProposerFacts,
    SelfTest,
    Support,
    Training,
    register,
)
from toolkit.modes.lookahead import LOOKAHEAD_FIELDS

__all__ = [
    "BACKENDS",
    "BLS_MODEL",
    "BY_NAME",
    "CHAIN_MODES",
    "DRAFT_TARGET",
    "EAGLE",
    "EAGLE3",
    "ENGINE_MAX",
    "ENGINE_MODE_FLAGS",
    "HOOKS",
    "LLMAPI_DECODING_TYPES",
    "LLMAPI_MIN",
    "LLMAPI_MODES",
    "LLM_MODEL",
    "LOOKAHEAD",
    "LOOKAHEAD_FIELDS",
    "MEDUSA",
    "MEDUSA_HEAD_MODEL_TYPE",
    "MODES",
    "MODE_SOURCES",
    "NGRAM",
    "NONE",
    "PLUGINS",
    "REGISTRY",
    "SOURCES",
    "SPEC_MODE_NAMES",
    "DraftTargetName",
    "Eagle3Name",
    "EagleName",
    "Finding",
    "LlmapiCall",
    "LookaheadName",
    "MedusaName",
    "Mode",
    "ModeHooks",
    "ModeInfo",
    "NGramName",
    "NoneName",
    "ProposerFacts",
    "SelfTest",
    "Support",
    "Training",
    "hooks",
    "info",
    "mode",
    "register",
]

# The mode plug-ins, in the registry's order (the recipe union's, the CLI's and compat's order).
PLUGINS: tuple[Mode, ...] = tuple(
    register(m) for m in (none, draft_target, eagle3, eagle, medusa, lookahead, ngram, sa, pard, mtp)
)
_BY_MODE: dict[str, Mode] = {m.name: m for m in PLUGINS}

REGISTRY: tuple[ModeInfo, ...] = tuple(m.info for m in PLUGINS)
BY_NAME: dict[str, ModeInfo] = {m.name: m for m in REGISTRY}
MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY)
# Modes whose max_draft_len is a chain length γ (bench's plan and tune sweep it).
CHAIN_MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.chain)
LLMAPI_MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.llmapi.supported)
# Which model source each mode needs; the others must be absent.
MODE_SOURCES: dict[str, str | None] = {m.name: m.source for m in REGISTRY}
# The model sources a mode may need besides the target (`models.<source>`), in the registry's order.
SOURCES: tuple[str, ...] = tuple(dict.fromkeys(m.source for m in REGISTRY if m.source is not None))
# trtllm-build's --speculative_decoding_mode names; sdtk's own for modes trtllm-build lacks.
SPEC_MODE_NAMES: dict[str, str | None] = {m.name: m.engine_name for m in REGISTRY}
LLMAPI_DECODING_TYPES: dict[str, tuple[str, ...]] = {
    m.name: m.llmapi_types for m in REGISTRY if m.llmapi_types
}


def info(name: str) -> ModeInfo:
    return BY_NAME[name]


def mode(name: str, *, backend: str = "any") -> Mode:
    """The registered mode `name`; a CompatError for a name no plug-in registered (no fallback)."""
    found = _BY_MODE.get(name)
    if found is None:
        raise CompatError(
            f"unknown speculative mode {name!r}",
            mode=name,
            backend=backend,
            hint="the modes are: " + ", ".join(MODES),
        )
    return found


def hooks(name: str, *, backend: str = "any") -> ModeHooks:
    """The hooks of mode `name` (raises on an unknown mode, like `mode`)."""
    return mode(name, backend=backend).hooks
