"""A draft model stored without its tied embedding (config.json `sdtk_embedding_from_target`), the
way scripts/train_smollm2_drafts.py ships SmolLM2's: draft-target training keeps the target's
embedding frozen and exports the rest alone; the reference runtime's loader copies the target's
embedding back, and draft-target decoding with it is lossless. Random tiny Llama models (tied
embeddings, the tiny family's tokenizer), built in a temp dir: seconds, no training quality asked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ModelError
from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET, EMBEDDING_KEYS
from toolkit.reference.draft_target import load_draft_lm

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "models" / "tiny" / "target"


def _llama(out: Path, hidden: int, layers: int, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=2048, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(str(out))
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (TOKENIZER / f).exists():
            shutil.copy2(TOKENIZER / f, out / f)
    return model


def _cut(target: Any, out: Path) -> Path:
    """The target's first decoder layer and final norm, stored without the embedding."""
    import copy

    import torch

    m = copy.deepcopy(target)
    m.model.layers = torch.nn.ModuleList(list(m.model.layers)[:1])
    m.config.num_hidden_layers = 1
    if getattr(m.config, "layer_types", None):
        m.config.layer_types = m.config.layer_types[:1]
    setattr(m.config, EMBEDDING_FROM_TARGET, True)
    m.save_pretrained(
        str(out), state_dict={k: v for k, v in m.state_dict().items() if k not in EMBEDDING_KEYS}
    )
    return out


def _keys(d: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(d / "model.safetensors"), "pt") as f:
        return set(f.keys())


def test_trained_and_exported_without_the_embedding_then_lossless(tmp_path: Path) -> None:
    import torch

    from toolkit.recipe import DraftTarget, NoSpeculation
    from toolkit.reference import ReferenceRuntime
    from toolkit.train import data as data_mod
    from toolkit.train.api import TrainOptions
    from toolkit.train.trainers import train

    target = _llama(tmp_path / "target", 64, 3, seed=0)
    init = _cut(target, tmp_path / "init")
    assert not _keys(init) & EMBEDDING_KEYS
    examples = [data_mod.Example("p", list(range(3, 40)), list(range(40, 90, 2))) for _ in range(4)]
    opts = TrainOptions(
        data="x", out=tmp_path / "work", from_=init, max_steps=2, checkpoint_every=2, batch_size=2,
        seq_len=16, lr=1e-2, threads=1, progress=False,
    )  # fmt: skip
    res = train("draft_target", tmp_path / "target", None, examples, opts, tmp_path / "draft", "h")
    assert res["steps"] == 2
    assert "the target's, frozen and not stored" in res["trainer"]
    out = tmp_path / "draft"
    assert json.loads((out / "config.json").read_text())[EMBEDDING_FROM_TARGET] is True
    assert not _keys(out) & EMBEDDING_KEYS and _keys(out)  # the layers and the norm, no embedding
    assert not (out / "tokenizer.json").exists()
    assert res["export"]["stored_params"] == res["export"]["params"] - 2048 * 64

    draft = load_draft_lm(out, target)
    assert torch.equal(draft.get_input_embeddings().weight, target.get_input_embeddings().weight)
    assert draft.get_output_embeddings().weight is draft.get_input_embeddings().weight
    trained = load_draft_lm(init, target)  # the init differs from the export: training moved the layers
    assert not torch.equal(
        trained.model.layers[0].mlp.up_proj.weight, draft.model.layers[0].mlp.up_proj.weight.float()
    )

    rt = ReferenceRuntime.load(tmp_path / "target", {"draft": out})
    prompt = list(range(5, 25))
    plain = rt.generate(prompt, 24, spec=NoSpeculation())
    spec = rt.generate(prompt, 24, spec=DraftTarget(mode="draft_target", max_draft_len=3))
    assert list(spec.token_ids) == list(plain.token_ids) and len(plain.token_ids) == 24
    assert spec.stats.steps <= plain.stats.steps


def test_a_target_of_another_shape_is_refused(tmp_path: Path) -> None:
    target = _llama(tmp_path / "target", 64, 2, seed=0)
    other = _llama(tmp_path / "other", 32, 1, seed=1)
    draft = _cut(target, tmp_path / "draft")
    with pytest.raises(
        ModelError, match=rf"{EMBEDDING_FROM_TARGET}.*embedding \(2048, 64\) != the target's \(2048, 32\)"
    ):
        load_draft_lm(draft, other)
    assert load_draft_lm(draft, target).config.num_hidden_layers == 1


def test_the_reference_build_gives_the_served_draft_the_targets_embedding(tmp_path: Path) -> None:
    """The draft's own engine directory (the served draft-target draft, a model of its own) names
    the target's checkpoint for its embedding and tokenizer; loaded as the serving side loads it
    (toolkit.serving.reference.load_runtime, whose module needs Triton: its call is repeated here),
    its logits equal the in-process loader's. Without `embedding_from` it is refused, not loaded
    with a random embedding."""
    import torch

    from toolkit.build import build
    from toolkit.recipe import parse_recipe
    from toolkit.reference import ReferenceRuntime

    target = _llama(tmp_path / "target", 64, 2, seed=0)
    draft = _cut(target, tmp_path / "draft")
    recipe = parse_recipe(
        {
            "backend": "reference",
            "models": {"target": str(tmp_path / "target"), "draft": str(draft)},
            "speculative": {"mode": "draft_target", "max_draft_len": 2},
            "dtype": "float32",
            "build": {"max_input_len": 64, "max_seq_len": 128},
        },
        path=tmp_path / "r.yaml",
    )
    r = build(recipe, workdir=tmp_path / "wd", progress=lambda _: None)
    ref = json.loads((Path(r.outputs["draft"]) / "config.json").read_text())["reference"]
    assert ref["embedding_from"] == ref["tokenizer"] == str(tmp_path / "target")
    assert (
        "embedding_from"
        not in json.loads((Path(r.outputs["target"]) / "config.json").read_text())["reference"]
    )
    served = ReferenceRuntime.load(
        target=Path(ref["checkpoint"]),
        tokenizer=Path(ref["tokenizer"]),
        embedding_from=Path(ref["embedding_from"]),
    )
    ids = torch.tensor([list(range(5, 20))])
    with torch.no_grad():
        assert torch.equal(
            served.target.model(input_ids=ids).logits, load_draft_lm(draft, target)(input_ids=ids).logits
        )
    with pytest.raises(ModelError, match="stored without its embedding"):
        ReferenceRuntime.load(target=draft)
