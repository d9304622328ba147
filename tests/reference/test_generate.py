"""run_generate (the `sdtk generate` library call) and ReferenceRuntime.from_engine_dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import GenerationError, ModelError
from toolkit.generate import run_generate
from toolkit.recipe import parse_recipe
from toolkit.reference import ReferenceRuntime
from toolkit.reference.prompts import PROMPTS


def recipe(tiny: Path, tmp_path: Path, speculative: dict[str, Any], **models: str) -> Any:
    data = {
        "backend": "reference",
        "models": {"target": str(tiny / "target"), **{k: str(tiny / v) for k, v in models.items()}},
        "speculative": speculative,
    }
    return parse_recipe(data, path=tmp_path / "recipe.yaml")


def test_run_generate_draft_target_matches_baseline(tiny: Path, tmp_path: Path, runtime: Any) -> None:
    r = recipe(tiny, tmp_path, {"mode": "draft_target", "max_draft_len": 3}, draft="draft")
    spec = run_generate(
        r, PROMPTS[0], 24, no_speculation=False, temperature=0.0, top_k=0, top_p=1.0, seed=None
    )
    base = run_generate(
        r, PROMPTS[0], 24, no_speculation=True, temperature=0.0, top_k=0, top_p=1.0, seed=None
    )
    assert set(spec) == {"text", "token_ids", "stats", "mode", "finish_reason"}
    assert spec["mode"] == "draft_target" and base["mode"] == "none"
    assert spec["token_ids"] == base["token_ids"]
    assert spec["text"] == runtime.tokenizer.decode(spec["token_ids"], skip_special_tokens=True)
    assert spec["stats"]["tokens"] == len(spec["token_ids"])
    assert base["stats"]["steps"] == len(base["token_ids"])


def test_run_generate_relative_paths_and_sampling(tiny: Path, tmp_path: Path) -> None:
    r = recipe(tiny, tmp_path, {"mode": "ngram"})
    out = run_generate(r, PROMPTS[3], 16, no_speculation=False, temperature=0.8, top_k=20, top_p=0.9, seed=5)
    again = run_generate(
        r, PROMPTS[3], 16, no_speculation=False, temperature=0.8, top_k=20, top_p=0.9, seed=5
    )
    assert out["token_ids"] == again["token_ids"]


def test_run_generate_rejects_bad_requests(tiny: Path, tmp_path: Path) -> None:
    r = recipe(tiny, tmp_path, {"mode": "none"})
    with pytest.raises(GenerationError, match="empty"):
        run_generate(r, "", 8, no_speculation=False, temperature=0.0, top_k=0, top_p=1.0, seed=None)
    with pytest.raises(GenerationError, match="positive"):
        run_generate(r, "x", 0, no_speculation=False, temperature=0.0, top_k=0, top_p=1.0, seed=None)


def test_run_generate_offline_hub_id_is_a_model_error(tmp_path: Path) -> None:
    r = parse_recipe({"models": {"target": "sdtk-test/not-cached"}}, path=tmp_path / "r.yaml")
    with pytest.raises(ModelError, match="cannot fetch target") as info:
        run_generate(r, "x", 4, no_speculation=False, temperature=0.0, top_k=0, top_p=1.0, seed=None)
    assert "HF_HUB_OFFLINE" in (info.value.hint or "")


def test_from_engine_dir(tiny: Path, tmp_path: Path, runtime: Any, prompt_ids: list[list[int]]) -> None:
    engine = tmp_path / "engines" / "target"
    engine.mkdir(parents=True)
    config = {
        "version": "sdtk-reference-0.1.0",
        "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "float32"},
        "build_config": {"max_draft_len": 4, "speculative_decoding_mode": "eagle3"},
        "reference": {
            "role": "target",
            "checkpoint": str(tiny / "target"),
            "tokenizer": str(tiny / "target"),
            "draft": None,
            "medusa_heads": None,
            "eagle_head": str(tiny / "eagle3"),
            "speculative": {"mode": "eagle3", "max_draft_len": 4},
        },
    }
    (engine / "config.json").write_text(json.dumps(config))
    rt = ReferenceRuntime.from_engine_dir(engine)
    assert rt.spec.mode == "eagle3" and rt.spec.max_draft_len == 4
    got = rt.generate(prompt_ids[0], 20, end_id=-1)
    assert got.token_ids == runtime.generate(prompt_ids[0], 20, end_id=-1).token_ids
    assert len(got.stats.per_position_proposed) == 4  # the engine dir's chain of 4, not the default 3
