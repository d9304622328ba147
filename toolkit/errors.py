"""One error hierarchy. Exceptions carry data; the CLI turns them into one line plus a hint."""

from __future__ import annotations

import difflib
import errno
import shutil
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


# What a write fails with when its file system has no room (ENOSPC) or its user no quota (EDQUOT).
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(WorkdirError):
    """A write that found no space left: names the path it was writing and the space free on
    that file system now."""

    def __init__(self, path: Path | str, *, free: int | None, hint: str | None = None):
        self.free = free
        room = f"{_size(free)} free there now" if free is not None else "its free space unknown"
        super().__init__(
            f"no space left on the device while writing {path} ({room})",
            path=path,
            hint=hint
            or "free space on that file system, or pass another --workdir; the same command then "
            "goes on from what was written (finished build steps are not redone)",
        )

    @classmethod
    def from_oserror(cls, e: OSError, fallback: Path | str) -> DiskFull:
        """For an OSError whose errno is in DISK_FULL_ERRNOS: the path it names (the
        destination of a copy), else `fallback`."""
        path = Path(str(e.filename2 or e.filename or fallback))
        if path.name.endswith(".incomplete"):  # an atomic write's temporary (toolkit._fs)
            path = path.with_name(path.name.removesuffix(".incomplete"))
        return cls(path, free=free_bytes(path))


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the file system of `path` (or of its nearest existing parent)."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
