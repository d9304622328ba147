"""`sdtk recipes`, `build`, `generate` and `compat`: the work on a recipe that serves nothing."""

from __future__ import annotations

from pathlib import Path

import click

from toolkit.cli._app import _table, backends, cli, emit, json_option, mode_names, set_option
from toolkit.errors import SdtkError


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
    type=backends(),
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
        for src in result.sources:
            if src.get("provenance"):
                click.echo(f"{src['role']} weights: {src['provenance']['note']}")


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
@click.option(
    "--raw",
    is_flag=True,
    help="Use PROMPT as written. Default: through the tokenizer's chat template when the recipe "
    "applies one (serving.chat_template), as a served chat client would.",
)
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
    raw: bool,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Generate in process with the reference runtime (no server) and print acceptance statistics."""
    from toolkit.generate import run_generate
    from toolkit.hub import chat, gguf
    from toolkit.recipe import load_recipe

    rec = load_recipe(recipe, overrides)
    if not raw and prompt:
        fmt = chat.for_recipe(rec)
        prompt = fmt.render(prompt)
        if not as_json and fmt.applied:
            click.echo(f"[{fmt.label}]", err=True)
    out = run_generate(
        rec,
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
    note = gguf.weights_note(rec)
    if note:
        click.echo(f"[{note}]", err=True)


# --------------------------------------------------------------------------- compat


@cli.command()
@click.option("--mode", type=mode_names())
@click.option("--backend", type=backends(auto=False))
@json_option
def compat(mode: str | None, backend: str | None, as_json: bool) -> None:
    """Print the support matrix: mode × backend × TensorRT-LLM versions (a column per release line:
    yes, deprecated, no) × model families."""
    from toolkit.compat import COLUMNS, matrix, versions_note

    cells = matrix(mode, backend)
    emit(
        [c.to_dict() for c in cells],
        as_json,
        lambda: _table(
            "speculative decoding support",
            ["mode", "backend", "ok", "TRT-LLM", *COLUMNS, "families", "name", "why / fix"],
            [
                [
                    c.mode,
                    c.backend,
                    "yes" if c.supported else "no",
                    c.version_range() if c.supported else "-",
                    *(c.at(line) for line in COLUMNS),
                    ",".join(c.families) if c.families else "any",
                    c.trtllm_name or "-",
                    c.reason + (f" | fix: {c.fix}" if not c.supported else "") + versions_note(c),
                ]
                for c in cells
            ],
        ),
    )
