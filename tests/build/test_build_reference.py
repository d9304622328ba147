"""Reference-backend builds on real (tiny) files: engine dirs in the docs/contracts.md layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standins import quiet

from toolkit import __version__
from toolkit.build import build
from toolkit.hub import has_weights
from toolkit.recipe import load_recipe
from toolkit.repo import read_engine

REPO = Path(__file__).resolve().parents[2]
LEAD_TINY = sorted((REPO / "recipes").glob("tiny-*.yaml"))
FIXTURE_MODES = ["none", "draft_target", "medusa", "eagle3", "lookahead", "ngram"]
SPEC_NAMES = {
    "none": None, "draft_target": "draft_tokens_external", "medusa": "medusa", "eagle3": "eagle3",
    "lookahead": "lookahead_decoding", "ngram": "ngram", "eagle": "eagle",
    # model-free or one-model modes that no TensorRT engine builds (llmapi or reference only)
    "sa": None, "pard": None, "mtp": None,
}  # fmt: skip


def _check_engine_dir(d: Path, recipe, role: str) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    llmapi = {"llmapi"} if recipe.repository_layout("reference") == "llmapi" else set()
    assert set(cfg) == {"version", "pretrained_config", "build_config", "reference", *llmapi}
    if llmapi:  # the LLM-API options the llmapi backend writes, for the same model.yaml template
        assert (d / "extra_llm_api_options.yaml").is_file()
    assert cfg["version"] == f"sdtk-reference-{__version__}"
    pc, bc, ref = cfg["pretrained_config"], cfg["build_config"], cfg["reference"]
    for key in (
        "architecture",
        "dtype",
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "mapping",
        "quantization",
    ):
        assert key in pc, key  # fmt: skip
    # The draft length is stated once: in the recipe section the runtime reads (below), under
    # neither of trtllm-build's keys.
    assert "max_draft_len" not in pc and "max_draft_len" not in bc
    assert pc["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1}
    # What the reference runtime computes in: the recipe's dtype, float32 for auto (not the checkpoint's).
    assert pc["dtype"] == ("float32" if recipe.dtype == "auto" else recipe.dtype)
    assert pc["quantization"] == {"quant_algo": None, "kv_cache_quant_algo": None}
    assert (
        bc["max_batch_size"] == recipe.build.max_batch_size and bc["max_seq_len"] == recipe.build.max_seq_len
    )
    assert (
        bc["max_input_len"] == recipe.build.max_input_len
        and bc["max_num_tokens"] == recipe.build.max_num_tokens
    )
    assert bc["plugin_config"] == {}
    target = role == "target"
    assert bc["speculative_decoding_mode"] == (SPEC_NAMES[recipe.mode] if target else None)
    # What deploy reads as the engine's draft length (render's serving checks): from that section.
    assert read_engine(d, role).max_draft_len == (recipe.speculative.draft_len if target else 0)
    assert ref["role"] == role
    assert ref["speculative"] == recipe.speculative.model_dump(mode="json")
    assert ref["inflate"] == (recipe.reference.inflate if target else 1)  # the memory-bound twin
    for key in ("checkpoint", "tokenizer", "draft", "medusa_heads", "eagle_head"):
        assert ref[key] is None or (Path(ref[key]).is_absolute() and Path(ref[key]).is_dir()), key
    return cfg


@pytest.mark.parametrize("mode", FIXTURE_MODES)
def test_reference_build_of_fixture_recipes(make_recipe, models, mode):
    path = make_recipe(mode)
    recipe = load_recipe(path)
    r = build(path, progress=quiet)
    assert r.backend == "reference" and not r.dry_run
    target = _check_engine_dir(Path(r.outputs["target"]), recipe, "target")
    assert target["reference"]["checkpoint"] == str(models["target"])
    assert (
        target["pretrained_config"]["vocab_size"] == 64 and target["pretrained_config"]["hidden_size"] == 32
    )
    if mode == "draft_target":
        assert target["reference"]["draft"] == str(models["draft"])
        draft = _check_engine_dir(Path(r.outputs["draft"]), recipe, "draft")
        assert draft["reference"]["checkpoint"] == str(models["draft"])
        assert draft["pretrained_config"]["hidden_size"] == 16
    else:
        assert list(r.outputs) == ["target"]
    head = {"medusa": "medusa_heads", "eagle3": "eagle_head"}.get(mode)
    if head:
        assert target["reference"][head] == str(models["medusa" if mode == "medusa" else "eagle3"])
    summary = json.loads(Path(r.build_json).read_text())
    statuses = {c["name"]: c["status"] for c in summary["preflight"]}
    assert statuses["target-tokenizer"] == "passed"
    assert "failed" not in statuses.values()
    assert all(s["facts_source"] == "config.json" for s in summary["sources"])


@pytest.mark.parametrize("path", LEAD_TINY, ids=[p.stem for p in LEAD_TINY])
def test_reference_build_of_bundled_tiny_recipes(path, tmp_path):
    recipe = load_recipe(path)
    sources = (
        recipe.models.target,
        recipe.models.draft,
        recipe.models.medusa_heads,
        recipe.models.eagle_head,
    )
    missing = [
        s.path for s in sources
        if s is not None and s.path is not None
        and not ((recipe.local_path(s) / "config.json").exists() and has_weights(recipe.local_path(s)))
    ]  # fmt: skip
    assert not missing, f"tiny models without weights (models/tiny is committed): {missing}"
    r = build(recipe, backend="reference", workdir=tmp_path / "wd", progress=quiet)
    cfg = _check_engine_dir(Path(r.outputs["target"]), recipe, "target")
    assert cfg["reference"]["checkpoint"] == str(recipe.local_path(recipe.models.target))
    assert all(c["status"] != "failed" for c in r.preflight)


def test_recipe_relative_paths_and_tokenizer_override(tmp_path, models):
    """Relative model paths resolve against the recipe file; models.tokenizer is recorded."""
    rdir = tmp_path / "r"
    rdir.mkdir()
    import shutil

    shutil.copytree(models["target"], tmp_path / "ckpt")
    (rdir / "t.yaml").write_text(
        f"backend: reference\nmodels:\n  target: ../ckpt\n  tokenizer: {models['draft']}\n"
    )
    r = build(rdir / "t.yaml", workdir=tmp_path / "wd", progress=quiet)
    cfg = json.loads((Path(r.outputs["target"]) / "config.json").read_text())
    assert cfg["reference"]["checkpoint"] == str(tmp_path / "ckpt")
    assert cfg["reference"]["tokenizer"] == str(models["draft"])
    assert Path(r.outputs["target"]) == tmp_path / "wd" / "t" / "engines" / "target"
