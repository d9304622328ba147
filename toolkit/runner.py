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
from typing import TextIO

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


def kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the child's process group, wait `grace` seconds, then SIGKILL it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(
    argv: Sequence[str],
    *,
    step: str,
    log_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    echo: TextIO | None = None,
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
            if echo is not None:
                echo.write(line)
                echo.flush()

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
