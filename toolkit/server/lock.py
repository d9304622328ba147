"""One deploy per deployment directory: an OS file lock (`flock`) on `<dir>/sdtk.lock`.

    lock = WorkdirLock.acquire(root, "sdtk deploy recipes/x.yaml")   # or WorkdirError, at once
    server = TritonServer(..., workdir=root); server.start(lock=lock)  # the server inherits it
    lock.close()

`sdtk deploy` takes it before it builds or renders anything, so a second deploy into a live
directory, or two racing ones, never touch the live repository: the loser is refused at once and
told who holds it. The launched tritonserver inherits the locked descriptor (flock locks belong to
the open file, shared by every process that holds a descriptor of it), so the directory stays
locked for as long as the server or any of its stubs lives, whoever started it and whether or
not that sdtk process is still there; `sdtk stop` takes the lock once the server is gone.

A lock is never unlocked explicitly (LOCK_UN would unlock the server's inherited copy too): each
holder just closes its descriptor. The file keeps the holders' pids as JSON, for the loser's
message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from pathlib import Path

from toolkit.errors import WorkdirError
from toolkit.server import procs

LOCK_FILE = "sdtk.lock"


def lock_path(root: Path | str) -> Path:
    return Path(root) / LOCK_FILE


def unwritable(path: Path, e: OSError) -> WorkdirError:
    """The one error for a deployment directory sdtk cannot write."""
    why = {
        errno.EROFS: "is on a read-only file system",
        errno.EACCES: "is not writable by this user",
        errno.EPERM: "is not writable by this user",
        errno.ENOTDIR: "is not a directory",
        errno.ENOSPC: "is on a full disk",
    }.get(e.errno or 0, f"cannot be written ({e.strerror})")
    return WorkdirError(
        f"the workdir {path} {why}",
        path=path,
        hint="pass a writable --workdir (sdtk writes engines, the model repository, logs and state there)",
    )


def _describe(holder: dict) -> tuple[str, int | None]:
    """'sdtk deploy … (pid 12), serving as tritonserver pid 34', and the pid to name."""
    who, pid, server = holder.get("what", "another sdtk"), holder.get("pid"), holder.get("server_pid")
    live_pid = pid if isinstance(pid, int) and procs.alive(pid) else None
    text = f"{who} (pid {pid}{'' if live_pid else ', gone'})"
    if isinstance(server, int) and procs.alive(server):
        return text + f", whose tritonserver (pid {server}) still runs", server
    return text, live_pid


class WorkdirLock:
    """An exclusive flock on `<root>/sdtk.lock`, held through `fd` (inheritable by a server)."""

    def __init__(self, root: Path, fd: int, what: str):
        self.root, self.fd, self.what = root, fd, what

    @classmethod
    def acquire(cls, root: Path | str, what: str, wait_s: float = 0.0) -> WorkdirLock:
        """Lock `root` (created if needed) for `what` ("sdtk deploy …"), waiting up to `wait_s`.

        WorkdirError when it cannot be written, or when another process holds it: the message
        names that process (and the server it started)."""
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path(root), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise unwritable(root, e) from None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                holder = _read(fd)
                for _ in range(10):  # the holder writes its record just after it locks
                    if holder:
                        break
                    time.sleep(0.05)
                    holder = _read(fd)
                os.close(fd)
                who, pid = _describe(holder)
                raise WorkdirError(
                    f"the workdir {root} is in use by {who}",
                    path=root,
                    holder_pid=pid,
                    hint=f"wait for it, or stop its server (sdtk stop --workdir {root}), or use another --workdir",
                ) from None
        lock = cls(root, fd, what)
        lock.record()
        return lock

    def record(self, server_pid: int | None = None) -> None:
        """Write who holds the lock (this process and the server it launched) into the file."""
        data = {"pid": os.getpid(), "what": self.what, "since": time.time()}
        if server_pid is not None:
            data["server_pid"] = server_pid
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, (json.dumps(data) + "\n").encode(), 0)

    def close(self) -> None:
        """Drop this process's hold; a server that inherited the descriptor keeps the lock."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> WorkdirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
