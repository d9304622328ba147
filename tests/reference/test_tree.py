"""Tree attention and the EAGLE-3 head, checked numerically against sequential runs and ModelOpt."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.reference.core import Context, prune, tree_from_choices
from toolkit.reference.models import CachedLM, tree_mask
from toolkit.reference.sampling import SamplingParams


def test_tree_mask_and_depths() -> None:
    mask, depth = tree_mask([-1, 0, 0, 1, 2])
    assert depth == [0, 1, 1, 2, 2]
    assert mask[3].tolist() == [True, True, False, True, False]
    assert mask[4].tolist() == [True, False, True, False, True]


def test_prune_and_choices_order() -> None:
    ordered, parents = tree_from_choices([[1], [0, 0], [0], [0, 0, 0], [1, 0]])
    assert ordered == [[0], [1], [0, 0], [1, 0], [0, 0, 0]]
    assert parents == [-1, -1, 0, 1, 2]
    assert prune([5, 6, 7, 8, 9], parents, 2) == ([5, 6, 7, 8], [-1, -1, 0, 1])


def test_tree_forward_equals_sequential_forwards(runtime: Any, prompt_ids: list[list[int]]) -> None:
    lm = CachedLM(runtime.target.model, capture=[0, 1])
    ctx = prompt_ids[4]
    tokens, parents = [11, 12, 13, 14, 15, 16], [-1, 0, 0, 1, 2, 4]
    lm.forward(ctx, logits_from=len(ctx))
    tree = lm.forward(tokens, parents=parents, hidden=True, aux=True)
    paths = {0: [11], 1: [11, 12], 2: [11, 13], 3: [11, 12, 14], 4: [11, 13, 15], 5: [11, 13, 15, 16]}
    for node, path in paths.items():
        seq = CachedLM(runtime.target.model, capture=[0, 1]).forward(ctx + path, hidden=True, aux=True)
        for name in ("logits", "hidden", "aux"):
            a, b = getattr(seq, name)[-1], getattr(tree, name)[node]
            assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (node, name, float((a - b).abs().max()))
    # Keeping a path's KV and continuing equals running that path from scratch.
    lm.keep(len(ctx), [0, 2, 4])
    after = lm.forward([17]).logits[-1]
    seq = CachedLM(runtime.target.model).forward(ctx + [11, 13, 15, 17]).logits[-1]
    assert torch.allclose(after, seq, atol=1e-4, rtol=1e-4)


def test_eagle3_drafts_match_modelopt(tiny: Path, tmp_path: Path, prompt_ids: list[list[int]]) -> None:
    """A random EAGLE-3 module converted and exported by ModelOpt drafts the same chain in our runtime."""
    mtsp = pytest.importorskip("modelopt.torch.speculative")
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    from transformers import AutoModelForCausalLM

    from toolkit.reference.eagle3 import Eagle3Speculator, load_eagle3_head

    model = AutoModelForCausalLM.from_pretrained(tiny / "target", dtype=torch.float32)
    h = model.config.hidden_size
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    cfg["eagle_export_rope_scaling"] = {}  # run with the rope it was trained with
    cfg["eagle_use_torch_compile"] = False  # compiling per sequence length takes minutes on CPU
    cfg["eagle_architecture_config"].update(
        {
            "intermediate_size": 2 * h,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": h // 4,
            "draft_vocab_size": model.config.vocab_size // 2,
            "torch_dtype": "float32",
        }
    )
    mtsp.convert(model, [("eagle", cfg)])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.eagle_module.parameters():
            p.copy_(
                torch.randn(p.shape, generator=gen) * 0.2
                if p.dim() > 1
                else torch.rand(p.shape, generator=gen) + 0.5
            )
        v, dv = model.config.vocab_size, model.eagle_config.draft_vocab_size
        model.eagle_module.d2t.copy_(torch.randperm(v, generator=gen)[:dv].sort().values - torch.arange(dv))
    model.eval()
    model.get_exporter().export(tmp_path / "eagle3")
    base = AutoModelForCausalLM.from_pretrained(tiny / "target", dtype=torch.float32).eval()
    head = load_eagle3_head(tmp_path / "eagle3", base.config)
    head.embed = base.get_input_embeddings()
    lm = CachedLM(base, capture=head.capture)
    for ids in prompt_ids[:4]:
        with torch.no_grad():
            root, drafts = model.pseudo_speculative_generate(torch.tensor([ids]), steps=4)
        ctx = Context(tokens=[*ids, int(root)], target=lm, sampling=SamplingParams(), gen=None)
        lm.reset()
        with torch.inference_mode():
            speculator = Eagle3Speculator(head, tree_from_choices([[0] * d for d in range(1, 5)]))
            speculator.prefill(ctx, lm.forward(ids, aux=True))
            assert speculator.propose(ctx, 8).tokens == drafts[0].tolist()
