"""Recipe schema: loading, round-trips, overrides, shipped recipes, cross-field rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit import trees as choices
from toolkit.errors import RecipeError
from toolkit.recipe import (
    Recipe,
    apply_overrides,
    bundled_recipes,
    load_recipe,
    lookahead_max_draft_len,
    parse_recipe,
)

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


def test_recipes_are_bundled():
    names = set(bundled_recipes())
    for required in (
        "llama-3.1-8b-eagle3",
        "vicuna-7b-medusa",
        "vicuna-7b-eagle",
        "llama-3.3-70b-draft-target",
        "qwen2.5-coder-7b-lookahead",
        "llama-3.1-8b-ngram",
        "llama-3.1-8b-baseline",
    ):
        assert required in names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_shipped_recipe_validates_and_round_trips(path):
    recipe = load_recipe(path)
    assert recipe.display_name == path.stem
    dumped = recipe.model_dump(mode="json")
    again = parse_recipe(dumped, path=path)
    assert again.model_dump(mode="json") == dumped
    # Only defaults-free fields in YAML, then back: the same recipe.
    sparse = recipe.model_dump(mode="json", exclude_defaults=True)
    assert parse_recipe(sparse, path=path).model_dump(mode="json") == dumped


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_shipped_real_model_recipes_cite_their_source(path):
    text = path.read_text()
    if path.stem.startswith("tiny-"):
        return
    assert text.startswith("#"), "real-model recipes start with a header comment citing the pairing"


def test_load_by_bundled_name_and_did_you_mean():
    assert load_recipe("vicuna-7b-medusa").mode == "medusa"
    with pytest.raises(RecipeError, match="did you mean 'vicuna-7b-medusa'"):
        load_recipe("vicuna-7b-medusaa")


def test_shorthand_sources_and_relative_paths(tmp_path):
    p = tmp_path / "sub" / "r.yaml"
    p.parent.mkdir()
    p.write_text("models:\n  target: ../models/t\n  draft: org/draft\nspeculative:\n  mode: draft_target\n")
    r = load_recipe(p)
    assert r.models.target.path == "../models/t" and r.models.target.repo is None
    assert r.local_path(r.models.target) == (tmp_path / "models" / "t").resolve()
    assert r.models.draft.repo == "org/draft"
    assert r.local_path(r.models.draft) is None


def test_defaults():
    r = parse_recipe({"models": {"target": "a/b"}})
    assert r.mode == "none" and r.backend == "auto"
    assert r.serving.host == "127.0.0.1"
    assert (r.serving.http_port, r.serving.grpc_port, r.serving.metrics_port) == (8000, 8001, 8002)
    assert r.parallel.world_size == 1


def test_overrides_parse_yaml_scalars(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("models:\n  target: a/b\n  draft: c/d\nspeculative:\n  mode: draft_target\n")
    r = load_recipe(p, ["speculative.max_draft_len=7", "serving.decoupled=false", "serving.host=0.0.0.0"])
    assert r.speculative.max_draft_len == 7
    assert r.serving.decoupled is False
    assert r.serving.host == "0.0.0.0"
    with pytest.raises(RecipeError, match="speculative.max_draft_len"):
        load_recipe(p, ["speculative.max_draft_len=zero"])


def test_override_errors():
    with pytest.raises(RecipeError, match="a.b=value"):
        apply_overrides({}, ["novalue"])
    with pytest.raises(RecipeError, match="is a value"):
        apply_overrides({"backend": "engine"}, ["backend.x=1"])
    d = apply_overrides({}, ["a.b.c=[1, 2]"])
    assert d == {"a": {"b": {"c": [1, 2]}}}


@pytest.mark.parametrize(("w", "n", "g", "expected"), [(7, 7, 7, 83), (1, 1, 0, 0), (2, 2, 1, 2), (4, 3, 4, 15)])
def test_lookahead_formula(w, n, g, expected):
    assert lookahead_max_draft_len(w, n, g) == expected
    r = parse_recipe(
        {"models": {"target": "a/b"}, "speculative": {"mode": "lookahead", "window": w, "ngram": n,
                                                      "verification_set": g, "max_draft_len": expected}}
    )
    assert r.speculative.draft_len == expected


def test_medusa_default_tree_and_draft_len():
    r = parse_recipe({"models": {"target": "a/b", "medusa_heads": "c/d"}, "speculative": {"mode": "medusa"}})
    assert r.speculative.choices == choices.MEDUSA_MC_SIM_7B_63
    assert len(r.speculative.choices) == 63 and r.speculative.draft_len == 63
    assert choices.check_choices(choices.MEDUSA_MC_SIM_7B_63) is None
    assert choices.check_choices(choices.EAGLE_MC_SIM_7B_63) is None


def test_choices_string_round_trip():
    text = choices.to_triton_string([[0], [0, 1], [1]])
    assert text == "{0}, {0, 1}, {1}"
    assert choices.from_triton_string(text) == [[0], [0, 1], [1]]


def test_error_names_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("models:\n  target: a/b\nbackend: gpu\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(p) in str(e.value) and e.value.field == "backend"


def test_schema_is_documented():
    schema = Recipe.model_json_schema()
    assert "speculative" in schema["properties"]
    props = schema["$defs"]["Lookahead"]["properties"]
    assert "description" in props["window"]


@pytest.mark.parametrize(
    "extra, field, message",
    [
        ({"reference": {"inflate": 0}}, "reference.inflate", "greater than or equal to 1"),
        ({"reference": {"inflate": "4"}}, "reference.inflate", "integer"),
        ({"reference": {"inflat": 4}}, "reference.inflat", "inflate"),
        ({"backend": "engine", "reference": {"inflate": 4}}, "reference.inflate", "backend: reference"),
        (
            {"serving": {"repository": "llmapi"}, "reference": {"inflate": 4}},
            "reference.inflate",
            "serving.repository",
        ),
    ],
)
def test_reference_inflate_errors_name_the_field(extra, field, message):
    data = {"backend": "reference", "models": {"target": "./t"}, **extra}
    with pytest.raises(RecipeError, match=message) as e:
        parse_recipe(data)
    assert e.value.field == field


def test_membound_recipes_are_their_tiny_twins_padded():
    """Each tiny-*-membound recipe is its tiny recipe's models with reference.inflate > 1
    (tiny-eagle3-tree-membound: tiny-eagle3's, with a static tree)."""
    from toolkit.membound import recipe_label

    twins = [p for p in RECIPES if p.stem.endswith("-membound")]

    def plain_of(p: Path) -> str:
        return p.stem.removesuffix("-membound").removesuffix("-tree")

    assert sorted(plain_of(p) for p in twins) == sorted([
        "tiny-baseline", "tiny-draft-target", "tiny-eagle3", "tiny-eagle3", "tiny-medusa", "tiny-lookahead",
        "tiny-ngram", "tiny-sa", "tiny-pard", "tiny-mtp",
    ])  # fmt: skip
    for p in twins:
        twin, plain = load_recipe(p), load_recipe(p.with_name(plain_of(p) + ".yaml"))
        assert twin.reference.inflate > 1 and plain.reference.inflate == 1
        assert twin.models == plain.models and twin.mode == plain.mode
        assert (recipe_label(twin) or "").startswith(f"memory-bound twin: target padded ×{twin.reference.inflate}, ")
        assert recipe_label(plain) is None


@pytest.mark.parametrize(
    "schedule",
    [
        [{"max_batch": 3, "draft_len": 3}, {"max_batch": 16, "draft_len": 1}],
        [{"draft_len": 3}],
        {1: 3, 4: 1, 17: 0},
    ],
)
def test_the_json_schema_accepts_every_draft_len_schedule_form_the_recipe_does(schedule):
    """`sdtk recipes schema` is what editors validate recipes with: the recommended explicit-ranges
    form of speculative.draft_len_schedule must pass it, as it passes the recipe's own check."""
    import jsonschema

    spec = {"mode": "ngram", "max_draft_len": 3, "draft_len_schedule": schedule}
    parse_recipe(
        {"models": {"target": "meta-llama/Llama-3.1-8B-Instruct"}, "backend": "llmapi", "speculative": spec}
    )
    defs = Recipe.model_json_schema()["$defs"]
    jsonschema.validate(spec, {**defs["NGram"], "$defs": defs})
    with pytest.raises(jsonschema.ValidationError):
        bad = {**spec, "draft_len_schedule": [{"max_batch": 3, "draft_len": 3, "extra": 1}]}
        jsonschema.validate(bad, {**defs["NGram"], "$defs": defs})
