"""Golden plans: the exact converter / trtllm-build argv and llmapi YAML for every mode × backend.

Facts asserted come from NVIDIA/TensorRT-LLM: the engine flags from `examples/medusa/README.md` and
`convert_checkpoint.py` @b93e14c, `examples/eagle/README.md` @585c756 and `convert_checkpoint.py`
@65b31db, `examples/draft_target_model/README.md` @567239f, `examples/lookahead/README.md` @83ab45a;
`speculative_config` from `tensorrt_llm/llmapi/llm_args.py` (per release line, toolkit.build.llmapi_schema). Every test that runs a TensorRT-LLM binary runs a stand-in (standins.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from standins import activate, make_standins, quiet

from toolkit.build import build
from toolkit.build.llmapi import schema_for


def _argv(standins, tool: str) -> list[list[str]]:
    return [c["argv"] for c in standins.calls() if c["tool"] == tool]


def _common_build(ck: Path, out: Path, dtype: str = "float16") -> list[str]:
    return [
        "--checkpoint_dir", str(ck), "--output_dir", str(out) + ".incomplete", "--gemm_plugin", dtype,
        "--max_batch_size", "2", "--max_input_len", "64", "--max_seq_len", "128", "--max_num_tokens", "256",
    ]  # fmt: skip


def _convert(t: Path, out: Path, *, extra_dirs: list[str] = ()) -> list[str]:
    return [
        "--model_dir", str(t), *extra_dirs, "--output_dir", str(out) + ".incomplete",
        "--dtype", "float16", "--tp_size", "1", "--pp_size", "1", "--workers", "1",
    ]  # fmt: skip


# --------------------------------------------------------------------------- engine (TRT-LLM ≤ 1.1)


def test_engine_none(make_recipe, models, standins):
    """Stand-in trtllm-build and llama converter: plain engine, no speculative flags."""
    r = build(make_recipe("none", backend="engine"), progress=quiet)
    root = r.root
    assert _argv(standins, "models/core/llama/convert_checkpoint.py") == [
        _convert(models["target"], root / "checkpoints/target")
    ]
    assert _argv(standins, "trtllm-build") == [
        _common_build(root / "checkpoints/target", root / "engines/target") + ["--workers", "1"]
    ]
    assert json.loads((root / "engines/target/config.json").read_text())["standin"] == "trtllm-build"
    assert r.commands[0][:2] == [
        "python3",
        str(standins.examples / "models/core/llama/convert_checkpoint.py"),
    ]


def test_engine_draft_target_two_engines(make_recipe, models, standins):
    """Stand-ins: target with draft_tokens_external; both engines paged context FMHA and, with
    draft logits, --gather_generation_logits; a second engine for the draft."""
    path = make_recipe("draft_target", backend="engine", speculative={"mode": "draft_target", "max_draft_len": 4,
                                                                       "use_draft_logits": True})  # fmt: skip
    r = build(path, progress=quiet)
    root = r.root
    conv = _argv(standins, "models/core/llama/convert_checkpoint.py")
    assert conv == [
        _convert(models["target"], root / "checkpoints/target"),
        _convert(models["draft"], root / "checkpoints/draft"),
    ]
    target, draft = _argv(standins, "trtllm-build")
    assert target == _common_build(root / "checkpoints/target", root / "engines/target") + [
        "--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "4",
        "--use_paged_context_fmha", "enable", "--gather_generation_logits", "--workers", "1",
    ]  # fmt: skip
    assert draft == _common_build(root / "checkpoints/draft", root / "engines/draft") + [
        "--use_paged_context_fmha", "enable", "--gather_generation_logits", "--workers", "1",
    ]  # fmt: skip
    assert set(r.outputs) == {"target", "draft"}


def test_engine_draft_target_without_logits(make_recipe, standins):
    """Stand-ins: no --gather_generation_logits unless use_draft_logits."""
    build(make_recipe("draft_target", backend="engine"), progress=quiet)
    for argv in _argv(standins, "trtllm-build"):
        assert "--gather_generation_logits" not in argv
        assert argv[argv.index("--use_paged_context_fmha") + 1] == "enable"


def test_engine_medusa(make_recipe, models, standins):
    """Stand-ins: examples/medusa/convert_checkpoint.py --medusa_model_dir --num_medusa_heads
    --max_medusa_token_len; trtllm-build --speculative_decoding_mode medusa."""
    r = build(make_recipe("medusa", backend="engine"), progress=quiet)
    root = r.root
    assert _argv(standins, "medusa/convert_checkpoint.py") == [
        _convert(
            models["target"],
            root / "checkpoints/target",
            extra_dirs=["--medusa_model_dir", str(models["medusa"])],
        )
        + ["--num_medusa_heads", "4", "--max_medusa_token_len", "63"]
    ]
    assert _argv(standins, "trtllm-build") == [
        _common_build(root / "checkpoints/target", root / "engines/target")
        + ["--speculative_decoding_mode", "medusa", "--max_draft_len", "63", "--workers", "1"]
    ]


def test_engine_eagle(make_recipe, models, standins):
    """Stand-ins: examples/eagle/convert_checkpoint.py with --max_draft_len 63 --num_eagle_layers 4
    --max_non_leaves_per_layer 10; trtllm-build --speculative_decoding_mode eagle with paged context FMHA."""
    r = build(make_recipe("eagle", backend="engine"), progress=quiet)
    root = r.root
    assert _argv(standins, "eagle/convert_checkpoint.py") == [
        _convert(
            models["target"],
            root / "checkpoints/target",
            extra_dirs=["--eagle_model_dir", str(models["eagle1"])],
        )
        + ["--max_draft_len", "63", "--num_eagle_layers", "4", "--max_non_leaves_per_layer", "10"]
    ]
    assert _argv(standins, "trtllm-build") == [
        _common_build(root / "checkpoints/target", root / "engines/target")
        + ["--speculative_decoding_mode", "eagle", "--max_draft_len", "63", "--use_paged_context_fmha", "enable",
           "--workers", "1"]
    ]  # fmt: skip


def test_engine_lookahead(make_recipe, standins):
    """Stand-in trtllm-build: --speculative_decoding_mode lookahead_decoding, --max_draft_len from (W,N,G)
    = (4,3,4): (3-2) + (4-1+4)*(3-1) = 15."""
    r = build(make_recipe("lookahead", backend="engine"), progress=quiet)
    (argv,) = _argv(standins, "trtllm-build")
    assert argv == _common_build(r.root / "checkpoints/target", r.root / "engines/target") + [
        "--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", "15", "--workers", "1",
    ]  # fmt: skip


def test_engine_tp_and_bf16(make_recipe, models, standins, monkeypatch):
    """Stand-ins with two fake GPUs: tp=2 reaches --tp_size/--workers; dtype reaches --gemm_plugin."""
    monkeypatch.setenv("STANDIN_GPUS", "81559,81559")
    path = make_recipe("none", backend="engine", parallel={"tp": 2}, dtype="bfloat16")
    build(path, progress=quiet)
    (conv,) = _argv(standins, "models/core/llama/convert_checkpoint.py")
    assert conv[conv.index("--tp_size") + 1] == "2" and conv[conv.index("--workers") + 1] == "2"
    assert conv[conv.index("--dtype") + 1] == "bfloat16"
    (b,) = _argv(standins, "trtllm-build")
    assert b[b.index("--gemm_plugin") + 1] == "bfloat16" and b[-2:] == ["--workers", "2"]


def test_engine_runs_converters_with_this_python(make_recipe, standins):
    """Stand-ins: the plan says `python3` (portable runbook); sdtk runs it with its own interpreter."""
    r = build(make_recipe("none", backend="engine"), progress=quiet)
    log = (r.root / "logs" / "convert-target.log").read_text()
    assert log.startswith("$ " + sys.executable)


def test_build_json_summary(make_recipe, models, standins):
    """Stand-ins: build.json records sources (+how/commit), backend and why, mode, commands, per-step
    durations and preflight results."""
    r = build(make_recipe("medusa", backend="engine"), progress=quiet)
    data = json.loads(Path(r.build_json).read_text())
    assert data["backend"] == "engine" and "requested" in data["backend_why"]
    assert data["mode"] == "medusa" and data["trtllm_version"] == "1.1.0"
    assert {s["role"] for s in data["sources"]} == {"target", "medusa_heads"}
    assert all(s["how"] == "local path" and s["facts_source"] == "config.json" for s in data["sources"])
    assert [s["name"] for s in data["steps"]] == ["convert-target", "build-target"]
    assert all(s["status"] == "ran" and s["seconds"] >= 0 for s in data["steps"])
    names = {c["name"]: c["status"] for c in data["preflight"]}
    assert names["medusa-heads"] == "passed" and names["gpus"] == "passed" and names["memory"] == "passed"
    assert data["commands"][1][0] == "trtllm-build"


# --------------------------------------------------------------------------- llmapi (TRT-LLM ≥ 1.0)


def _llmapi(make_recipe, mode, **kw):
    r = build(make_recipe(mode, backend="llmapi", **kw), progress=quiet)
    d = Path(r.outputs["target"])
    return (
        r,
        yaml.safe_load((d / "extra_llm_api_options.yaml").read_text()),
        yaml.safe_load((d / "model.yaml").read_text()),
    )


_LIMITS = {"max_batch_size": 2, "max_num_tokens": 256, "max_seq_len": 128, "dtype": "float16"}
_KV = {"kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
       "cuda_graph_config": {"max_batch_size": 2}}  # fmt: skip


def test_llmapi_none(make_recipe, models, standins):
    """Stand-in TRT-LLM 1.1.0 (installed version, nvidia-smi): no speculative_config."""
    r, extra, model = _llmapi(make_recipe, "none")
    assert extra == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, **_LIMITS, **_KV}
    assert model == {
        "model": str(models["target"]),
        "backend": "pytorch",
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "triton_config": {"max_batch_size": 0, "decoupled": True},
        **_LIMITS,
        **_KV,
    }
    assert r.llmapi["serve_command"] == [
        "trtllm-serve", str(models["target"]), "--backend", "pytorch", "--extra_llm_api_options",
        str(Path(r.outputs["target"]) / "extra_llm_api_options.yaml"), "--host", "127.0.0.1", "--port", "8000",
    ]  # fmt: skip
    cfg = json.loads((Path(r.outputs["target"]) / "config.json").read_text())
    assert cfg["build_config"]["speculative_decoding_mode"] is None and cfg["version"] == "1.1.0"


def test_llmapi_eagle3_1_1(make_recipe, models, standins):
    """Stand-in TRT-LLM 1.1.0: decoding_type Eagle + eagle3_one_model + speculative_model_dir (local dir)."""
    _, extra, model = _llmapi(make_recipe, "eagle3")
    assert extra["speculative_config"] == {
        "decoding_type": "Eagle",
        "max_draft_len": 3,
        "speculative_model_dir": str(models["eagle3"]),
        "eagle3_one_model": True,
    }
    assert model["speculative_config"] == extra["speculative_config"]
    assert "disable_overlap_scheduler" not in extra


def test_llmapi_eagle3_1_2(make_recipe, models, tmp_path, monkeypatch):
    """Stand-in TRT-LLM 1.2.0: decoding_type Eagle3 + speculative_model; layers_to_capture passes through."""
    activate(make_standins(tmp_path / "s12", "1.2.0"), monkeypatch)
    spec = {"mode": "eagle3", "max_draft_len": 3, "layers_to_capture": [1, 2, 0]}
    _, extra, _ = _llmapi(make_recipe, "eagle3", speculative=spec)
    assert extra["speculative_config"] == {
        "decoding_type": "Eagle3",
        "max_draft_len": 3,
        "speculative_model": str(models["eagle3"]),
        "eagle3_one_model": True,
        "eagle3_layers_to_capture": [0, 1, 2],
    }


def test_llmapi_ngram(make_recipe, standins):
    """Stand-in TRT-LLM 1.1.0: NGram fields and disable_overlap_scheduler as the docs run it."""
    _, extra, _ = _llmapi(make_recipe, "ngram")
    assert extra["speculative_config"] == {
        "decoding_type": "NGram",
        "max_draft_len": 4,
        "max_matching_ngram_size": 2,
        "is_keep_all": True,
        "is_use_oldest": True,
        "is_public_pool": True,
    }
    assert extra["disable_overlap_scheduler"] is True


def test_llmapi_draft_target(make_recipe, models, standins):
    """Stand-in TRT-LLM 1.1.0: DraftTarget with the draft's directory; overlap scheduler disabled."""
    r, extra, model = _llmapi(make_recipe, "draft_target")
    assert extra["speculative_config"] == {
        "decoding_type": "DraftTarget",
        "max_draft_len": 4,
        "speculative_model_dir": str(models["draft"]),
    }
    assert extra["disable_overlap_scheduler"] is True and model["disable_overlap_scheduler"] is True
    assert list(r.outputs) == ["target"]


@pytest.mark.parametrize(
    ("version", "decoding", "key", "hub"),
    [
        ("1.0.0", "Eagle", "speculative_model_dir", False),
        ("1.1.0", "Eagle", "speculative_model_dir", False),
        ("1.2.0rc1", "Eagle", "speculative_model_dir", False),
        ("1.2.0", "Eagle3", "speculative_model", True),
        ("1.3.0", "Eagle3", "speculative_model", True),
        (None, "Eagle3", "speculative_model", True),
    ],
)
def test_schema_mapping(version, decoding, key, hub):
    s = schema_for(version)
    assert (s.eagle3_decoding_type, s.model_key, s.hub_ids) == (decoding, key, hub)


def test_llmapi_tree_fields_need_1_1(make_recipe, tmp_path, monkeypatch):
    """Stand-in TRT-LLM 1.0.0: eagle3_layers_to_capture does not exist there; preflight says so."""
    from toolkit.build import PreflightFailed

    activate(make_standins(tmp_path / "s10", "1.0.0"), monkeypatch)
    spec = {"mode": "eagle3", "max_draft_len": 3, "layers_to_capture": [0, 1, 2]}
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("eagle3", backend="llmapi", speculative=spec), progress=quiet)
    assert e.value.check == "llmapi-fields" and "1.1" in str(e.value)


def test_llmapi_load_aware_fields_1_2(make_recipe, tmp_path, monkeypatch):
    """Stand-in TRT-LLM 1.2.0: the recipe's schedule and max_concurrency become one
    `draft_len_schedule` in speculative_config (never both fields: 1.3's llm_args.py @0004396 makes
    them mutually exclusive, and whether 1.2.x does is unverified), keyed at the first and last batch
    size of each run, so that upstream's lower-bound reading (1.2-era `validate_draft_len_schedule_and_sort`:
    "batch_size >= 4 uses draft_len=2") and PR #10860's upper-bound reading both give sdtk's lengths
    at every batch size 1..max_batch_size; 1.1 has neither field."""
    from toolkit.build import PreflightFailed
    from toolkit.build.llmapi_schema import read_lower_bounds, read_upper_bounds

    activate(make_standins(tmp_path / "s12", "1.2.0"), monkeypatch)
    spec = {
        "mode": "ngram",
        "max_draft_len": 4,
        "draft_len_schedule": {8: 0, 1: 4, 4: 2},
        "max_concurrency": 6,
    }
    limits = {"max_batch_size": 10, "max_input_len": 64, "max_seq_len": 128, "max_num_tokens": 256}
    _, extra, model = _llmapi(make_recipe, "ngram", speculative=spec, build=limits)
    sc = extra["speculative_config"]
    # sdtk: 1-3 -> 4, 4-6 -> 2, above max_concurrency 6 -> off
    assert sc["draft_len_schedule"] == {1: 4, 3: 4, 4: 2, 6: 2, 7: 0, 10: 0}
    assert "max_concurrency" not in sc and model["speculative_config"] == sc
    want = [4, 4, 4, 2, 2, 2, 0, 0, 0, 0]
    for read in (read_lower_bounds, read_upper_bounds):
        assert [read(sc["draft_len_schedule"], b) for b in range(1, 11)] == want
    only = {"mode": "ngram", "max_draft_len": 4, "max_concurrency": 6}
    _, extra, _ = _llmapi(make_recipe, "ngram", speculative=only, build=limits)
    assert extra["speculative_config"]["max_concurrency"] == 6
    assert "draft_len_schedule" not in extra["speculative_config"]
    activate(make_standins(tmp_path / "s11", "1.1.0"), monkeypatch)
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("ngram", backend="llmapi", speculative=spec), progress=quiet)
    assert e.value.check == "llmapi-fields" and "1.2" in str(e.value)


def test_llmapi_max_concurrency_on_1_1_is_rendered_and_marked_unverified(make_recipe, tmp_path, monkeypatch):
    """Stand-in TRT-LLM 1.1.0: `max_concurrency` is a DecodingBaseConfig field from NVIDIA/TensorRT-LLM
    PR #6676 (merged 2025-08, "Add a `max_concurrency` field to `DecodingBaseConfig`"), on main while
    the 1.1 release candidates were cut, so a 1.1-era llm_args.py may declare it: sdtk renders it and
    says it is unverified for 1.1 instead of refusing it. `draft_len_schedule` (PR #8194, Oct 2025)
    stays refused on 1.1, and both on 1.0 (branched before PR #6676)."""
    from toolkit.build import PreflightFailed

    activate(make_standins(tmp_path / "s11", "1.1.0"), monkeypatch)
    limits = {"max_batch_size": 10, "max_input_len": 64, "max_seq_len": 128, "max_num_tokens": 256}
    only = {"mode": "ngram", "max_draft_len": 4, "max_concurrency": 6}
    r, extra, model = _llmapi(make_recipe, "ngram", speculative=only, build=limits)
    assert extra["speculative_config"]["max_concurrency"] == 6 and model["speculative_config"]["max_concurrency"] == 6
    assert any("max_concurrency" in n and "unverified for 1.1" in n and "#6676" in n for n in r.notes)
    sched = {**only, "draft_len_schedule": {1: 4, 4: 2}}
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("ngram", backend="llmapi", speculative=sched), progress=quiet)
    assert e.value.check == "llmapi-fields" and "draft_len_schedule" in str(e.value)
    assert "max_concurrency" not in str(e.value)
    activate(make_standins(tmp_path / "s10", "1.0.0"), monkeypatch)
    with pytest.raises(PreflightFailed) as e:
        build(make_recipe("ngram", backend="llmapi", speculative=only), progress=quiet)
    assert e.value.check == "llmapi-fields" and "max_concurrency" in str(e.value)


def test_load_aware_fields_refused_where_upstream_has_none(make_recipe):
    from toolkit.compat import check_recipe
    from toolkit.errors import CompatError
    from toolkit.recipe import load_recipe

    sched = {"mode": "draft_target", "max_draft_len": 4, "draft_len_schedule": {1: 4, 4: 0}}
    with pytest.raises(CompatError, match="C\\+\\+ executor"):
        check_recipe(
            load_recipe(str(make_recipe("draft_target", backend="engine", speculative=sched))), "1.1.0"
        )
    adaptive = {"mode": "ngram", "max_draft_len": 4, "adaptive_draft_len": True}
    with pytest.raises(CompatError, match="adaptive_draft_len"):
        check_recipe(load_recipe(str(make_recipe("ngram", backend="llmapi", speculative=adaptive))), "1.2.0")
    ref = load_recipe(str(make_recipe("ngram", backend="reference", speculative=adaptive)))
    assert check_recipe(ref).backend == "reference"
