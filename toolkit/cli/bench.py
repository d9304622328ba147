"""`sdtk bench`, `plan` and `tune`: measure, predict and tune speculative decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from toolkit.cli._app import cli, emit, json_option, set_option
from toolkit.errors import UsageError
from toolkit.progress import enabled as progress_enabled


def _ints(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
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
@click.option(
    "--protocol",
    type=click.Choice(["grpc", "http", "openai"]),
    default="grpc",
    show_default=True,
    help="openai: /v1/completions (a `--target dynamo` workdir uses it by itself).",
)
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
@click.option(
    "--interleave",
    is_flag=True,
    help="With --compare: measure both sides level by level (the baseline, then the speculative side, "
    "at each concurrency) instead of one side's levels after the other's, so that a machine whose "
    "speed drifts moves both sides of a level alike. Recipe sides are deployed once per level.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --compare: split each level's --requests into this many rounds, each a closed loop at "
    "the level's concurrency, run by the two sides in turn (A B, B A, A B, ...), both deployed "
    "throughout; implies --interleave. A drift over tens of seconds then falls on both sides alike. "
    "`sdtk plan --requests` predicts it with the requests per round.",
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
    interleave: bool,
    rounds: int,
    as_json: bool,
) -> None:
    """Benchmark a deployment (TARGET: recipe, workdir or URL), or A/B two with --compare.

    --workdir is the deployment (the directory `sdtk deploy --workdir` was given, or the
    deployment directory under it); recipes given to --compare are deployed under it, and
    reports go to --report-dir, default <workdir>/reports.
    """
    from toolkit.bench.api import RunOptions
    from toolkit.deploy import deployed

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

        result: Any = run_compare(
            compare[0],
            compare[1],
            opts,
            concurrency=levels,
            deploy_fn=deployed,
            interleave=interleave or rounds > 1,
            rounds=rounds,
        )
    else:
        if interleave or rounds > 1:
            flag = "--interleave" if interleave else "--rounds"
            raise UsageError(f"{flag} orders the two sides of --compare A B; give --compare")
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
@click.option(
    "--requests",
    type=click.IntRange(min=1),
    help="Requests per level of the `sdtk bench --compare` run to predict (its closed loop is replayed "
    "with that many; the share that runs in the draining tail changes the speedup); for a run with "
    "--rounds K, its requests per round (requests ÷ K). Default: bench's.",
)
@click.option(
    "--gamma-max",
    "draft_len_max",
    default=8,
    show_default=True,
    type=int,
    help="Longest draft length (γ) to consider.",
)
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
    requests: int | None,
    draft_len_max: int,
    concurrency: str,
    serving_overhead_ms: float | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Probe acceptance and cost, recommend a draft length, size GPUs and predict speedup."""
    from toolkit.bench.api import RunOptions
    from toolkit.bench.api import plan as run_plan
    from toolkit.recipe import load_recipe

    opts = RunOptions(workload=workload, prompts_file=prompts_file, progress=progress_enabled(as_json))
    result = run_plan(
        load_recipe(recipe, overrides),
        RunOptions.of(opts, requests=requests) if requests else opts,
        gpu=gpu,
        tp=tp,
        probe=False if no_probe else None,
        probe_prompts=probe_prompts,
        draft_len_max=draft_len_max,
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
@click.option(
    "--protocol",
    type=click.Choice(["grpc", "http", "openai"]),
    default="grpc",
    show_default=True,
    help="openai: /v1/completions (a `--target dynamo` workdir uses it by itself).",
)
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
