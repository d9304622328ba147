"""Support-matrix cells and backend resolution, against the upstream facts toolkit/compat.py cites."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

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
        ("sa", False, True),  # SA: the PyTorch backend's, 1.3 line
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


# --------------------------------------------------------------------------- the engine path per release line
# NVIDIA/TensorRT-LLM PR #11723 (2026-02-25): DeprecationWarning in trtllm-build, convert_checkpoint.py and
# LLM(backend="tensorrt"); NGC 26.03-26.07 carry 1.2.0/1.2.1 with the engine path still shipped.
# PR #15907 (2026-07-03): the C++ backend and every TRT-engine template removed; PR #15918: the legacy TRT
# Python modules removed (both on the 1.3.0rc line).


@pytest.mark.parametrize("version", ["1.2.0rc2", "1.2.0", "1.2.1"])
def test_engine_path_runs_on_1_2_with_a_cited_deprecation(version):
    """1.2.0rc2 counts as a 1.2 (release tuple), not as a 1.1."""
    for mode in ("none", "draft_target", "medusa", "lookahead", "eagle"):
        c = compat.check(mode, "engine", version)
        (warning,) = compat.warnings(c, version)
        assert "PR #11723" in warning and version in warning
    r = compat.resolve_backend("medusa", "auto", recipe_version=version)
    assert r.backend == "engine" and r.warnings and "WARNING" in r.why and "#11723" in r.why
    r = compat.resolve_backend("draft_target", "auto", recipe_version=version)
    assert r.backend == "llmapi" and not r.warnings  # auto prefers the maintained path
    assert not compat.warnings(compat.cell("medusa", "engine"), "1.1.0")


@pytest.mark.parametrize(
    ("mode", "instead"),
    [("medusa", ("eagle3", "ngram", "SA")), ("lookahead", ("ngram", "SA")), ("eagle", ("eagle3", "ngram", "SA")),
     ("draft_target", ("backend: llmapi", "DraftTarget")), ("none", ("backend: llmapi",))],
)  # fmt: skip
@pytest.mark.parametrize("version", ["1.3.0", "1.3.0rc24"])
def test_engine_path_is_refused_on_1_3_with_the_cited_removal_and_a_fix_it(mode, instead, version):
    with pytest.raises(CompatError) as e:
        compat.check(mode, "engine", version)
    assert "PR #15907" in str(e.value) and "PR #15918" in str(e.value)
    assert all(word in e.value.hint for word in instead), e.value.hint
    if mode in ("medusa", "lookahead", "eagle"):  # no other GPU path: say where it still runs
        assert "TensorRT-LLM < 1.3 (NGC nvcr.io/nvidia/tritonserver:26.07" in e.value.hint and "reference" in e.value.hint


def test_compat_columns_per_release_line():
    assert compat.COLUMNS == ("1.1", "1.2", "1.3")
    assert compat.cell("medusa", "engine").to_dict()["by_version"] == {"1.1": "yes", "1.2": "deprecated", "1.3": "no"}
    assert compat.cell("eagle3", "llmapi").to_dict()["by_version"] == {"1.1": "yes", "1.2": "yes", "1.3": "yes"}
    assert compat.cell("eagle3", "engine").to_dict()["by_version"] == {"1.1": "no", "1.2": "no", "1.3": "no"}
    assert compat.cell("medusa", "reference").at("1.3") == "yes"
    note = compat.versions_note(compat.cell("lookahead", "engine"))
    assert "#11723" in note and "#15907" in note and "ngram" in note


def test_compat_command_shows_the_1_2_and_1_3_columns():
    from toolkit.cli import cli

    r = CliRunner().invoke(cli, ["compat", "--mode", "medusa", "--json"])
    assert r.exit_code == 0, r.output
    engine = next(c for c in json.loads(r.output) if c["backend"] == "engine")
    assert engine["by_version"]["1.2"] == "deprecated" and engine["by_version"]["1.3"] == "no"
    assert engine["versions"] == "<1.3" and engine["deprecated_from"] == "1.2"
    r = CliRunner().invoke(cli, ["compat", "--mode", "medusa"], terminal_width=250)
    header = next(line for line in r.output.splitlines() if "backend" in line)
    assert "1.1" in header and "1.2" in header and "1.3" in header
    assert "deprecated" in r.output


def test_engine_only_parallel_fields_on_llmapi_are_named_not_dropped_silently():
    """parallel.draft_tp / draft_device_ids / target_device_ids place the engine path's models
    (gpu_device_ids per tensorrt_llm model); the LLM API runs the draft inside the target's LLM()
    with its tensor_parallel_size, so on llmapi they are not rendered: the resolution says so."""
    base = {
        "models": {"target": "meta-llama/Llama-3.3-70B-Instruct", "draft": "meta-llama/Llama-3.2-1B-Instruct"},
        "speculative": {"mode": "draft_target", "max_draft_len": 4},
        "trtllm_version": "1.2.1",
    }
    placed = parse_recipe({**base, "backend": "llmapi", "parallel": {"tp": 4, "draft_tp": 1}})
    res = compat.check_recipe(placed)
    assert res.backend == "llmapi"
    assert any("parallel.draft_tp" in w and "not rendered" in w for w in res.warnings)
    assert "parallel.draft_tp" in res.why
    plain = compat.check_recipe(parse_recipe({**base, "backend": "llmapi", "parallel": {"tp": 4}}))
    assert not any("parallel." in w for w in plain.warnings)
    engine = parse_recipe({**base, "backend": "engine", "parallel": {"tp": 4, "draft_tp": 1},
                           "serving": {"decoupled": False}})  # fmt: skip
    assert not any("parallel." in w for w in compat.check_recipe(engine).warnings)
