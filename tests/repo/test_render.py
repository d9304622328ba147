"""Rendering model repositories: every backend × mode the compat matrix allows.

The TensorRT-LLM engines and llmapi option directories are stand-ins (config.json only, see
conftest.py); the rendered configs are checked as Triton ModelConfigs and for their values.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from toolkit.errors import CompatError
from toolkit.repo import MANIFEST, RUNBOOK, RenderError, render_repository
from toolkit.resources import templates_dir
from toolkit.trees import MEDUSA_MC_SIM_7B_63, to_triton_string

from .conftest import ALL, engines_for, llmapi_options, make_recipe, write_engine


def configs(path: Path) -> dict[str, model_config_pb2.ModelConfig]:
    out = {}
    for f in sorted(path.glob("*/config.pbtxt")):
        cfg = model_config_pb2.ModelConfig()
        text_format.Parse(f.read_text(), cfg)
        out[f.parent.name] = cfg
    return out


def params(cfg: model_config_pb2.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


@pytest.mark.parametrize(("backend", "mode"), ALL)
def test_every_combination_renders_parses_and_is_fully_filled(render, backend, mode):
    result = render(backend, mode)
    cfgs = configs(result.path)
    assert sorted(cfgs) == result.models
    for name, cfg in cfgs.items():
        assert cfg.name == name
    for f in result.path.rglob("*"):
        if (
            f.is_file()
            and f.suffix in (".pbtxt", ".md", ".yaml", ".json", ".py")
            and f.name not in ("helpers.py",)
        ):
            text = f.read_text()
            for token in ("${", "{{", "{%"):
                assert token not in text, f"{token} left in {f}"
    assert not result.path.with_name(result.path.name + ".incomplete").exists()
    assert (result.path / RUNBOOK).is_file() and (result.path / MANIFEST).is_file()
    manifest = json.loads((result.path / MANIFEST).read_text())
    assert manifest["entry_model"] == result.entry_model and manifest["backend"] == backend


@pytest.mark.parametrize("backend", ["engine", "reference"])
def test_inflight_layout_and_entry_points(render, backend):
    plain = render(backend, "none")
    assert plain.models == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"]
    assert (plain.entry_model, plain.entry_kind) == ("ensemble", "ensemble")
    dt = render(backend, "draft_target")
    assert "tensorrt_llm_draft" in dt.models
    assert (dt.entry_model, dt.entry_kind) == ("tensorrt_llm_bls", "bls")
    assert dt.tensorrt_llm_models == ["tensorrt_llm", "tensorrt_llm_draft"]
    for name in ("ensemble", "tensorrt_llm", "tensorrt_llm_draft"):
        assert (dt.path / name / "1").is_dir()
    for name in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert (dt.path / name / "1" / "model.py").is_file()
        assert (dt.path / name / "1" / "sdtk_serving" / "triton.py").is_file()
    llm_code = (dt.path / "tensorrt_llm" / "1" / "model.py").is_file()
    assert llm_code == (backend == "reference")
    assert (dt.path / "tensorrt_llm_draft" / "1" / "model.py").is_file() == (backend == "reference")


def test_llmapi_layout(render):
    result = render("llmapi", "eagle3")
    assert result.models == ["tensorrt_llm"] and result.entry_kind == "llmapi"
    assert (result.path / "tensorrt_llm" / "1" / "model.yaml").is_file()
    assert result.missing == ["tensorrt_llm/1/model.py"]
    assert any("TRTLLM_DIR" in w for w in result.warnings)
    assert "git clone" in result.runbook.read_text()


def test_engine_parameters_carry_recipe_and_engine_values(render):
    result = render("engine", "medusa")
    cfgs = configs(result.path)
    llm = cfgs["tensorrt_llm"]
    p = params(llm)
    assert llm.backend == "tensorrtllm"
    assert llm.max_batch_size == 6 and list(llm.dynamic_batching.preferred_batch_size) == [6]
    assert p["decoding_mode"] == "medusa"
    assert p["medusa_choices"] == "{0}, {0, 0}, {1}, {0, 1}"
    assert p["eagle_choices"] == "" and p["lookahead_window_size"] == ""
    assert p["gpt_model_path"] == str(result.path.parent / "engines" / "target")
    assert p["gpt_model_type"] == "inflight_fused_batching"
    assert p["batch_scheduler_policy"] == "guaranteed_no_evict"
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.9"
    # upstream's default (tensorrtllm_backend v0.19.0 docs/model_config.md line 117: default false)
    assert p["exclude_input_in_output"] == "False" and p["enable_kv_cache_reuse"] == "False"
    assert p["max_beam_width"] == "1" and p["FORCE_CPU_ONLY_INPUT_TENSORS"] == "no"
    assert p["executor_worker_path"] == "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
    assert p["tokenizer_dir"] == "/models/tokenizer"
    for empty in (
        "encoder_model_path",
        "lora_prefetch_dir",
        "gpu_device_ids",
        "participant_ids",
        "max_attention_window_size",
    ):
        assert p[empty] == ""
    assert llm.model_transaction_policy.decoupled is True
    for name in ("preprocessing", "postprocessing", "tensorrt_llm_bls", "ensemble"):
        assert cfgs[name].max_batch_size == 6
    assert params(cfgs["preprocessing"])["tokenizer_dir"] == "/models/tokenizer"
    assert params(cfgs["preprocessing"])["gpt_model_path"] == p["gpt_model_path"]
    assert params(cfgs["preprocessing"])["add_special_tokens"] == "True"
    assert params(cfgs["postprocessing"])["skip_special_tokens"] == "True"


def test_medusa_default_tree_is_rendered_explicitly(render):
    recipe = make_recipe("engine", "medusa", speculative={"mode": "medusa"})
    p = params(configs(render("engine", "medusa", recipe=recipe).path)["tensorrt_llm"])
    assert p["medusa_choices"] == to_triton_string(MEDUSA_MC_SIM_7B_63)


@pytest.mark.parametrize(("backend", "decoding_mode"), [("engine", "eagle"), ("reference", "eagle3")])
def test_eagle_choices(render, backend, decoding_mode):
    mode = "eagle" if backend == "engine" else "eagle3"
    spec = (
        {"mode": mode, "eagle_choices": [[0], [1], [0, 0]]}
        if mode == "eagle"
        else {"mode": "eagle3", "max_draft_len": 2, "eagle_choices": [[0], [1], [0, 0]]}
    )
    recipe = make_recipe(backend, mode, speculative=spec)
    p = params(configs(render(backend, mode, recipe=recipe).path)["tensorrt_llm"])
    assert p["decoding_mode"] == decoding_mode
    assert p["eagle_choices"] == "{0}, {1}, {0, 0}"


@pytest.mark.parametrize("backend", ["engine", "reference"])
def test_lookahead_sizes(render, backend):
    p = params(configs(render(backend, "lookahead").path)["tensorrt_llm"])
    assert (
        p["decoding_mode"],
        p["lookahead_window_size"],
        p["lookahead_ngram_size"],
        p["lookahead_verification_set_size"],
    ) == ("lookahead", "5", "3", "4")


@pytest.mark.parametrize("backend", ["engine", "reference"])
def test_draft_target_wiring(render, backend):
    result = render(backend, "draft_target")
    cfgs = configs(result.path)
    bls = params(cfgs["tensorrt_llm_bls"])
    assert bls["tensorrt_llm_model_name"] == "tensorrt_llm"
    assert bls["tensorrt_llm_draft_model_name"] == "tensorrt_llm_draft"
    assert bls["default_num_draft_tokens"] == "5"
    assert bls["accumulate_tokens"] == "False"
    target, draft = params(cfgs["tensorrt_llm"]), params(cfgs["tensorrt_llm_draft"])
    assert target["gpt_model_path"].endswith("engines/target")
    assert draft["gpt_model_path"].endswith("engines/draft")
    assert target["decoding_mode"] == ""  # from the draft_tokens_external engine / the BLS loop
    assert draft["decoding_mode"] == "top_k_top_p"
    assert cfgs["tensorrt_llm_draft"].name == "tensorrt_llm_draft"
    decoupled = {
        cfgs[n].model_transaction_policy.decoupled
        for n in ("tensorrt_llm", "tensorrt_llm_draft", "tensorrt_llm_bls")
    }
    assert decoupled == {False}  # the twin's too: it serves the GPU repository
    # One BLS instance per sequence the engine batches (tensorrtllm_backend docs/model_config.md,
    # tensorrt_llm_bls: "set the number of model instances to the maximum batch size").
    assert [g.count for g in cfgs["tensorrt_llm_bls"].instance_group] == [cfgs["tensorrt_llm"].max_batch_size]


@pytest.mark.parametrize(
    ("backend", "mode"), [("engine", "none"), ("engine", "medusa"), ("reference", "lookahead")]
)
def test_bls_beside_the_ensemble_runs_one_instance(render, backend, mode):
    """Upstream's rule (tensorrtllm_backend docs/model_config.md line 210, r25.12, tensorrt_llm_bls):
    max-batch-size instances "when using the BLS model instead of the ensemble". Where the ensemble is
    the entry model the BLS is a side door: one instance, not max_batch_size idle Python stubs."""
    result = render(backend, mode)
    assert result.entry_kind == "ensemble"
    cfgs = configs(result.path)
    assert cfgs["tensorrt_llm"].max_batch_size == 6
    assert [g.count for g in cfgs["tensorrt_llm_bls"].instance_group] == [1]
    explicit = render(backend, mode, sections={"serving": {"bls_instance_count": 3}})
    assert [g.count for g in configs(explicit.path)["tensorrt_llm_bls"].instance_group] == [3]


@pytest.mark.parametrize("backend", ["engine", "reference"])
def test_draft_target_turns_kv_cache_reuse_on_for_both_models(render, backend):
    """TensorRT-LLM examples/draft_target_model/README.md @11925f6 fills both tensorrt_llm and
    tensorrt_llm_draft with `enable_kv_cache_reuse:True` ("we need KV-Cache reuse in this approach");
    the other modes keep the backend's default (off) unless the recipe says otherwise."""
    cfgs = configs(render(backend, "draft_target").path)
    assert params(cfgs["tensorrt_llm"])["enable_kv_cache_reuse"] == "True"
    assert params(cfgs["tensorrt_llm_draft"])["enable_kv_cache_reuse"] == "True"
    off = configs(
        render(backend, "draft_target", sections={"serving": {"enable_kv_cache_reuse": False}}).path
    )
    assert params(off["tensorrt_llm"])["enable_kv_cache_reuse"] == "False"
    assert params(configs(render(backend, "none").path)["tensorrt_llm"])["enable_kv_cache_reuse"] == "False"


def test_non_draft_bls_has_no_draft_model(render):
    bls = params(configs(render("engine", "none").path)["tensorrt_llm_bls"])
    assert bls["tensorrt_llm_draft_model_name"] == "" and bls["default_num_draft_tokens"] == "0"


def test_reference_models_are_python_with_the_same_parameters(render):
    result = render("reference", "medusa")
    llm = configs(result.path)["tensorrt_llm"]
    assert llm.backend == "python"
    assert params(llm)["decoding_mode"] == "medusa"
    engine = configs(render("engine", "medusa").path)["tensorrt_llm"]
    assert sorted(params(llm)) == sorted(params(engine))
    # The reference model implements the newest template; the stand-in engine says TensorRT-LLM
    # 1.1.0, whose tensorrt_llm has no token-count tensors (toolkit/repo/versions.py).
    counts = {"return_num_input_tokens", "return_num_output_tokens"}
    assert [i.name for i in llm.input if i.name not in counts] == [i.name for i in engine.input]
    assert counts <= {i.name for i in llm.input}


def test_reference_model_instance_count(render):
    result = render("reference", "none", sections={"serving": {"model_instance_count": 2}})
    assert configs(result.path)["tensorrt_llm"].instance_group[0].count == 2
    engine = render("engine", "none", sections={"serving": {"model_instance_count": 2}})
    assert configs(engine.path)["tensorrt_llm"].instance_group[0].count == 1


def test_serving_values_reach_every_model(render):
    serving = {
        "decoupled": False,
        "max_queue_delay_microseconds": 250,
        "max_queue_size": 17,
        "preprocessing_instance_count": 3,
        "postprocessing_instance_count": 2,
        "bls_instance_count": 4,
        "add_special_tokens": False,
        "skip_special_tokens": False,
        "enable_kv_cache_reuse": True,
        "exclude_input_in_output": False,
        "batch_scheduler_policy": "max_utilization",
    }
    cfgs = configs(render("engine", "none", sections={"serving": serving}).path)
    assert cfgs["tensorrt_llm"].model_transaction_policy.decoupled is False
    assert cfgs["tensorrt_llm_bls"].model_transaction_policy.decoupled is False
    assert cfgs["tensorrt_llm"].dynamic_batching.max_queue_delay_microseconds == 250
    assert cfgs["preprocessing"].dynamic_batching.default_queue_policy.max_queue_size == 17
    assert cfgs["preprocessing"].instance_group[0].count == 3
    assert cfgs["postprocessing"].instance_group[0].count == 2
    assert cfgs["tensorrt_llm_bls"].instance_group[0].count == 4
    assert params(cfgs["preprocessing"])["add_special_tokens"] == "False"
    assert params(cfgs["postprocessing"])["skip_special_tokens"] == "False"
    p = params(cfgs["tensorrt_llm"])
    assert (p["enable_kv_cache_reuse"], p["exclude_input_in_output"], p["batch_scheduler_policy"]) == (
        "True",
        "False",
        "max_utilization",
    )
    assert params(cfgs["tensorrt_llm_bls"])["exclude_input_in_output"] == "False"


def test_max_batch_size_comes_from_the_engine(render, tmp_path):
    recipe = make_recipe("engine", "none")
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", max_batch_size=3)}
    result = render("engine", "none", recipe=recipe, engines=engines)
    assert {c.max_batch_size for c in configs(result.path).values()} == {3}
    assert any("max_batch_size" in w for w in result.warnings)


def test_engine_dtype_sets_encoder_feature_type(render, tmp_path):
    recipe = make_recipe("engine", "none")
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", dtype="bfloat16")}
    llm = configs(render("engine", "none", recipe=recipe, engines=engines).path)["tensorrt_llm"]
    types = {i.name: model_config_pb2.DataType.Name(i.data_type) for i in llm.input}
    assert types["encoder_input_features"] == "TYPE_BF16"
    assert types["prompt_embedding_table"] == "TYPE_FP16"


# --------------------------------------------------------------------------- serving.model_name


def test_model_name_renames_the_entry_point(render):
    result = render("engine", "none", sections={"serving": {"model_name": "llama"}})
    assert result.entry_model == "llama" and "llama" in result.models and "ensemble" not in result.models
    bls = render("reference", "draft_target", sections={"serving": {"model_name": "chat"}})
    assert bls.entry_model == "chat" and bls.entry_kind == "bls"
    assert "ensemble" in bls.models and "tensorrt_llm_bls" not in bls.models
    assert configs(bls.path)["chat"].backend == "python"
    llm = render("llmapi", "none", sections={"serving": {"model_name": "served"}})
    assert llm.models == ["served"]


def test_model_name_may_not_collide(render):
    with pytest.raises(RenderError, match="serving.model_name 'preprocessing'"):
        render("engine", "none", sections={"serving": {"model_name": "preprocessing"}})


# --------------------------------------------------------------------------- checks


def test_engine_draft_target_must_not_be_decoupled(tmp_path):
    recipe = make_recipe("engine", "draft_target", serving={"decoupled": True})
    with pytest.raises(CompatError, match="decoupled"):
        render_repository(recipe, engines_for(tmp_path, recipe, "engine"), tmp_path / "out", backend="engine")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", ["engine", "reference"])
def test_draft_target_is_never_decoupled(render, backend):
    """Upstream's draft-target deployment runs tensorrt_llm, tensorrt_llm_draft and the BLS with
    decoupled_mode:False (TensorRT-LLM examples/draft_target_model/README.md @11925f6; the BLS's
    `_exec_triton_request_single` uses exec(decoupled=False), tensorrtllm_backend v0.19.0
    tensorrt_llm_bls/1/lib/triton_decoder.py). The twin refuses what the GPU path refuses."""
    with pytest.raises(CompatError, match="serving.decoupled must be false") as err:
        render(backend, "draft_target", sections={"serving": {"decoupled": True}})
    assert err.value.hint and "decoupled: false" in err.value.hint
    result = render(backend, "draft_target")
    cfgs = configs(result.path)
    assert not result.decoupled
    assert [cfgs[m].model_transaction_policy.decoupled for m in ("tensorrt_llm", "tensorrt_llm_draft", "tensorrt_llm_bls")] == [False] * 3


def test_incompatible_pair_is_refused(tmp_path):
    recipe = make_recipe("engine", "none")
    with pytest.raises(CompatError):
        render_repository(
            make_recipe("reference", "eagle3"),
            engines_for(tmp_path, recipe, "engine"),
            tmp_path / "o",
            backend="engine",
        )


def test_spec_mode_mismatch_names_the_engine_config(render, tmp_path):
    recipe = make_recipe("engine", "medusa")
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", spec_mode="lookahead_decoding")}
    with pytest.raises(RenderError, match="lookahead_decoding") as err:
        render("engine", "medusa", recipe=recipe, engines=engines)
    assert err.value.file == tmp_path / "e" / "config.json"


def test_lookahead_engine_draft_len_must_match_the_formula(render, tmp_path):
    recipe = make_recipe("engine", "lookahead")
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", max_draft_len=16)}
    with pytest.raises(RenderError, match="needs exactly 17"):
        render("engine", "lookahead", recipe=recipe, engines=engines)


def test_draft_target_engine_draft_len_too_small(render, tmp_path):
    recipe = make_recipe("engine", "draft_target")
    engines = engines_for(tmp_path, recipe, "engine")
    write_engine(engines["target"], recipe, "engine", max_draft_len=2)
    with pytest.raises(RenderError, match="at most 2 draft tokens"):
        render("engine", "draft_target", recipe=recipe, engines=engines)


def test_missing_draft_engine(render, tmp_path):
    recipe = make_recipe("reference", "draft_target")
    engines = {"target": write_engine(tmp_path / "t", recipe, "reference")}
    with pytest.raises(RenderError, match="no draft engine"):
        render("reference", "draft_target", recipe=recipe, engines=engines)


def test_missing_and_broken_engine_config(render, tmp_path):
    recipe = make_recipe("engine", "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RenderError, match="no config.json"):
        render("engine", "none", recipe=recipe, engines={"target": tmp_path / "empty"})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{\n  "build_config": {,\n}')
    with pytest.raises(RenderError, match="invalid JSON") as err:
        render("engine", "none", recipe=recipe, engines={"target": bad})
    assert err.value.line == 2 and err.value.file == bad / "config.json"


def test_engine_eagle_dynamic_tree_is_refused(render):
    with pytest.raises(RenderError, match="static EAGLE tree"):
        render(
            "engine",
            "eagle",
            sections={
                "speculative": {"mode": "eagle", "use_dynamic_tree": True, "dynamic_tree_max_top_k": 4}
            },
        )


# --------------------------------------------------------------------------- llmapi


def test_llmapi_model_yaml(render):
    import yaml

    result = render("llmapi", "eagle3", sections={"serving": {"decoupled": False}})
    data = yaml.safe_load((result.path / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert data["model"] == "/models/target" and data["backend"] == "pytorch"
    assert data["tensor_parallel_size"] == 1 and data["pipeline_parallel_size"] == 1
    assert data["triton_config"] == {"max_batch_size": 0, "decoupled": False}
    assert data["speculative_config"] == {"decoding_type": "Eagle3", "max_draft_len": 3}
    assert data["max_batch_size"] == 6
    cfg = configs(result.path)["tensorrt_llm"]
    assert cfg.backend == "python" and cfg.max_batch_size == 0
    assert cfg.model_transaction_policy.decoupled is False


def test_llmapi_model_from_engine_config_and_options_file(tmp_path):
    import yaml

    recipe = make_recipe("llmapi", "ngram")
    target = write_engine(tmp_path / "t", recipe, "llmapi")
    cfg = json.loads((target / "config.json").read_text())
    options = tmp_path / "t" / "extra_llm_api_options.yaml"
    options.write_text(yaml.safe_dump(llmapi_options(recipe)))
    cfg["llmapi"] = {"model": "org/served-model", "extra_llm_api_options": str(options)}
    (target / "config.json").write_text(json.dumps(cfg))
    result = render_repository(recipe, {"target": target}, tmp_path / "repo", backend="llmapi")
    data = yaml.safe_load((result.path / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert data["model"] == "org/served-model"
    assert data["speculative_config"]["decoding_type"] == "NGram"


def test_llmapi_needs_a_speculative_config(render):
    with pytest.raises(RenderError, match="decoding_type DraftTarget"):
        render("llmapi", "draft_target", llmapi_options={"max_batch_size": 4})
    with pytest.raises(RenderError, match="reserves"):
        render("llmapi", "none", llmapi_options={"backend": "tensorrt"})


def test_llmapi_model_py_is_copied_from_trtllm_dir(render, tmp_path, monkeypatch):
    src = tmp_path / "TensorRT-LLM" / "triton_backend/all_models/llmapi/tensorrt_llm/1"
    src.mkdir(parents=True)
    (src / "model.py").write_text("# NVIDIA's model (stand-in)\nX = {'a': {'b': 1}}\n")
    (src / "helpers.py").write_text("# helpers\n")
    monkeypatch.setenv("TRTLLM_DIR", str(tmp_path / "TensorRT-LLM"))
    result = render("llmapi", "none")
    assert result.missing == [] and not any("TRTLLM_DIR" in w for w in result.warnings)
    assert (result.path / "tensorrt_llm" / "1" / "model.py").read_text().startswith("# NVIDIA")
    assert (result.path / "tensorrt_llm" / "1" / "helpers.py").is_file()


def test_dry_run_of_the_lookahead_recipe_plans_one_bls_instance(tmp_path):
    """The qwen lookahead recipe (max_batch_size 32) serves through the ensemble: its dry run plans one
    tensorrt_llm_bls instance, not 32 idle stubs (docs/model_config.md line 210, r25.12: max batch size
    "when using the BLS model instead of the ensemble")."""
    from click.testing import CliRunner

    from toolkit.cli import cli

    recipe = Path(__file__).resolve().parents[2] / "recipes/qwen2.5-coder-7b-lookahead.yaml"
    args = ["deploy", str(recipe), "--dry-run", "--json", "--workdir", str(tmp_path / "wd")]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    (line,) = json.loads(r.stdout)["repository"]
    assert line.startswith("tensorrt_llm_bls: 1 instance(s) (the ensemble is the entry model"), line


def test_runbook_names_the_triton_images_all_models_dir(render, monkeypatch):
    """The tritonserver:*-trtllm-python-py3 image copies TensorRT-LLM's triton_backend/all_models to
    /app/all_models only (tensorrtllm_backend r25.12 @5419275 dockerfile/Dockerfile.triton.trt_llm_backend
    184-189: /app/{scripts,all_models,client,tools,examples}); /app/tensorrt_llm/triton_backend/all_models
    is TensorRT-LLM's own release image (docker/Dockerfile.multi, tritonrelease stage)."""
    monkeypatch.delenv("TRTLLM_DIR", raising=False)
    result = render("llmapi", "none")
    assert result.missing == ["tensorrt_llm/1/model.py"]
    text = " ".join((result.path / RUNBOOK).read_text().split())
    triton = text.split("`tritonserver:<yy.mm>-trtllm-python-py3` containers ship", 1)[1].split(";", 1)[0]
    assert "`/app/all_models/llmapi/tensorrt_llm/1/`" in triton and "/app/tensorrt_llm/" not in triton
    assert "TensorRT-LLM's own release image has it at `/app/tensorrt_llm/triton_backend/all_models/" in text


# --------------------------------------------------------------------------- strictness and atomicity


def _templates_with(tmp_path: Path, rel: str, old: str, new: str) -> Path:
    import shutil

    root = tmp_path / "templates"
    shutil.copytree(templates_dir(), root)
    path = root / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return root


def test_missing_template_variable_is_an_error_and_nothing_is_written(render, tmp_path):
    root = _templates_with(
        tmp_path,
        "inflight_batcher_llm/postprocessing/config.pbtxt.j2",
        "max_batch_size: {{ triton_max_batch_size }}",
        "max_batch_size: {{ triton_max_batch_sise }}",
    )
    out = tmp_path / "out"
    with pytest.raises(RenderError, match="triton_max_batch_sise") as err:
        render("engine", "none", out=out, templates=root)
    assert err.value.model == "postprocessing"
    assert err.value.file.name == "config.pbtxt.j2" and err.value.line is not None
    assert not out.exists() and not out.with_name("out.incomplete").exists()


def test_unparsable_config_is_caught_before_writing(render, tmp_path):
    root = _templates_with(
        tmp_path,
        "inflight_batcher_llm/ensemble/config.pbtxt.j2",
        'platform: "ensemble"',
        "platform: ensemble ][",
    )
    out = tmp_path / "out"
    with pytest.raises(RenderError, match="not a valid ModelConfig") as err:
        render("reference", "none", out=out, templates=root)
    assert err.value.model == "ensemble" and err.value.line is not None
    assert not out.exists()


def test_leftover_placeholder_is_caught(render, tmp_path):
    root = _templates_with(
        tmp_path,
        "inflight_batcher_llm/tensorrt_llm/config.pbtxt.j2",
        '{{ param("sink_token_length", sink_token_length) }}',
        '{{ param("sink_token_length", "$" ~ "{sink_token_length}") }}',
    )
    with pytest.raises(RenderError, match=r"'\$\{' left in the output") as err:
        render("engine", "none", out=tmp_path / "out", templates=root)
    assert err.value.model == "tensorrt_llm" and err.value.line is not None


def test_inconsistent_decoupled_policy_is_caught(render, tmp_path):
    root = _templates_with(
        tmp_path,
        "inflight_batcher_llm/tensorrt_llm_bls/config.pbtxt.j2",
        "decoupled: {{ decoupled | pbbool }}",
        "decoupled: {{ (not decoupled) | pbbool }}",
    )
    with pytest.raises(RenderError, match="must agree") as err:
        render("engine", "none", out=tmp_path / "out", templates=root)
    assert err.value.model == "tensorrt_llm_bls"


def test_failure_leaves_the_previous_repository_intact(render, tmp_path):
    out = tmp_path / "out"
    first = render("engine", "none", out=out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert first.path == out
    root = _templates_with(
        tmp_path, "inflight_batcher_llm/ensemble/config.pbtxt.j2", "{{ model_name | pbstr }}", "{{ nope }}"
    )
    with pytest.raises(RenderError):
        render("reference", "medusa", out=out, templates=root)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not (tmp_path / "out.incomplete").exists() and not (tmp_path / "out.previous").exists()


def test_success_replaces_the_previous_repository(render, tmp_path):
    out = tmp_path / "out"
    render("reference", "draft_target", out=out)
    assert (out / "tensorrt_llm_draft").is_dir()
    render("reference", "none", out=out)
    assert not (out / "tensorrt_llm_draft").exists()
    assert json.loads((out / MANIFEST).read_text())["mode"] == "none"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "r1", "r2"]


def test_refuses_to_replace_a_foreign_directory(render, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(RenderError, match="refusing to replace"):
        render("engine", "none", out=out)
    assert (out / "notes.txt").read_text() == "keep me"


# --------------------------------------------------------------------------- runbook


def test_runbook_commands(render):
    dt = render("engine", "draft_target").runbook.read_text()
    assert "tensorrt_llm_bls/generate" in dt and '"num_draft_tokens": 5' in dt
    assert "curl -sf http://127.0.0.1:8000/v2/health/ready" in dt
    assert "sdtk deploy" in dt and "sdtk bench" in dt
    assert "TRTLLM_ORCHESTRATOR=1" in dt and "--tensorrt_llm_model_name=tensorrt_llm,tensorrt_llm_draft" in dt
    assert '"num_draft_tokens": 0' in dt  # roll back per request
    assert "generate_stream" not in dt  # not decoupled
    la = render("engine", "lookahead").runbook.read_text()
    assert "lookahead_window_size" in la and "ensemble/generate_stream" in la
    ref = render("reference", "medusa").runbook.read_text()
    assert '"top_k_top_p"' in ref and "No rebuild" in ref
    med = render("engine", "medusa").runbook.read_text()
    assert "compiled into the engine" in med and "redeploy the baseline" in med
    llm = render("llmapi", "eagle3").runbook.read_text()
    assert "sampling_param_max_tokens" in llm and "speculative_config" in llm
    tp = render("engine", "none", sections={"parallel": {"tp": 2}})
    assert tp.world_size == 1  # the stand-in engine says tp 1: the built value wins


def test_runbook_multi_gpu_leader_mode(render, tmp_path):
    recipe = make_recipe("engine", "none", parallel={"tp": 2})
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", tp=2)}
    result = render("engine", "none", recipe=recipe, engines=engines)
    text = result.runbook.read_text()
    assert result.world_size == 2
    assert "mpirun --allow-run-as-root -n 1" in text and "--load-model=tensorrt_llm" in text


@pytest.mark.parametrize(
    ("stored", "mode"), [(4, "medusa"), ("SpeculativeDecodingMode.MEDUSA", "medusa"), (1, "none")]
)
def test_trtllm_build_spec_mode_spellings(render, tmp_path, stored, mode):
    """trtllm-build stores SpeculativeDecodingMode as its IntFlag value; sdtk's builds as the name."""
    recipe = make_recipe("engine", mode)
    engines = {"target": write_engine(tmp_path / "e", recipe, "engine", spec_mode=stored)}
    assert render("engine", mode, recipe=recipe, engines=engines).mode == mode
