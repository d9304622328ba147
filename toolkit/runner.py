"""The one way sdtk runs a subprocess.

argv lists only (never a shell), stdin closed, a new session so that Ctrl-C can kill the
whole process group, output tee'd to `logs/<step>.log`, and the return code checked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import StepFailed, ToolNotFound

_SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


@dataclass(frozen=True)
class RunResult:
    step: str
    argv: list[str]
    returncode: int
    seconds: float
    log_path: Path | None
    tail: str


def redact(text: str) -> str:
    """Remove tokens that may have leaked into a command line or its output."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def kill_pgroup(pgid: int) -> None:
    """SIGKILL process group `pgid` (gone or not ours: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_group(proc: subprocess.Popen, grace: float = 10.0, *, leader_only: bool = False) -> None:
    """SIGTERM the child's process group, wait `grace` seconds, then SIGKILL the group.

    `leader_only` sends the SIGTERM to the leader alone, so that it can stop its own children
    in order (tritonserver unloads its models and ends its Python backend stubs)."""
    if proc.poll() is not None:
        return
    try:
        if leader_only:
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        kill_pgroup(proc.pid)
        proc.wait()


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    hint: str | None = None,
    pass_fds: Sequence[int] = (),
    secrets: Sequence[str] = (),
    new_session: bool = True,
) -> subprocess.Popen:
    """Start a long-running process (a server) and return at once.

    As `run`: argv only, stdin closed, a new session (its own process group, for `kill_group`),
    stdout and stderr into `log_path` after a first line with the redacted command. The caller
    waits for it and stops it (`kill_group`). `pass_fds`: descriptors the process inherits (the
    workdir lock, toolkit.server.lock); every other one is closed. `secrets`: arguments'
    values that the log's first line shows as ***. `new_session=False` keeps the process in the
    caller's process group (a supervisor's children, stopped with it)."""
    argv = [str(a) for a in argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    shown = redact(" ".join(argv))
    for secret in secrets:
        shown = shown.replace(secret, "***")
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shown + "\n")
        log.flush()
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=new_session,
                close_fds=True,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError:
            raise ToolNotFound(argv[0], hint=hint) from None


def capture(argv: Sequence[str], *, step: str, timeout: float, hint: str | None = None) -> str:
    """Run a short query (`nvidia-smi --query-gpu=...`) and return its stdout.

    argv only, stdin closed, bounded by `timeout`; a missing tool raises ToolNotFound, a non-zero
    exit or a timeout StepFailed with the output's tail."""
    argv = [str(a) for a in argv]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolNotFound(argv[0], hint=hint) from None
    except subprocess.TimeoutExpired:
        raise StepFailed(step, -9, None, "", hint=f"timed out after {timeout:g}s") from None
    if done.returncode != 0:
        raise StepFailed(step, done.returncode, None, redact(done.stderr or done.stdout)[-2000:], hint=hint)
    return done.stdout


def run(
    argv: Sequence[str],
    *,
    step: str,
    log_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    timeout: float | None = None,
    hint: str | None = None,
) -> RunResult:
    """Run `argv` to completion. Raises StepFailed on a non-zero exit when `check` is set."""
    argv = [str(a) for a in argv]
    log_path = None
    log = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{step}.log"
        log = log_path.open("w", encoding="utf-8")
        log.write("$ " + redact(" ".join(argv)) + "\n")
        log.flush()
    tail: deque[str] = deque(maxlen=50)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            text=True,
            errors="replace",
            bufsize=1,
        )
    except FileNotFoundError:
        if log:
            log.close()
        raise ToolNotFound(argv[0], hint=hint) from None

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = redact(line)
            tail.append(line)
            if log:
                log.write(line)
                log.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        reader.join(timeout=5)
        if log:
            log.close()
        raise StepFailed(step, -9, log_path, "".join(tail), hint=f"timed out after {timeout:.0f}s") from None
    except BaseException:
        # Ctrl-C or any other interruption: never leave the step's process group behind.
        kill_group(proc)
        raise
    finally:
        reader.join(timeout=5)
        if log and not log.closed:
            log.close()
    result = RunResult(step, argv, proc.returncode, time.monotonic() - start, log_path, "".join(tail))
    if check and proc.returncode != 0:
        raise StepFailed(step, proc.returncode, log_path, result.tail, hint=hint)
    return result


def python_argv(*args: str) -> list[str]:
    """argv that runs this interpreter (the venv's) with `args`."""
    return [sys.executable, *args]
