"""The closed-schema base every recipe part derives from: strict pydantic models, field-naming
validator errors and bounded values for messages.

It sits below both toolkit.modes (each mode's recipe class) and toolkit.recipe (the rest of the
recipe), so that neither imports the other to get it. Importable without torch.
"""

from __future__ import annotations

import reprlib
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolkit.shellsafe import escape_controls, has_control

_CLIP = 100

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _CLIP
_repr.maxlist = _repr.maxdict = _repr.maxtuple = _repr.maxset = 8
_repr.maxlevel = 3


def clip(value: Any, limit: int = _CLIP) -> str:
    """A value for an error message: bounded repr (never walks a whole structure), one line."""
    s = value if isinstance(value, str) else _repr.repr(value)
    s = escape_controls(s)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def no_controls(v: str | None, what: str) -> str | None:
    if v is not None and has_control(v):
        raise ValueError(f"{what} '{clip(v)}' contains a control character (newline, tab, escape, …)")
    return v


class FieldError(ValueError):
    """A validator error that names the offending field, relative to the model it is raised in."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class Strict(BaseModel):
    # strict: `true` is not a number and "4" is not an int (YAML already gives typed scalars).
    model_config = ConfigDict(extra="forbid", frozen=False, validate_default=True, strict=True)
