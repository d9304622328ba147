"""The watchdog's note: what it is doing, in a file that needs no free space to be rewritten.

On a full disk state.json cannot be written (an atomic write needs a new file), so `sdtk status`
would show a stale record while the watchdog retries a restart. The watchdog therefore also
keeps `<workdir>/watchdog.note`: 4 KiB allocated when it starts (posix_fallocate) and rewritten
in place with one pwrite, which needs no new block. `sdtk status` reads it when the watchdog
says that it could not write the record.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

NOTE_FILE = "watchdog.note"
# The record's fields the note repeats (toolkit.server.state.ServerState).
NOTED = ("pid", "status", "restart_why", "restart_errors", "restart_error", "next_restart_at")
SIZE = 4096


def note_path(workdir: Path | str) -> Path:
    return Path(workdir) / NOTE_FILE


def open_note(workdir: Path | str) -> int | None:
    """The note's descriptor, its space allocated; None if even that fails (already full)."""
    try:
        fd = os.open(note_path(workdir), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, SIZE)
    except OSError:
        os.close(fd)
        return None
    return fd


def write_note(fd: int | None, data: dict[str, Any]) -> None:
    """Rewrite the note in place (JSON padded with spaces to its allocated size)."""
    if fd is None:
        return
    raw = json.dumps(data, sort_keys=True).encode()
    if len(raw) > SIZE:
        data = {**data, "restart_why": str(data.get("restart_why", ""))[:500]}
        raw = json.dumps(data, sort_keys=True).encode()[:SIZE]
    with contextlib.suppress(OSError):
        os.pwrite(fd, raw.ljust(SIZE, b" "), 0)


def read_note(workdir: Path | str) -> dict[str, Any]:
    """The note, {} when there is none or it cannot be parsed (a write in progress)."""
    try:
        data = json.loads(note_path(workdir).read_bytes() or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def unwritten(workdir: Path | str, record: Path) -> tuple[dict[str, Any], str]:
    """The record's fields as the watchdog noted them after it failed to write `record`, and
    why it failed; ({}, "") when the record is as new as the note."""
    note = read_note(workdir)
    with contextlib.suppress(OSError, TypeError, ValueError):
        if note.get("write_error") and float(note.get("at", 0)) >= record.stat().st_mtime:
            return {k: note[k] for k in NOTED if k in note and k != "pid"}, str(note["write_error"])
    return {}, ""
