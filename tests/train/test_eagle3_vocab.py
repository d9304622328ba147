"""toolkit.train.eagle3's pure helpers: the reduced draft vocabulary (d2t) and the RoPE base read
from a target config of either transformers generation."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from toolkit.train import eagle3


def test_draft_vocab_keeps_eos_when_pad_is_eos() -> None:
    # SmolLM2: bos 1, eos = pad = 2 (its GGUF header); </s> must stay draftable
    counts = torch.tensor([50, 40, 0, 30, 20, 10, 5, 1])
    used, d2t, coverage = eagle3.draft_vocab(counts, 4, bos=1, eos=2, pad=2)
    assert used.tolist() == [0, 2, 3, 4]
    assert (used - torch.arange(4)).tolist() == d2t.tolist()
    assert 0 < coverage < 1


def test_draft_vocab_drops_a_separate_pad_and_the_bos() -> None:
    counts = torch.tensor([50, 40, 0, 30, 20, 10])
    used, _, _ = eagle3.draft_vocab(counts, 3, bos=0, eos=1, pad=2)
    assert used.tolist() == [1, 3, 4]


def test_rope_theta_from_either_config_spelling() -> None:
    assert eagle3.rope_theta(SimpleNamespace(rope_theta=500000.0)) == 500000.0
    v5 = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    assert eagle3.rope_theta(v5) == 100000.0
    assert eagle3.rope_theta(SimpleNamespace()) == 10000.0
