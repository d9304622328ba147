"""The foreground of a server handle: the signals that stop it (raised as KeyboardInterrupt, or
ignored while it stops), and the echo of its log (toolkit.server.launch)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_last: list[int] = []  # the last stop signal any signals_interrupt() took, in this process


def last_stop_signal() -> int | None:
    """The last signal a `signals_interrupt` block turned into KeyboardInterrupt (None: none),
    whichever block was innermost when it came."""
    return _last[-1] if _last else None


@contextlib.contextmanager
def signals_interrupt() -> Iterator[list[int]]:
    """While active (main thread only), SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt,
    so the `except`/`finally` that stops the server runs; the list collects the signals."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        _last[:] = [signum]
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class LogFollower(threading.Thread):
    """Copies lines appended to the server log to `out` (foreground echo)."""

    def __init__(self, path: Path, out: TextIO):
        super().__init__(daemon=True, name="tritonserver-log")
        self.path = path
        self.out = out
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self.path.exists() and not self._stop_event.wait(0.05):
            pass
        with contextlib.suppress(OSError), open(self.path, errors="replace") as f:
            while True:
                line = f.readline()
                if line:
                    with contextlib.suppress(ValueError, OSError):
                        self.out.write(line)
                        self.out.flush()
                    continue
                if self._stop_event.wait(0.1):
                    for rest in f:
                        with contextlib.suppress(ValueError, OSError):
                            self.out.write(rest)
                    return

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=2)
