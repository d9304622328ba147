"""Speculative tree choices: the upstream default trees, validation, and Triton's string form.

A choice is a path of per-level top-k indices, root excluded: `[0, 1]` is "the top-1
candidate at depth 1, then its top-2 candidate at depth 2".
"""

from __future__ import annotations

from collections import Counter

# FasterDecoding/Medusa medusa/model/medusa_choices.py `mc_sim_7b_63`; TRT-LLM's Medusa
# README and Triton's `medusa_choices` default use the same 63-node tree.
MEDUSA_MC_SIM_7B_63: list[list[int]] = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0],
    [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5],
    [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9],
    [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0],
    [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]  # fmt: skip

# SafeAILab/EAGLE `choices.py` `mc_sim_7b_63` (despite the name: 25 nodes, depth 5).
EAGLE_MC_SIM_7B_63: list[list[int]] = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip


def check_choices(choices: list[list[int]]) -> str | None:
    """Why `choices` is not a usable tree, or None when it is.

    A usable tree has no empty or negative paths, no duplicates, and every path's
    parent present (so the flattened tree is connected).
    """
    if not choices:
        return "must list at least one path"
    seen = set()
    for i, path in enumerate(choices):
        if not path:
            return f"path [{i}] is empty"
        if any(k < 0 for k in path):
            return f"path [{i}] {path} has a negative index"
        key = tuple(path)
        if key in seen:
            return f"path [{i}] {path} appears twice"
        seen.add(key)
    for path in choices:
        if len(path) > 1 and tuple(path[:-1]) not in seen:
            return f"path {path} has no parent {path[:-1]} in the list (each path's prefixes must be listed)"
    return None


def depth(choices: list[list[int]]) -> int:
    return max(len(p) for p in choices)


def max_non_leaves_per_level(choices: list[list[int]]) -> int:
    """The most nodes at one depth that have children (EAGLE engine's `max_non_leaves_per_layer`)."""
    parents = {tuple(p[:-1]) for p in choices if len(p) > 1}
    per_level = Counter(len(p) for p in parents)
    return max(per_level.values(), default=0)


def to_triton_string(choices: list[list[int]]) -> str:
    """Triton `config.pbtxt` form: `{0}, {0, 0}, {1}`."""
    return ", ".join("{" + ", ".join(str(k) for k in path) + "}" for path in choices)


def from_triton_string(text: str) -> list[list[int]]:
    """Inverse of `to_triton_string` (the Python backend converts `{}` to `[]` and parses JSON)."""
    import json

    text = text.strip()
    if not text:
        return []
    return json.loads("[" + text.replace("{", "[").replace("}", "]") + "]")
