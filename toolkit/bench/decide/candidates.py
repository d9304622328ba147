"""The configurations `plan`'s probe runs and `tune` sweeps: candidate speculative settings
derived from a recipe (a few chain lengths, tree prefixes, or lookahead windows). Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.bench.proposers import has_window, is_chain, tree_field, window_of, window_settings
from toolkit.modes import info

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


def _tree_prefixes(choices: list[list[int]], max_candidates: int = 4) -> list[list[list[int]]]:
    """Valid sub-trees made of the first k paths (parents before children), a few sizes up to all."""
    n = len(choices)
    sizes = sorted({max(1, n // 4), max(1, n // 2), max(1, 3 * n // 4), n})[-max_candidates:]
    out = []
    for k in sizes:
        kept: list[list[int]] = []
        have = set()
        for path in choices[:k]:
            if len(path) == 1 or tuple(path[:-1]) in have:
                kept.append(path)
                have.add(tuple(path))
        if kept and kept not in out:
            out.append(kept)
    return out


def probe_candidates(recipe: Recipe, draft_len_max: int) -> list[tuple[str, dict[str, Any]]]:
    """Configurations the probe runs: (label, speculative fields to override)."""
    spec: Any = recipe.speculative  # any mode's: a field is read only where the mode has it
    if not info(spec.mode).reference.supported:
        return []  # nothing the reference runtime can probe
    if is_chain(spec):
        # The longest chain gives acceptance at every position (and its accepted runs predict τ
        # for every shorter γ); shorter chains add measured step times to interpolate between.
        g = max(draft_len_max, spec.max_draft_len)
        extra = sorted({1, (g + 1) // 2} - {g}, reverse=True)
        return [(f"γ={x}", {"max_draft_len": x}) for x in [g, *extra]]
    tree = tree_field(spec)
    if tree is not None:
        key, paths = tree
        return [(f"tree {len(t)} nodes", {key: t}) for t in _tree_prefixes(paths)]
    if has_window(spec):
        own = window_of(spec)
        grid = [own, (2, 3, 2), (4, 3, 4), (4, 4, 4), (6, 4, 6)]
        seen, out = set(), []
        for w, n, g in grid:
            if (w, n, g) not in seen:
                seen.add((w, n, g))
                out.append((f"W={w} N={n} G={g}", window_settings(w, n, g)))
        return out[:4]
    return []
