"""One error hierarchy. Exceptions carry data; the CLI turns them into one line plus a hint."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest choice to `word`, if any is close enough to be a plausible typo."""
    matches = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return matches[0] if matches else None


def check_names(given: Iterable[str], names: Iterable[str], what: str) -> None:
    """UsageError (with a did-you-mean) for the first of `given` not in `names`, e.g. a keyword
    argument that names no field of an options record."""
    allowed = list(names)
    for name in given:
        if name not in allowed:
            near = did_you_mean(name, allowed)
            raise UsageError(
                f"unknown {what} '{name}'" + (f"; did you mean '{near}'?" if near else ""),
                hint=f"{what}s: " + ", ".join(allowed),
            )


class SdtkError(Exception):
    """Base of every error sdtk reports to a user. `hint` says what to do about it."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(SdtkError):
    """Bad flags or arguments that click itself cannot catch."""

    exit_code = 2


class RecipeError(SdtkError):
    """A recipe that cannot be loaded or does not validate."""

    def __init__(
        self,
        message: str,
        *,
        path: Path | str | None = None,
        field: str | None = None,
        hint: str | None = None,
        problems: list[tuple[str, str]] | None = None,
    ):
        self.path = Path(path) if path else None
        self.field = field
        # Every (field, message) pair found; `message` already summarises them on one line.
        self.problems = problems or ([(field, message)] if field else [])
        prefix = f"{self.path}: " if self.path else ""
        super().__init__(prefix + message, hint=hint)


class CompatError(SdtkError):
    """A mode/backend/version/family combination the support matrix rules out."""

    def __init__(self, message: str, *, mode: str, backend: str, hint: str | None = None):
        self.mode = mode
        self.backend = backend
        super().__init__(message, hint=hint)


class PreflightError(SdtkError):
    """A check that failed before any expensive work started."""

    def __init__(self, check: str, message: str, *, hint: str | None = None):
        self.check = check
        super().__init__(f"preflight {check}: {message}", hint=hint)


class StepFailed(SdtkError):
    """A subprocess step exited non-zero."""

    def __init__(
        self, step: str, returncode: int, log_path: Path | None, tail: str = "", hint: str | None = None
    ):
        self.step = step
        self.returncode = returncode
        self.log_path = log_path
        self.tail = tail
        where = f"; log: {log_path}" if log_path else ""
        super().__init__(f"step '{step}' failed with exit code {returncode}{where}", hint=hint)


class ToolNotFound(SdtkError):
    """An external program sdtk needs is missing."""

    def __init__(self, tool: str, *, hint: str | None = None):
        self.tool = tool
        super().__init__(f"'{tool}' was not found", hint=hint)


class ModelError(SdtkError):
    """Model files that are missing, unreadable or inconsistent."""


class TieProneCheckpoint(ModelError):
    """A test checkpoint whose greedy choices are not decisive: at some step the top-1 logit beats
    the runner-up by less than `threshold` (a fraction of that step's largest |logit|), so a
    rounding difference between two correct kernels could flip the token."""

    def __init__(
        self, path: Path, *, margin: float, threshold: float, prompt: str, step: int, hint: str | None = None
    ):
        self.path = Path(path)
        self.margin = margin
        self.threshold = threshold
        self.prompt = prompt
        self.step = step
        super().__init__(
            f"{self.path}: greedy top-1 margin {margin:.4f} of the largest |logit| at step {step} of "
            f"prompt {prompt!r} is below {threshold}: fp16/bf16 rounding could flip that token",
            hint=hint,
        )


class GenerationError(SdtkError):
    """A generation request that cannot be served as asked (empty prompt, too long, ...)."""


class ServerError(SdtkError):
    """The Triton server failed to start, crashed, or is unreachable."""

    def __init__(
        self, message: str, *, log_tail: str = "", log_path: Path | None = None, hint: str | None = None
    ):
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(message, hint=hint)


class WorkdirError(SdtkError):
    """A deployment directory sdtk cannot use: unwritable (read-only, no permission, not a
    directory), or held by another deploy or server (`holder_pid`)."""

    def __init__(
        self, message: str, *, path: Path | str, holder_pid: int | None = None, hint: str | None = None
    ):
        self.path = Path(path)
        self.holder_pid = holder_pid
        super().__init__(message, hint=hint)
