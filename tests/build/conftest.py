"""Fixtures for `sdtk build` tests: an isolated hub environment, tiny checkpoints, stand-in tools.

Stand-ins (TensorRT-LLM cannot be installed here): `trtllm-build`, the `convert_checkpoint.py`
scripts and `nvidia-smi` are small Python scripts that record their argv (JSON lines in
$SDTK_STANDIN_LOG) and write what the real tools would (a config.json, a rank0 file), and a
`tensorrt_llm-<version>.dist-info` makes `compat.installed_trtllm_version()` report a version.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tinyckpt as tiny  # noqa: E402
from standins import activate, make_standins  # noqa: E402

from toolkit import compat  # noqa: E402


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No real hub, token, GPU or TensorRT-LLM leaks into a test."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in (
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "TRTLLM_EXAMPLES_DIR",
        "CUDA_VISIBLE_DEVICES",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(compat, "installed_trtllm_version", lambda: None)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny-models")
    w = tiny.words(61)  # vocab 64 with the 3 specials
    return {
        "target": tiny.llama(d / "target", vocab_words=w, hidden=32, layers=4, heads=4, kv_heads=2),
        "draft": tiny.llama(d / "draft", vocab_words=w, hidden=16, layers=2, heads=2, kv_heads=1, seed=5),
        "draft_other": tiny.llama(d / "draft-other", vocab_words=tiny.words(45, "x"), hidden=16, layers=2,
                                  heads=2, kv_heads=1, seed=6),
        "medusa": tiny.medusa(d / "medusa", heads=4, hidden=32, vocab=64, config_heads=2),
        "medusa_narrow": tiny.medusa(d / "medusa-narrow", heads=4, hidden=16, vocab=64),
        "eagle3": tiny.eagle3(d / "eagle3", hidden=32, vocab=64, draft_vocab=48),
        "eagle3_badmap": tiny.eagle3(d / "eagle3-badmap", hidden=32, vocab=64, draft_vocab=48, d2t_shift=20),
        "eagle1": tiny.eagle1(d / "eagle1", hidden=32, vocab=64),
    }  # fmt: skip


MODES = {
    "none": ({}, {"mode": "none"}),
    "draft_target": ({"draft": "draft"}, {"mode": "draft_target", "max_draft_len": 4}),
    "medusa": ({"medusa_heads": "medusa"}, {"mode": "medusa", "num_medusa_heads": 4}),
    "eagle": ({"eagle_head": "eagle1"}, {"mode": "eagle", "max_draft_len": 63, "num_eagle_layers": 4,
                                         "max_non_leaves_per_layer": 10}),
    "eagle3": ({"eagle_head": "eagle3"}, {"mode": "eagle3", "max_draft_len": 3}),
    "lookahead": ({}, {"mode": "lookahead", "window": 4, "ngram": 3, "verification_set": 4}),
    "ngram": ({}, {"mode": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 2}),
}  # fmt: skip


@pytest.fixture
def make_recipe(tmp_path, models):
    """Write a recipe over the tiny checkpoints: make_recipe(mode, backend=..., **top-level overrides)."""

    def make(
        mode: str, *, backend: str = "reference", name: str | None = None, models_map=None, **extra
    ) -> Path:
        srcs, spec = MODES[mode]
        srcs = {**srcs, **(models_map or {})}
        data = {
            "name": name or f"tiny-{mode.replace('_', '-')}-{backend}",
            "backend": backend,
            "models": {"target": str(models["target"]), **{k: str(models[v]) for k, v in srcs.items()}},
            "speculative": spec,
            "dtype": "float16",
            "build": {"max_batch_size": 2, "max_input_len": 64, "max_seq_len": 128, "max_num_tokens": 256},
            **extra,
        }
        if mode == "draft_target" and backend == "engine":
            data.setdefault("serving", {"decoupled": False})
        path = tmp_path / "recipes" / f"{data['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return make


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """Stand-in TensorRT-LLM 1.1.0 tools on PATH (see standins.py)."""
    return activate(make_standins(tmp_path / "standins"), monkeypatch)
