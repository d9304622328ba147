"""The files of a deployment's ConfigMap, mounted at SCRIPTS_MOUNT in every pod: the recipe, the
prepare and launch scripts, kubectl's rsh agent (multi-node), the liveness probe's stub check and
the HTTP proxy's nginx.conf."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from toolkit import __version__
from toolkit.ops.k8s.context import Context
from toolkit.ops.k8s.options import HTTP_PROXY_PORT, SCRIPTS_MOUNT, pull_source
from toolkit.ops.layout import launch_argv
from toolkit.ops.templating import raw, render, shell_join, var
from toolkit.server.workdir import REPO_SUBDIR

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


def config_files(ctx: Context, notes: list[str]) -> dict[str, str]:
    """File name → text; notes on the recipe's local paths are added to `notes`."""
    files = {
        "recipe.yaml": _recipe_yaml(ctx.recipe, ctx.recipe_name, notes),
        "prepare.sh": _prepare_sh(ctx),
        "launch.sh": _launch_sh(ctx),
    }
    if ctx.topo.multi_node:
        files["kubexec.sh"] = raw("kubexec.sh")
    # The liveness probe's check, the one `sdtk status` makes (toolkit/server/stubcheck.py).
    files["stubcheck.py"] = _stubcheck_source()
    if ctx.opts.http_proxy:
        files["nginx.conf"] = render(
            "nginx.conf.j2",
            sdtk_version=__version__,
            listen_port=HTTP_PROXY_PORT,
            triton_port=ctx.recipe.serving.http_port,
            max_body=ctx.opts.http_proxy_max_body,
        )
    return files


def _prepare_sh(ctx: Context) -> str:
    prepare = ctx.opts.prepare
    root = ctx.models_mount
    dest = f"{root}/{ctx.recipe_name}"
    prep_mode = "build"
    pull: dict[str, str] = {"pull_repo": "", "pull_revision": "", "pull_ref": ""}
    if prepare == "pull":
        prep_mode, pull = pull_source(ctx.opts.pull_from)
    elif prepare == "none":
        prep_mode = "none"
    recipe_file = f"{SCRIPTS_MOUNT}/recipe.yaml"
    return render(
        "prepare.sh.j2",
        sdtk_version=__version__,
        recipe_name=ctx.recipe_name,
        mode=prep_mode,
        image=ctx.image,
        root=root,
        dest=dest,
        repo=ctx.repo,
        repo_subdir=REPO_SUBDIR,
        marker=ctx.marker,
        lock=f"{root}/.{ctx.recipe_name}.lock",
        stale_s=300,
        timeout_s=ctx.opts.prepare_timeout_s,
        build_cmd=shell_join(["sdtk", "build", recipe_file, "--workdir", root]),
        render_cmd=shell_join(["sdtk", "deploy", recipe_file, "--workdir", root, "--render-only"]),
        **pull,
    )


def _launch_sh(ctx: Context) -> str:
    """The `triton` container's command: the recipe's launch plan at the pod's site (toolkit.ops.layout)."""
    topo, sv = ctx.topo, ctx.recipe.serving
    mpi_args: list[str] = []
    if topo.multi_node:
        mpi_args = ["--host", var("HOSTLIST"), "--mca", "plm_rsh_agent", f"{SCRIPTS_MOUNT}/kubexec.sh"]
    argv = launch_argv(
        topo,
        model_repo=ctx.repo,
        http_port=sv.http_port,
        grpc_port=sv.grpc_port,
        metrics_port=sv.metrics_port,
        mpi_args=mpi_args,
    )
    return render(
        "launch.sh.j2",
        sdtk_version=__version__,
        recipe_name=ctx.recipe_name,
        layout_line=f"{ctx.layout}; {topo.nodes} node(s), {topo.ranks} rank(s), backend {topo.backend}",
        repo=ctx.repo,
        marker=ctx.marker,
        env=topo.launch.env,
        multi_node=topo.multi_node,
        layout=ctx.layout,
        nodes=topo.nodes,
        worker_prefix=f"{ctx.name}-worker-",
        worker_wait_s=900,
        ranks=topo.ranks,
        ranks_per_node=topo.ranks_per_node,
        command=shell_join(argv),
    )


def _stubcheck_source() -> str:
    from importlib import resources

    return resources.files("toolkit.server").joinpath("stubcheck.py").read_text(encoding="utf-8")


def _recipe_yaml(recipe: Recipe, recipe_name: str, notes: list[str]) -> str:
    data = recipe.model_dump(mode="json", exclude_none=True)
    data["name"] = recipe_name
    # Local checkpoint paths are relative to the recipe file, which the pod does not have.
    for role, src in (data.get("models") or {}).items():
        if isinstance(src, dict) and src.get("path"):
            local = recipe.local_path(getattr(recipe.models, role))
            src["path"] = str(local)
            notes.append(
                f"models.{role} is a local path ({local}): it must exist at that path inside the pod "
                "(e.g. on the models volume); hub ids are downloaded by the prepare step instead"
            )
    header = f"# Recipe {recipe_name}, as rendered by sdtk {__version__} for Kubernetes.\n"
    return header + yaml.safe_dump(data, sort_keys=False)
