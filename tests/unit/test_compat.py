"""Support-matrix cells and backend resolution, against trtllm-speculative.md §0-§4."""

from __future__ import annotations

import pytest

from toolkit import compat
from toolkit.errors import CompatError
from toolkit.recipe import MODES, parse_recipe


def test_every_mode_backend_pair_has_a_cell():
    for mode in MODES:
        for backend in ("engine", "llmapi", "reference"):
            c = compat.cell(mode, backend)
            assert c.reason
            if not c.supported:
                assert c.fix, (mode, backend)


@pytest.mark.parametrize(
    ("mode", "engine", "llmapi"),
    [
        ("none", True, True),
        ("draft_target", True, True),
        ("eagle3", False, True),  # EAGLE-3 exists only in the PyTorch backend
        ("eagle", True, False),  # EAGLE-1/2: engine only
        ("medusa", True, False),
        ("lookahead", True, False),
        ("ngram", False, True),
    ],
)
def test_support(mode, engine, llmapi):
    assert compat.cell(mode, "engine").supported is engine
    assert compat.cell(mode, "llmapi").supported is llmapi


def test_trtllm_names():
    assert compat.cell("draft_target", "engine").trtllm_name == "draft_tokens_external"
    assert compat.cell("lookahead", "engine").trtllm_name == "lookahead_decoding"
    assert compat.cell("medusa", "engine").trtllm_name == "medusa"
    assert compat.cell("eagle", "engine").trtllm_name == "eagle"
    assert compat.cell("eagle3", "llmapi").trtllm_name == "Eagle3"
    assert compat.cell("ngram", "llmapi").trtllm_name == "NGram"
    assert compat.cell("draft_target", "llmapi").trtllm_name == "DraftTarget"


def test_reference_runs_everything_but_eagle1():
    for mode in MODES:
        assert compat.cell(mode, "reference").supported is (mode != "eagle")


def test_versions():
    compat.check("medusa", "engine", "1.1.0")
    with pytest.raises(CompatError, match="1.3.0 has no engine path"):
        compat.check("medusa", "engine", "1.3.0")
    compat.check("eagle3", "llmapi", "1.0.0")
    with pytest.raises(CompatError, match="older than 1.0"):
        compat.check("eagle3", "llmapi", "0.21.0")


def test_families():
    compat.check("eagle", "engine", "1.1.0", "llama")
    with pytest.raises(CompatError, match="family 'qwen2'") as e:
        compat.check("eagle", "engine", "1.1.0", "qwen2")
    assert e.value.hint
    compat.check("medusa", "engine", None, "qwen2")
    with pytest.raises(CompatError):
        compat.check("medusa", "engine", None, "gemma")


def test_eagle3_on_engine_has_fix():
    with pytest.raises(CompatError) as e:
        compat.check("eagle3", "engine")
    assert "llmapi" in e.value.hint


def test_auto_prefers_llmapi_and_says_why():
    r = compat.resolve_backend("draft_target", "auto")
    assert r.backend == "llmapi" and "auto" in r.why and r.version_source == "none"
    r = compat.resolve_backend("draft_target", "auto", installed_version="0.21.0")
    assert r.backend == "engine" and "installed TensorRT-LLM 0.21.0" in r.why
    r = compat.resolve_backend("medusa", "auto", recipe_version="1.1.0")
    assert r.backend == "engine" and r.version_source == "recipe"
    # the installed version wins over the recipe's declaration
    r = compat.resolve_backend("ngram", "auto", recipe_version="0.21.0", installed_version="1.1.0")
    assert r.backend == "llmapi" and r.version == "1.1.0"


def test_auto_fails_with_every_reason():
    with pytest.raises(CompatError) as e:
        compat.resolve_backend("medusa", "auto", installed_version="1.3.0")
    assert "llmapi:" in str(e.value) and "engine:" in str(e.value)
    assert "reference" in e.value.hint


def test_engine_specific_rules():
    base = {"models": {"target": "a/b", "eagle_head": "c/d"}, "backend": "engine",
            "speculative": {"mode": "eagle"}}
    compat.check_recipe(parse_recipe(base))
    with pytest.raises(CompatError, match="pipeline"):
        compat.check_recipe(parse_recipe({**base, "parallel": {"pp": 2}}))
    with pytest.raises(CompatError, match="512"):
        compat.check_recipe(parse_recipe({**base, "build": {"max_batch_size": 1024}}))
    dt = {"models": {"target": "a/b", "draft": "c/d"}, "backend": "engine", "speculative": {"mode": "draft_target"}}
    with pytest.raises(CompatError, match="decoupled"):
        compat.check_recipe(parse_recipe(dt))
    compat.check_recipe(parse_recipe({**dt, "serving": {"decoupled": False}}))


def test_installed_version_absent_here():
    assert compat.installed_trtllm_version() is None
