"""The GPU paths against upstream facts (an audit of the engine and llmapi paths; each test names its
upstream source).

TensorRT-LLM and the NGC container cannot exist here: engines are stand-in config.json files
(tests/repo/conftest.py), tritonserver is the NGC path, and nothing is launched. Each test asserts
the exact argv, config or request sdtk produces against the upstream file it cites.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from toolkit.recipe import load_recipe
from toolkit.repo import render_repository
from toolkit.server.discover import Candidate
from toolkit.server.plan import launch_ranks as launch_world_size

from .conftest import engines_for, llmapi_options, make_recipe

REPO = Path(__file__).resolve().parents[2]
NGC = Candidate("ngc", Path("/opt/tritonserver/bin/tritonserver"), True)


def _cfg(path: Path) -> model_config_pb2.ModelConfig:
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), cfg)
    return cfg


def _params(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def _server(recipe, rendered, tmp_path):
    from toolkit.deploy.local import server_for as _server

    return _server(recipe, rendered, tmp_path / "wd", tritonserver=NGC)


@pytest.fixture
def container(monkeypatch):
    """The Triton container the launch is planned for (render plans it): 25.12 unless set again."""

    def set_version(version: str) -> None:
        monkeypatch.setenv("NVIDIA_TRITON_SERVER_VERSION", version)

    set_version("25.12")
    return set_version


# --------------------------------------------------------------------------- draft-target with TP: one orchestrator


def test_engine_draft_target_tp4_launches_one_orchestrator_with_a_pool_per_gpu(tmp_path, container):
    """Upstream: `launch_triton_server.py --model_repo=... --multi-model --world_size=1`; "--multi-model
    is necessary if TP mode is used" (NVIDIA/TensorRT-LLM examples/draft_target_model/README.md
    @11925f6). With --multi-model, spawning on and NVIDIA_TRITON_SERVER_VERSION > 24.06, the launcher
    adds `--pinned-memory-pool-byte-size=0 --enable-peer-access=false` and one
    `--cuda-memory-pool-byte-size={gpu}:0` per GPU (tensorrtllm_backend v0.19.0
    scripts/launch_triton_server.py add_multi_model_config) and sets TRTLLM_ORCHESTRATOR=1,
    TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1."""
    recipe = make_recipe(
        "engine", "draft_target", serving={"decoupled": False}, parallel={"tp": 4, "draft_tp": 1}
    )
    engines = engines_for(tmp_path, recipe, "engine")
    write = json.loads((engines["target"] / "config.json").read_text())
    write["pretrained_config"]["mapping"] = {"world_size": 4, "tp_size": 4, "pp_size": 1}
    (engines["target"] / "config.json").write_text(json.dumps(write))
    r = render_repository(recipe, engines, tmp_path / "repo", backend="engine", tokenizer_dir="/tok")
    assert (r.world_size, r.multi_model, r.num_gpus) == (1, True, 4)
    server = _server(recipe, r, tmp_path)
    argv = server.command()
    assert argv[:5] == ["mpirun", "--allow-run-as-root", "-n", "1", str(NGC.path)]
    assert ":" not in argv  # one rank
    assert argv.count("--pinned-memory-pool-byte-size=0") == 1 and "--enable-peer-access=false" in argv
    pools = [a for a in argv if a.startswith("--cuda-memory-pool-byte-size=")]
    assert pools == [f"--cuda-memory-pool-byte-size={g}:0" for g in range(4)]
    assert server.state  # constructible; the env below is what start() adds
    assert server.plan is r.launch  # the render's plan, read as it is
    assert server.plan.env == {
        "TRTLLM_ORCHESTRATOR": "1",
        "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1",
    }
    # each model gets its own device list, as upstream fills gpu_device_ids per model
    # (`gpu_device_ids:${TARGET_DEVICE_IDS}` / `${DRAFT_DEVICE_IDS}`).
    assert _params(_cfg(r.path / "tensorrt_llm/config.pbtxt"))["gpu_device_ids"] == "0,1,2,3"
    assert _params(_cfg(r.path / "tensorrt_llm_draft/config.pbtxt"))["gpu_device_ids"] == "0"


def test_no_pool_flags_in_old_containers(tmp_path, container):
    """launch_triton_server.py adds the pool flags only when the container is newer than 24.06."""
    container("24.06")
    recipe = make_recipe("engine", "draft_target", serving={"decoupled": False})
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "engine"),
        tmp_path / "repo",
        backend="engine",
        tokenizer_dir="/t",
    )
    argv = _server(recipe, r, tmp_path).command()
    assert not [a for a in argv if "memory-pool" in a or "peer-access" in a]


def test_engine_leader_mode_keeps_a_rank_per_gpu():
    """Without --multi-model, launch_triton_server.py asserts mpiSize == tp*pp (leader mode)."""
    assert launch_world_size("engine", "medusa", 4) == 4
    assert launch_world_size("engine", "draft_target", 4) == 1


# --------------------------------------------------------------------------- the draft's own TP and devices


def test_draft_gets_its_own_tp_and_devices(tmp_path):
    """Upstream's example converts each model with its own `--tp_size` ("can be modified set if using
    TP mode for draft / target model") and gives them separate devices (`DRAFT_DEVICE_IDS="0"`,
    `TARGET_DEVICE_IDS="1,2,3,4"`), examples/draft_target_model/README.md @11925f6."""
    from toolkit.build import build

    recipe = load_recipe(
        REPO / "recipes/llama-3.3-70b-draft-target.yaml",
        ["backend=engine", "parallel.draft_tp=1", "parallel.target_device_ids=[1,2,3,4]", "parallel.draft_device_ids=[0]"],
    )
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    argv = {s["name"]: s["argv"] for s in result.steps}

    def flag(step: str, name: str) -> str:
        a = argv[step]
        return a[a.index(name) + 1]

    assert (flag("convert-target", "--tp_size"), flag("convert-target", "--workers")) == ("4", "4")
    assert (flag("convert-draft", "--tp_size"), flag("convert-draft", "--pp_size")) == ("1", "1")
    assert flag("build-draft", "--workers") == "1" and flag("build-target", "--workers") == "4"
    assert recipe.parallel.devices("target") == [1, 2, 3, 4]
    assert recipe.parallel.devices("draft") == [0]


def test_device_lists_must_match_the_model_sizes():
    from toolkit.errors import RecipeError

    with pytest.raises(RecipeError, match="draft_device_ids"):
        make_recipe("engine", "draft_target", parallel={"tp": 2, "draft_tp": 1, "draft_device_ids": [0, 1]})
    with pytest.raises(RecipeError, match="target_device_ids"):
        make_recipe("engine", "draft_target", parallel={"tp": 2, "target_device_ids": [0, 0]})


# --------------------------------------------------------------------------- llmapi: one tritonserver, no mpirun


def test_llmapi_tp4_is_one_tritonserver_without_mpirun(tmp_path, container):
    """tensorrtllm_backend docs/llmapi.md (HEAD 0b9d7d5) launches one server,
    `launch_triton_server.py --model_repo=llmapi_repo/`, and the llmapi model.py clears
    OMPI_COMM_WORLD_* at import (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py
    @044a90d): mpirun ranks would each load the whole model."""
    recipe = make_recipe("llmapi", "eagle3", parallel={"tp": 4})
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
        trtllm_dir=tmp_path / "no-checkout",
    )
    assert (r.world_size, r.multi_model, r.num_gpus) == (1, False, 4)
    argv = _server(recipe, r, tmp_path).command()
    assert argv[0] == str(NGC.path) and "mpirun" not in argv
    assert f"--model-repository={r.path}" in argv


# --------------------------------------------------------------------------- llmapi model.py in the NGC layout


def test_llmapi_model_py_is_found_in_the_ngc_layout(tmp_path, monkeypatch):
    """NGC -trtllm-python-py3 containers ship the model at /app/all_models/llmapi/tensorrt_llm/1/
    (triton-inference-server/tutorials Feature_Guide/Speculative_Decoding/TRT-LLM/README.md) and
    /app/tensorrt_llm/triton_backend/all_models/... (TensorRT-LLM docker/Dockerfile.multi @00f74ad).
    The /app tree is a stand-in under tmp_path."""
    from toolkit.repo import render as render_mod
    from toolkit.repo import versions

    assert versions.LLMAPI_MODEL_DIRS == (
        "/app/all_models/llmapi/tensorrt_llm/1",
        "/app/tensorrt_llm/triton_backend/all_models/llmapi/tensorrt_llm/1",
    )
    app = tmp_path / "app/tensorrt_llm/triton_backend/all_models/llmapi/tensorrt_llm/1"
    app.mkdir(parents=True)
    (app / "model.py").write_text("# NVIDIA's model\n")
    (app / "helpers.py").write_text("# helpers\n")
    monkeypatch.setattr(render_mod, "LLMAPI_MODEL_DIRS", (str(tmp_path / "app/all_models/x"), str(app)))
    monkeypatch.delenv("TRTLLM_DIR", raising=False)
    recipe = make_recipe("llmapi", "ngram")
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
    )
    assert r.missing == []
    assert (r.path / "tensorrt_llm/1/model.py").read_text() == "# NVIDIA's model\n"
    assert (r.path / "tensorrt_llm/1/helpers.py").is_file()
    runbook = (r.path / "RUNBOOK.md").read_text()
    assert "not in the\ncontainer" not in runbook


def test_llmapi_missing_model_names_every_place_looked(tmp_path, monkeypatch):
    from toolkit.repo import render as render_mod

    monkeypatch.setattr(render_mod, "LLMAPI_MODEL_DIRS", (str(tmp_path / "none"),))
    recipe = make_recipe("llmapi", "ngram")
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
        trtllm_dir=tmp_path / "checkout",
    )
    assert r.missing == ["tensorrt_llm/1/model.py"]
    assert str(tmp_path / "checkout") in r.warnings[-1] and str(tmp_path / "none") in r.warnings[-1]
    assert "/app/all_models/llmapi/tensorrt_llm/1/" in (r.path / "RUNBOOK.md").read_text()


# --------------------------------------------------------------------------- llmapi request inputs


def _llmapi_info(tmp_path):
    from toolkit.client.types import ModelInfo

    recipe = make_recipe("llmapi", "eagle3")
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
        trtllm_dir=tmp_path / "none",
    )
    from google.protobuf.json_format import MessageToDict

    cfg = MessageToDict(_cfg(r.path / "tensorrt_llm/config.pbtxt"), preserving_proto_field_name=True)
    cfg["model_transaction_policy"] = {"decoupled": True}  # what auto_complete_config sets from model.yaml
    return ModelInfo.from_config(cfg)


def test_llmapi_request_uses_sampling_param_inputs(tmp_path):
    """Inputs read by the llmapi model: text_input, streaming, sampling_param_{max_tokens, temperature,
    top_k, top_p, seed, exclude_input_from_output, return_perf_metrics, ...} (TensorRT-LLM
    triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt @0a71057, 1/helpers.py
    get_sampling_params_from_request); docs example `{"text_input": ..., "sampling_param_max_tokens": 10}`."""
    from toolkit.client.types import GenerationRequest

    info = _llmapi_info(tmp_path)
    req = GenerationRequest(
        "Hello", 12, temperature=0.5, top_k=4, top_p=0.9, seed=7, return_perf_metrics=True
    )
    assert req.values(info, stream=True) == {
        "text_input": "Hello",
        "sampling_param_max_tokens": 12,
        "sampling_param_temperature": 0.5,
        "sampling_param_top_k": 4,
        "sampling_param_top_p": 0.9,
        "sampling_param_seed": 7,
        "sampling_param_exclude_input_from_output": True,
        "sampling_param_return_perf_metrics": True,
        "streaming": True,
    }
    assert GenerationRequest("Hi", 3).values(info, stream=False) == {
        "text_input": "Hi",
        "sampling_param_max_tokens": 3,
        "sampling_param_exclude_input_from_output": True,
        "streaming": False,
    }


def test_llmapi_request_refuses_ensemble_only_fields(tmp_path):
    from toolkit.client.types import GenerationRequest
    from toolkit.errors import GenerationError

    info = _llmapi_info(tmp_path)
    with pytest.raises(GenerationError, match="num_draft_tokens"):
        GenerationRequest("Hi", 3, num_draft_tokens=4).values(info, stream=False)


def test_llmapi_streamed_text_is_cumulative_upstream():
    """Upstream _create_response sends `output.text` of the RequestOutput, the whole text so far,
    in every streamed response; the client hands the collector only the new part."""
    from toolkit.client.llmapi import delta_text

    raw = [({"text_output": ["Hel"]}, False), ({"text_output": ["Hello"]}, False), ({}, True)]
    assert [o.get("text_output") for o, _ in delta_text(iter(raw))] == ["Hel", "lo", None]


def test_ensemble_request_is_unchanged(tmp_path):
    from toolkit.client.types import GenerationRequest, ModelInfo

    info = ModelInfo("ensemble", 4, True, {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL"},
                     frozenset({"text_input", "max_tokens"}), {})  # fmt: skip
    assert GenerationRequest("Hi", 3).values(info, stream=True) == {
        "text_input": "Hi",
        "max_tokens": 3,
        "stream": True,
    }


# --------------------------------------------------------------------------- pinned versions and containers


def test_pinned_versions_have_a_verified_container():
    """Triton's release compatibility matrix (server docs/introduction/compatibility.md @r26.07, 819ee37):
    newest trtllm-python-py3 row 26.07 → TensorRT-LLM 1.2.1. Every bundled recipe that pins a version pins
    one a verified container carries."""
    from toolkit.containers import images

    pinned = {}
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        v = yaml.safe_load(path.read_text()).get("trtllm_version")
        if v is not None:
            pinned[path.name] = v
            assert images.image_for(v).endswith("-trtllm-python-py3"), path.name
    assert pinned["llama-3.1-8b-eagle3.yaml"] == "1.2.1"
    assert images.image_for("1.2.1") == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"


# --------------------------------------------------------------------------- llmapi model.yaml does not batch


def test_llmapi_model_yaml_does_not_batch(tmp_path):
    """Upstream llmapi 1/model.yaml: `max_batch_size: 0 # The current implementation does not support
    batching`; model.py `_convert_request` rejects a batched text_input (@044a90d)."""
    from toolkit.build import build

    recipe = load_recipe(REPO / "recipes/llama-3.1-8b-eagle3.yaml")
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    model = yaml.safe_load(result.llmapi["model_yaml"])  # the file's text
    assert model["triton_config"] == {"max_batch_size": 0, "decoupled": True}
    assert model["max_batch_size"] == recipe.build.max_batch_size  # the LLM's in-flight batch


# --------------------------------------------------------------------------- C++ backend input names per version


@pytest.mark.parametrize(
    ("version", "min_name", "seed_name", "counts"),
    [
        ("0.19.0", "min_length", "random_seed", False),
        ("0.20.0", "min_tokens", "seed", False),
        ("1.1.0", "min_tokens", "seed", False),
        (None, "min_tokens", "seed", True),
    ],
)
def test_tensorrt_llm_input_names_follow_the_version(tmp_path, version, min_name, seed_name, counts):
    """tensorrtllm_backend v0.19.0 inflight_batcher_llm/src/utils.h: `minLength = "min_length"`,
    `randomSeed = "random_seed"`; TensorRT-LLM triton_backend/inflight_batcher_llm/src/utils.h
    @14c3afe: `min_tokens`, `seed`, no num_*_tokens output; config.pbtxt @0c8de69 adds them."""
    recipe = make_recipe("engine", "medusa", trtllm_version=version)
    engines = engines_for(tmp_path, recipe, "engine")
    cfg = json.loads((engines["target"] / "config.json").read_text())
    cfg.pop("version")  # the recipe's declared version decides
    (engines["target"] / "config.json").write_text(json.dumps(cfg))
    r = render_repository(recipe, engines, tmp_path / "repo", backend="engine", tokenizer_dir="/tok")
    llm = _cfg(r.path / "tensorrt_llm/config.pbtxt")
    names = {i.name for i in llm.input}
    assert {min_name, seed_name} <= names
    assert not ({"min_length", "random_seed", "min_tokens", "seed"} - {min_name, seed_name}) & names
    assert ("num_output_tokens" in {o.name for o in llm.output}) is counts
    ens = _cfg(r.path / "ensemble/config.pbtxt")
    step = next(s for s in ens.ensemble_scheduling.step if s.model_name == "tensorrt_llm")
    assert step.input_map[min_name] == min_name and step.input_map[seed_name] == seed_name
    assert {min_name, seed_name} <= {i.name for i in ens.input}  # upstream's ensemble of that version
    assert ("return_num_output_tokens" in step.input_map) is counts


def test_engine_config_version_wins_over_the_recipe(tmp_path):
    recipe = make_recipe("engine", "none", trtllm_version="1.1.0")
    engines = engines_for(tmp_path, recipe, "engine")
    cfg = json.loads((engines["target"] / "config.json").read_text())
    cfg["version"] = "0.19.0"
    (engines["target"] / "config.json").write_text(json.dumps(cfg))
    r = render_repository(recipe, engines, tmp_path / "repo", backend="engine", tokenizer_dir="/tok")
    assert "random_seed" in {i.name for i in _cfg(r.path / "tensorrt_llm/config.pbtxt").input}


# --------------------------------------------------------------------------- trtllm-serve options flag


def test_trtllm_serve_options_flag():
    """`--extra_llm_api_options` is the flag of 1.0/1.1 and an alias of `--config` later:
    `@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options", ...)`
    (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py @00209af)."""
    from toolkit.build import build

    result = build(REPO / "recipes/llama-3.1-8b-ngram.yaml", dry_run=True, progress=lambda _m: None)
    argv = result.llmapi["serve_command"]
    assert argv[:4] == ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct", "--backend", "pytorch"]
    assert argv[4] == "--extra_llm_api_options" and argv[5].endswith("extra_llm_api_options.yaml")


# --------------------------------------------------------------------------- deploy --dry-run


def test_deploy_dry_run_engine_draft_target(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from toolkit.cli import cli

    monkeypatch.setenv("NVIDIA_TRITON_SERVER_VERSION", "25.03")
    out = CliRunner().invoke(
        cli,
        ["deploy", str(REPO / "recipes/llama-3.3-70b-draft-target.yaml"), "--backend", "engine",
         "--dry-run", "--workdir", str(tmp_path), "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)
    argv = plan["launch_argv"]
    assert argv.count("/opt/tritonserver/bin/tritonserver") == 1 and argv[:4] == [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
    ]
    assert [a for a in argv if a.startswith("--cuda-memory-pool")] == [
        f"--cuda-memory-pool-byte-size={g}:0" for g in range(4)
    ]
    assert plan["launch_env"] == {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
    assert "trtllm-build" in plan["build_script"]
    assert not any(tmp_path.iterdir())  # nothing built or rendered
    text = CliRunner().invoke(
        cli, ["deploy", str(REPO / "recipes/llama-3.3-70b-draft-target.yaml"), "--backend", "engine",
              "--dry-run", "--workdir", str(tmp_path)],
    )  # fmt: skip
    launch = text.stdout.rstrip("\n").splitlines()[-1]
    assert launch.startswith("TRTLLM_ORCHESTRATOR=1 TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1 mpirun ")


def test_deploy_dry_run_llmapi_tp4(tmp_path):
    from toolkit.deploy import plan_deploy

    recipe = load_recipe(REPO / "recipes/llama-3.3-70b-draft-target.yaml", ["backend=llmapi"])
    plan = plan_deploy(recipe, workdir=tmp_path)
    assert plan.backend == "llmapi" and plan.world_size == 1 and plan.num_gpus == 4
    assert plan.launch_argv[0] == "/opt/tritonserver/bin/tritonserver" and "mpirun" not in plan.launch_argv
    assert plan.script().rstrip("\n").splitlines()[-1].startswith("/opt/tritonserver/bin/tritonserver ")
