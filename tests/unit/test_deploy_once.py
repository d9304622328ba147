"""One local deployment is resolved once: the support matrix is asked once, the launch plan is
planned once and the deployed recipe is saved once, for `sdtk deploy --render-only` and for
`--dry-run` alike (toolkit.deploy.local.resolve). Real code throughout (the tiny EAGLE-3 recipe,
the reference backend, a real build and render); the counted functions are wrapped, not
replaced, so that every call still does its work."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from toolkit import compat
from toolkit.deploy import DeployOptions, deploy, plan_deploy
from toolkit.errors import CompatError
from toolkit.progress import quiet
from toolkit.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def calls(monkeypatch):
    """Counts, by name, the consultations of the support matrix (`compat.cell`: every check,
    resolution and auto choice goes through it), the launch plans made (`plan_launch`, where
    deploy and render find it) and the recipe saves (`save_recipe`)."""
    import toolkit.deploy.local as local
    import toolkit.repo as repo
    import toolkit.repo.render as render
    import toolkit.server.plan as plan

    seen: Counter[str] = Counter()

    def counted(module, name: str, key: str) -> None:
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            seen[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(compat, "cell", "support matrix")
    counted(plan, "plan_launch", "launch plan")
    counted(render, "plan_launch", "launch plan")
    counted(local, "save_recipe", "recipe saved")
    counted(repo, "render_repository", "render")
    return seen


def test_a_local_deploy_asks_the_support_matrix_plans_the_launch_and_saves_the_recipe_once(calls, tmp_path):
    recipe = load_recipe(ROOT / "recipes" / "tiny-eagle3.yaml")
    result = deploy(recipe, DeployOptions(workdir=tmp_path, render_only=True), progress=quiet)
    assert calls == {"support matrix": 1, "launch plan": 1, "recipe saved": 1, "render": 1}
    assert (result.workdir / "recipe.json").is_file() and result.backend == "reference"


def test_the_rendered_repository_carries_the_resolved_launch_plan(tmp_path):
    """The plan render stores (RUNBOOK.md, the manifest, the TritonServer) is the one resolved
    before the build, not a second one."""
    from toolkit.deploy import resolve

    recipe = load_recipe(ROOT / "recipes" / "tiny-eagle3.yaml")
    d = resolve(recipe, backend=None, workdir=tmp_path, progress=quiet)
    assert d.repo.launch is d.launch
    assert d.built.resolution.backend == d.built.backend == d.launch.backend == "reference"


@pytest.mark.parametrize("name", ["tiny-eagle3", "llama-3.1-8b-eagle3"])
def test_a_dry_run_resolves_once_and_renders_and_saves_nothing(calls, name, tmp_path):
    """The reference backend, and the LLM-API one whose build preflight also checks the model
    family (against the cell already resolved, not by asking the matrix again)."""
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    plan = plan_deploy(recipe, workdir=tmp_path)
    assert calls == {"support matrix": 1, "launch plan": 1}
    assert plan.backend == recipe.backend
    assert not (tmp_path / recipe.display_name / "recipe.json").exists()


def test_the_model_family_is_checked_against_the_resolved_cell():
    """What `compat.check` says of a family the cell does not take, the resolution says too,
    without looking the cell up again."""
    res = compat.resolve_backend("eagle", "engine", recipe_version="1.1.0")
    res.check_family("llama")
    with pytest.raises(CompatError) as e:
        res.check_family("qwen2")
    with pytest.raises(CompatError) as direct:
        compat.check("eagle", "engine", "1.1.0", "qwen2")
    assert str(e.value) == str(direct.value) and e.value.hint == direct.value.hint
