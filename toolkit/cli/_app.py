"""The `sdtk` group and what every command module shares: the error mapping, the shared
options and the printers. The commands register on `cli` from the modules beside this one."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import click

from toolkit import __version__, checks
from toolkit.errors import MissingExtra, SdtkError
from toolkit.log import install_handler
from toolkit.server.foreground import last_stop_signal, signals_interrupt

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Override a recipe field, e.g. --set speculative.max_draft_len=3 (value parsed as YAML).",
)


class LazyChoice(click.Choice):
    """A click.Choice whose values are read when click first needs them (help, validation,
    completion), not when the command is declared: the mode names live in toolkit.modes, whose
    recipe classes pull pydantic, and `import toolkit.cli` stays light for `sdtk --help`."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self._values: tuple[str, ...] | None = None
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    @choices.setter
    def choices(self, _value: Sequence[str]) -> None:  # click.Choice.__init__ assigns it
        pass


def backends(*, auto: bool = True) -> LazyChoice:
    """`--backend` choices: toolkit.modes.BACKENDS, "auto" included unless `auto` is false."""

    def load() -> list[str]:
        from toolkit.modes import BACKENDS

        return [b for b in BACKENDS if auto or b != "auto"]

    return LazyChoice(load)


def mode_names() -> LazyChoice:
    """`--mode` choices: every registered speculative-decoding mode."""

    def load() -> list[str]:
        from toolkit.modes import MODES

        return list(MODES)

    return LazyChoice(load)


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
        """Run the command with SIGTERM and SIGHUP taken as Ctrl-C: a `kill`, a CI timeout or a
        closed terminal unwinds the command as an interrupt does, so every `finally` runs (the
        server a bench or tune deployed is stopped, outputs stay atomic) instead of the process
        vanishing and leaving them behind. Exit status 128 + the signal's number, whether this
        handler or an inner one (a server's start) took the signal."""
        with signals_interrupt():
            try:
                return self._invoke(ctx)
            except KeyboardInterrupt:
                sig = last_stop_signal()
                if sig is None or sig == signal.SIGINT:
                    raise
                click.echo(f"sdtk: stopped by {signal.Signals(sig).name}", err=True)
                ctx.exit(128 + sig)

    def _invoke(self, ctx: click.Context) -> Any:
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
            # An optional package's lazy import (torch, modelopt, matplotlib, ...): name its extra.
            missing = MissingExtra.from_import_error(e) if isinstance(e, ModuleNotFoundError) else None
            if missing is not None:
                raise _Reported(missing, missing.exit_code, missing.hint) from None
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
    checks.print_rows(title, columns, rows)


def print_table(title: str | None, results: Any) -> None:
    checks.print_table(title, results)


@click.group(cls=SdtkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sdtk")
def cli() -> None:
    """sdtk: build, deploy and benchmark LLMs with speculative decoding on TensorRT-LLM and Triton.

    Recipes are YAML files (or bundled names, see `sdtk recipes list`).
    Set SDTK_DEBUG=1 for tracebacks.
    """
    import logging

    install_handler(logging.DEBUG if os.environ.get("SDTK_DEBUG") else logging.INFO)
