"""`sdtk deploy` and `sdtk selftest`: from a recipe to a served, validated deployment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toolkit.cli._app import backends, cli, emit, json_option, set_option
from toolkit.server.policies import POLICIES

if TYPE_CHECKING:
    from toolkit.deploy import DeployResult


def _serving_overrides(host: str | None, ports: tuple[int | None, int | None, int | None]) -> list[str]:
    out = [f"serving.host={host}"] if host else []
    for name, value in zip(("http_port", "grpc_port", "metrics_port"), ports, strict=True):
        if value is not None:
            out.append(f"serving.{name}={value}")
    return out


@cli.command()
@click.argument("recipe")
@click.option(
    "--target",
    type=click.Choice(["local", "k8s", "slurm", "dynamo"]),
    default="local",
    show_default=True,
    help="local: launch tritonserver here; k8s/slurm: render manifests or an sbatch script into --out; "
    "dynamo: NVIDIA Dynamo's OpenAI frontend and --workers workers here (docs/dynamo.md).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=int,
    help="dynamo: workers behind the frontend (k8s --engine dynamo: worker, or decode, replicas).",
)
@click.option(
    "--router-mode",
    default=None,
    help="dynamo: the frontend's router (round-robin, random, power-of-two, kv, least-loaded, ...); "
    "default: the recipe's serving.dynamo.router_mode (round-robin).",
)
@click.option(
    "--engine",
    type=click.Choice(["triton", "dynamo"]),
    default="triton",
    show_default=True,
    help="k8s: Triton manifests, or an NVIDIA Dynamo DynamoGraphDeployment (docs/dynamo.md).",
)
@click.option(
    "--disagg",
    is_flag=True,
    help="k8s --engine dynamo: disaggregated prefill and decode workers (--workers decode replicas).",
)
@click.option(
    "--prefill-workers", default=1, show_default=True, type=int, help="k8s --engine dynamo --disagg."
)
@click.option("--backend", type=backends(), help="Overrides `backend`.")
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), help="Root of deployments (./workdir)."
)
@click.option("--render-only", is_flag=True, help="Build and render the model repository; do not launch.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the runbook (build, render, the exact launch argv); run nothing. As `sdtk build --dry-run`.",
)
@click.option(
    "--detach", is_flag=True, help="Leave the server running in the background (see sdtk status/stop)."
)
@click.option("--host", help="Bind address. Overrides `serving.host` (default 127.0.0.1).")
@click.option("--http-port", type=int, help="Overrides `serving.http_port`.")
@click.option("--grpc-port", type=int, help="Overrides `serving.grpc_port`.")
@click.option("--metrics-port", type=int, help="Overrides `serving.metrics_port`.")
@click.option("--auto-ports", is_flag=True, help="Pick free ports instead of the recipe's.")
@click.option("--tritonserver", type=click.Path(dir_okay=False), help="tritonserver binary to use.")
@click.option(
    "--no-validate",
    is_flag=True,
    help="Skip the validation (and the short burst of concurrent, cancelled requests) after READY.",
)
@click.option(
    "--on-failure",
    type=click.Choice(POLICIES),
    help="When a Python backend stub or the server dies: restart the server on the same ports "
    "(ends the requests the dead stub held at once), reload just the dead model, stop, or nothing. "
    "Foreground, sdtk does it (default: stop and exit 1); --detach starts a watchdog beside the "
    "server for it (default: restart).",
)
@click.option("--restart-on-failure", is_flag=True, help="The same as --on-failure restart.")
@click.option(
    "--ready-timeout", default=600.0, show_default=True, type=float, help="Seconds to wait for READY."
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="k8s/slurm: output directory.")
@click.option("--namespace", default="default", show_default=True, help="k8s: namespace.")
@click.option(
    "--image", help="k8s/slurm: container image (default: NGC tritonserver for the TRT-LLM version)."
)
@click.option("--replicas", default=1, show_default=True, type=int, help="k8s: replicas.")
@set_option
@json_option
def deploy(
    recipe: str,
    target: str,
    workers: int,
    router_mode: str | None,
    engine: str,
    disagg: bool,
    prefill_workers: int,
    backend: str | None,
    workdir: Path | None,
    render_only: bool,
    dry_run: bool,
    detach: bool,
    host: str | None,
    http_port: int | None,
    grpc_port: int | None,
    metrics_port: int | None,
    auto_ports: bool,
    tritonserver: str | None,
    no_validate: bool,
    on_failure: str | None,
    restart_on_failure: bool,
    ready_timeout: float,
    out: Path | None,
    namespace: str,
    image: str | None,
    replicas: int,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build, render, launch tritonserver, wait until READY, validate (foreground unless --detach)."""
    from toolkit.errors import UsageError
    from toolkit.recipe import load_recipe

    r = load_recipe(recipe, [*overrides, *_serving_overrides(host, (http_port, grpc_port, metrics_port))])
    if restart_on_failure:
        if on_failure not in (None, "restart"):
            raise UsageError(f"--restart-on-failure contradicts --on-failure {on_failure}")
        on_failure = "restart"
    if on_failure is None:
        on_failure = "restart" if detach else "stop"
    if dry_run and target == "dynamo":
        from toolkit.deploy import deployment_dir
        from toolkit.dynamo.launch import make_plan

        dplan = make_plan(
            r,
            deployment_dir(r, workdir),
            backend=backend,
            workers=workers,
            router_mode=router_mode,
            auto_ports=auto_ports,
            dry_run=True,
        )
        emit(dplan.to_dict(), as_json, lambda: click.echo(dplan.script(), nl=False))
        return
    if dry_run and target == "k8s" and engine == "dynamo":
        from toolkit.dynamo.k8s import plan_dgd

        dgd = plan_dgd(r, namespace=namespace, image=image, workers=workers, prefill_workers=prefill_workers,
                       disagg=disagg, router_mode=router_mode)  # fmt: skip
        emit(dgd.to_dict(), as_json, lambda: click.echo(dgd.script(), nl=False))
        return
    if dry_run and target == "local":
        from toolkit.deploy import plan_deploy

        plan = plan_deploy(r, backend=backend, workdir=workdir, tritonserver=tritonserver)
        emit(plan.to_dict(), as_json, lambda: click.echo(plan.script(), nl=False))
        return

    from toolkit.deploy import DeployOptions
    from toolkit.deploy import deploy as run_deploy

    options = DeployOptions(
        target=target,
        backend=backend,
        workdir=workdir,
        render_only=render_only,
        detach=detach,
        auto_ports=auto_ports,
        tritonserver=tritonserver,
        validate=not no_validate,
        ready_timeout=ready_timeout,
        on_failure=on_failure,
        out=out,
        namespace=namespace,
        image=image,
        replicas=replicas,
        workers=workers,
        router_mode=router_mode,
        engine=engine,
        disagg=disagg,
        prefill_workers=prefill_workers,
    )
    result = run_deploy(r, options, on_ready=lambda result: _print_ready(result, as_json))
    if result.files:  # --target k8s | slurm
        paths = [str(p) for p in result.files]
        emit(paths, as_json, lambda: click.echo("\n".join(paths)))
    elif render_only:
        emit(
            result.to_dict(),
            as_json,
            lambda: click.echo(f"{result.model_repo}\n(entry model: {result.model})"),
        )


@cli.command()
@click.option("--mode", "modes", multiple=True, help="Test only this mode (repeatable); default: every one.")
@click.option(
    "--reference", is_flag=True, help="Use the reference backend even if TensorRT-LLM is installed."
)
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), help="Keep checkpoints and logs here."
)
@click.option(
    "--bench-requests", default=2, show_default=True, type=int, help="Requests in each short bench."
)
@click.option(
    "--stand-in",
    metavar="VERSION",
    help="On the reference backend: run the cells of this TensorRT-LLM version (default 1.2.1, the newest "
    "verified container's; 1.3.0 adds SA and PARD).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Run nothing: print every step's argv and resolve every container path it needs.",
)
@click.option(
    "--container",
    metavar="YY.MM",
    help="With --dry-run: the tritonserver:<yy.mm>-trtllm-python-py3 to plan for "
    "(default: $NVIDIA_TRITON_SERVER_VERSION, else the newest known).",
)
@click.option(
    "--container-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="With --dry-run: resolve container paths under this directory tree instead of /.",
)
@json_option
def selftest(
    modes: tuple[str, ...],
    reference: bool,
    workdir: Path | None,
    bench_requests: int,
    stand_in: str | None,
    dry_run: bool,
    container: str | None,
    container_root: Path | None,
    as_json: bool,
) -> None:
    """Random-weight tiny checkpoints → build, deploy, validate, bench, stop for every supported mode.

    The first thing to run on a GPU box, inside NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3
    container. Without TensorRT-LLM it runs the reference backend (CPU). Exits 1 if any mode fails.
    With --dry-run it runs nothing and exits 1 if a path the plan needs is missing.
    """
    from toolkit.selftest.run import selftest as run_selftest

    if dry_run and stand_in:
        from toolkit.errors import UsageError

        raise UsageError(
            "--stand-in goes without --dry-run (a dry run plans the container's own TensorRT-LLM)"
        )
    if dry_run:
        from toolkit.selftest.dry_run import dry_run as plan

        planned = plan(container=container, root=container_root, modes=list(modes) or None)
        emit(planned.to_dict(), as_json, lambda: click.echo(planned.text(), nl=False))
        if not planned.ok:
            sys.exit(1)
        return
    if container or container_root:
        from toolkit.errors import UsageError

        raise UsageError("--container and --container-root go with --dry-run")
    result = run_selftest(
        modes=modes or None,
        workdir=workdir,
        force_reference=reference,
        bench_requests=bench_requests,
        stand_in=stand_in,
    )
    emit(result.to_dict(), as_json, lambda: click.echo(result.table(), nl=False))
    if not result.ok:
        sys.exit(1)


def _print_ready(result: DeployResult, as_json: bool) -> None:
    """`sdtk deploy`'s lines once the server is ready (stdout: the data)."""
    data = result.to_dict()
    if as_json:
        keys = ("pid", "http_url", "grpc_url", "metrics_url", "model", "model_repo")
        emit({**{k: data[k] for k in keys}, **{k: v for k, v in data.items() if k not in keys}}, True)
    else:
        click.echo(f"model:    {data['model']} ({data['backend']}, {data['mode']})")
        click.echo(
            f"http:     {data['http_url']}\ngrpc:     {data['grpc_url']}\nmetrics:  {data['metrics_url']}"
        )
        click.echo(f"repo:     {data['model_repo']}\npid:      {data['pid']}")
        if data.get("weights"):
            click.echo(f"weights:  {data['weights']}")
    sys.stdout.flush()
