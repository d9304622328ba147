"""`sdtk validate --strict` reaches the gate, and the gate's dtype follows the recipe."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from toolkit.cli import cli
from toolkit.recipe import load_recipe
from toolkit.validate import ValidationReport, serving_dtype

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_validate_strict_is_passed_to_the_gate(monkeypatch) -> None:
    import toolkit.validate as validate

    seen = []

    def fake(**kw):
        seen.append(kw)
        return ValidationReport(kw["model"], kw["http_url"], None, "baseline")

    monkeypatch.setattr(validate, "validate_deployment", fake)
    for extra, strict in (([], False), (["--strict"], True)):
        r = CliRunner().invoke(cli, ["validate", "--url", "http://127.0.0.1:9", "--json", *extra])
        assert r.exit_code == 0, r.output
        assert seen[-1]["options"].strict is strict and json.loads(r.stdout)["ok"] is True


def test_serving_dtype() -> None:
    assert serving_dtype(load_recipe(str(RECIPES / "tiny-eagle3.yaml"))) == "float32"  # the reference runtime
    engine = load_recipe(str(RECIPES / "tiny-eagle3.yaml"), ["backend=engine", "dtype=float16"])
    assert serving_dtype(engine) == "float16"
    assert serving_dtype(None) == "bfloat16"
    auto = load_recipe(str(RECIPES / "tiny-eagle3.yaml"), ["backend=engine", "dtype=auto"])  # the checkpoint's
    cfg = json.loads((RECIPES.parent / "models" / "tiny" / "target" / "config.json").read_text())
    torch_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    assert serving_dtype(auto) == torch_dtype
