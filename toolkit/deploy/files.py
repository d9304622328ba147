"""`deploy(target=k8s|slurm)`: the files that deploy a recipe on a cluster, written under `out`
(Kubernetes manifests, toolkit.ops.k8s, or a DynamoGraphDeployment, toolkit.dynamo.k8s; an sbatch
script, toolkit.ops.slurm). Nothing is built or launched here."""

from __future__ import annotations

from pathlib import Path

from toolkit.deploy.result import TARGETS, DeployOptions, DeployResult
from toolkit.errors import UsageError
from toolkit.progress import Step
from toolkit.recipe import Recipe
from toolkit.server.workdir import DEFAULT_WORKDIR, REPO_SUBDIR


def render_target(recipe: Recipe, options: DeployOptions, progress: Step) -> DeployResult:
    """Write the files that deploy `recipe` on `options.target` (k8s | slurm) under `options.out`;
    the support matrix's warnings (the engine path deprecated on 1.2.x), from the topology that
    applied it once, go to `progress` too."""
    from toolkit.repo.render import entry_point

    target, out = options.target, options.out
    if target not in ("k8s", "slurm"):
        raise UsageError(f"target must be one of {', '.join(TARGETS)}, not '{target}'")
    if out is None:
        raise UsageError(f"--target {target} needs --out DIR")
    if target == "k8s":
        from toolkit.ops.k8s import MODELS_MOUNT, plan_k8s, write_k8s

        k8s = plan_k8s(recipe, namespace=options.namespace, image=options.image, replicas=options.replicas)
        topology, root = k8s.topology, Path(MODELS_MOUNT) / recipe.display_name
    else:
        from toolkit.ops.slurm import plan_slurm, write_slurm

        base = (options.workdir or DEFAULT_WORKDIR).resolve()
        slurm = plan_slurm(recipe, workdir=base, container_image=options.image)
        topology, root = slurm.topology, base / recipe.display_name
    # What clients call is decided (and a bad serving.model_name refused) before a file is written.
    entry, kind = entry_point(recipe, topology.backend)
    files = write_k8s(k8s, out, validate=True) if target == "k8s" else write_slurm(slurm, out)
    for w in topology.warnings:
        progress(f"WARNING: {w}")
    return DeployResult(
        recipe=recipe.display_name,
        backend=topology.backend,
        mode=recipe.mode,
        workdir=root,
        model_repo=root / REPO_SUBDIR,
        model=entry,
        entry_kind=kind,
        decoupled=recipe.serving.decoupled,
        target=target,
        files=files,
    )


def render_dgd(recipe: Recipe, options: DeployOptions) -> DeployResult:
    """`deploy(target=k8s, engine=dynamo)`: a DynamoGraphDeployment under `out` (toolkit.dynamo.k8s)."""
    from toolkit.dynamo.k8s import plan_dgd, write_dgd

    out = options.out
    if out is None:
        raise UsageError("--target k8s needs --out DIR")
    dgd = plan_dgd(
        recipe,
        namespace=options.namespace,
        image=options.image,
        workers=options.workers,
        prefill_workers=options.prefill_workers,
        disagg=options.disagg,
        router_mode=options.router_mode,
    )
    return DeployResult(
        recipe=recipe.display_name,
        backend="llmapi",
        mode=recipe.mode,
        workdir=out,
        model_repo=out,
        model=dgd.served_name,
        entry_kind="openai",
        decoupled=True,
        target="k8s",
        files=write_dgd(dgd, out),
    )
