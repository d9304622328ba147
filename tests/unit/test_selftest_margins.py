"""The selftest's target checkpoint has decisive greedy choices (toolkit/selftest/checkpoints.py MIN_MARGIN):
validation compares two deployments token for token, so a near-tie that fp16/bf16 rounding can
flip would fail a correct deployment. Measured with transformers, in float32 and in casts to
bfloat16 and float16 (which simulate those precisions' rounding)."""

from __future__ import annotations

import pytest

from toolkit.errors import ModelError, TieProneCheckpoint
from toolkit.selftest.checkpoints import (
    MIN_MARGIN,
    MTP_TARGET,
    PROMPTS,
    TARGETS,
    VALIDATE_TOKENS,
    check_margins,
    greedy_margins,
    make_checkpoints,
)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("selftest") / "checkpoints")


@pytest.mark.parametrize("role", TARGETS)
def test_written_target_is_decisive_in_float32_and_bfloat16(checkpoints, role):
    """Every target a cell serves (the tiny Llama, and the DeepSeek-V3 of the MTP cell)."""
    fp32 = check_margins(checkpoints[role])
    assert fp32.min_margin > MIN_MARGIN
    assert set(fp32.tokens) == set(PROMPTS)
    assert all(len(t) == VALIDATE_TOKENS for t in fp32.tokens.values())  # no early EOS: every step counts
    for dtype in ("bfloat16", "float16"):
        low = greedy_margins(checkpoints[role], dtype=dtype)
        assert low.min_margin > MIN_MARGIN, dtype
        assert low.tokens == fp32.tokens, dtype  # the rounding of a coarser dtype flips no choice


def test_mtp_target_carries_one_mtp_layer_in_deepseek_v3_layout(checkpoints):
    """The MTP cell's target: model_type deepseek_v3 (the family TensorRT-LLM's MTP has in every
    release), num_nextn_predict_layers 1, the layer at model.layers.{num_hidden_layers}.* with
    DeepSeek-V3's own parts (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md @0b39205), MLA of DeepSeek-V3's
    dimensions; and the reference runtime loads it."""
    import json

    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from toolkit.modes import info
    from toolkit.reference.mtp import load_mtp

    path = checkpoints[MTP_TARGET]
    assert info("mtp").selftest is not None and info("mtp").selftest.target == MTP_TARGET
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v3" == info("mtp").selftest.family
    assert cfg["num_nextn_predict_layers"] == 1
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]) == (
        512, 64, 128, 128,
    )  # fmt: skip
    assert cfg["first_k_dense_replace"] > cfg["num_hidden_layers"]  # the MTP layer is dense too
    n = cfg["num_hidden_layers"]
    with safe_open(str(path / "mtp.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    own = {"enorm", "hnorm", "eh_proj", "shared_head.norm", "shared_head.head", "embed_tokens"}
    assert {f"model.layers.{n}.{k}.weight" for k in own} <= keys
    assert f"model.layers.{n}.self_attn.kv_a_proj_with_mqa.weight" in keys
    assert f"model.layers.{n}.mlp.gate_proj.weight" in keys and all(k.startswith(f"model.layers.{n}.") for k in keys)
    target = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    module = load_mtp(path, target, torch.float32)
    emb, hid = torch.randn(1, 3, cfg["hidden_size"]), torch.randn(1, 3, cfg["hidden_size"])
    with torch.no_grad():
        assert module.logits(module(emb, hid))[0].shape == (3, cfg["vocab_size"])


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
