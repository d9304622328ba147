"""Version-aware LLM-API rendering (toolkit/build/llmapi.py) against the per-line stand-ins of
TensorRT-LLM's `speculative_config` check (toolkit/build/llmapi_schema.py).

TensorRT-LLM cannot be installed here, so `LLM(**args)` cannot check the rendered YAML; the stand-ins
transcribe NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` (1.2 line: the pre-PR-#10860 state,
lower-bound `draft_len_schedule`, `acceptance_window` / `acceptance_length_threshold`,
`eagle3_one_model`; 1.3 line: @0004396, upper-bound schedule (PR #10860), `max_concurrency` and
`draft_len_schedule` mutually exclusive, `acceptance_rate_*`, `use_rejection_sampling`, no
`eagle3_one_model`). Every rendered YAML below is parsed by the declared version's stand-in, and its
schedule is read back by that version's rule at every batch size.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.repo.conftest import make_recipe
from toolkit.build import PreflightFailed, build, llmapi_schema
from toolkit.modes.load_aware import draft_len_at, to_ranges
from toolkit.reference.runtime import ReferenceRuntime
from toolkit.schema import FieldError

VERSIONS = ["1.2.1", "1.3.0"]


def plan(tmp_path: Path, mode: str, version: str, spec: dict[str, Any] | None = None, **sections: Any):
    """The dry-run build of a recipe over empty local model directories (planning reads no weights)."""
    base = make_recipe("llmapi", mode, trtllm_version=version)
    models = {}
    for field, source in base.models:
        if source is not None:
            path = tmp_path / "models" / field
            path.mkdir(parents=True, exist_ok=True)
            models[field] = {"path": str(path)}
    kw: dict[str, Any] = {"models": models, "trtllm_version": version, **sections}
    if spec is not None:
        kw["speculative"] = {**base.speculative.model_dump(exclude_unset=True), **spec}
    recipe = make_recipe("llmapi", mode, **kw)
    return recipe, build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)


def ngram(**speculative: Any) -> Any:
    """The llmapi n-gram recipe (max_draft_len 4) with `speculative` fields on top."""
    return make_recipe("llmapi", "ngram", speculative={"mode": "ngram", "max_draft_len": 4, **speculative})


def rendered(result) -> tuple[dict, dict]:
    return (
        yaml.safe_load(result.llmapi["extra_llm_api_options"]),
        yaml.safe_load(result.llmapi["model_yaml"]),
    )


def upstream_draft_len(version: str, spec: dict[str, Any], batch: int) -> int | None:
    """The draft length TensorRT-LLM `version` runs at `batch` requests for this speculative_config:
    speculation off above max_concurrency (Drafter.should_use_spec_decode), else the schedule by the
    line's reading of its keys, else no limit (None)."""
    line = llmapi_schema.line(version)
    assert line is not None
    limit = spec.get("max_concurrency")
    if limit is not None and batch > limit:
        return 0
    if spec.get("draft_len_schedule"):
        return line.read_schedule(spec["draft_len_schedule"], batch)
    return None


SCHEDULES = [
    ({"draft_len_schedule": {1: 3, 4: 1}}, 8),  # sdtk's own example: 1-3 -> 3, 4+ -> 1
    ({"draft_len_schedule": {1: 3, 2: 2, 4: 1, 16: 0}}, 32),  # a tune overlay's shape
    ({"draft_len_schedule": {1: 3, 4: 1}, "max_concurrency": 5}, 8),
    ({"max_concurrency": 2}, 6),
    ({"draft_len_schedule": [{"max_batch": 2, "draft_len": 3}, {"max_batch": 6, "draft_len": 1}]}, 9),
    ({"draft_len_schedule": [{"max_batch": 1, "draft_len": 3}, {"draft_len": 2}]}, 4),
    ({"draft_len_schedule": {1: 3}}, 1),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("knobs", "max_batch"), SCHEDULES)
def test_schedule_reads_back_the_same_at_every_batch_size(version, knobs, max_batch, tmp_path):
    """sdtk's reference runtime (ReferenceRuntime.draft_len_now over the recipe's LoadAware) and the
    version's reading of the rendered YAML give the same draft length at every batch size
    1..max_batch_size; the YAML passes the version's stand-in and never carries max_concurrency with
    draft_len_schedule."""
    spec = {"max_draft_len": 3, **knobs}
    recipe, result = plan(tmp_path, "eagle3", version, spec, build={"max_batch_size": max_batch})
    extra, model = rendered(result)
    sc = extra["speculative_config"]
    assert model["speculative_config"] == sc
    assert not {"max_concurrency", "draft_len_schedule"} <= set(sc)
    llmapi_schema.validate(version, sc)
    s = recipe.speculative
    for batch in range(1, max_batch + 1):
        runtime = SimpleNamespace(batcher=SimpleNamespace(active=batch))
        ours = ReferenceRuntime.draft_len_now(runtime, s)  # type: ignore[arg-type]
        assert ours == draft_len_at(s.draft_len_schedule, s.max_concurrency, batch)
        assert upstream_draft_len(version, sc, batch) == ours, (version, batch, sc)


def test_schedule_forms_and_meaning():
    """Ranges are explicit batch ranges; a map's keys are the first batch size they apply to; both
    are one function. A map without key 1 (TensorRT-LLM 1.3's upper-bound spelling) is refused with
    the ranges that 1.3 reading would mean."""
    ranges = ngram(
        max_matching_ngram_size=2,
        draft_len_schedule=[{"max_batch": 3, "draft_len": 4}, {"max_batch": 7, "draft_len": 2}],
    ).speculative
    assert ranges.draft_len_schedule == {1: 4, 4: 2, 8: 0}
    assert [ranges.draft_len_at(b) for b in range(1, 10)] == [4, 4, 4, 2, 2, 2, 2, 0, 0]
    assert to_ranges({1: 4, 4: 2, 8: 0}) == [
        {"max_batch": 3, "draft_len": 4},
        {"max_batch": 7, "draft_len": 2},
        {"draft_len": 0},
    ]
    with pytest.raises(Exception) as e:
        ngram(draft_len_schedule={4: 4, 8: 2, 32: 1})
    text = str(e.value)
    assert "draft_len_schedule" in text and "Did you mean" in text
    assert (
        "[{max_batch: 4, draft_len: 4}, {max_batch: 8, draft_len: 2}, {max_batch: 32, draft_len: 1}]" in text
    )
    with pytest.raises(Exception, match="may be left out on the last range only"):
        ngram(draft_len_schedule=[{"draft_len": 4}, {"max_batch": 8, "draft_len": 2}])
    assert issubclass(FieldError, ValueError)


def test_eagle3_one_model_only_where_the_version_declares_it(tmp_path):
    """1.2's EagleDecodingConfig declares eagle3_one_model; 1.3's Eagle3DecodingConfig (1.3.0rc27 API
    page) has none and forbids extra keys; an explicit `false` on 1.3 is refused (two-model path gone)."""
    _, r12 = plan(tmp_path / "a", "eagle3", "1.2.1")
    assert rendered(r12)[0]["speculative_config"]["eagle3_one_model"] is True
    _, r13 = plan(tmp_path / "b", "eagle3", "1.3.0")
    sc = rendered(r13)[0]["speculative_config"]
    assert "eagle3_one_model" not in sc and sc["decoding_type"] == "Eagle3"
    with pytest.raises(llmapi_schema.StandinError, match="eagle3_one_model: not a field"):
        llmapi_schema.validate("1.3.0", {**sc, "eagle3_one_model": True})
    with pytest.raises(PreflightFailed, match="two-model EAGLE-3"):
        plan(tmp_path / "c", "eagle3", "1.3.0", {"eagle3_one_model": False})


@pytest.mark.parametrize(
    ("version", "knobs", "want"),
    [
        ("1.2.1", {"acceptance_window": 8, "acceptance_length_threshold": 1.5},
         {"acceptance_window": 8, "acceptance_length_threshold": 1.5}),
        ("1.3.0", {"acceptance_window": 8, "acceptance_rate_threshold": 0.4, "use_rejection_sampling": True},
         {"acceptance_rate_window_size": 8, "acceptance_rate_threshold": 0.4, "use_rejection_sampling": True}),
    ],
)  # fmt: skip
def test_cutoffs_and_rejection_sampling_in_the_versions_names(version, knobs, want, tmp_path):
    _, result = plan(tmp_path, "ngram", version, knobs)
    sc = rendered(result)[0]["speculative_config"]
    assert {k: sc[k] for k in want} == want
    llmapi_schema.validate(version, sc)


@pytest.mark.parametrize(
    ("version", "knobs", "match"),
    [
        ("1.2.1", {"use_rejection_sampling": True}, "use_rejection_sampling: TensorRT-LLM 1.2 has no such field"),
        ("1.2.1", {"acceptance_window": 4, "acceptance_rate_threshold": 0.5}, "did you mean acceptance_length_threshold"),
        ("1.3.0", {"acceptance_window": 4, "acceptance_length_threshold": 2.0}, "did you mean acceptance_rate_threshold"),
        ("1.1.0", {"acceptance_window": 4}, "needs TensorRT-LLM >= 1.2"),
    ],
)  # fmt: skip
def test_knobs_refused_where_the_version_has_no_field(version, knobs, match, tmp_path):
    with pytest.raises(PreflightFailed, match=match) as e:
        plan(tmp_path, "ngram", version, knobs)
    assert e.value.check == "llmapi-fields"


def test_acceptance_rate_threshold_is_a_rate():
    with pytest.raises(Exception, match="acceptance_rate_threshold"):
        ngram(acceptance_window=4, acceptance_rate_threshold=1.5)


def test_standin_refusal_and_override(tmp_path, monkeypatch):
    """A rendered speculative_config the stand-in refuses fails preflight with the field and the
    source; `speculative.llmapi_check: warn` lets a user whose TensorRT-LLM build differs go on, with
    a note."""
    from toolkit.build import llmapi

    def with_extra(ctx):
        cfg = original(ctx)
        if cfg is not None:
            cfg["not_upstream"] = 1
        return cfg

    original = llmapi.speculative_config
    monkeypatch.setattr(llmapi, "speculative_config", with_extra)
    with pytest.raises(
        PreflightFailed, match="speculative_config.not_upstream: not a field of NGramDecodingConfig"
    ):
        plan(tmp_path / "a", "ngram", "1.3.0")
    _, result = plan(tmp_path / "b", "ngram", "1.3.0", {"llmapi_check": "warn"})
    assert any("llmapi_check: warn" in n for n in result.notes)


@pytest.mark.parametrize(
    ("version", "flag"),
    [("1.1.0", "--extra_llm_api_options"), ("1.2.1", "--extra_llm_api_options"), ("1.3.0", "--config")],
)
def test_serve_flag_and_unverified_facts(version, flag, tmp_path):
    """trtllm-serve's options flag: `--config` on the 1.3 line (its docs), the old name elsewhere
    (an alias of --config from PR #9104 on); the plan's notes and the YAML header say what is
    unverified for the declared line."""
    _, result = plan(tmp_path, "ngram", version)
    argv = result.llmapi["serve_command"]
    assert argv[argv.index(flag) + 1].endswith("extra_llm_api_options.yaml")
    line = llmapi_schema.line(version)
    if line is None:
        assert not any("unverified" in n for n in result.notes)
        return
    note = next(n for n in result.notes if "unverified" in n)
    assert all(u in note for u in line.unverified)
    assert all(
        f"unverified for {line.name}: {u}" in result.llmapi["extra_llm_api_options"] for u in line.unverified
    )


def test_standin_rules_per_line():
    """Rules transcribed from llm_args.py, per line."""
    v = llmapi_schema.validate
    eagle = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "/m"}
    assert v("1.2.1", {**eagle, "max_concurrency": 4, "draft_len_schedule": {1: 3, 4: 1}}) is not None
    with pytest.raises(llmapi_schema.StandinError, match="mutually exclusive"):
        v("1.3.0", {**eagle, "max_concurrency": 4, "draft_len_schedule": {1: 3, 4: 1}})
    with pytest.raises(llmapi_schema.StandinError, match="must include batch_size=1"):
        v("1.2.1", {**eagle, "draft_len_schedule": {4: 3}})
    assert (
        v("1.3.0", {**eagle, "draft_len_schedule": {4: 3, 8: 1}}) is not None
    )  # smallest key = max_draft_len
    with pytest.raises(llmapi_schema.StandinError, match=r"draft_len_schedule\[4\] must equal max_draft_len"):
        v("1.3.0", {**eagle, "draft_len_schedule": {4: 2}})
    with pytest.raises(llmapi_schema.StandinError, match="Medusa is declared only for the TensorRT engine"):
        v("1.2.1", {"decoding_type": "Medusa", "max_draft_len": 3})
    with pytest.raises(llmapi_schema.StandinError, match="'Medusa' is not one of"):
        v("1.3.0", {"decoding_type": "Medusa", "max_draft_len": 3})
    with pytest.raises(llmapi_schema.StandinError, match="'SA' is not one of"):
        v("1.2.1", {"decoding_type": "SA", "max_draft_len": 4})
    sa = {"decoding_type": "SA", "max_draft_len": 4}
    assert v("1.3.0", sa) is not None
    with pytest.raises(llmapi_schema.StandinError, match="global_pool_size requires enable_global_pool"):
        v("1.3.0", {**sa, "global_pool_size": 64})
    with pytest.raises(llmapi_schema.StandinError, match="max_matching_ngram_size must be > 0"):
        v("1.3.0", {**sa, "max_matching_ngram_size": 0})
    assert v("1.3.0", {**eagle, "sa_config": {"threshold": 4, "enable_global_pool": True}}) is not None
    with pytest.raises(llmapi_schema.StandinError, match="sa_config.extra: not a field"):
        v("1.3.0", {**eagle, "sa_config": {"threshold": 4, "extra": 1}})
    with pytest.raises(
        llmapi_schema.StandinError, match="use_rejection_sampling cannot be combined with sa_config"
    ):
        v("1.3.0", {**eagle, "sa_config": {}, "use_rejection_sampling": True})
    with pytest.raises(llmapi_schema.StandinError, match="sa_config: not a field"):
        v("1.3.0", {"decoding_type": "NGram", "max_draft_len": 3, "sa_config": {}})
    with pytest.raises(llmapi_schema.StandinError, match="acceptance_rate_threshold"):
        v("1.3.0", {**eagle, "acceptance_rate_window_size": 4, "acceptance_rate_threshold": 1.5})
    mtp = v("1.3.0", {"decoding_type": "MTP", "num_nextn_predict_layers": 3})
    assert mtp is not None and mtp.max_draft_len == 3  # type: ignore[attr-defined]  # remapped (deprecated)
    assert (
        v("1.3.0", {"decoding_type": "DraftTarget", "max_draft_len": 4, "speculative_model_dir": "/d"})
        is not None
    )
    with pytest.raises(
        llmapi_schema.StandinError, match="speculative_model must be specified for DraftTarget"
    ):
        v("1.2.1", {"decoding_type": "DraftTarget", "max_draft_len": 4})
    for kind in ("PARD", "DFlash", "DSpark", "AUTO"):
        assert v("1.3.0", {"decoding_type": kind, "max_draft_len": 4}) is not None
    assert llmapi_schema.line("1.1.0") is None and v("1.1.0", {"decoding_type": "Eagle"}) is None
    assert llmapi_schema.line("1.2.0rc8") is llmapi_schema.LINE_1_2
    assert llmapi_schema.line("1.3.0rc24") is llmapi_schema.LINE_1_3 is llmapi_schema.line(None)


def test_k8s_deploy_checks_the_llmapi_options_for_the_declared_version(tmp_path):
    """`sdtk deploy --target k8s` (its pod runs `sdtk build`): the EAGLE-3 recipe at 1.3.0 renders a
    speculative_config the 1.3 stand-in accepts (no eagle3_one_model, never max_concurrency beside
    draft_len_schedule), NOTES.md says which 1.3 facts are unverified, and a refusal stops it before
    any file is written."""
    import json

    from toolkit.deploy import DeployOptions, deploy
    from toolkit.recipe import load_recipe

    repo = Path(__file__).parents[2]
    image = "nvcr.io/nvidia/tritonserver:26.11-trtllm-python-py3"
    sets = [
        "trtllm_version=1.3.0",
        "speculative.max_concurrency=4",
        "speculative.draft_len_schedule={1: 3, 2: 1}",
    ]
    recipe = load_recipe(repo / "recipes" / "llama-3.1-8b-eagle3.yaml", sets)
    deploy(recipe, DeployOptions(target="k8s", out=tmp_path / "k8s", image=image))
    notes = (tmp_path / "k8s" / "NOTES.md").read_text()
    line = next(n for n in notes.splitlines() if "speculative_config that sdtk build renders" in n)
    spec = json.loads(line.split(": ", 1)[1])
    assert "eagle3_one_model" not in spec and "max_concurrency" not in spec
    assert spec["draft_len_schedule"] == {"1": 3, "2": 1, "4": 1, "5": 0, "8": 0}
    llmapi_schema.validate(
        "1.3.0", {**spec, "draft_len_schedule": {int(k): v for k, v in spec["draft_len_schedule"].items()}}
    )
    assert all(u in notes for u in llmapi_schema.LINE_1_3.unverified)
    bad = load_recipe(
        repo / "recipes" / "llama-3.1-8b-eagle3.yaml", [*sets, "speculative.eagle3_one_model=false"]
    )
    with pytest.raises(PreflightFailed, match="two-model EAGLE-3"):
        deploy(bad, DeployOptions(target="k8s", out=tmp_path / "bad", image=image))
    assert not (tmp_path / "bad").exists()


def test_a_prerelease_is_its_release_line():
    """`Version("1.3.0rc24") < Version("1.3")`: the 1.3.0rc line (what ships, in the Dynamo
    container) must still get 1.3's llmapi inputs and stand-in, and 26.03's 1.2.0rc8 the 1.2
    C++ model's token counts."""
    from toolkit.repo.versions import llmapi_late_inputs, tensor_names

    assert llmapi_late_inputs("1.3.0rc24") and llmapi_late_inputs("1.3.0") and llmapi_late_inputs(None)
    assert not llmapi_late_inputs("1.2.1") and not llmapi_late_inputs("1.2.0rc8")
    assert tensor_names("1.2.0rc8").token_counts and not tensor_names("1.1.0").token_counts
    assert (
        tensor_names("0.19.0").min_tokens == "min_length"
        and tensor_names("0.20.0rc1").min_tokens == "min_tokens"
    )
    assert llmapi_schema.line("1.3.0rc24") is llmapi_schema.LINE_1_3


def test_the_sa_enhancer_is_rendered_on_1_3_and_refused_before(tmp_path):
    """`speculative.sa_config` on EAGLE-3 becomes 1.3's `sa_config: {threshold, enable_global_pool}`
    (SAEnhancerConfig, NVIDIA/TensorRT-LLM llm_args.py @0004396), accepted by the 1.3 stand-in; the 1.2
    line has no enhancer, so a recipe that asks for it is refused, not silently rendered without it."""
    _, r13 = plan(tmp_path / "a", "eagle3", "1.3.0", {"sa_config": {"threshold": 4}})
    sc = rendered(r13)[0]["speculative_config"]
    assert sc["sa_config"] == {"threshold": 4, "enable_global_pool": False}
    llmapi_schema.validate("1.3.0", sc)
    with pytest.raises(PreflightFailed, match="sa_config: TensorRT-LLM 1.2 has no SA enhancer") as e:
        plan(tmp_path / "b", "eagle3", "1.2.1", {"sa_config": {"threshold": 4}})
    assert e.value.check == "llmapi-fields"
