"""How a speculative mode proposes drafts, as bench's measurements and predictions need it.

Everything here derives from the mode registry (toolkit.modes): which model source a mode
needs and whether it proposes a chain (its ModeInfo), its draft forwards per step and the tree
or window its recipe gives (its `draft_forwards` and `proposer` hooks). bench never spells a
mode's name, so a new mode is measured, predicted and tuned by what its home says it is.
"""

from __future__ import annotations

from typing import Any

from toolkit.modes import LOOKAHEAD_FIELDS, REGISTRY, hooks, info

DRAFT_SOURCE = "draft"  # a separate draft model (the BLS loop drives it when served on Triton)
ONE_PASS_SOURCE = "medusa_heads"  # heads that propose a whole tree in one pass

# Modes whose heads propose a tree in one pass (also toolkit.hub's head_kind of such checkpoints).
ONE_PASS_MODES: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.source == ONE_PASS_SOURCE)
# The recipe fields of a windowed (Jacobi lookahead) proposer: W, N, G.
WINDOW_FIELDS = LOOKAHEAD_FIELDS

# Modes whose drafts come from a separate draft model: per-request draft lengths (BLS
# num_draft_tokens), Leviathan's c, and α from the draft's and the target's logits.
# (two-model modes: PARD's draft is a `draft` source too, but drafts inside the target's model, one model.)
DRAFT_MODEL_MODES: tuple[str, ...] = tuple(
    m.name for m in REGISTRY if m.source == DRAFT_SOURCE and m.two_model
)


def has_draft_model(mode: str) -> bool:
    return mode in DRAFT_MODEL_MODES


def is_chain(spec: Any) -> bool:
    """A recipe's `speculative` proposes one chain of max_draft_len tokens per step (γ to sweep);
    a chain mode given a static tree (`eagle_choices`) does not."""
    return info(spec.mode).chain and getattr(spec, "eagle_choices", None) is None


def varies_per_step(mode: str) -> bool:
    """Proposes up to γ tokens per step, often fewer: a chain with no model behind it (a
    proposer that looks tokens up), so drafts ÷ γ undercounts its steps."""
    m = info(mode)
    return m.chain and m.source is None and hooks(mode).draft_forwards(2) == 0  # MTP's layers draft all γ


def draft_forwards(mode: str, draft_len: int) -> int:
    """Draft-side forward passes per step (the mode's cost shape): γ for a model or head chain,
    one for heads that propose a tree in one pass, none for proposers without a model."""
    return hooks(mode).draft_forwards(draft_len)


def tree_field(spec: Any) -> tuple[str, list[list[int]]] | None:
    """(the `--set` field, its paths) of a recipe's static tree, or None for a chain or a mode
    without one."""
    return hooks(spec.mode).proposer(spec).tree


def has_window(spec_or_settings: Any) -> bool:
    """A (window, ngram, verification_set) proposer: Jacobi lookahead."""
    if isinstance(spec_or_settings, dict):
        return WINDOW_FIELDS[0] in spec_or_settings
    return hooks(spec_or_settings.mode).proposer(spec_or_settings).window is not None


def knob_of(spec: Any) -> tuple[str, tuple[int, ...]] | None:
    """(the dotted `speculative` field, the values to try) that tune sweeps besides the draft
    length (the SA enhancer's threshold, SA's match size), or None for a mode without one."""
    return hooks(spec.mode).proposer(spec).knob


def window_of(spec_or_settings: Any) -> tuple[int, int, int]:
    """(W, N, G) of a windowed proposer's recipe `speculative`, or of its settings."""
    if isinstance(spec_or_settings, dict):
        w, n, g = (spec_or_settings[f] for f in WINDOW_FIELDS)
        return int(w), int(n), int(g)
    window = hooks(spec_or_settings.mode).proposer(spec_or_settings).window
    if window is None:
        raise ValueError(f"speculative.mode {spec_or_settings.mode} has no (window, ngram, verification_set)")
    return window


def window_settings(w: int, n: int, g: int) -> dict[str, Any]:
    """The `speculative` fields of a windowed proposer at (W, N, G); max_draft_len follows from them."""
    return dict(zip(WINDOW_FIELDS, (w, n, g), strict=True)) | {"max_draft_len": None}
