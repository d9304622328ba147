"""Atomic outputs: write `<name>.incomplete`, then rename over `<name>`.

A killed run never leaves a half-written file under the final name; a reader sees the old
file or the new one. The one implementation for every file (and directory: `publish_dir`)
sdtk writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

INCOMPLETE = ".incomplete"


def incomplete_path(path: Path, tmp_name: str | None = None) -> Path:
    """Where `path` is written before the rename (same directory, so the rename is atomic)."""
    return path.with_name(tmp_name or path.name + INCOMPLETE)


@contextlib.contextmanager
def atomic_path(path: Path | str, *, tmp_name: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it over `path`, else remove it.

    `tmp_name` names the temporary file where its ending matters (matplotlib picks the format
    from it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = incomplete_path(path, tmp_name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write(
    path: Path | str, data: str | bytes, *, mode: int | None = None, durable: bool = False
) -> Path:
    """Write `data` (text as UTF-8) to `path` atomically; `mode` sets its permissions.

    `durable`, for a record that several processes rewrite (a server's state.json): the
    temporary file is this process's own (`<name>.<pid>.incomplete`, so two writers never write
    into one file), and it is fsynced before the rename and the directory after it, so a crash
    or a power cut leaves the old record or the new one, never an empty file. On a full disk
    the write raises OSError and the old file is left as it was."""
    path = Path(path)
    tmp_name = f"{path.name}.{os.getpid()}{INCOMPLETE}" if durable else None
    with atomic_path(path, tmp_name=tmp_name) as tmp:
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if mode is not None else 0o666)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    if durable:
        with contextlib.suppress(OSError):
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    return path


def publish_dir(tmp: Path, dest: Path, *, old: Path | None = None) -> None:
    """Rename the finished directory `tmp` over `dest`; a previous `dest` is moved aside to `old`
    (default `<dest>.old-<pid>`) and removed only once the new one is in place, and put back if
    the swap fails. Directories cannot be renamed over each other, hence the aside."""
    if not dest.exists():
        os.replace(tmp, dest)
        return
    old = old or dest.with_name(f"{dest.name}.old-{os.getpid()}")
    os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def replace_section(
    path: Path | str, start: str, end: str, block: str, *, title: str = "# Benchmarks"
) -> Path:
    """Put `block` (which begins with `start` and ends with `end`) in place of the text between
    those markers in `path`, or append it; atomically. The benchmark scripts' write to
    docs/benchmarks.md: each owns one marked section and leaves the rest alone."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else title + "\n"
    if start in text and end in text[text.index(start) :]:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, text)
