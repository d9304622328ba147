"""`sdtk train-draft`: train a draft, EAGLE-3 head or Medusa heads for a workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from toolkit.cli._app import cli, emit, json_option
from toolkit.progress import enabled as progress_enabled
from toolkit.progress import steps


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
    "--draft-vocab",
    type=click.IntRange(min=1),
    help="EAGLE-3 from scratch: draft vocabulary size (d2t), the most frequent tokens of the data "
    "(default: half the target's vocabulary, at most 32000).",
)
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
