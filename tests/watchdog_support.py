"""Shared support of the watchdog's fault probes: tests/server/test_watchdog_faults.py and
scripts/benchmarks/_watchdog_probes.py (the rows of `scripts/bench.py run stress_served --faults`) both drive a
detached tiny-baseline through real `sdtk` processes with these helpers.

tests/conftest.py puts the tests directory on sys.path (the script does the same):

    from watchdog_support import deploy, state, status, ready, greedy, wait_for, ...
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes" / "tiny-baseline.yaml")


def sdtk(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, cwd=ROOT, env={**os.environ, **(env or {})},
    )  # fmt: skip


def deploy(workdir: Path, **env: str) -> Path:
    """`sdtk deploy tiny-baseline --detach` on free ports, the watchdog's knobs from `env`."""
    r = sdtk(
        "deploy", RECIPE, "--workdir", str(workdir), "--detach", "--auto-ports", "--no-validate", env=env
    )
    assert r.returncode == 0, r.stderr
    return workdir / "tiny-baseline"


def state(dep: Path) -> dict:
    return json.loads((dep / "state.json").read_text())


def status(dep: Path) -> tuple[int, dict]:
    r = sdtk("status", "--workdir", str(dep), "--json")
    return r.returncode, json.loads(r.stdout)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if value := predicate():
                return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ready(dep: Path, restarts: int) -> dict | None:
    st = state(dep)
    return st if st["status"] == "ready" and st["restarts"] == restarts and st["stubs"] else None


def failing_restart(dep: Path) -> tuple[int, dict] | None:
    """`status` while the watchdog's relaunches fail (None otherwise)."""
    s = status(dep)
    return s if s[1]["state"] == "restarting" and "failed" in s[1]["message"] else None


def greedy(st: dict) -> str:
    body = {"text_input": "def f(x):", "max_tokens": 16}
    r = httpx.post(f"{st['http_url']}/v2/models/{st['model_name']}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["text_output"]


def long_stream(
    st: dict, model: str | None = None, max_tokens: int = 900
) -> tuple[threading.Thread, threading.Event, list]:
    """A long stream to `model` (the entry by default), running: `first` is set at its first
    event (or its end); `events` gets each event, then {"end": ...} or {"exception": ...} (a cut
    connection, a hang), with "at": its time.monotonic()."""
    first, events = threading.Event(), []

    def client() -> None:
        url = f"{st['http_url']}/v2/models/{model or st['model_name']}/generate_stream"
        body = {"text_input": "import os\n", "max_tokens": max_tokens, "stream": True}
        try:
            with httpx.Client(timeout=60) as c, c.stream("POST", url, json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:]))
                        first.set()
            events.append({"end": "closed without an error", "at": time.monotonic()})
        except Exception as e:  # a cut connection (or a hang: ReadTimeout)
            events.append({"exception": repr(e), "at": time.monotonic()})
        finally:
            first.set()

    thread = threading.Thread(target=client)
    thread.start()
    return thread, first, events


@contextlib.contextmanager
def stopped_at_the_end(dep: Path) -> Iterator[None]:
    """`sdtk stop --force` of `dep` on the way out; asserts no process of its group is left."""
    from toolkit.server import procs

    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # shown with a failure
            print("--- watchdog.log ---\n" + (dep / "logs" / "watchdog.log").read_text()[-3000:])
        pgids = []
        with contextlib.suppress(OSError, ValueError):
            pgids.append(state(dep)["pgid"])
        r = sdtk("stop", "--workdir", str(dep), "--force", "--grace", "2")
        assert r.returncode == 0, r.stderr
        assert all(not procs.group_members(g) for g in pgids)


def mount_tmpfs(mnt: Path, size: str = "64m") -> str | None:
    """A `size` tmpfs at `mnt` (root only): None, or why it cannot be mounted."""
    mnt.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    return None if r.returncode == 0 else r.stderr.decode().strip() or f"mount exited {r.returncode}"


def umount(mnt: Path) -> None:
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write `path` until its disk is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):  # until ENOSPC
            while True:
                os.write(fd, b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0")  # the last bytes
    finally:
        os.close(fd)
