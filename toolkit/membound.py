"""The memory-bound twin: a target whose MLP is zero-padded N times (recipe `reference.inflate`).

Padding the MLP's intermediate dimension with zeros (gate and up projections get zero rows, the
down projection zero columns) leaves the function unchanged: the new units compute
silu(0) · 0 = 0 and contribute nothing. The bytes each decoding step reads grow about N-fold,
so the target's step becomes long and memory-bound, as an 8B model's is on a GPU, and drafts
and heads become cheap beside it. The padding happens when the reference runtime loads the
target (toolkit.reference.models.inflate_mlp); no padded weights are ever written.

This module only names and sizes the twin (no torch): reports label every number measured on
it, e.g. "memory-bound twin: target padded ×32, 0.46 GB per step".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.hub import estimate_parameters, facts_from_config, read_json

BYTES_PER_PARAM = 4  # the reference runtime computes in float32


def label(factor: int, step_bytes: int | None) -> str:
    """The one line every report carries for numbers measured on the twin."""
    size = f", {step_bytes / 1e9:.2f} GB per step" if step_bytes else ""
    return f"memory-bound twin: target padded ×{factor}{size}"


def step_bytes(config: dict[str, Any], factor: int) -> int | None:
    """Weight bytes one decoding step of the padded target reads (float32): every parameter but
    the input embedding, of which a step reads only its tokens' rows. None: not a known layout."""
    facts = facts_from_config(config, cite="config.json")
    if facts.intermediate_size is None:
        return None
    facts.intermediate_size *= factor
    params = estimate_parameters(facts)
    if params is None or facts.vocab_size is None or facts.hidden_size is None:
        return None
    embedding = 0 if facts.tie_word_embeddings else facts.vocab_size * facts.hidden_size
    return (params - embedding) * BYTES_PER_PARAM


def recipe_label(recipe: Any) -> str | None:
    """The twin's label for a recipe with `reference.inflate` > 1 (None otherwise). The step size
    comes from the target's config.json when the target is a local directory."""
    factor = recipe.reference.inflate
    if factor <= 1:
        return None
    path = recipe.local_path(recipe.models.target)
    cfg = read_json(Path(path) / "config.json") if path is not None else None
    return label(factor, step_bytes(cfg, factor) if cfg else None)
