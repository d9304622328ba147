"""GPU sizing and the roofline, checked against hand-computed numbers."""

from __future__ import annotations

import pytest

from toolkit import catalogue, hub
from toolkit.bench.decide import sizing as sz
from toolkit.errors import ModelError, UsageError


def comp(repo: str, role: str = "target") -> sz.Component:
    return sz.component_from_facts(role, repo, hub.facts_from_catalogue(catalogue.lookup(repo)))


def llama_params(v, h, layers, inter, heads, kv, hd, tied=False):
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    return v * h * (1 if tied else 2) + layers * (attn + 3 * h * inter + 2 * h) + h


def test_llama_3_1_8b_by_hand():
    c = comp("meta-llama/Llama-3.1-8B-Instruct")
    p = llama_params(128256, 4096, 32, 14336, 32, 8, 128)
    assert p == 8_030_261_248 == c.params
    assert c.weight_bytes(2) == 8_030_261_248 * 2  # ≈ 16.06 GB in bf16
    assert c.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2 == 131072
    s = sz.size([c], "h100", dtype="bfloat16", max_seq_len=8192, context=1024, kv_fraction=0.9)
    f1 = s.fits[0]
    assert f1.tp == 1 and f1.fits
    assert f1.weights_gb_per_gpu == pytest.approx(16.060522496)
    budget = (80e9 - 16_060_522_496 - 2e9) * 0.9
    assert f1.kv_budget_gb_per_gpu == pytest.approx(budget / 1e9)
    assert f1.max_sequences == int(budget // (131072 * 8192)) == 51
    # Batch-1 roofline: 3.35 TB/s ÷ (weights + 1024 tokens of KV) ≈ 206.9 tok/s.
    assert f1.decode_tok_s_roofline == pytest.approx(3.35e12 / (16_060_522_496 + 131072 * 1024))
    assert round(f1.decode_tok_s_roofline, 1) == 206.9
    f2 = s.fits[1]  # tp=2: half the weights and half the KV heads per GPU
    assert f2.kv_bytes_per_token_per_gpu == 65536
    assert f2.decode_tok_s_roofline == pytest.approx(3.35e12 / (8_030_261_248 + 65536 * 1024))


def test_llama_3_3_70b_by_hand():
    c = comp("meta-llama/Llama-3.3-70B-Instruct")
    p = llama_params(128256, 8192, 80, 28672, 64, 8, 128)
    assert p == 70_553_706_496 == c.params
    assert c.kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 327680
    s = sz.size([c], "h100", dtype="bfloat16", max_seq_len=8192, kv_fraction=0.9)
    by_tp = {f.tp: f for f in s.fits}
    assert not by_tp[1].fits and "more than 80 GB" in by_tp[1].note  # 141 GB of weights
    # tp=2: 70.55 GB weights per GPU, KV per token per GPU 163840 bytes.
    budget2 = (80e9 - 70_553_706_496 * 2 / 2 - 2e9) * 0.9
    assert by_tp[2].max_sequences == int(budget2 // (163840 * 8192)) == 4
    budget4 = (80e9 - 70_553_706_496 * 2 / 4 - 2e9) * 0.9
    assert by_tp[4].max_sequences == int(budget4 // (81920 * 8192)) == 57
    assert s.min_tp == 2
    # H200 (141 GB) still cannot hold 141.1 GB of bf16 weights plus the reserve on one GPU.
    assert not sz.size([c], "h200").fits[0].fits


def test_draft_and_speculative_roofline():
    t = comp("meta-llama/Llama-3.3-70B-Instruct")
    d = comp("meta-llama/Llama-3.2-1B-Instruct", "draft")
    assert d.params == llama_params(128256, 2048, 16, 8192, 32, 8, 64, tied=True) == 1_235_814_400
    s = sz.size([t, d], "h200", max_seq_len=8192, context=1024, step=sz.SpeculativeStep(3.0, draft_forwards=4),
                tp_sizes=(4,))  # fmt: skip
    f = s.fits[0]
    kv_t, kv_d = 327680 / 4, 2 * 16 * 2 * 64 * 2  # 8 KV heads over 4 ranks: 2 each
    assert f.kv_bytes_per_token_per_gpu == pytest.approx(kv_t + kv_d)
    tb = t.params * 2 / 4 + kv_t * 1024
    db = d.params * 2 / 4 + kv_d * 1024
    assert f.decode_tok_s_roofline == pytest.approx(4.8e12 / tb)
    assert f.decode_tok_s_spec_roofline == pytest.approx(3.0 * 4.8e12 / (tb + 4 * db))
    assert s.to_dict()["facts_sources"]["draft"].startswith("catalogue (")


def test_roofline_step_cost():
    c = comp("meta-llama/Llama-3.1-8B-Instruct")
    r = sz.roofline_for(c, sz.get_gpu("h100"), 2, tp=1, context=1024, mbu=1.0, mfu=1.0)
    mem = (c.params * 2 + 131072 * 1024) / 3.35e12
    per_token = 2 * c.params + 4 * 32 * 4096 * 1024  # FLOPs: weights + attention over 1024 tokens
    assert r.time(1, 1) == pytest.approx(mem + per_token / 989e12)
    # Batch 1: five tokens cost barely more than one (memory-bound) ...
    assert r.time(1, 5) / r.time(1, 1) < 1.02
    # ... at batch 512 the extra tokens are far from free (compute dominates).
    big_mem = (c.params * 2 + 512 * 131072 * 1024) / 3.35e12
    assert r.time(512, 5) == pytest.approx(big_mem + 512 * 5 * per_token / 989e12)
    assert r.time(512, 5) > 1.5 * r.time(512, 1)


def test_bad_inputs():
    with pytest.raises(UsageError, match="did you mean 'h100'"):
        sz.get_gpu("h10")
    with pytest.raises(UsageError):
        sz.dtype_bytes("float8")
    with pytest.raises(ModelError, match="no architecture facts"):
        sz.component_from_facts("target", "nobody/nothing", hub.ModelFacts(source="none"))
    assert sz.get_gpu("H200").memory_gb == 141


def test_recipe_components_use_the_catalogue_offline():
    from toolkit.bench.orchestrate.plan import recipe_components
    from toolkit.recipe import load_recipe

    comps = recipe_components(load_recipe("llama-3.1-8b-eagle3"), fetch="none")
    assert [c.role for c in comps] == ["target", "eagle_head"]
    assert comps[0].params == 8_030_261_248
    assert all(c.facts_source.startswith("catalogue (") for c in comps)
