"""The watchdog of a detached deployment: `sdtk deploy --detach` starts one beside the server.

Triton never restarts a dead Python backend stub, its health endpoints keep answering 200 after
one died (server#8604), and Triton 2.51 holds the requests a dead stub had in flight through an
`ensemble` until the client gives up: neither unloading the model nor anything a client sends
ends them; only the end of `tritonserver` does (docs/runbooks/troubleshooting.md). A foreground
`sdtk deploy` supervises its server itself (`TritonServer.serve_forever`); a detached one has
this process, which polls the server every `poll_s` and, when a stub or the server itself died,
applies the deployment's `--on-failure` policy:

- `restart` (the default): SIGKILL the server's process group at once (every client of the dead
  model gets a closed connection within a second instead of a hang) and launch it again, as
  recorded in `<workdir>/launch.json`, on the same ports with the same repository and key;
- `restart-model`: reload only the dead models through Triton's model-control API (`sdtk
  restart`), keeping the other models' requests; the requests the dead stub held through the
  `ensemble` keep hanging (Triton 2.51), and a dead server is restarted as with `restart`;
- `stop`: stop the server (clients get closed connections; `sdtk status` then says stopped).

Each failure it handled is recorded in state.json (`failures`, shown by `sdtk status`); the
failed server's log is kept as `logs/tritonserver.<pid>.log`. `sdtk stop` stops the watchdog first
(and marks the record `stopping`), so a deliberate stop is never taken for a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from toolkit.errors import SdtkError
from toolkit.server import procs
from toolkit.server.policies import WATCHDOG_POLICIES
from toolkit.server.state import (
    WATCHDOG_MODULE as MODULE,
)
from toolkit.server.state import (
    ServerState,
    _alive_and_ours,
    _crash,
    dead_stubs,
    read_state,
    remove_server_files,
    restart_model,
    stop_server,
    stub_message,
    write_state,
)

SPEC_FILE = "launch.json"
MAX_FAILURES_KEPT = 20
KEPT_LOGS = 5  # logs of failed servers kept as tritonserver.<pid>.log


def spec_path(workdir: Path | str) -> Path:
    return Path(workdir) / SPEC_FILE


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _say(text: str) -> None:
    print(f"{_now()} sdtk watchdog: {text}", flush=True)


def _record(workdir: Path, pid: int, when: str, failure: str, action: str) -> None:
    st = read_state(workdir)
    if st is not None and st.pid == pid:
        failures = [*st.failures, f"{when} {failure}: {action}"][-MAX_FAILURES_KEPT:]
        write_state(workdir, replace(st, failures=failures))


def _failure(st: ServerState) -> tuple[str, dict[str, list[int]]] | None:
    """What failed and the dead stubs by model; None while the server and its stubs live."""
    if not _alive_and_ours(st):
        crash = _crash(st)
        return f"tritonserver (pid {st.pid}) exited{crash or ' on its own'}", {}
    dead = dead_stubs(st)
    if dead:
        return stub_message(dead), dead
    return None


def failed_log(st: ServerState) -> Path:
    """Where the watchdog keeps the log of server `st` once it failed."""
    log = Path(st.log_path)
    return log.with_name(f"{log.stem}.{st.pid}{log.suffix}")


def keep_log(st: ServerState, keep: int = KEPT_LOGS) -> None:
    """Keep the failed server's log as tritonserver.<pid>.log (the newest `keep` of them)."""
    log = Path(st.log_path)
    with contextlib.suppress(OSError):
        os.replace(log, failed_log(st))
    old = sorted(log.parent.glob(f"{log.stem}.*[0-9]{log.suffix}"), key=lambda p: p.stat().st_mtime)
    for path in old[:-keep]:
        with contextlib.suppress(OSError):
            path.unlink()


def restart_server(workdir: Path, st: ServerState) -> ServerState:
    """Kill what is left of the recorded server at once and launch it again from launch.json
    (same ports, repository, flags and repository key). Returns the new record."""
    from toolkit.server.launch import TritonServer
    from toolkit.server.lock import WorkdirLock

    procs.kill_group_now(st.pgid)
    remove_server_files(st.shm_prefix, st.python_env)
    keep_log(st)
    spec = json.loads(spec_path(workdir).read_text())
    server = TritonServer.from_spec(spec)
    server.repo_key = st.repo_key or None
    server.restarts = st.restarts + 1
    server.validation = st.validation
    lock = WorkdirLock.acquire(workdir, "sdtk watchdog (restarting the server)", wait_s=5.0)
    try:
        server.start(detach=True, lock=lock)
    finally:
        lock.close()  # the server holds its inherited copy
    new = read_state(workdir)
    assert new is not None
    new = replace(
        new,
        watchdog_pid=os.getpid(),
        watchdog_policy=st.watchdog_policy,
        failures=st.failures,
        model_restarts=st.model_restarts,
    )
    write_state(workdir, new)
    return new


def watch(workdir: Path, policy: str, poll_s: float = 0.5) -> int:
    """Watch the server recorded in `workdir` until it is stopped (or replaced by another
    deploy). Returns 0 then; 1 when a restart failed (the record says why)."""
    st = read_state(workdir)
    if st is None:
        _say(f"no server recorded in {workdir}; nothing to watch")
        return 0
    pid = st.pid
    _say(f"watching tritonserver pid {pid} in {workdir} (on failure: {policy})")
    while True:
        time.sleep(poll_s)
        st = read_state(workdir)
        if st is None or st.pid != pid or st.status == "stopping":
            _say("the server was stopped; exiting")
            return 0
        found = _failure(st)
        if found is None:
            continue
        if not _alive_and_ours(st):
            # A stop removes the record right after the server is gone: give it a moment.
            time.sleep(1.0)
            again = read_state(workdir)
            if again is None or again.pid != pid or again.status == "stopping":
                _say("the server was stopped; exiting")
                return 0
        what, dead = found
        what = what.replace("`sdtk logs -n 40`", str(failed_log(st)))
        when = _now()
        _say(what)
        try:
            if policy == "stop":
                _record(workdir, pid, when, what, "stopped the server")
                stop_server(workdir, grace=1.0)
                return 0
            if policy == "restart-model" and dead and _alive_and_ours(st):
                for model in dead:
                    res = restart_model(workdir, model)
                    _say(res.message)
                    _record(workdir, pid, when, what, f"reloaded '{model}'")
                continue
            t0 = time.monotonic()
            new = restart_server(workdir, st)
            took = time.monotonic() - t0
            action = f"restarted the server (pid {new.pid}, ready in {took:.1f}s)"
            _record(workdir, new.pid, when, what, action)
            _say(action)
            pid = new.pid
        except SdtkError as e:
            _say(f"recovery failed: {e}")
            _record(workdir, pid, when, what, f"recovery failed: {e}")
            return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--on-failure", choices=list(WATCHDOG_POLICIES), default="restart")
    ap.add_argument("--poll", type=float, default=0.5)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(args.workdir.resolve(), args.on_failure, args.poll)


if __name__ == "__main__":
    raise SystemExit(main())
