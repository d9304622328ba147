"""Jinja rendering for toolkit/ops/templates: StrictUndefined, shell-quoting filters."""

from __future__ import annotations

import shlex
from functools import cache
from typing import Any

import jinja2

from toolkit.shellsafe import comment

SENTINEL_PREFIX = "@SDTK_VAR_"


def shell_word(s: Any) -> str:
    """Quote for bash, except sdtk's runtime placeholders (@SDTK_VAR_NAME@ -> "$NAME")."""
    s = str(s)
    if s.startswith(SENTINEL_PREFIX) and s.endswith("@"):
        return '"$' + s[len(SENTINEL_PREFIX) : -1] + '"'
    return shlex.quote(s)


def shell_join(argv: list[Any], indent: str = "  ") -> str:
    """An argv as one bash command, continued over lines at each flag for readability."""
    words = [shell_word(a) for a in argv]
    lines: list[str] = []
    for w in words:
        if not lines or w == ":" or (w.startswith("-") and len(lines[-1]) + len(w) > 76):
            lines.append(w)
        else:
            lines[-1] += " " + w
    return (" \\\n" + indent).join(lines)


def var(name: str) -> str:
    """A placeholder that `shell_word` renders as "$name" (a shell variable set by the script)."""
    return f"{SENTINEL_PREFIX}{name}@"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("toolkit.ops", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = shell_word
    env.filters["c"] = comment  # inside `# …` lines: a newline must not end the comment
    return env


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)


def raw(name: str) -> str:
    """A template file shipped as-is (no Jinja)."""
    loader = environment().loader
    assert loader is not None
    source, _, _ = loader.get_source(environment(), name)
    return source
