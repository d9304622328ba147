"""`sdtk deploy`: one function, `deploy(recipe, DeployOptions(...))`, split by target:

- local (`toolkit.deploy.local`): build (skipping finished steps) → render the repository →
  launch tritonserver → validate; the deployment is resolved once and read by every stage;
- k8s / slurm (`toolkit.deploy.files`): the manifests or sbatch script, written under `out`;
- dynamo (`toolkit.deploy.dynamo`): Dynamo's frontend and workers here.

`--dry-run` is `toolkit.deploy.plan.plan_deploy`. One deployment lives in
`<workdir>/<recipe name>/`: `engines/`, `triton_repo/`, `logs/` and, while a server runs, `state.json`.
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit.deploy.local import LocalDeployment, deployed, render, resolve
from toolkit.deploy.plan import DeployPlan, plan_deploy
from toolkit.deploy.result import (
    RECIPE_FILE,
    TARGETS,
    DeployOptions,
    DeployResult,
    deployment_dir,
    find_deployment,
    load_deployed_recipe,
)
from toolkit.errors import UsageError
from toolkit.progress import Step, steps
from toolkit.recipe import Recipe

__all__ = [
    "RECIPE_FILE",
    "TARGETS",
    "DeployOptions",
    "DeployPlan",
    "DeployResult",
    "LocalDeployment",
    "deploy",
    "deployed",
    "deployment_dir",
    "find_deployment",
    "load_deployed_recipe",
    "plan_deploy",
    "render",
    "resolve",
]

_stderr = steps("deploy")


def deploy(
    recipe: Recipe,
    options: DeployOptions | None = None,
    *,
    progress: Step = _stderr,
    on_ready: Callable[[DeployResult], None] | None = None,
) -> DeployResult:
    """Deploy `recipe` on `options.target` (DeployOptions says what each target reads).

    local: build, render, launch, validate; foreground mode blocks until Ctrl-C, `detach` returns
    with the server running. k8s / slurm: write the files under `out` and return them. dynamo:
    Dynamo's frontend and workers here. `on_ready` runs once the server is ready and validated
    (the CLI prints the URLs there).
    """
    options = options or DeployOptions()
    if options.target == "dynamo":
        from toolkit.deploy.dynamo import deploy_dynamo

        return deploy_dynamo(recipe, options, progress, on_ready)
    if options.target == "k8s" and options.engine == "dynamo":
        from toolkit.deploy.files import render_dgd

        return render_dgd(recipe, options)
    if options.engine != "triton":
        raise UsageError(
            f"--engine {options.engine} goes with --target k8s only (--target dynamo runs Dynamo here)"
        )
    if options.target != "local":
        from toolkit.deploy.files import render_target

        if options.backend is not None and options.backend != recipe.backend:  # as build() applies it
            recipe = recipe.model_copy(update={"backend": options.backend})
        return render_target(recipe, options, progress)
    from toolkit.deploy.local import deploy_local

    return deploy_local(recipe, options, progress, on_ready)
