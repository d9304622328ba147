"""toolkit.train.data: the hold-out split and the self-distillation cache key."""

from __future__ import annotations

import pytest

from toolkit.errors import UsageError
from toolkit.train.data import TrainPrompt, cache_key, load_prompts, split


def _prompts(n: int) -> list[TrainPrompt]:
    return [TrainPrompt(f"prompt number {i}", "x", 32) for i in range(n)]


def test_split_is_disjoint_order_free_and_sized():
    ps = _prompts(20)
    train, held = split(ps, 0.25, seed=0)
    assert len(held) == 5 and len(train) == 15
    assert not {p.text for p in train} & {p.text for p in held}
    train_r, held_r = split(list(reversed(ps)), 0.25, seed=0)  # the file's order does not matter
    assert {p.text for p in held_r} == {p.text for p in held}
    assert {p.text for p in split(ps, 0.25, seed=1)[1]} != {p.text for p in held}  # the seed does


def test_split_keeps_one_on_each_side_and_rejects_bad_input():
    train, held = split(_prompts(2), 0.9, seed=0)
    assert len(train) == 1 and len(held) == 1
    with pytest.raises(UsageError, match="at least 2 distinct"):
        split([TrainPrompt("same", "x", 8)] * 3, 0.5, seed=0)
    with pytest.raises(UsageError, match="between 0 and 1"):
        split(_prompts(4), 1.0, seed=0)


def test_cache_key_changes_with_every_input():
    ps = _prompts(3)
    k = cache_key("fp", ps, 64, "ref")
    assert k == cache_key("fp", list(ps), 64, "ref")
    assert len({k, cache_key("fp2", ps, 64, "ref"), cache_key("fp", ps[:2], 64, "ref"),
                cache_key("fp", ps, 32, "ref"), cache_key("fp", ps, 64, "endpoint:x")}) == 5  # fmt: skip


def test_bundled_workload_loads():
    name, ps = load_prompts("summarization")
    assert name == "summarization" and len(ps) > 20 and all(p.text for p in ps)
