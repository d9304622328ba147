"""Checkpoint resolution and inspection (toolkit.hub) and the catalogue."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tinyckpt
import yaml

from toolkit import catalogue, hub
from toolkit.recipe import ModelSource

REPO = Path(__file__).resolve().parents[2]


def _hub_ids() -> set[str]:
    ids = set()
    for p in (REPO / "recipes").glob("*.yaml"):
        models = yaml.safe_load(p.read_text()).get("models", {})
        for v in models.values():
            repo = ModelSource.model_validate(
                v
            ).repo  # the schema's shorthand: paths and GGUF files have none
            if repo:
                ids.add(repo)
    return ids


def test_catalogue_covers_every_model_in_the_recipes():
    missing = [r for r in _hub_ids() if catalogue.lookup(r) is None]
    assert not missing
    for r in _hub_ids():
        entry = catalogue.lookup(r)
        assert entry["cite"] and entry["hidden_size"] and entry["vocab_size"] and entry["model_type"]


@pytest.mark.parametrize("repo", [n for n in catalogue.names() if catalogue.lookup(n).get("parameters")])
def test_parameter_formula_reproduces_published_counts(repo):
    facts = hub.facts_from_catalogue(catalogue.lookup(repo))
    published = facts.parameters
    facts.parameters = None
    assert hub.estimate_parameters(facts) == published


def _fake_cache(home: Path, repo: str, src: Path, sha: str = "a" * 40) -> Path:
    d = home / "hub" / f"models--{repo.replace('/', '--')}"
    snap = d / "snapshots" / sha
    shutil.copytree(src, snap)
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(sha)
    return snap


def test_resolve_from_the_hf_cache_offline(models, tmp_path):
    """HF_HOME and HF_HUB_OFFLINE are read at call time; the commit comes from the snapshot."""
    snap = _fake_cache(tmp_path / "hf-home", "sdtk-test/tiny", models["target"])
    r = hub.resolve(ModelSource(repo="sdtk-test/tiny"), role="target", fetch="full")
    assert r.path == snap and r.commit == "a" * 40 and r.how == "hub cache" and r.weights
    assert r.facts.source == "config.json" and r.facts.num_hidden_layers == 4 and r.facts.dtype == "float32"
    assert r.tokenizer.vocab_size == 64 and r.tokenizer.bos_token_id == 1 and r.tokenizer.eos_token_id == 2
    pinned = hub.resolve(ModelSource(repo="sdtk-test/tiny", revision="a" * 40), role="target", fetch="none")
    assert pinned.path == snap


def test_unresolved_offline_uses_the_catalogue(tmp_path):
    r = hub.resolve(ModelSource(repo="lmsys/vicuna-7b-v1.3"), role="target")
    assert not r.resolved and "HF_HUB_OFFLINE" in r.reason and str(tmp_path / "hf-home" / "hub") in r.reason
    assert r.facts.source == "catalogue" and r.facts.num_hidden_layers == 32 and "vicuna" in r.facts.cite
    unknown = hub.resolve(ModelSource(repo="sdtk-test/unknown"), role="target")
    assert unknown.facts.source == "none" and unknown.to_dict()["facts_source"] == "none"


def test_local_path_missing():
    r = hub.resolve(ModelSource(path="/no/such/dir"), role="draft")
    assert not r.resolved and "no such directory" in r.reason


def test_tokenizer_fingerprints(models):
    t = hub.inspect_tokenizer(models["target"])
    d = hub.inspect_tokenizer(models["draft"])
    o = hub.inspect_tokenizer(models["draft_other"])
    assert t.fingerprint == d.fingerprint and t.vocab_size == 64
    assert o.fingerprint != t.fingerprint and o.vocab_size == 48


def test_tokenizer_model_file_hash(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"spm-bytes")
    (tmp_path / "config.json").write_text('{"vocab_size": 32000, "bos_token_id": 1}')
    t = hub.inspect_tokenizer(tmp_path)
    assert t.kind == "tokenizer.model (file hash)" and t.vocab_size == 32000 and not t.comparable


def test_head_readers(models):
    assert hub.medusa_heads(models["medusa"]) == {"num_heads": 4, "hidden_size": 32, "vocab_size": 64}
    m = hub.eagle3_vocab_map(models["eagle3"])
    assert m["d2t_len"] == 48 and m["min_target_id"] == 2 and m["max_target_id"] == 49 and m["t2d_len"] == 64
    facts = hub.resolve(ModelSource(path=str(models["eagle3"])), role="eagle_head").facts
    assert facts.head_kind == "eagle3" and facts.draft_vocab_size == 48 and facts.parameters_estimated


def test_medusa_facts_prefer_the_weights(models):
    f = hub.resolve(ModelSource(path=str(models["medusa"])), role="medusa_heads").facts
    assert f.head_kind == "medusa" and f.medusa_num_heads == 4 and f.medusa_num_heads_config == 2
    assert f.hidden_size == 32 and f.vocab_size == 64


def test_parameter_estimate_of_a_tiny_llama(tmp_path):
    d = tinyckpt.llama(tmp_path / "m", vocab_words=tinyckpt.words(13), hidden=8, layers=1, heads=2, kv_heads=1,
                       inter=16)  # fmt: skip
    facts = hub.resolve(ModelSource(path=str(d)), role="target").facts
    index = hub.safetensors_index(d)
    counted = sum(int(__import__("math").prod(t.shape)) for t in index.values())
    assert facts.parameters == counted


def test_corrupt_safetensors_is_skipped_not_a_memory_error(tmp_path):
    """A file whose first 8 bytes are not a header length (here text: ~7e18 bytes) is not read;
    the other files of the directory still are."""
    d = tinyckpt.llama(tmp_path / "m", vocab_words=tinyckpt.words(13), hidden=8, layers=1, heads=2, kv_heads=1,
                       inter=16)  # fmt: skip
    good = hub.safetensors_index(d)
    (d / "zz-corrupt.safetensors").write_bytes(b"not safetensors")
    assert hub.safetensors_index(d) == good and good


def test_modelopt_export_layouts(models, tmp_path):
    """The layouts scripts/train_tiny_models.py writes: Medusa heads in model.safetensors with a
    medusa_lm_head.safetensors symlink and hidden/vocab in config.json; EAGLE-3 capture layers under
    eagle_config.eagle_aux_hidden_state_layer_ids."""
    import json
    import os

    m = tmp_path / "medusa"
    shutil.copytree(models["medusa"], m)
    (m / "medusa_lm_head.safetensors").rename(m / "model.safetensors")
    os.symlink("model.safetensors", m / "medusa_lm_head.safetensors")
    (m / "config.json").write_text(json.dumps({"architectures": ["MedusaModel"], "medusa_num_heads": 4,
                                               "medusa_num_layers": 1, "hidden_size": 32, "vocab_size": 64}))  # fmt: skip
    f = hub.resolve(ModelSource(path=str(m)), role="medusa_heads").facts
    assert (f.head_kind, f.medusa_num_heads, f.hidden_size, f.vocab_size) == ("medusa", 4, 32, 64)

    e = tmp_path / "eagle3"
    shutil.copytree(models["eagle3"], e)
    cfg = json.loads((e / "config.json").read_text())
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    (e / "config.json").write_text(json.dumps(cfg))
    f = hub.resolve(ModelSource(path=str(e)), role="eagle_head").facts
    assert f.layers_to_capture == [1, 2, 3] and f.head_kind == "eagle3"
