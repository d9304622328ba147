"""The `sdtk` command line. Thin: parse flags, call one library function, print its result.

Data goes to stdout (`--json` where it is data); progress and errors go to stderr.
Every SdtkError becomes one line plus a hint and a non-zero exit; SDTK_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

# The command modules register their commands on `cli` when imported.
from toolkit.cli import bench, deploy, operate, recipes, train  # noqa: F401
from toolkit.cli._app import cli, emit, print_table

__all__ = ["cli", "emit", "main", "print_table"]


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="sdtk")
