"""The `sdtk` command line. Thin: parse flags, call one library function, print its result.

Data goes to stdout (`--json` where it is data); progress and errors go to stderr.
Every SdtkError becomes one line plus a hint and a non-zero exit; SDTK_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from toolkit import __version__
from toolkit.errors import SdtkError
from toolkit.modes import BACKENDS, MODES
from toolkit.progress import enabled as progress_enabled
from toolkit.server.policies import POLICIES

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Override a recipe field, e.g. --set speculative.max_draft_len=3 (value parsed as YAML).",
)


def _debug() -> bool:
    return os.environ.get("SDTK_DEBUG", "") not in ("", "0", "false")


class _Reported(click.ClickException):
    """An SdtkError on its way out through click: one line, a hint, the error's exit code."""

    def __init__(self, error: BaseException | str, exit_code: int, hint: str | None):
        super().__init__(" ".join(str(error).split("\n")))
        # click declares exit_code a ClassVar; here it is per error, as click reads it from the instance.
        self.exit_code = exit_code  # type: ignore[misc]
        self.hint = hint

    def show(self, file: Any = None) -> None:
        err = file or sys.stderr
        click.echo(f"error: {self.message}", file=err)
        if self.hint:
            click.echo(f"hint: {self.hint}", file=err)


class SdtkGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SdtkError as e:
            if _debug():
                traceback.print_exc()
            raise _Reported(e, e.exit_code, e.hint) from None
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as e:  # a bug: still one line unless debugging
            if _debug():
                traceback.print_exc()
            raise _Reported(
                f"internal error: {e.__class__.__name__}: {e}",
                70,
                "rerun with SDTK_DEBUG=1 and report the traceback",
            ) from None


def emit(data: Any, as_json: bool, human: Any = None) -> None:
    """Print `data` as JSON, or call `human()` to print it for people."""
    if as_json or human is None:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human()


def _table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    from toolkit.checks import print_rows

    print_rows(title, columns, rows)


def print_table(title: str | None, checks: Any) -> None:
    from toolkit.checks import print_table as render

    render(title, checks)


@click.group(cls=SdtkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sdtk")
def cli() -> None:
    """sdtk: build, deploy and benchmark LLMs with speculative decoding on TensorRT-LLM and Triton.

    Recipes are YAML files (or bundled names, see `sdtk recipes list`).
    Set SDTK_DEBUG=1 for tracebacks.
    """
    import logging

    from toolkit.log import install_handler

    install_handler(logging.DEBUG if os.environ.get("SDTK_DEBUG") else logging.INFO)


# --------------------------------------------------------------------------- recipes


@cli.group()
def recipes() -> None:
    """List, show and validate recipes."""


@recipes.command("list")
@json_option
def recipes_list(as_json: bool) -> None:
    """List the bundled recipes."""
    from toolkit.recipe import bundled_recipes, load_recipe

    items = []
    for name, path in bundled_recipes().items():
        try:
            r = load_recipe(path)
            items.append(
                {
                    "name": name,
                    "path": str(path),
                    "mode": r.mode,
                    "backend": r.backend,
                    "target": r.models.target.describe(),
                    "description": r.description,
                }
            )
        except SdtkError as e:
            items.append({"name": name, "path": str(path), "error": str(e)})
    emit(
        items,
        as_json,
        lambda: _table(
            "bundled recipes",
            ["name", "mode", "backend", "target", "description"],
            [
                [
                    i["name"],
                    i.get("mode", "INVALID"),
                    i.get("backend", ""),
                    i.get("target", ""),
                    i.get("description", i.get("error", "")),
                ]
                for i in items
            ],
        ),
    )


@recipes.command("show")
@click.argument("recipe")
@set_option
@json_option
def recipes_show(recipe: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show a recipe: the file as written, or (--json) with every default filled in."""
    from toolkit.recipe import load_recipe, resolve_recipe_path

    r = load_recipe(recipe, overrides)
    if as_json:
        emit(r.model_dump(mode="json"), True)
    elif overrides:
        import yaml

        click.echo(
            yaml.safe_dump(r.model_dump(mode="json", exclude_defaults=True), sort_keys=False), nl=False
        )
    else:
        click.echo(resolve_recipe_path(recipe).read_text(encoding="utf-8"), nl=False)


@recipes.command("validate")
@click.argument("paths", nargs=-1, required=True)
@set_option
@json_option
def recipes_validate(paths: tuple[str, ...], overrides: tuple[str, ...], as_json: bool) -> None:
    """Validate recipes (schema, cross-field rules, support matrix). Exits 1 if any is invalid."""
    from toolkit.recipe_check import check_recipe_file

    results = [check_recipe_file(p, overrides) for p in paths]
    bad = [r for r in results if not r["ok"]]

    def human() -> None:
        for r in results:
            if r["ok"]:
                click.echo(f"ok    {r['path']}  ({r['mode']} on {r['backend']})")
            else:
                click.echo(f"FAIL  {r['error']}")

    emit(results, as_json, human)
    if bad:
        if not as_json:
            for r in bad:
                if r.get("hint"):
                    click.echo(f"hint: {r['hint']}", err=True)
        raise click.exceptions.Exit(1)


@recipes.command("schema")
def recipes_schema() -> None:
    """Print the recipe JSON schema (every field, documented)."""
    from toolkit.recipe import Recipe

    emit(Recipe.model_json_schema(), True)


# --------------------------------------------------------------------------- build


@cli.command("build")
@click.argument("recipe")
@click.option(
    "--backend",
    type=click.Choice(list(BACKENDS)),
    help="Overrides `backend` in the recipe.",
)
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), help="Output root (default ./workdir)."
)
@click.option(
    "--dry-run", is_flag=True, help="Print the build as a runnable bash script (the runbook); build nothing."
)
@set_option
@json_option
def build_cmd(
    recipe: str,
    backend: str | None,
    workdir: Path | None,
    dry_run: bool,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build TensorRT-LLM artifacts (or reference engine dirs) for RECIPE, after preflight checks."""
    from toolkit.build import build
    from toolkit.recipe import load_recipe

    result = build(load_recipe(recipe, overrides), backend=backend, workdir=workdir, dry_run=dry_run)
    if as_json:
        emit(result.to_dict(), True)
    elif dry_run:
        click.echo(result.script, nl=False)
    else:
        for role, path in result.outputs.items():
            click.echo(f"{role}: {path}")


# --------------------------------------------------------------------------- generate


@cli.command()
@click.argument("recipe")
@click.option(
    "--prompt", required=True, help="Text to continue (tokenized as the target's AutoTokenizer does)."
)
@click.option("--max-tokens", default=64, show_default=True, type=int, help="Tokens to generate.")
@click.option("--no-speculation", is_flag=True, help="Plain target decoding (the baseline).")
@click.option("--temperature", default=0.0, show_default=True, type=float, help="0 = greedy.")
@click.option("--top-k", default=0, show_default=True, type=int, help="0 = off.")
@click.option("--top-p", default=1.0, show_default=True, type=float, help="1.0 = off.")
@click.option("--seed", type=int, help="Sampling seed.")
@set_option
@json_option
def generate(
    recipe: str,
    prompt: str,
    max_tokens: int,
    no_speculation: bool,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Generate in process with the reference runtime (no server) and print acceptance statistics."""
    from toolkit.generate import run_generate
    from toolkit.recipe import load_recipe

    out = run_generate(
        load_recipe(recipe, overrides),
        prompt,
        max_tokens,
        no_speculation=no_speculation,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    if as_json:
        emit(out, True)
        return
    click.echo(out["text"])
    st = out["stats"]
    click.echo(
        f"[{out['mode']}] {len(out['token_ids'])} tokens in {st['steps']} steps; "
        f"accepted {st['accepted_tokens']}/{st['draft_tokens']} drafts "
        f"(rate {st['acceptance_rate']:.2f}, length {st['acceptance_length']:.2f})",
        err=True,
    )


# --------------------------------------------------------------------------- deploy and operate


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
    type=click.Choice(["local", "k8s", "slurm"]),
    default="local",
    show_default=True,
    help="local: launch tritonserver here; k8s/slurm: render manifests or an sbatch script into --out.",
)
@click.option("--backend", type=click.Choice(list(BACKENDS)), help="Overrides `backend`.")
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
    if dry_run and target == "local":
        from toolkit.deploy import plan_deploy

        plan = plan_deploy(r, backend=backend, workdir=workdir, tritonserver=tritonserver)
        emit(plan.to_dict(), as_json, lambda: click.echo(plan.script(), nl=False))
        return

    from toolkit.deploy import deploy as run_deploy

    def on_ready(result) -> None:
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
        sys.stdout.flush()

    result = run_deploy(
        r,
        target=target,
        backend=backend,
        workdir=workdir,
        render_only=render_only,
        detach=detach,
        auto_ports=auto_ports,
        tritonserver=tritonserver,
        validate=not no_validate,
        ready_timeout=ready_timeout,
        on_ready=on_ready,
        on_failure=on_failure,
        out=out,
        namespace=namespace,
        image=image,
        replicas=replicas,
    )
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
    from toolkit.selftest import selftest as run_selftest

    if dry_run:
        from toolkit.selftest_dry_run import dry_run as plan

        planned = plan(container=container, root=container_root, modes=list(modes) or None)
        emit(planned.to_dict(), as_json, lambda: click.echo(planned.text(), nl=False))
        if not planned.ok:
            sys.exit(1)
        return
    if container or container_root:
        from toolkit.errors import UsageError

        raise UsageError("--container and --container-root go with --dry-run")
    result = run_selftest(
        modes=modes or None, workdir=workdir, force_reference=reference, bench_requests=bench_requests
    )
    emit(result.to_dict(), as_json, lambda: click.echo(result.table(), nl=False))
    if not result.ok:
        sys.exit(1)


workdir_option = click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Deployment directory (default: the only deployment under ./workdir).",
)


@cli.command()
@workdir_option
@json_option
def status(workdir: Path | None, as_json: bool) -> None:
    """Is the deployment's server running, ready, and are all its Python stubs alive? Exits 1
    if not."""
    from toolkit.server.state import find_deployment, server_status

    st = server_status(find_deployment(workdir))
    emit(st.to_dict(), as_json, lambda: click.echo(f"{st.state}: {st.message}"))
    if not st.healthy:
        raise click.exceptions.Exit(1)


@cli.command()
@workdir_option
@click.option("-n", "--lines", type=int, help="Only the last N lines.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the server stops.")
def logs(workdir: Path | None, lines: int | None, follow: bool) -> None:
    """Print the deployment's tritonserver log."""
    from toolkit.server.state import find_deployment, follow_logs, read_logs

    wd = find_deployment(workdir)
    if follow:
        for line in follow_logs(wd, lines=lines or 50):
            click.echo(line, nl=False)
    else:
        click.echo(read_logs(wd, lines), nl=False)


@cli.command()
@workdir_option
@click.option(
    "--grace", default=15.0, show_default=True, type=float, help="Seconds between SIGTERM and SIGKILL."
)
@json_option
def stop(workdir: Path | None, grace: float, as_json: bool) -> None:
    """Stop the deployment's server (and its Python backend stubs)."""
    from dataclasses import asdict

    from toolkit.server.state import find_deployment, stop_server

    res = stop_server(find_deployment(workdir), grace=grace)
    emit(asdict(res), as_json, lambda: click.echo(res.message))


@cli.command()
@click.argument("model")
@workdir_option
@json_option
def restart(model: str, workdir: Path | None, as_json: bool) -> None:
    """Reload one model of the running deployment (e.g. one whose Python stub died), leaving the
    others serving, through Triton's model-control API and the deployment's key."""
    from dataclasses import asdict

    from toolkit.server.state import find_deployment, restart_model

    res = restart_model(find_deployment(workdir), model)
    emit(asdict(res), as_json, lambda: click.echo(res.message))


def _running_deployment(workdir: Path | None):
    """(deployment dir, its ServerState) for --workdir, or a one-line error."""
    from toolkit.errors import UsageError
    from toolkit.server.state import find_deployment, read_state

    wd = find_deployment(workdir)
    st = read_state(wd)
    if st is None:
        raise UsageError(
            f"no running deployment recorded in {wd}", hint="pass --url, or `sdtk deploy RECIPE --detach`"
        )
    return wd, st


def _client_target(url: str | None, workdir: Path | None, protocol: str) -> tuple[str | None, str | None]:
    """(url, model) from --url, or from the deployment's state.json."""
    if url:
        return url, None
    _, st = _running_deployment(workdir)
    return (st.http_url if protocol == "http" else st.grpc_url), st.model_name


@cli.command()
@click.option(
    "--url", help="Server URL (HTTP host:port for http, host:port for grpc). Default: from --workdir."
)
@workdir_option
@click.option("--model", help="Model to validate (default: the deployment's entry model, else 'ensemble').")
@click.option("--recipe", help="Recipe of the deployment (enables the in-process baseline on CPU).")
@click.option("--baseline-url", help="HTTP URL of a baseline (no speculation) deployment of the same target.")
@click.option("--max-tokens", default=32, show_default=True, type=int)
@click.option(
    "--strict",
    is_flag=True,
    help="Correctness gate: require text identical to the baseline (no near-tie allowance; "
    "docs/correctness.md).",
)
@json_option
def validate(
    url: str | None,
    workdir: Path | None,
    model: str | None,
    recipe: str | None,
    baseline_url: str | None,
    max_tokens: int,
    strict: bool,
    as_json: bool,
) -> None:
    """Validate a served deployment: metadata, HTTP + gRPC smoke, correctness gate, acceptance."""
    from toolkit.recipe import load_recipe
    from toolkit.validate import validate_deployment

    grpc_url, served = None, None
    rec = load_recipe(recipe) if recipe else None
    if url:
        http_url = url
    else:
        from toolkit.deploy import load_deployed_recipe
        from toolkit.errors import ServerError
        from toolkit.server.state import dead_stubs, stub_message

        wd, st = _running_deployment(workdir)
        dead = dead_stubs(st, server_ready=True)
        if dead:  # requests would fail with "Stub process ... is not healthy"; say which model
            raise ServerError(stub_message(dead), hint="redeploy: sdtk stop, then sdtk deploy")
        http_url, grpc_url, model = st.http_url, st.grpc_url, model or st.model_name
        rec, served = rec or load_deployed_recipe(wd), (wd, st.pid)
    report = validate_deployment(
        http_url=http_url,
        grpc_url=grpc_url,
        model=model or "ensemble",
        recipe=rec,
        max_tokens=max_tokens,
        baseline_url=baseline_url,
        progress=None,
        strict=strict,
    )

    def human() -> None:
        print_table(f"validation of '{report.model}' at {report.http_url}", report.checks)

    emit(report.to_dict(), as_json, human)
    report.raise_if_failed()
    if served is not None:  # `sdtk status` stops calling a deploy's unfinished validation out
        from toolkit.server.state import update_state

        update_state(*served, validation="passed")


@cli.command()
@click.argument("prompt")
@click.option("--url", help="Server URL. Default: the running deployment under --workdir.")
@workdir_option
@click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True)
@click.option("--model", help="Model to call (default: the deployment's entry model, else 'ensemble').")
@click.option("--stream", is_flag=True, help="Stream tokens as they are generated.")
@click.option("--max-tokens", default=64, show_default=True, type=int)
@click.option("--temperature", type=float)
@click.option("--num-draft-tokens", type=int, help="Draft-target BLS only: draft tokens per step (0 = off).")
@json_option
def infer(
    prompt: str,
    url: str | None,
    workdir: Path | None,
    protocol: str,
    model: str | None,
    stream: bool,
    max_tokens: int,
    temperature: float | None,
    num_draft_tokens: int | None,
    as_json: bool,
) -> None:
    """Send one generation request to a served model and print the text and acceptance stats."""
    from toolkit.client import TritonClient

    target, state_model = _client_target(url, workdir, protocol)
    params: dict = {"exclude_input_in_output": True, "return_perf_metrics": True}
    counted = {"return_num_output_tokens": True}  # output_tokens in --json, where the model counts
    if temperature is not None:
        params["temperature"] = temperature
    if num_draft_tokens is not None:
        params["num_draft_tokens"] = num_draft_tokens
    with TritonClient(target, protocol=protocol, model=model or state_model or "ensemble") as c:
        info = c.model_info()
        from toolkit.client.llmapi import accepts

        params = {k: v for k, v in params.items() if accepts(info, k) or k == "num_draft_tokens"}
        extra = {k: v for k, v in counted.items() if k in info.inputs}
        if extra:
            params["extra_inputs"] = extra
        if stream:
            s = c.stream(prompt, max_tokens, **params)
            for chunk in s:
                if not as_json:
                    click.echo(chunk.text, nl=False)
            resp = s.response
            if not as_json:
                click.echo()
        else:
            resp = c.generate(prompt, max_tokens, **params)
            if not as_json:
                click.echo(resp.text)
    if as_json:
        emit(resp.to_dict(), True)
    elif resp.total_draft_tokens is not None:
        click.echo(
            f"[{resp.model} over {resp.protocol}] accepted {resp.total_accepted_draft_tokens}/"
            f"{resp.total_draft_tokens} draft tokens; {resp.latency_s * 1000:.0f} ms",
            err=True,
        )


@cli.command()
@click.option("--url", required=True, help="HTTP URL of the Triton server to probe.")
@click.option("--port", default=9400, show_default=True, type=int, help="Port of the exporter's /metrics.")
@click.option("--addr", default="127.0.0.1", show_default=True, help="Bind address of the exporter.")
@click.option("--model", default="ensemble", show_default=True)
@click.option("--interval", default=15.0, show_default=True, type=float, help="Seconds between probes.")
@click.option("--num-draft-tokens", type=int, help="Draft-target BLS: draft tokens per probe request.")
@click.option("--draft-len", type=int, help="Draft length, to derive acceptance length (steps) from counts.")
def monitor(
    url: str,
    port: int,
    addr: str,
    model: str,
    interval: float,
    num_draft_tokens: int | None,
    draft_len: int | None,
) -> None:
    """Export speculative-decoding metrics (sdtk_spec_*) for Prometheus by probing a deployment."""
    from toolkit.ops.monitor import run_monitor

    run_monitor(
        url,
        port=port,
        addr=addr,
        model=model,
        interval=interval,
        num_draft_tokens=num_draft_tokens,
        draft_len=draft_len,
    )


# --------------------------------------------------------------------------- bench / plan / tune


def _ints(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    from toolkit.errors import UsageError

    try:
        out = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"'{value}' is not a comma-separated list of integers, e.g. 1,2,4") from None
    if not out or min(out) < 1:
        raise UsageError(f"'{value}': every value must be >= 1")
    return out


workload_options = [
    click.option(
        "--workload",
        default="code",
        show_default=True,
        help="Bundled prompts: code, math, chat, summarization, or synthetic (unrealistic for acceptance).",
    ),
    click.option(
        "--prompts",
        "prompts_file",
        type=click.Path(dir_okay=False),
        help="Your JSONL (prompt[, max_tokens]).",
    ),
]


def _with(options):
    def deco(f):
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


@cli.command()
@click.argument("target", required=False)
@click.option(
    "--compare", nargs=2, metavar="BASELINE SPECULATIVE", help="A/B: two recipes, workdirs or URLs."
)
@click.option("--url", help="Benchmark this server URL (gRPC host:port, or HTTP with --protocol http).")
@click.option("--workdir", type=click.Path(path_type=Path), help="Benchmark the deployment in this workdir.")
@_with(workload_options)
@click.option("--concurrency", default="1,2,4", show_default=True, help="Comma-separated concurrency levels.")
@click.option("--rate", type=float, help="Poisson request rate (req/s) instead of fixed concurrency.")
@click.option("--requests", default=32, show_default=True, type=int, help="Requests per level.")
@click.option("--duration", type=float, help="Seconds per level (stops earlier than --requests).")
@click.option("--warmup", default=2, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--max-tokens", type=int, help="Override the prompts' max_tokens.")
@click.option("--protocol", type=click.Choice(["grpc", "http"]), default="grpc", show_default=True)
@click.option("--model", help="Model to call (default: the deployment's entry model).")
@click.option(
    "--report-dir", type=click.Path(file_okay=False, path_type=Path), help="Default: <workdir>/reports."
)
@click.option(
    "--tokenizer",
    help="Tokenizer (directory or hub id) to count output tokens when the server does not; "
    "default: the deployment's, from its recipe.",
)
@click.option(
    "--allow-inexact",
    is_flag=True,
    help="Run without exact token counts (no server count, no tokenizer): one token per chunk, "
    "and every report says INEXACT.",
)
@json_option
def bench(
    target: str | None,
    compare: tuple[str, str] | None,
    url: str | None,
    workdir: Path | None,
    workload: str,
    prompts_file: str | None,
    concurrency: str,
    rate: float | None,
    requests: int,
    duration: float | None,
    warmup: int,
    seed: int,
    max_tokens: int | None,
    protocol: str,
    model: str | None,
    report_dir: Path | None,
    tokenizer: str | None,
    allow_inexact: bool,
    as_json: bool,
) -> None:
    """Benchmark a deployment (TARGET: recipe, workdir or URL), or A/B two with --compare.

    --workdir is the deployment (the directory `sdtk deploy --workdir` was given, or the
    deployment directory under it); recipes given to --compare are deployed under it, and
    reports go to --report-dir, default <workdir>/reports.
    """
    from toolkit.bench.api import RunOptions
    from toolkit.deploy import deployed
    from toolkit.errors import UsageError

    levels = _ints(concurrency)
    opts = RunOptions(
        workload=workload,
        prompts_file=prompts_file,
        requests=requests,
        duration=duration,
        warmup=warmup,
        seed=seed,
        max_tokens=max_tokens,
        protocol=protocol,
        report_dir=report_dir,
        workdir=workdir,
        progress=progress_enabled(as_json),
        tokenizer=tokenizer,
        allow_inexact=allow_inexact,
    )
    if compare:
        from toolkit.bench.api import compare as run_compare

        result: Any = run_compare(compare[0], compare[1], opts, concurrency=levels, deploy_fn=deployed)
    else:
        ref = target or url or (str(workdir) if workdir else None)
        if ref is None:
            raise UsageError("give a TARGET (recipe, workdir or URL), --url, --workdir, or --compare A B")
        from toolkit.bench.api import bench as run_bench

        result = run_bench(ref, opts, concurrency=levels, rate=rate, model=model, deploy_fn=deployed)
    from toolkit.bench.report import render

    emit(result.to_dict(), as_json, lambda: click.echo(render(result)))


@cli.command()
@click.argument("recipe")
@_with(workload_options)
@click.option("--gpu", type=click.Choice(["h100", "h200", "b200", "a100", "l40s"]), help="GPU to size for.")
@click.option("--tp", type=int, help="Tensor-parallel size to size for (default: the recipe's, and a table).")
@click.option("--no-probe", is_flag=True, help="Skip the acceptance probe (sizing and roofline only).")
@click.option("--probe-prompts", default=24, show_default=True, type=int)
@click.option("--gamma-max", default=8, show_default=True, type=int, help="Longest draft length to consider.")
@click.option(
    "--concurrency",
    default="1,2,4,8,16,32,64",
    show_default=True,
    help="Concurrency levels to predict the speedup at (the batch dimension).",
)
@click.option(
    "--serving-overhead-ms",
    type=click.FloatRange(min=0),
    help="What each served step costs beyond its forwards (e.g. the serving_overhead_ms `sdtk tune` "
    "reports for the deployment): predict the served speedup. Default: the in-process speedup.",
)
@set_option
@json_option
def plan(
    recipe: str,
    workload: str,
    prompts_file: str | None,
    gpu: str | None,
    tp: int | None,
    no_probe: bool,
    probe_prompts: int,
    gamma_max: int,
    concurrency: str,
    serving_overhead_ms: float | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Probe acceptance and cost, recommend a draft length, size GPUs and predict speedup."""
    from toolkit.bench.api import RunOptions
    from toolkit.bench.api import plan as run_plan
    from toolkit.recipe import load_recipe

    result = run_plan(
        load_recipe(recipe, overrides),
        RunOptions(workload=workload, prompts_file=prompts_file, progress=progress_enabled(as_json)),
        gpu=gpu,
        tp=tp,
        probe=False if no_probe else None,
        probe_prompts=probe_prompts,
        gamma_max=gamma_max,
        concurrency=_ints(concurrency) or (1,),
        serving_overhead=serving_overhead_ms / 1e3 if serving_overhead_ms else None,
    )  # the overrides are in the loaded recipe
    from toolkit.bench.report import render

    emit(result.to_dict(), as_json, lambda: click.echo(render(result)))


@cli.command()
@click.argument("target")
@click.option("--recipe", help="The deployment's recipe (when TARGET is a URL or workdir).")
@click.option(
    "--method", type=click.Choice(["auto", "per-request", "redeploy"]), default="auto", show_default=True
)
@click.option("--draft-lens", help="Comma-separated draft lengths to sweep (default: from plan).")
@click.option("--concurrency", default="1,2,4", show_default=True)
@_with(workload_options)
@click.option("--requests", default=16, show_default=True, type=int)  # bench.api.TUNE_REQUESTS
@click.option("--protocol", type=click.Choice(["grpc", "http"]), default="grpc", show_default=True)
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path))
@json_option
def tune(
    target: str,
    recipe: str | None,
    method: str,
    draft_lens: str | None,
    concurrency: str,
    workload: str,
    prompts_file: str | None,
    requests: int,
    protocol: str,
    report_dir: Path | None,
    as_json: bool,
) -> None:
    """Sweep the draft length on a live deployment; write the best settings as a recipe overlay + schedule."""
    from toolkit.bench.api import RunOptions
    from toolkit.bench.api import tune as run_tune
    from toolkit.deploy import deployed

    opts = RunOptions(
        workload=workload,
        prompts_file=prompts_file,
        requests=requests,
        protocol=protocol,
        report_dir=report_dir,
        progress=progress_enabled(as_json),
    )
    result = run_tune(
        target,
        opts,
        recipe=recipe,
        method=method,
        draft_lens=_ints(draft_lens),
        concurrency=_ints(concurrency),
        deploy_fn=deployed,
    )
    from toolkit.bench.report import render

    emit(result.to_dict(), as_json, lambda: click.echo(render(result)))


# --------------------------------------------------------------------------- compat / doctor


@cli.command()
@click.option("--mode", type=click.Choice(list(MODES)))
@click.option("--backend", type=click.Choice([b for b in BACKENDS if b != "auto"]))
@json_option
def compat(mode: str | None, backend: str | None, as_json: bool) -> None:
    """Print the support matrix: mode × backend × TensorRT-LLM versions × model families."""
    from toolkit.compat import matrix

    cells = matrix(mode, backend)
    emit(
        [c.to_dict() for c in cells],
        as_json,
        lambda: _table(
            "speculative decoding support",
            ["mode", "backend", "ok", "TRT-LLM", "families", "name", "why / fix"],
            [
                [
                    c.mode,
                    c.backend,
                    "yes" if c.supported else "no",
                    c.version_range() if c.supported else "-",
                    ",".join(c.families) if c.families else "any",
                    c.trtllm_name or "-",
                    c.reason + (f" | fix: {c.fix}" if not c.supported else ""),
                ]
                for c in cells
            ],
        ),
    )


@cli.command()
@click.option("--tritonserver", type=click.Path(dir_okay=False), help="Use this tritonserver binary.")
@click.option(
    "--url", help="Check a running deployment instead: health, models, metrics, speculation active."
)
@click.option("--model", default="ensemble", show_default=True, help="With --url: the model to probe.")
@click.option(
    "--num-draft-tokens", type=int, help="With --url on a draft-target BLS: draft tokens per probe."
)
@click.option(
    "--baseline", is_flag=True, help="With --url: the deployment has no speculation; do not expect it."
)
@json_option
def doctor(
    tritonserver: str | None,
    url: str | None,
    model: str,
    num_draft_tokens: int | None,
    baseline: bool,
    as_json: bool,
) -> None:
    """Check Python, torch, TensorRT-LLM, tritonserver, GPUs and disk (or, with --url, a deployment)."""
    if url:
        from toolkit.ops.health import check_deployment

        health = check_deployment(
            url, model, num_draft_tokens=num_draft_tokens, expect_speculation=not baseline
        )

        def human() -> None:
            print_table(f"sdtk doctor {url}", health.checks)
            click.echo(health.verdict)

        emit(health.to_dict(), as_json, human)
        if not health.ok:
            raise click.exceptions.Exit(1)
        return

    from toolkit.doctor import run_doctor

    report = run_doctor(tritonserver)
    emit(
        report.to_dict(),
        as_json,
        lambda: print_table("sdtk doctor", report.checks),
    )


@cli.command("train-draft")
@click.argument("recipe")
@click.option(
    "--data", required=True, help="Workload: bundled name, .jsonl of prompts, or a HF datasets dir."
)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output dir.")
@click.option(
    "--from",
    "from_",
    type=click.Path(file_okay=False, path_type=Path),
    help="Fine-tune this head or draft (default: from scratch).",
)
@click.option("--generate-with", help="URL or workdir of a running deployment that generates the data.")
@click.option("--holdout", default=0.25, show_default=True, type=float, help="Held-out fraction.")
@click.option("--max-steps", default=200, show_default=True, type=int)
@click.option("--max-minutes", type=float, help="Wall-clock budget; stops and exports when spent.")
@click.option("--checkpoint-every", default=50, show_default=True, type=int)
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in OUT/checkpoints.")
@click.option("--batch-size", default=8, show_default=True, type=int)
@click.option("--seq-len", default=256, show_default=True, type=int)
@click.option("--lr", default=1e-3, show_default=True, type=float)
@click.option(
    "--gen-tokens", default=128, show_default=True, type=int, help="Max tokens per generated response."
)
@click.option(
    "--eval-tokens", default=64, show_default=True, type=int, help="Tokens per hold-out probe prompt."
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--threads", type=int, help="torch threads for training (default: torch's).")
@click.option(
    "--dry-run", is_flag=True, help="Print the multi-GPU launch command, memory and steps; train nothing."
)
@click.option("--gpus", default=8, show_default=True, type=int, help="--dry-run: GPUs per node.")
@click.option(
    "--config",
    "config_json",
    type=click.Path(dir_okay=False, path_type=Path),
    help="--dry-run: the target's config.json when the recipe names a hub id.",
)
@json_option
def train_draft(
    recipe: str, dry_run: bool, gpus: int, config_json: Path | None, as_json: bool, **kw: Any
) -> None:
    """Train the EAGLE-3 head, Medusa heads or draft model for a workload; report hold-out τ before/after."""
    from toolkit.progress import steps
    from toolkit.train.api import TrainOptions

    opts = TrainOptions(**kw, progress=progress_enabled(as_json))
    if dry_run:
        from toolkit.train.launch import dry_run as plan_launch

        launch = plan_launch(recipe, opts, gpus=gpus, config_json=config_json)
        emit(launch.to_dict(), as_json, lambda: click.echo(launch.render()))
        return
    from toolkit.train.api import train_draft as run_train
    from toolkit.train.report import render

    result = run_train(recipe, opts, progress=steps("train-draft"))
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return
    emit(result.to_dict(), as_json, lambda: click.echo(render(result)))
    click.echo(f"next: {result.next_command}", err=as_json)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="sdtk")


if __name__ == "__main__":  # pragma: no cover
    main()
