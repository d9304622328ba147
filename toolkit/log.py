"""Diagnostics through `logging`, under the `sdtk.*` loggers.

Library code logs (toolkit.progress.steps("deploy")("ready") logs INFO to `sdtk.deploy`) and
installs no handler, so that a program importing sdtk decides what it shows. The CLI installs one
handler (`install_handler`) that writes `sdtk <component>: <message>` lines to stderr; stdout
stays data.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO

ROOT = "sdtk"


def logger(component: str) -> logging.Logger:
    return logging.getLogger(f"{ROOT}.{component}")


if TYPE_CHECKING:
    _Handler = logging.StreamHandler[TextIO]
else:  # not subscriptable at run time before Python 3.11
    _Handler = logging.StreamHandler


class _StderrHandler(_Handler):
    """Writes to the sys.stderr of the moment (test runners and click swap it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        component = record.name[len(ROOT) + 1 :] if record.name.startswith(ROOT + ".") else ""
        prefix = f"{ROOT} {component}" if component else ROOT
        return f"{prefix}: {record.getMessage()}"


def install_handler(level: int = logging.INFO) -> logging.Handler:
    """The CLI's handler on the `sdtk` logger (replacing one installed before)."""
    root = logging.getLogger(ROOT)
    for h in list(root.handlers):
        if isinstance(h, _StderrHandler):
            root.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    return handler
