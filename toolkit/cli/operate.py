"""Commands on a running deployment (`status`, `logs`, `stop`, `restart`, `validate`, `infer`,
`monitor`) and `doctor`."""

from __future__ import annotations

from pathlib import Path

import click

from toolkit.cli._app import cli, emit, json_option, print_table
from toolkit.errors import ServerError, UsageError

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

    wd = find_deployment(workdir)
    if _dynamo_at(wd):
        from toolkit.dynamo.status import dynamo_status

        st = dynamo_status(wd)
    else:
        st = server_status(wd)
    emit(st.to_dict(), as_json, lambda: click.echo(f"{st.state}: {st.message}"))
    if not st.healthy:
        raise click.exceptions.Exit(1)


def _dynamo_at(wd: Path) -> bool:
    """The deployment in `wd` is a Dynamo one; False for an unreadable record with nothing
    running (toolkit.server.state: `status` reports it, `stop` removes it)."""
    from toolkit.dynamo.launch import is_dynamo
    from toolkit.server.state import RecordUnreadable

    try:
        return is_dynamo(wd)
    except RecordUnreadable:
        return False


@cli.command()
@workdir_option
@click.option("-n", "--lines", type=int, help="Only the last N lines.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the server stops.")
def logs(workdir: Path | None, lines: int | None, follow: bool) -> None:
    """Print the deployment's tritonserver log (a Dynamo deployment's: its supervisor's, which
    names each process's own log)."""
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
@click.option(
    "--force",
    is_flag=True,
    help="Also stop every server and watchdog of the workdir that its lock or the process table "
    "shows, recorded or not (for a damaged or missing state.json).",
)
@json_option
def stop(workdir: Path | None, grace: float, force: bool, as_json: bool) -> None:
    """Stop the deployment's server (and its Python backend stubs) and its watchdog; a Dynamo
    deployment's supervisor, frontend and workers."""
    from dataclasses import asdict

    from toolkit.server.state import find_deployment, stop_server

    wd = find_deployment(workdir)
    if _dynamo_at(wd):  # the supervisor, the frontend and each worker, named
        from toolkit.dynamo.status import stop_dynamo

        res = stop_dynamo(wd, grace=grace, force=force)
    else:
        res = stop_server(wd, grace=grace, force=force)
    emit(asdict(res), as_json, lambda: click.echo(res.message))


@cli.command()
@click.argument("model")
@workdir_option
@json_option
def restart(model: str, workdir: Path | None, as_json: bool) -> None:
    """Reload one model of the running deployment (e.g. one whose Python stub died), leaving the
    others serving, through Triton's model-control API and the deployment's key."""
    from dataclasses import asdict

    from toolkit.server.modelcontrol import restart_model
    from toolkit.server.state import find_deployment

    res = restart_model(find_deployment(workdir), model)
    emit(asdict(res), as_json, lambda: click.echo(res.message))


def _running_deployment(workdir: Path | None):
    """(deployment dir, its ServerState) for --workdir, or a one-line error."""
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
@click.option(
    "--openai",
    is_flag=True,
    help="--url speaks the OpenAI API (/v1/completions, /v1/chat/completions), e.g. a Dynamo frontend "
    "(a `--target dynamo` deployment under --workdir is recognized without it).",
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
    openai: bool,
    as_json: bool,
) -> None:
    """Validate a served deployment: metadata, HTTP + gRPC smoke, correctness gate, acceptance."""
    from toolkit.recipe import load_recipe
    from toolkit.validate import ValidateOptions, validate_deployment

    grpc_url, served = None, None
    rec = load_recipe(recipe) if recipe else None
    if openai or (not url and _is_dynamo(workdir)):
        _validate_openai(url, workdir, model, rec, max_tokens, strict, as_json)
        return
    if url:
        http_url = url
    else:
        from toolkit.deploy import load_deployed_recipe
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
        options=ValidateOptions(max_tokens=max_tokens, baseline_url=baseline_url, strict=strict),
        progress=None,
    )

    def human() -> None:
        print_table(f"validation of '{report.model}' at {report.http_url}", report.checks)
        for note in report.notes:
            click.echo(note)

    emit(report.to_dict(), as_json, human)
    report.raise_if_failed()
    if served is not None:  # `sdtk status` stops calling a deploy's unfinished validation out
        from toolkit.server.state import update_state

        update_state(*served, validation="passed")


def _is_dynamo(workdir: Path | None) -> bool:
    from toolkit.dynamo.launch import is_dynamo
    from toolkit.server.state import find_deployment

    return is_dynamo(find_deployment(workdir))


def _infer_openai(
    prompt, url, workdir, model, stream: bool, max_tokens: int, temperature, as_json: bool
) -> None:
    """`sdtk infer` over /v1/completions (toolkit.client.openai_api)."""
    from dataclasses import asdict

    from toolkit.client.openai_api import OpenAIClient, OpenAIResponse

    if not url:
        _, st = _running_deployment(workdir)
        url, model = st.http_url, model or st.model_name
    if not model:
        raise UsageError("--protocol openai --url needs --model (the served model name)")
    params = {"temperature": temperature} if temperature is not None else {}
    with OpenAIClient(url, model) as c:
        if stream:
            resp = OpenAIResponse(text="")
            body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0} | params
            for piece in c.stream("/v1/completions", body, resp, chat=False):
                if not as_json:
                    click.echo(piece, nl=False)
            if not as_json:
                click.echo()
        else:
            resp = c.complete(prompt, max_tokens, **params)
            if not as_json:
                click.echo(resp.text)
    if as_json:
        emit(asdict(resp), True)


def _validate_openai(url, workdir, model, rec, max_tokens: int, strict: bool, as_json: bool) -> None:
    """`sdtk validate` over the OpenAI API (toolkit.dynamo.check)."""
    from toolkit.dynamo.check import validate_openai

    served = None
    if not url:
        from toolkit.deploy import load_deployed_recipe

        wd, st = _running_deployment(workdir)
        url, model = st.http_url, model or st.model_name
        rec, served = rec or load_deployed_recipe(wd), (wd, st.pid)
    if not model:
        raise UsageError("--openai --url needs --model (the served model name)")
    report = validate_openai(http_url=url, model=model, recipe=rec, max_tokens=max_tokens, strict=strict)
    emit(report.to_dict(), as_json, lambda: print_table(f"validation of '{model}' at {url}", report.checks))
    report.raise_if_failed()
    if served is not None:
        from toolkit.server.state import update_state

        update_state(*served, validation="passed")


@cli.command()
@click.argument("prompt")
@click.option("--url", help="Server URL. Default: the running deployment under --workdir.")
@workdir_option
@click.option(
    "--protocol",
    type=click.Choice(["http", "grpc", "openai"]),
    default="http",
    show_default=True,
    help="openai: /v1/completions (a --target dynamo deployment under --workdir uses it by default).",
)
@click.option("--model", help="Model to call (default: the deployment's entry model, else 'ensemble').")
@click.option("--stream", is_flag=True, help="Stream tokens as they are generated.")
@click.option("--max-tokens", default=64, show_default=True, type=int)
@click.option("--temperature", type=float)
@click.option("--num-draft-tokens", type=int, help="Draft-target BLS only: draft tokens per step (0 = off).")
@click.option(
    "--raw",
    is_flag=True,
    help="Send PROMPT as written. Default: through the deployment's chat template when its recipe "
    "applies one (serving.chat_template), as a chat client would; never with --url.",
)
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
    raw: bool,
    as_json: bool,
) -> None:
    """Send one generation request to a served model and print the text and acceptance stats."""
    from toolkit.client import TritonClient

    if protocol == "openai" or (not url and _is_dynamo(workdir)):
        _infer_openai(prompt, url, workdir, model, stream, max_tokens, temperature, as_json)
        return
    target, state_model = _client_target(url, workdir, protocol)
    if not (url or raw) and prompt:
        from toolkit.deploy import load_deployed_recipe
        from toolkit.hub import chat

        fmt = chat.for_recipe(load_deployed_recipe(_running_deployment(workdir)[0]))
        prompt = fmt.render(prompt)
        if not as_json and fmt.applied:
            click.echo(f"[{fmt.label}]", err=True)
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
    from toolkit.ops.monitor import Monitor, ProbeRequest, run_monitor

    request = ProbeRequest(num_draft_tokens=num_draft_tokens, draft_len=draft_len)
    run_monitor(Monitor(url, model=model, interval=interval, request=request), port=port, addr=addr)


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
        from toolkit.ops.health import SpeculationProbe, check_deployment

        probe = SpeculationProbe(num_draft_tokens=num_draft_tokens, expect=not baseline)
        health = check_deployment(url, model, probe=probe)

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
