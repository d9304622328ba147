"""Safe text for the scripts sdtk writes (build runbooks, RUNBOOK.md, Slurm, k8s, Dockerfile).

Arguments are quoted with `shlex.quote`; what else reaches a script goes through here:
- `comment`: one `# …` line cannot be ended early (control characters shown as escapes);
- `heredoc_tag`: a here-document terminator that no line of the body equals;
- `check_line`: refuse a value that must stay on one line where quoting cannot help
  (`#SBATCH` directives, Dockerfile instructions).
"""

from __future__ import annotations

import re
from typing import Any

# C0/C1 controls (newline, CR, ESC, NUL, …) and the Unicode line/paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control(s: str) -> bool:
    return CONTROL.search(s) is not None


def escape_controls(s: Any) -> str:
    """`s` with every control character written as a visible escape (`\\n`, `\\x1b`, `\\u2028`)."""
    return CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), str(s))


def comment(s: Any) -> str:
    """Text that stays on one comment line."""
    return escape_controls(s)


def heredoc_tag(body: str, base: str = "EOF") -> str:
    """A here-document terminator that no line of `body` equals (bash splits lines at \\n only)."""
    lines = set(body.split("\n"))
    tag, i = base, 0
    while tag in lines:
        i += 1
        tag = f"{base}_{i}"
    return tag


def check_line(value: str, what: str) -> str:
    """`value` if it holds no control character; else a UsageError naming `what`."""
    if has_control(value):
        from toolkit.errors import UsageError

        raise UsageError(
            f"{what} contains a control character ({escape_controls(value)[:100]}); "
            "it would break the generated script",
            hint="use a name or path without newlines or other control characters",
        )
    return value
