"""Rendered repositories and build plans against upstream facts, per TensorRT-LLM version.

The fixtures `trtllm-<version>.json` are facts transcribed from upstream (each names its repository,
path and tag or commit under `sources`): tensor names, types and dims and parameter keys of the
`tensorrt_llm`, `ensemble`, `preprocessing`, `postprocessing`, `tensorrt_llm_bls` and llmapi
`tensorrt_llm` models, `trtllm-build` flags and LLM-API option names. Engines are stand-in config.json
files (TensorRT-LLM cannot be installed here); rendering reads nothing else from them.

What sdtk renders on top of upstream, on purpose, is listed in SDTK_EXTRAS, each with its reason.

Where a fact was read at a commit other than the release tag, the fixture says so per tensor:
`models.llmapi_tensorrt_llm.at_tag` of trtllm-1.0/1.1.json (`bracketed`, `unverified` with the
reason, `absent` with the upstream change that added it after the tag), checked by
test_llmapi_facts_state_their_standing_at_the_tag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from packaging.version import Version
from tritonclient.grpc import model_config_pb2

from tests.repo.conftest import engines_for, llmapi_options, make_recipe
from toolkit.build import build, llmapi_schema
from toolkit.modes.core import ENGINE_MAX
from toolkit.repo import render_repository

HERE = Path(__file__).parent
VERSIONS = {
    "0.19": "0.19.0",
    "0.20": "0.20.0",
    "1.0": "1.0.0",
    "1.1": "1.1.0",
    "1.2": "1.2.1",
    "1.3": "1.3.0",
}
ENGINE_VERSIONS = ["0.19", "0.20", "1.0", "1.1", "1.2"]  # 1.3 removed the engine path (PRs #15907, #15918)
LLMAPI_VERSIONS = ["1.0", "1.1", "1.2", "1.3"]
# Versions whose engine path sdtk plans (its engine-path policy, toolkit.modes.core.ENGINE_MAX).
ENGINE_PLANNED = [v for v in ENGINE_VERSIONS if Version(VERSIONS[v]) < Version(ENGINE_MAX)]
ENGINE_MODES = ["none", "draft_target", "medusa", "eagle", "lookahead"]
LLMAPI_MODES = ["none", "draft_target", "eagle3", "ngram"]

# model → {"inputs"/"outputs"/"parameters": {name: why}}: what sdtk renders beyond the upstream model.
SDTK_EXTRAS: dict[str, dict[str, dict[str, str]]] = {
    "tensorrt_llm": {
        "parameters": {"enable_trt_overlap": "un-commented in the newer template (TensorRT-LLM 0c8de69)"},
    },
    "preprocessing": {
        "inputs": {"IMAGES": "sdtk's preprocessing declares the newer template's multimodal input"},
        "dims": {"IMAGE_SIZES": "[-1, 2] in the newer template; multimodal, never produced by sdtk"},
        "parameters": {"hf_model_path": "the newer template's multimodal parameter"},
    },
    "tensorrt_llm_bls": {
        # sdtk's own BLS (not upstream's code): its draft-target defaults and token counts.
        "inputs": {
            "return_num_input_tokens": "sdtk's BLS counts tokens itself",
            "return_num_output_tokens": "sdtk's BLS counts tokens itself",
        },
        "outputs": {
            "num_input_tokens": "sdtk's BLS counts tokens itself",
            "num_output_tokens": "sdtk's BLS counts tokens itself",
        },
        "parameters": {
            "default_num_draft_tokens": "draft-target default when a request sends none",
            "default_use_draft_logits": "draft-target default when a request sends none",
            "exclude_input_in_output": "the BLS's default for that input",
            "max_input_len": "the engine's limit, checked on the prompt before the draft-target loop",
            "max_seq_len": "the engine's limit, checked on prompt + max_tokens before the loop",
        },
    },
}


def fixture(version: str) -> dict:
    return json.loads((HERE / f"trtllm-{version}.json").read_text())


def _dt(t: int) -> str:
    return model_config_pb2.DataType.Name(t)


def _cfg(path: Path) -> model_config_pb2.ModelConfig:
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), cfg)
    return cfg


def check_model(cfg: model_config_pb2.ModelConfig, facts: dict, model: str) -> None:
    """Every rendered tensor is upstream's (same type and dims) or a listed extra; every upstream
    tensor and parameter key is rendered."""
    extras = SDTK_EXTRAS.get(model, {})
    for kind, rendered in (("inputs", cfg.input), ("outputs", cfg.output)):
        want = {t["name"]: t for t in facts[kind]}
        got = {t.name: t for t in rendered}
        allowed = set(extras.get(kind, {}))
        assert set(got) - set(want) <= allowed, (
            f"{model} {kind} not upstream: {sorted(set(got) - set(want) - allowed)}"
        )
        missing = set(want) - set(got)
        assert not missing, f"{model}: upstream {kind} not rendered: {sorted(missing)}"
        for name in set(want) & set(got):
            w, g = want[name], got[name]
            if not w["data_type"].startswith("${"):
                assert _dt(g.data_type) == w["data_type"], f"{model}.{name} data_type"
            if name not in extras.get("dims", {}):
                assert list(g.dims) == w["dims"], f"{model}.{name} dims"
            if kind == "inputs":
                assert bool(g.optional) == bool(w.get("optional")), f"{model}.{name} optional"
    keys = set(cfg.parameters)
    assert set(facts["parameters"]) <= keys, (
        f"{model}: parameters missing {sorted(set(facts['parameters']) - keys)}"
    )
    assert keys - set(facts["parameters"]) <= set(extras.get("parameters", {})), f"{model}: parameters"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_fixture_names_its_sources(version):
    facts = fixture(version)
    assert facts["trtllm_version"] == version
    for where in facts["sources"].values():
        assert "/" in where and any(w in where for w in ("tag", "commit", "@", "era", "PR #"))
    engine = {"tensorrt_llm", "ensemble", "preprocessing", "postprocessing", "tensorrt_llm_bls"}
    want = {"llmapi_tensorrt_llm"} | (engine if version in ENGINE_VERSIONS else set())
    assert set(facts["models"]) == want
    if version == "1.2":  # the C++ backend of 1.2 is a deprecated leftover whose template is not pinned
        assert all(
            "UNVERIFIED" in facts["sources"]["engine_models"] and facts["models"][m]["unverified"]
            for m in engine
        )


@pytest.mark.parametrize("mode", ENGINE_MODES)
@pytest.mark.parametrize("version", ENGINE_VERSIONS)
def test_engine_repository_matches_its_version(version, mode, tmp_path):
    facts = fixture(version)
    recipe = make_recipe("engine", mode, trtllm_version=VERSIONS[version])
    engines = engines_for(tmp_path, recipe, "engine")
    for path in engines.values():  # trtllm-build records its version in config.json
        cfg = json.loads((path / "config.json").read_text())
        cfg["version"] = VERSIONS[version]
        (path / "config.json").write_text(json.dumps(cfg))
    r = render_repository(recipe, engines, tmp_path / "repo", backend="engine", tokenizer_dir="/tok")
    for name in r.models:
        upstream = "tensorrt_llm" if name == "tensorrt_llm_draft" else name
        check_model(_cfg(r.path / name / "config.pbtxt"), facts["models"][upstream], upstream)


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_llmapi_facts_state_their_standing_at_the_tag(version):
    """The llmapi model's facts were read at commits other than the release tag (the tag's file
    could not be read here). `at_tag` says, for each tensor, which it is: `bracketed` (the same
    before the tag, at tensorrtllm_backend c2e65b8, and after it), `unverified` (absent before the
    tag, present after it: name -> reason, with the upstream change that added it) or `absent`
    (added after the tag: name -> reason; left out of the fixture and of what sdtk renders)."""
    from toolkit.repo.versions import LLMAPI_LATE_INPUTS

    facts = fixture(version)["models"]["llmapi_tensorrt_llm"]
    at = facts["at_tag"]
    assert f"v{VERSIONS[version]}" in at["tag"] and "NVIDIA/TensorRT-LLM" in at["tag"]
    if not at["read"]:
        assert at["not_read"]
    listed = [t["name"] for t in facts["inputs"] + facts["outputs"]]
    bracketed, unverified, absent = set(at["bracketed"]["names"]), set(at["unverified"]), set(at["absent"])
    assert not bracketed & unverified, sorted(bracketed & unverified)
    assert bracketed | unverified == set(listed), sorted(set(listed) ^ (bracketed | unverified))
    assert not absent & set(listed), sorted(absent & set(listed))
    assert absent == set(LLMAPI_LATE_INPUTS)  # what the renderer leaves out below 1.3
    assert "c2e65b8" in at["bracketed"]["why"] and "0a71057" in at["bracketed"]["why"]
    for name, why in {**at["unverified"], **at["absent"]}.items():
        assert "NVIDIA/TensorRT-LLM" in why and "PR #" in why and "20" in why, name  # the change, its date


@pytest.mark.parametrize("mode", LLMAPI_MODES)
@pytest.mark.parametrize("version", LLMAPI_VERSIONS)
def test_llmapi_repository_matches_its_version(version, mode, tmp_path):
    facts = fixture(version)
    recipe = make_recipe("llmapi", mode, trtllm_version=VERSIONS[version])
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
        trtllm_dir=tmp_path / "none",
    )
    cfg = _cfg(r.path / "tensorrt_llm/config.pbtxt")
    check_model(cfg, facts["models"]["llmapi_tensorrt_llm"], "llmapi")
    absent = set(facts["models"]["llmapi_tensorrt_llm"].get("at_tag", {}).get("absent", {}))
    assert not absent & {t.name for t in cfg.input}, "inputs added after the tag are rendered"
    model = yaml.safe_load((r.path / "tensorrt_llm/1/model.yaml").read_text())
    assert set(model["triton_config"]) <= set(facts["llmapi_options"]["triton_config"])


def planned_recipe(backend: str, mode: str, version: str, tmp_path: Path):
    """make_recipe's recipe with its model paths as empty local directories: a dry run refuses
    missing local paths, and planning needs no weights."""
    recipe = make_recipe(backend, mode, trtllm_version=VERSIONS[version])
    models = {}
    for field, source in recipe.models:
        if source is not None:
            path = tmp_path / "models" / field
            path.mkdir(parents=True, exist_ok=True)
            models[field] = {"path": str(path)}
    return make_recipe(backend, mode, trtllm_version=VERSIONS[version], models=models)


@pytest.mark.parametrize("mode", ENGINE_MODES)
@pytest.mark.parametrize("version", ENGINE_PLANNED)
def test_engine_build_plan_uses_known_flags(version, mode, tmp_path):
    facts = fixture(version)["trtllm_build"]
    recipe = planned_recipe("engine", mode, version, tmp_path)
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    builds = [c for c in result.commands if c and c[0] == "trtllm-build"]
    assert builds
    for argv in builds:
        flags = [a for a in argv if a.startswith("--")]
        assert set(flags) <= set(facts["flags"]), sorted(set(flags) - set(facts["flags"]))
        if "--speculative_decoding_mode" in argv:
            assert argv[argv.index("--speculative_decoding_mode") + 1] in facts["speculative_decoding_mode"]


@pytest.mark.parametrize("mode", LLMAPI_MODES)
@pytest.mark.parametrize("version", LLMAPI_VERSIONS)
def test_llmapi_build_plan_uses_known_options(version, mode, tmp_path):
    """Every rendered option is one the version's fixture lists; from 1.2 on, the rendered
    speculative_config also passes the version's stand-in of LLM()'s check (llmapi_schema)."""
    facts = fixture(version)["llmapi_options"]
    recipe = planned_recipe("llmapi", mode, version, tmp_path)
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    for name in ("extra_llm_api_options", "model_yaml"):
        options = yaml.safe_load(result.llmapi[name])
        top = set(options) - {"triton_config"}
        assert top <= set(facts["top_level"]), sorted(top - set(facts["top_level"]))
        assert set(options.get("triton_config", {})) <= set(facts["triton_config"])
        spec = options.get("speculative_config")
        if spec is not None:
            known = facts["speculative_config"][spec["decoding_type"]]
            assert set(spec) <= set(known), sorted(set(spec) - set(known))
            if version in ("1.2", "1.3"):
                llmapi_schema.validate(VERSIONS[version], spec)
    flag = facts.get("speculative_config_rules", {}).get(
        "trtllm_serve_options_flag", "--extra_llm_api_options"
    )
    assert flag in result.llmapi["serve_command"]


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_speculative_config_standin_matches_its_fixture(version):
    """The stand-in (toolkit/build/llmapi_schema.py) declares exactly the fixture's fields per
    decoding type, and the fixture's rules (schedule reading, exclusivity, cut-off names,
    eagle3_one_model, serve flag, unverified facts) are the stand-in's."""
    facts = fixture(version)["llmapi_options"]
    line = llmapi_schema.line(VERSIONS[version])
    assert line is not None and line.name == version
    for kind, fields in facts["speculative_config"].items():
        assert line.field_names(kind) == set(fields), kind
    rules = facts["speculative_config_rules"]
    assert rules["draft_len_schedule_keys"] == line.schedule_keys
    assert rules["acceptance_cutoffs"] == list(line.cutoffs)
    assert rules["eagle3_one_model"] is line.eagle3_one_model
    assert rules["trtllm_serve_options_flag"] == line.serve_flag
    assert (rules["max_concurrency_with_draft_len_schedule"] == "mutually exclusive") is line.exclusive_limit
    assert rules["unverified"] == list(line.unverified) and rules["source"] == line.source
    if version == "1.3":
        assert not {"Medusa", "Lookahead"} & set(facts["speculative_config"])
        assert {"SA", "PARD", "MTP", "DFlash", "DSpark", "AUTO"} <= set(facts["speculative_config"])
        assert "eagle3_one_model" not in facts["speculative_config"]["Eagle3"]
        sa = facts["sa_config"]
        assert set(sa["fields"]) == set(llmapi_schema.SAEnhancerConfig.model_fields)
        assert all("sa_config" in facts["speculative_config"][k] for k in sa["on"])


REPO = HERE.parents[1]
# The GPU recipes (tiny-* and smollm2-* are the CPU reference backend's).
BUNDLED = sorted(
    p.name for p in (REPO / "recipes").glob("*.yaml") if not p.name.startswith(("tiny-", "smollm2-"))
)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_recipe_build_plans_match_their_declared_version(name, tmp_path):
    """The real-model recipes, planned (dry run) for the version they declare (default: the newest
    verified container's, 1.1.0), use only flags and options that version has."""
    from toolkit.containers.images import DEFAULT_TRTLLM
    from toolkit.recipe import load_recipe

    recipe = load_recipe(REPO / "recipes" / name)
    version = recipe.trtllm_version or DEFAULT_TRTLLM
    key = ".".join(version.split(".")[:2])
    facts = fixture(key)
    result = build(
        load_recipe(REPO / "recipes" / name, [f"trtllm_version={version}"]),
        workdir=tmp_path,
        dry_run=True,
        progress=lambda _m: None,
    )
    if result.backend == "engine":
        for argv in (c for c in result.commands if c and c[0] == "trtllm-build"):
            assert {a for a in argv if a.startswith("--")} <= set(facts["trtllm_build"]["flags"])
    else:
        options = yaml.safe_load(result.llmapi["extra_llm_api_options"])
        assert set(options) <= set(facts["llmapi_options"]["top_level"])
        spec = options.get("speculative_config")
        if spec is not None:
            assert set(spec) <= set(facts["llmapi_options"]["speculative_config"][spec["decoding_type"]])


TWIN_MODES = ["none", "draft_target", "medusa", "lookahead"]  # the engine path's modes the twin serves


def _normalized(path: Path, engine_dir: Path) -> model_config_pb2.ModelConfig:
    cfg = _cfg(path)
    for value in cfg.parameters.values():
        value.string_value = value.string_value.replace(str(engine_dir), "<engines>")
    return cfg


@pytest.mark.parametrize("mode", TWIN_MODES)
@pytest.mark.parametrize("version", [*ENGINE_VERSIONS, None])
def test_twin_renders_the_gpu_repository(version, mode, tmp_path):
    """The reference backend serves exactly the repository the engine path renders for the declared
    TensorRT-LLM version: every config.pbtxt is the same ModelConfig (V's input names, outputs,
    parameters, transaction policy, instance counts), except the `backend` of tensorrt_llm and
    tensorrt_llm_draft (python instead of tensorrtllm); every Python model's code (preprocessing,
    postprocessing, BLS) is the same file. Only the two LLM models' implementation differs."""
    declared = {"trtllm_version": VERSIONS[version]} if version else {}
    repos = {}
    for backend in ("engine", "reference"):
        recipe = make_recipe(backend, mode, **declared)
        engines = engines_for(tmp_path / backend, recipe, backend)
        if backend == "engine":
            for path in engines.values():  # trtllm-build records its version in config.json
                cfg = json.loads((path / "config.json").read_text())
                cfg["version"] = VERSIONS[version] if version else "1.2.0"  # newest: 1.2's contract
                (path / "config.json").write_text(json.dumps(cfg))
        r = render_repository(
            recipe, engines, tmp_path / backend / "repo", backend=backend, tokenizer_dir="/tok"
        )
        repos[backend] = (r, tmp_path / backend / "engines")
    (eng, eng_dir), (ref, ref_dir) = repos["engine"], repos["reference"]
    assert eng.models == ref.models and eng.entry_model == ref.entry_model and eng.decoupled == ref.decoupled
    llm_models = {"tensorrt_llm", "tensorrt_llm_draft"}
    for name in eng.models:
        e = _normalized(eng.path / name / "config.pbtxt", eng_dir)
        f = _normalized(ref.path / name / "config.pbtxt", ref_dir)
        if name in llm_models:
            assert (e.backend, f.backend) == ("tensorrtllm", "python"), name
            f.backend = e.backend
        assert e == f, (
            f"{name}: the twin's config.pbtxt differs from the engine path's for {version or 'newest'}"
        )
    for rel in ref.files:
        model = rel.split("/", 1)[0]
        if rel.endswith(".py") and model not in llm_models:
            assert (ref.path / rel).read_bytes() == (eng.path / rel).read_bytes(), rel
    if version in ("0.19",):
        names = {i.name for i in _cfg(ref.path / "tensorrt_llm" / "config.pbtxt").input}
        assert {"min_length", "random_seed"} <= names and not {"min_tokens", "seed"} & names
