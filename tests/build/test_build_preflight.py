"""Preflight failures: each one names both sides and the fix, and carries every check record."""

from __future__ import annotations

import time

import pytest
from standins import quiet

from toolkit.build import PreflightFailed, build
from toolkit.build import preflight as pf
from toolkit.build.core import choose_backend
from toolkit.errors import PreflightError, RecipeError
from toolkit.recipe import load_recipe


def _failed(exc: PreflightFailed, name: str) -> dict:
    return next(r.to_dict() for r in exc.results if r.name == name)


def test_draft_with_another_tokenizer(make_recipe, models):
    path = make_recipe("draft_target", models_map={"draft": "draft_other"})
    with pytest.raises(PreflightFailed) as e:
        build(path, progress=quiet)
    msg = str(e.value)
    assert e.value.check == "vocab-size"
    assert str(models["draft_other"]) in msg and str(models["target"]) in msg
    assert "48" in msg and "64" in msg
    tok = _failed(e.value, "tokenizer-match")
    assert tok["status"] == "failed" and "fingerprint" in tok["detail"] and tok["hint"]
    assert "same model family" in e.value.hint or "same tokenizer" in e.value.hint


def test_medusa_head_with_the_wrong_width(make_recipe, models):
    path = make_recipe("medusa", models_map={"medusa_heads": "medusa_narrow"})
    with pytest.raises(PreflightFailed) as e:
        build(path, progress=quiet)
    heads = _failed(e.value, "medusa-heads")
    assert heads["status"] == "failed"
    assert "16 wide" in heads["detail"] and "hidden_size 32" in heads["detail"]
    assert str(models["medusa_narrow"]) in heads["detail"] and str(models["target"]) in heads["detail"]
    assert "trained for this target" in heads["hint"]


def test_medusa_more_heads_than_the_checkpoint(make_recipe):
    spec = {"mode": "medusa", "num_medusa_heads": 5, "medusa_choices": [[0], [0, 0]]}
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("medusa", speculative=spec), progress=quiet)
    assert "uses 5 Medusa heads" in _failed(e.value, "medusa-heads")["detail"]


def test_medusa_reads_head_count_from_weights_not_config(make_recipe):
    """The tiny heads' config.json says 2 heads (like medusa-vicuna-7b-v1.3) but the weights hold 4."""
    r = build(make_recipe("medusa"), progress=quiet)
    heads = next(c for c in r.preflight if c["name"] == "medusa-heads")
    assert (
        heads["status"] == "passed"
        and "4 heads" in heads["detail"]
        and "config.json says 2" in heads["detail"]
    )


def test_lookahead_formula_mismatch_direct_preflight_call(make_recipe):
    """The schema rejects the mismatch at load time; preflight recomputes it for recipes built in code."""
    recipe = load_recipe(make_recipe("lookahead"))
    recipe.speculative.max_draft_len = 99  # assignment is not validated: the case preflight exists for
    with pytest.raises(PreflightFailed) as e:
        build(recipe, progress=quiet)
    assert e.value.check == "lookahead-draft-len"
    assert "99" in str(e.value) and "= 15" in str(e.value)
    assert e.value.hint == "set speculative.max_draft_len: 15 or drop it"


def test_lookahead_formula_mismatch_via_set_is_a_recipe_error(make_recipe):
    with pytest.raises(RecipeError) as e:
        load_recipe(make_recipe("lookahead"), ["speculative.max_draft_len=99"])
    assert "speculative.max_draft_len" in str(e.value)


def test_eagle3_on_engine(make_recipe, standins):
    """Stand-in TRT-LLM 1.1.0 installed: EAGLE-3 exists only on the PyTorch path."""
    with pytest.raises(PreflightError) as e:
        build(make_recipe("eagle3", backend="engine"), progress=quiet)
    assert e.value.check == "backend" and "eagle3" in str(e.value)
    assert "llmapi" in e.value.hint


def test_eagle3_on_engine_dry_run_too(make_recipe):
    with pytest.raises(PreflightError) as e:
        build(make_recipe("eagle3", backend="engine"), dry_run=True, progress=quiet)
    assert e.value.check == "backend"


def test_eagle3_official_layer_convention_is_caught(make_recipe):
    """Target has L=4 layers: official EAGLE {2, L//2, L-3} = [1, 2, 2]... use L where they differ."""
    # With L=4 the official set {2, 2, 1} is not three distinct ids; check the rule on L=32 directly.
    assert pf.eagle3_default_layers(32) == [1, 15, 28]
    spec = {"mode": "eagle3", "max_draft_len": 3, "layers_to_capture": [0, 1, 9]}
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("eagle3", speculative=spec), progress=quiet)
    assert e.value.check == "eagle3-layers" and "0..3" in str(e.value)


def test_eagle3_layer_off_by_one_hint(make_recipe, models, tmp_path):
    import tinyckpt

    deep = tinyckpt.llama(tmp_path / "deep", vocab_words=tinyckpt.words(61), layers=12)
    spec = {"mode": "eagle3", "max_draft_len": 3, "layers_to_capture": [2, 6, 9]}  # official: {2, L//2, L-3}
    path = make_recipe("eagle3", speculative=spec)
    recipe = load_recipe(path)
    recipe.models.target.path = str(deep)
    with pytest.raises(PreflightFailed) as e:
        build(recipe, progress=quiet)
    assert e.value.check == "eagle3-layers"
    assert "official EAGLE convention" in str(e.value) and e.value.hint.endswith(
        "[1, 5, 8] (or drop it to use the default)"
    )


def test_eagle3_bad_vocab_map(make_recipe):
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("eagle3", models_map={"eagle_head": "eagle3_badmap"}), progress=quiet)
    assert e.value.check == "eagle3-vocab-map" and "target id 69" in str(e.value)


def test_offline_with_a_missing_cache(make_recipe, tmp_path):
    """HF_HUB_OFFLINE=1 and an empty HF_HOME (the autouse fixture): a real build names the repo,
    the cache and the fix; it never reaches the network."""
    path = tmp_path / "hub.yaml"
    path.write_text("backend: reference\nmodels:\n  target: sdtk-test/not-cached\n")
    with pytest.raises(PreflightFailed) as e:
        build(path, progress=quiet)
    assert e.value.check == "source:target"
    assert "sdtk-test/not-cached" in str(e.value) and "HF_HUB_OFFLINE" in str(e.value)
    assert str(tmp_path / "hf-home" / "hub") in str(e.value)
    assert "hf download sdtk-test/not-cached" in e.value.hint


def test_gpu_backend_without_tensorrt_llm_fails_fast(make_recipe):
    t0 = time.monotonic()
    with pytest.raises(PreflightError) as e:
        build(make_recipe("medusa", backend="engine"), progress=quiet)
    assert time.monotonic() - t0 < 1.0
    assert e.value.check == "runtime" and "--dry-run" in e.value.hint and "container" in e.value.hint


def test_auto_without_tensorrt_llm_builds_reference(make_recipe):
    r = build(make_recipe("eagle3", backend="auto"), progress=quiet)
    assert r.backend == "reference" and "not installed" in r.backend_why


def test_auto_with_tensorrt_llm_picks_llmapi(make_recipe, standins):
    recipe = load_recipe(make_recipe("ngram", backend="auto"))
    res = choose_backend(recipe, dry_run=False, installed="1.1.0")
    assert res.backend == "llmapi" and res.version == "1.1.0"


def test_not_enough_gpus(make_recipe, standins):
    """Stand-in nvidia-smi reports one GPU; tp=2 needs two."""
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("none", backend="engine", parallel={"tp": 2}), progress=quiet)
    assert e.value.check == "gpus" and "2 GPUs needed" in str(e.value)


def test_memory_estimate_vs_gpu(make_recipe, standins, monkeypatch):
    """Stand-in nvidia-smi reports a 1 MiB GPU: the KV cache alone does not fit."""
    monkeypatch.setenv("STANDIN_GPUS", "1")
    with pytest.raises(PreflightFailed) as e:
        limits = {"max_batch_size": 64, "max_input_len": 64, "max_seq_len": 4096, "max_num_tokens": 256}
        build(make_recipe("none", backend="engine", build=limits), progress=quiet)
    assert e.value.check == "memory" and "kv_cache" in str(e.value) and "tp" in e.value.hint


def test_memory_formula():
    """2 × layers × kv_heads × head_dim × bytes per token, over max_batch_size × max_seq_len tokens."""
    from toolkit import compat
    from toolkit.build.context import BuildContext
    from toolkit.hub import ModelFacts, Resolved
    from toolkit.recipe import parse_recipe

    recipe = parse_recipe({"models": {"target": "a/b"}, "build": {"max_batch_size": 8, "max_seq_len": 8192,
                                                                  "max_input_len": 4096}})  # fmt: skip
    resolution = compat.Resolution(compat.cell("none", "llmapi"), None, "none", "")
    ctx = BuildContext(recipe, "x", True, resolution, None, root=__import__("pathlib").Path("/x"))
    facts = ModelFacts(source="catalogue", num_hidden_layers=32, num_key_value_heads=8, head_dim=128,
                       parameters=8_030_261_248)  # fmt: skip
    ctx.sources["target"] = Resolved("target", "a/b", facts=facts)
    ctx.dtype = "bfloat16"
    est = pf.memory_estimate(ctx)
    assert est["parts"]["target_kv_cache"] == 2 * 32 * 8 * 128 * 2 * 8 * 8192 == 8 * 2**30
    assert est["parts"]["target_weights"] == 2 * 8_030_261_248


# --------------------------------------------------------------------------- converter scripts (where the container keeps them)


def test_a_missing_converter_fails_and_says_where_it_looked(make_recipe, standins, monkeypatch, tmp_path):
    """The preflight checks that each convert_checkpoint.py the plan runs exists (before: PASSED
    without looking). Stand-in TensorRT-LLM 1.1.0 (standins.py); $TRTLLM_EXAMPLES_DIR names an
    empty directory."""
    empty = tmp_path / "no-examples"
    empty.mkdir()
    monkeypatch.setenv("TRTLLM_EXAMPLES_DIR", str(empty))
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("draft_target", backend="engine"), progress=quiet)
    for role in ("target", "draft"):
        rec = _failed(e.value, f"converter:{role}")
        assert rec["status"] == "failed"
        assert str(empty / "models/core/llama/convert_checkpoint.py") in rec["detail"]
        assert "$TRTLLM_EXAMPLES_DIR" in rec["detail"] and rec["hint"]
    assert standins.calls() == [], "nothing ran"


def test_converter_default_is_the_container_layout(make_recipe, standins, monkeypatch):
    """Without $TRTLLM_EXAMPLES_DIR the scripts are looked for where the newest container carrying the
    recipe's TensorRT-LLM 1.1.0 has them: tritonserver:26.02-trtllm-python-py3 (Triton's compatibility
    matrix @r26.07 lists 1.1.0 for 25.12-26.02), /app/examples (tensorrtllm_backend
    dockerfile/Dockerfile.triton.trt_llm_backend @r26.02: `WORKDIR /app`,
    `COPY --from=tensorrt_llm_code /workspace/tensorrt_llm/examples examples`)."""
    monkeypatch.delenv("TRTLLM_EXAMPLES_DIR")
    monkeypatch.delenv("NVIDIA_TRITON_SERVER_VERSION", raising=False)
    if __import__("pathlib").Path("/app/examples/models/core/medusa").exists():
        pytest.skip("running inside a TensorRT-LLM container")
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("medusa", backend="engine"), progress=quiet)
    rec = _failed(e.value, "converter:target")
    assert "/app/examples/medusa/convert_checkpoint.py" in rec["detail"]
    assert "container 26.02" in rec["detail"] and "r26.02" in rec["detail"]


def test_converter_resolves_against_a_container_root(make_recipe, monkeypatch, tmp_path):
    """`container_root`: a directory tree stands in for the container; the commands keep the
    in-container path, the check reads the tree."""
    monkeypatch.delenv("NVIDIA_TRITON_SERVER_VERSION", raising=False)
    root = tmp_path / "ct"
    script = root / "app/examples/models/core/llama/convert_checkpoint.py"
    with pytest.raises(PreflightFailed) as e:  # strict even in a dry run: the tree was asked for
        build(make_recipe("none", backend="engine"), dry_run=True, container="25.10", container_root=root,
              progress=quiet)  # fmt: skip
    assert e.value.check == "converter:target" and str(script) in str(e.value)
    script.parent.mkdir(parents=True)
    script.write_text("")
    r = build(make_recipe("none", backend="engine"), dry_run=True, container="25.10", container_root=root,
              progress=quiet)  # fmt: skip
    rec = next(c for c in r.preflight if c["name"] == "converter:target")
    assert rec["status"] == "passed" and str(script) in rec["detail"] and "container 25.10" in rec["detail"]
    assert r.commands[0][:2] == ["python3", "/app/examples/models/core/llama/convert_checkpoint.py"]


def test_a_missing_trtllm_build_fails_and_names_the_path_searched(make_recipe, standins, monkeypatch):
    """Stand-in TensorRT-LLM 1.1.0 (standins.py) with trtllm-build removed from PATH."""
    (standins.bin / "trtllm-build").unlink()
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("none", backend="engine"), progress=quiet)
    rec = _failed(e.value, "tool:trtllm-build")
    assert rec["status"] == "failed" and str(standins.bin) in rec["detail"]
    assert standins.calls() == [], "nothing ran"
