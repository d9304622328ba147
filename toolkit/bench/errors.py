"""Errors of bench / plan / tune. They subclass toolkit.errors so the CLI maps them like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.errors import ServerError, UsageError


class WorkloadError(UsageError):
    """A prompt file or workload name that cannot be used; names the file and line."""

    def __init__(self, message: str, *, path: Path | str | None = None, line: int | None = None, hint=None):
        self.path = Path(path) if path else None
        self.line = line
        where = f"{self.path}" if self.path else ""
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class InexactCounts(UsageError):
    """Per-token metrics were asked for without an exact token count (server or tokenizer)."""


class BenchAborted(ServerError):
    """A benchmark stopped early (the server died or stopped answering).

    `partial` is the result measured so far (a BenchResult, ABResult or TuneResult, marked
    partial); `report_dir` is where its reports were written, if anywhere.
    """

    def __init__(
        self,
        message: str,
        *,
        partial: Any = None,
        report_dir: Path | None = None,
        cause: str = "",
        hint: str | None = None,
    ):
        self.partial = partial
        self.report_dir = report_dir
        self.cause = cause
        if report_dir is not None:
            message += f"; partial report in {report_dir}"
        super().__init__(message, hint=hint)
