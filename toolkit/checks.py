"""One vocabulary for checks: a `Status`, a `Check` record, a `CheckReport`, one table renderer.

Used by `sdtk doctor` (this machine), `sdtk doctor --url` (ops.health), `sdtk validate`
(validate) and the build preflight (build.preflight). A check that cannot run says `skipped`
and why; it never passes silently. `warning` does not fail a report; `failed` does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TextIO


class Status(str, Enum):
    PASSED = "passed"
    WARNING = "warning"
    SKIPPED = "skipped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


PASSED, WARNING, SKIPPED, FAILED = Status.PASSED, Status.WARNING, Status.SKIPPED, Status.FAILED


@dataclass
class Check:
    """One verdict: `detail` says what was found, `value` the short reading, `hint` the fix."""

    name: str
    status: Status
    detail: str = ""
    hint: str | None = None
    value: str = ""

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def ok(self) -> bool:
        return self.status is not FAILED

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "status": self.status.value, "ok": self.ok}
        if self.value:
            d["value"] = self.value
        d["detail"] = self.detail
        if self.hint:
            d["hint"] = self.hint
        return d


def passed_if(ok: bool) -> Status:
    return PASSED if ok else FAILED


@dataclass
class CheckReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status is FAILED]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.to_dict() for c in self.checks]}


def print_table(title: str | None, checks: Iterable[Check], file: TextIO | None = None) -> None:
    """The one human rendering of checks (a rich table; `value` only when some check has one)."""
    checks = list(checks)
    columns = ["check", "status", "value", "detail"]
    if not any(c.value for c in checks):
        columns.remove("value")
    rows = [[c.name, c.status.value, c.value, c.detail] for c in checks]
    if "value" not in columns:
        rows = [[r[0], r[1], r[3]] for r in rows]
    print_rows(title, columns, rows, file)


def print_rows(
    title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], file: TextIO | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    Console(file=file or sys.stdout, width=max(100, Console().width)).print(t)
