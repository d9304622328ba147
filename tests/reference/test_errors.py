"""Bad requests and broken checkpoints fail with the right error class, a clear message and a hint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.errors import CompatError, GenerationError, ModelError
from toolkit.recipe import Eagle, Medusa
from toolkit.reference import ReferenceRuntime


def test_empty_prompt(runtime: Any) -> None:
    with pytest.raises(GenerationError, match="prompt is empty") as info:
        runtime.generate([], 8)
    assert info.value.hint


@pytest.mark.parametrize("n", [0, -3])
def test_non_positive_max_tokens(runtime: Any, prompt_ids: list[list[int]], n: int) -> None:
    with pytest.raises(GenerationError, match="max_new_tokens must be positive"):
        runtime.generate(prompt_ids[0], n)


def test_context_overflow(runtime: Any, prompt_ids: list[list[int]]) -> None:
    ids = prompt_ids[0]
    with pytest.raises(GenerationError, match="exceeds the model's context") as info:
        runtime.generate(ids, runtime.max_context - len(ids) + 1)
    assert "shorten" in (info.value.hint or "")
    with pytest.raises(GenerationError, match="exceeds the model's context"):
        runtime.generate([ids[0]] * (runtime.max_context + 1), 1)


def test_token_outside_vocabulary(runtime: Any) -> None:
    with pytest.raises(GenerationError, match="outside the vocabulary"):
        runtime.generate([runtime.target.config.vocab_size], 4)


def test_eagle_1_2_is_not_implemented(runtime: Any, prompt_ids: list[list[int]]) -> None:
    with pytest.raises(CompatError, match="EAGLE-1/2"):
        runtime.generate(prompt_ids[0], 4, spec=Eagle(mode="eagle"))


def test_medusa_tree_deeper_than_heads(runtime: Any, prompt_ids: list[list[int]]) -> None:
    deep = [[0] * d for d in range(1, len(runtime.weights["medusa_heads"]) + 2)]
    with pytest.raises(GenerationError, match="deep"):
        runtime.generate(prompt_ids[0], 4, spec=Medusa(mode="medusa", medusa_choices=deep))


def test_missing_target_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist") as info:
        ReferenceRuntime.load(tmp_path / "nope")
    assert info.value.hint


def test_missing_config(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no config.json"):
        ReferenceRuntime.load(tmp_path)


def test_missing_weights(tiny: Path, tmp_path: Path) -> None:
    shutil.copy(tiny / "target" / "config.json", tmp_path / "config.json")
    with pytest.raises(ModelError, match="no weight file") as info:
        ReferenceRuntime.load(tmp_path)
    assert "incomplete" in (info.value.hint or "")


def test_mode_without_its_model(tiny: Path) -> None:
    with pytest.raises(ModelError, match="needs a medusa_heads checkpoint"):
        ReferenceRuntime.load(tiny / "target", spec=Medusa(mode="medusa"))


def test_draft_with_another_vocabulary(tiny: Path, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "draft")
    with pytest.raises(ModelError, match="draft vocab_size 97 differs"):
        ReferenceRuntime.load(tiny / "target", {"draft": tmp_path / "draft"})


def test_medusa_heads_of_another_width(tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    vocab = json.loads((tiny / "target" / "config.json").read_text())["vocab_size"]
    d = tmp_path / "medusa"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"medusa_num_heads": 1, "medusa_num_layers": 1}))
    save_file(
        {
            "0.0.linear.weight": torch.zeros(8, 8),
            "0.0.linear.bias": torch.zeros(8),
            "0.1.weight": torch.zeros(vocab, 8),
        },
        str(d / "model.safetensors"),
    )
    with pytest.raises(ModelError, match="hidden_size 8 does not fit"):
        ReferenceRuntime.load(tiny / "target", {"medusa_heads": d})


def test_eagle3_capture_layers_that_do_not_fit(tiny: Path, runtime: Any) -> None:
    from toolkit.recipe import Eagle3

    layers = [0, 1, runtime.target.config.num_hidden_layers + 5]
    with pytest.raises(ModelError, match="cannot capture layer|layers are captured") as info:
        ReferenceRuntime.load(
            tiny / "target",
            {"eagle_head": tiny / "eagle3"},
            spec=Eagle3(mode="eagle3", layers_to_capture=layers),
        )
    assert "layers_to_capture" in (info.value.hint or "")


def test_engine_dir_without_reference_section(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"version": "1", "pretrained_config": {}}))
    with pytest.raises(ModelError, match="no `reference` section"):
        ReferenceRuntime.from_engine_dir(tmp_path)


def test_engine_dir_missing(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no engine config"):
        ReferenceRuntime.from_engine_dir(tmp_path / "engines" / "target")
