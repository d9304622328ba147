"""The selftest's target checkpoint has decisive greedy choices (toolkit/selftest/checkpoints.py MIN_MARGIN):
validation compares two deployments token for token, so a near-tie that fp16/bf16 rounding can
flip would fail a correct deployment. Measured with transformers, in float32 and in casts to
bfloat16 and float16 (which simulate those precisions' rounding)."""

from __future__ import annotations

import pytest

from toolkit.errors import ModelError, TieProneCheckpoint
from toolkit.selftest.checkpoints import (
    MIN_MARGIN,
    PROMPTS,
    VALIDATE_TOKENS,
    check_margins,
    greedy_margins,
    make_checkpoints,
)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("selftest") / "checkpoints")


def test_written_target_is_decisive_in_float32_and_bfloat16(checkpoints):
    fp32 = check_margins(checkpoints["target"])
    assert fp32.min_margin > MIN_MARGIN
    assert set(fp32.tokens) == set(PROMPTS)
    assert all(len(t) == VALIDATE_TOKENS for t in fp32.tokens.values())  # no early EOS: every step counts
    for dtype in ("bfloat16", "float16"):
        low = greedy_margins(checkpoints["target"], dtype=dtype)
        assert low.min_margin > MIN_MARGIN, dtype
        assert low.tokens == fp32.tokens, dtype  # the rounding of a coarser dtype flips no choice


def _tie_prone(paths) -> None:
    """Overwrite the target with the plain random construction (every weight N(0, 0.02)), whose
    logits are nearly tied (std ~0.2 over 512 tokens)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = paths["target"] / "model.safetensors"
    state = load_file(str(path))
    gen = torch.Generator().manual_seed(0)
    for name in ("lm_head.weight", "model.embed_tokens.weight"):
        state[name] = (torch.randn(state[name].shape, generator=gen) * 0.02).to(state[name].dtype)
    save_file(state, str(path), metadata={"format": "pt"})


def test_tie_prone_target_is_refused(tmp_path):
    paths = make_checkpoints(tmp_path / "checkpoints")
    _tie_prone(paths)
    with pytest.raises(TieProneCheckpoint) as err:
        check_margins(paths["target"])
    assert isinstance(err.value, ModelError)  # the CLI maps it like any model error
    assert err.value.margin < MIN_MARGIN and err.value.threshold == MIN_MARGIN
    assert err.value.prompt in PROMPTS and 0 <= err.value.step < VALIDATE_TOKENS
    assert f"below {MIN_MARGIN}" in str(err.value) and "fp16/bf16" in str(err.value)


def test_selftest_refuses_a_tie_prone_checkpoint_before_deploying(tmp_path, monkeypatch):
    from toolkit.selftest import run as st

    def tie_prone_checkpoints(root, seed=0):
        paths = make_checkpoints(root, seed)
        _tie_prone(paths)
        return paths

    def no_run(*_a, **_k):
        raise AssertionError("a mode ran on a tie-prone checkpoint")

    monkeypatch.setattr(st, "make_checkpoints", tie_prone_checkpoints)
    monkeypatch.setattr(st, "run_mode", no_run)
    with pytest.raises(TieProneCheckpoint):
        st.selftest(modes=["medusa"], workdir=tmp_path, force_reference=True, progress=lambda _m: None)
