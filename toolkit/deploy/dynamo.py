"""`deploy(target=dynamo)`: Dynamo's frontend and workers here (toolkit.dynamo.launch), its
result as a DeployResult."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.deploy.result import DeployOptions, DeployResult, deployment_dir, save_recipe
from toolkit.progress import Step
from toolkit.recipe import Recipe


def deploy_dynamo(
    recipe: Recipe,
    options: DeployOptions,
    progress: Step,
    on_ready: Callable[[DeployResult], None] | None,
) -> DeployResult:
    from toolkit.dynamo.launch import DynamoLaunch
    from toolkit.dynamo.launch import deploy_dynamo as launch

    root = deployment_dir(recipe, options.workdir)

    def ready(plan: Any, info: dict[str, Any]) -> DeployResult:
        result = DeployResult(
            recipe=recipe.display_name,
            backend=plan.backend,
            mode=recipe.mode,
            workdir=root,
            model_repo=root / "dynamo",
            model=plan.model,
            entry_kind="openai",
            decoupled=True,
            pid=info.get("pid"),
            http_url=plan.http_url,
            metrics_url=f"{plan.http_url}/metrics",
            command=plan.frontend.argv,
            validation=info.get("validation"),
            ready_seconds=info.get("ready_seconds"),
            target="dynamo",
        )
        if on_ready is not None:
            on_ready(result)
        return result

    how = DynamoLaunch(
        backend=options.backend,
        workers=options.workers,
        router_mode=options.router_mode,
        detach=options.detach,
        auto_ports=options.auto_ports,
        validate=options.validate,
        ready_timeout=options.ready_timeout,
        on_failure=options.on_failure or ("restart" if options.detach else "stop"),
    )
    return launch(recipe, root, how, progress=progress, save_recipe=save_recipe, on_ready=ready)
