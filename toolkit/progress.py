"""Progress on stderr: the one helper every long job uses (stdout stays data).

- `steps(component)`: a `Step` callback for one-line step messages ("sdtk deploy: ready"),
  logged INFO to `sdtk.<component>`; library code installs no handler, the CLI does
  (toolkit.log.install_handler), so a program importing sdtk decides what it shows.
- `Bars(enabled, label)`: rich progress bars with an ETA for counted work (bench's warm-up and
  levels, stress traffic), one bar per `level`.
- `enabled(as_json)`: the CLI's rule for both: on, except under --json when stderr is not a
  terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from toolkit.log import logger

Step = Callable[[str], None]  # the `progress=` argument of build, deploy, validate, selftest


def steps(component: str) -> Step:
    """Step messages to the `sdtk.<component>` logger."""
    return logger(component).info


def quiet(_msg: str) -> None:
    """A Step that shows nothing (a nested build or deploy whose caller reports the steps)."""


def enabled(as_json: bool) -> bool:
    """Progress goes to stderr; off only under --json when stderr is not a terminal."""
    return not as_json or sys.stderr.isatty()


def rich_bar(title: str, fields: str) -> Any:
    """A rich Progress on stderr: `title`, the bar, M/N, `fields` (a TextColumn format over the
    task's fields), elapsed time and ETA. Imports rich: call it only when progress is on."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(title),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


class Bars:
    """Rich progress bars on stderr, one per level (e.g. warm-up, each concurrency) with its ETA
    and an error count. Disabled, every call is a no-op; a non-terminal stderr gets the bars'
    final state once, not a live display. rich is imported only when enabled."""

    def __init__(self, enabled: bool, label: str):
        self.bar: Any = None
        self.task: Any = None  # rich's TaskID while a level runs
        self.label = label
        if enabled:
            self.bar = rich_bar("[bold]{task.description}", "errors {task.fields[errors]}")

    def __enter__(self) -> Bars:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def level(self, name: str, total: int) -> None:
        if self.bar is not None:
            self.task = self.bar.add_task(f"{self.label} {name}", total=total, errors=0)

    def advance(self, errors: int) -> None:
        """One more unit done; `errors` is the level's error count so far."""
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, advance=1, errors=errors)
