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

    def __init__(self, error: BaseException, exit_code: int, hint: str | None):
        super().__init__(" ".join(str(error).split("\n")))
        self.exit_code = exit_code
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
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    Console(file=sys.stdout, width=max(100, Console().width)).print(t)


@click.group(cls=SdtkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sdtk")
def cli() -> None:
    """sdtk: build, deploy and benchmark LLMs with speculative decoding on TensorRT-LLM and Triton.

    Recipes are YAML files (or bundled names, see `sdtk recipes list`).
    Set SDTK_DEBUG=1 for tracebacks.
    """


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
    from toolkit.compat import validate_recipe_file

    results = [validate_recipe_file(p, overrides) for p in paths]
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
    type=click.Choice(["auto", "engine", "llmapi", "reference"]),
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


# --------------------------------------------------------------------------- compat / doctor


@cli.command()
@click.option(
    "--mode", type=click.Choice(["none", "draft_target", "eagle3", "eagle", "medusa", "lookahead", "ngram"])
)
@click.option("--backend", type=click.Choice(["engine", "llmapi", "reference"]))
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
@json_option
def doctor(tritonserver: str | None, as_json: bool) -> None:
    """Check Python, torch, TensorRT-LLM, tritonserver, GPUs and disk."""
    from toolkit.doctor import run_doctor

    report = run_doctor(tritonserver)
    emit(
        report.to_dict(),
        as_json,
        lambda: _table(
            "sdtk doctor",
            ["check", "ok", "value", "detail"],
            [[c.name, "yes" if c.ok else "no", c.value, c.detail] for c in report.checks],
        ),
    )


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="sdtk")


if __name__ == "__main__":  # pragma: no cover
    main()
