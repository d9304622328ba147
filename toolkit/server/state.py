"""A server's record (`<workdir>/state.json`) and `sdtk status | logs | stop`.

state.json is written the moment the server is spawned (`status: starting`, so a server whose
`sdtk deploy` was killed before READY is still found), updated at READY with the Python backend
stub pids, and removed by `stop`. The pid in it is trusted only while /proc says the process
still has the recorded start time and is a tritonserver (or the mpirun leading one), so a reused
pid is never signalled.

Triton's health endpoints keep answering 200 after a Python backend stub dies (upstream
server#8604), so `status` compares the stub pids recorded at READY with the live ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit._fs import atomic_write
from toolkit.errors import ServerError, WorkdirError
from toolkit.server import crashsite, logscan, procs, stubcheck
from toolkit.server.liveness import frozen, frozen_message
from toolkit.server.lock import WorkdirLock
from toolkit.server.note import unwritten
from toolkit.server.record import (  # the record's data, re-exported
    STATE_FILE,
    WATCHDOG_MODULE,
    ServerState,
    default_log_path,
    state_path,
)
from toolkit.server.workdir import DEFAULT_WORKDIR

STOP_LOCK_WAIT_S = 3.0  # how long `stop` waits for the workdir lock once the server is gone


def find_deployment(workdir: Path | str | None, *, default: Path = DEFAULT_WORKDIR) -> Path:
    """The deployment directory for a --workdir: one resolver for every command.

    Accepts the deployment directory itself (`<workdir>/<recipe name>`, holding state.json or
    recipe.json) or the workdir given to `sdtk deploy --workdir` when exactly one deployment
    under it has a server recorded. With nothing running there, an existing directory is
    returned as is (status/stop then report "stopped"; bench says it is not running).
    """
    from toolkit.errors import UsageError

    base = Path(workdir or default).expanduser().resolve()
    if state_path(base).is_file():
        return base
    found = sorted(p.parent for p in base.glob(f"*/{STATE_FILE}"))
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(str(p) for p in found)
        raise UsageError(
            f"several deployments under {base}: {names}", hint="pick one with --workdir <that directory>"
        )
    if workdir is not None and base.is_dir():
        return base
    raise UsageError(
        f"no deployment found under {base}",
        hint="pass --workdir <workdir>/<recipe name>, or start one with `sdtk deploy RECIPE --detach`",
    )


def write_state(workdir: Path | str, state: ServerState) -> Path:
    """Atomically and durably (toolkit._fs), readable and writable by its owner only (it holds
    the repository key). A full disk raises OSError and leaves the old record as it was."""
    path = state_path(workdir)
    return atomic_write(path, state.to_json(), mode=0o600, durable=True)


def update_state(workdir: Path | str, pid: int, **changes: Any) -> bool:
    """Change fields of the record of server `pid` (atomically); False if it records another."""
    st = read_state(workdir)
    if st is None or st.pid != pid:
        return False
    write_state(workdir, replace(st, **changes, rebuilt=""))
    return True


class RecordUnreadable(ServerError):
    """state.json cannot be read and no server of its workdir runs: nothing to rebuild it from."""


def read_state(workdir: Path | str) -> ServerState | None:
    """The record of `workdir`'s server; None when there is none. An unreadable one (garbage, an
    empty file, a disk error) is rebuilt from what still says which server runs there: the
    lock's server pid, the process table, launch.json (toolkit.server.recover; `rebuilt` says
    why); RecordUnreadable when no server of the workdir runs."""
    path = state_path(workdir)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        return ServerState.from_dict(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        why = f"{path} is unreadable: {e}"
    from toolkit.server.recover import rebuild_state

    st = rebuild_state(workdir, why)
    if st is None:
        raise RecordUnreadable(
            f"{why}; no server of {workdir} runs (none holds its lock or runs from it)",
            hint=f"`sdtk stop --workdir {workdir}` removes the record",
        )
    return st


def remove_state(workdir: Path | str) -> None:
    with contextlib.suppress(FileNotFoundError):
        state_path(workdir).unlink()


STUB = stubcheck.STUB
python_models = stubcheck.python_models  # the models of a repository that need a stub


def python_stubs(pgid: int) -> dict[str, list[int]]:
    """The live Python backend stubs of a server's process group, by model name (the same
    reading of /proc as the Kubernetes liveness probe's, toolkit.server.stubcheck)."""
    return stubcheck.stubs_by_model(procs.group_members(pgid))


def dead_stubs(st: ServerState, server_ready: bool | None = None) -> dict[str, list[int]]:
    """Stubs that are gone, by model: recorded ones that died (or were replaced by a restarted
    one), and, once the server is ready (`server_ready`, default: state.json says so), every
    Python-backend model of its repository without a live stub among the server's processes,
    whether or not its stubs were ever recorded (a deploy killed before READY records none)."""
    live = python_stubs(st.pgid)
    dead = {
        model: gone
        for model, pids in st.stubs.items()
        if (gone := [p for p in pids if p not in live.get(model, [])])
    }
    if server_ready if server_ready is not None else st.status == "ready":
        for model in stubcheck.without_stub(st.model_repo, live):
            dead.setdefault(model, [])
    return dead


def stub_message(dead: dict[str, list[int]]) -> str:
    models = ", ".join(
        f"'{m}' (pid {', '.join(map(str, p))})" if p else f"'{m}' (no stub running)" for m, p in dead.items()
    )
    return (
        f"the Python backend stub of model {models} died: requests to it fail with "
        "'Stub process is not healthy' while Triton's health endpoints still answer ready"
    )


def remove_shm(prefix: str) -> list[str]:
    """Remove the /dev/shm regions named with the server's prefix (left behind by a killed
    server or stub); returns their names."""
    if not prefix:
        return []
    gone = []
    for path in Path("/dev/shm").glob(prefix + "*"):
        with contextlib.suppress(OSError):
            path.unlink()
            gone.append(path.name)
    return gone


# Triton's Python backend makes a directory when it starts (EnvironmentManager:
# mkdtemp("/tmp/python_env_XXXXXX"), triton-inference-server/python_backend src/pb_env.cc) and
# removes it only when the backend is finalized, which a stopped server never reached here: every
# deploy left one empty directory in /tmp (540 after a day of tests and benchmarks).
PYTHON_ENV_DIR = Path("/tmp")
PYTHON_ENV_PREFIX = "python_env_"


def python_env_dirs() -> set[str]:
    """The Python backend's directories in /tmp now (any server's)."""
    try:
        names = os.listdir(PYTHON_ENV_DIR)
    except OSError:
        return set()
    return {str(PYTHON_ENV_DIR / n) for n in names if n.startswith(PYTHON_ENV_PREFIX)}


def new_python_env(before: set[str]) -> str:
    """The one directory made since `before` (taken before a launch): that server's. "" when
    there is none, or several (another server started meanwhile; whose is whose is unknown)."""
    new = python_env_dirs() - before
    return next(iter(new)) if len(new) == 1 else ""


def unclaimed_python_env(before: set[str]) -> str:
    """For a launch that failed before READY, once its server is gone: the one directory made
    since `before` (`new_python_env`), but only while no tritonserver runs at all. Otherwise it
    may be another server's, one that started meanwhile: removing a live server's directory
    makes its backend's finalize fail (pb_env.cc walks the directory and throws when it is
    gone). "" when unsure, or when the server died before its Python backend started."""
    new = new_python_env(before)
    if new and procs.find_processes("tritonserver"):  # the /proc scan only when there is one
        return ""
    return new


def remove_python_env(path: str) -> bool:
    """Remove a stopped server's Python-backend directory if it is empty (nothing is extracted
    into it unless a model sets EXECUTION_ENV_PATH, which sdtk's repositories do not); a
    directory holding anything is left alone. True if it was removed."""
    if not path or not Path(path).name.startswith(PYTHON_ENV_PREFIX):
        return False
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


def remove_server_files(shm_prefix: str, python_env: str) -> None:
    """What a stopped server leaves outside its workdir, removed: its Python backend's /dev/shm
    regions and /tmp directory (every stop path calls this, after the process group is gone)."""
    remove_shm(shm_prefix)
    remove_python_env(python_env)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if GET `url` answers 200 within `timeout` seconds (any error counts as no)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - our own server
            return r.status == 200
    except urllib.error.HTTPError as e:
        e.close()  # else its socket stays open until GC, and Triton's shutdown waits for it
        return False
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ServerStatus:
    """What `sdtk status` reports (only `running` exits 0). `state`: running | starting | unhealthy
    (a stub died or is frozen, or no answer) | unvalidated (serving; the deploy that started it died
    before its validation finished) | unsupervised (serving; its watchdog is gone) | restarting
    (by its watchdog) | crash-loop (its watchdog gave up) | dead | stopped."""

    state: str
    workdir: str
    message: str
    pid: int | None = None
    live: bool = False
    ready: bool = False
    model_ready: bool = False
    uptime_s: float | None = None
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None
    model_name: str | None = None
    model_repo: str | None = None
    log_path: str | None = None
    processes: list[int] = field(default_factory=list)  # members of the server's process group
    dead_stubs: dict[str, list[int]] = field(default_factory=dict)
    restarts: int = 0
    model_restarts: dict[str, int] = field(default_factory=dict)  # by `sdtk restart MODEL`
    validation: str = ""  # as recorded (ServerState.validation); "unfinished": its deploy died first
    watchdog: str = ""  # the detached deploy's watchdog (toolkit.server.watchdog), if any
    failures: list[str] = field(default_factory=list)  # failures the watchdog handled

    @property
    def running(self) -> bool:
        """A process of the server runs (it may not be serving)."""
        return self.state in ("running", "starting", "unhealthy", "unvalidated", "unsupervised", "restarting")

    @property
    def healthy(self) -> bool:
        return self.state == "running"

    def to_dict(self) -> dict:
        return asdict(self)


def _alive_and_ours(st: ServerState) -> bool:
    return procs.same_process(st.pid, st.start_ticks, st.executable)


def _crash(st: ServerState) -> str:
    """', crashed: Signal (11) received at <log mtime> in <function>: <known bug> (backtrace: ...)'
    when the log ends in a crash (Triton prints the signal and a backtrace), else "". The site
    only where the backtrace resolves against the binary (toolkit.server.crashsite)."""
    text = logscan.tail(st.log_path, 200)
    found = crashsite.SIGNAL.findall(text)
    if not found:
        return ""
    try:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(st.log_path).st_mtime))
    except OSError:
        when = "an unknown time"
    site = crashsite.crash_site(text)
    where = f" {site.describe()}" if site else ""
    return f", crashed: Signal ({found[-1]}) received at {when}{where} (backtrace: `sdtk logs -n 40`)"


def server_status(workdir: Path | str, timeout: float = 2.0) -> ServerStatus:
    """Read state.json, check that its pid is still our tritonserver, and ask it for health."""
    workdir = str(workdir)
    try:
        st = read_state(workdir)
    except RecordUnreadable as e:
        return ServerStatus("stopped", workdir, f"{e}; {e.hint}")
    if st is None:  # a server may run from it all the same (its record deleted by hand)
        from toolkit.server.recover import rebuild_state

        st = rebuild_state(workdir, f"{state_path(workdir)} is missing")
    if st is None:
        return ServerStatus("stopped", workdir, f"no server recorded in {state_path(workdir)}")
    st, unsaved = _noted(workdir, st)
    base: dict[str, Any] = dict(
        workdir=workdir,
        pid=st.pid,
        http_url=st.http_url,
        grpc_url=st.grpc_url,
        metrics_url=st.metrics_url,
        model_name=st.model_name,
        model_repo=st.model_repo,
        log_path=st.log_path,
        restarts=st.restarts,
        failures=list(st.failures),
        watchdog=_watchdog_line(st),
    )
    supervised = is_watchdog(st.watchdog_pid)
    if st.status == "crash-loop":
        first = (
            f"; first failure: {st.first_failure} (log {st.first_failure_log})" if st.first_failure else ""
        )
        last = f"; last failure: {st.failures[-1]}" if st.failures else ""
        return ServerStatus(
            "crash-loop",
            message=f"{st.restart_why}{first}{last}; fix the cause, then `sdtk stop --workdir "
            f"{workdir}` and `sdtk deploy` again",
            **base,
        )
    if st.status == "restarting" or (st.status == "starting" and st.restart_why):
        return _restarting(st, supervised, base, unsaved)
    if not _alive_and_ours(st):
        left = _leftovers(st)
        why = "is gone" if not procs.alive(st.pid) else "now belongs to another program"
        extra = f" ({len(left)} of its processes are left)" if left else ""
        gone = f"the server recorded with pid {st.pid} {why}{extra}{_crash(st)}"
        if supervised and st.watchdog_policy in ("", "restart", "restart-model"):
            return ServerStatus(
                "restarting", message=f"{gone}; its watchdog (pid {st.watchdog_pid}) restarts it", **base
            )
        return ServerStatus("dead", message=f"{gone}; `sdtk stop` cleans up", processes=left, **base)
    if frozen_now := frozen(st.pgid, st.pid):
        msg = frozen_message(frozen_now)
        if supervised:
            msg += f"; its watchdog (pid {st.watchdog_pid}) restarts the server if it stays frozen"
        msg += f"; or `kill -CONT {' '.join(str(p) for ps in frozen_now.values() for p in ps)}`"
        return ServerStatus("unhealthy", message=msg, processes=procs.group_members(st.pgid), **base)
    live = http_ok(f"{st.http_url}/v2/health/live", timeout)
    ready = live and http_ok(f"{st.http_url}/v2/health/ready", timeout)
    model_ready = ready and http_ok(f"{st.http_url}/v2/models/{st.model_name}/ready", timeout)
    dead = dead_stubs(st, server_ready=ready or None)
    validation = st.validation
    if dead:
        fix = (
            f"restart it: `sdtk restart {next(iter(dead))} --workdir {workdir}`"
            if st.repo_key
            else "redeploy (`sdtk stop`, then `sdtk deploy`)"
        )
        state, msg = "unhealthy", stub_message(dead) + "; " + fix
    elif live and ready and model_ready:
        state, msg = "running", f"serving '{st.model_name}' at {st.http_url} (gRPC {st.grpc_url})"
        if st.model_restarts:
            msg += "; restarted: " + ", ".join(f"'{m}' ×{n}" for m, n in sorted(st.model_restarts.items()))
        if st.restarts:
            msg += f"; server restarted ×{st.restarts}"
        if st.failures:
            msg += f"; last failure: {st.failures[-1]}"
        if st.validation == "pending" and st.owner_pid and procs.alive(st.owner_pid):
            msg += f"; sdtk deploy (pid {st.owner_pid}) is validating it"
        elif st.validation == "pending":
            validation = "unfinished"
            state = "unvalidated"
            msg += (
                f", but its validation never finished: the sdtk deploy that started it (pid "
                f"{st.owner_pid}) is gone; check it with `sdtk validate --workdir {workdir}`"
            )
    elif st.status == "starting":
        state, msg = "starting", f"pid {st.pid} is starting (not READY yet); see `sdtk logs`"
    else:
        state = "unhealthy"
        msg = (
            f"pid {st.pid} runs but is not ready (live={live}, ready={ready}, "
            f"model '{st.model_name}' ready={model_ready}); see `sdtk logs`"
        )
    if st.rebuilt:
        msg += f"; rebuilt its record ({st.rebuilt}) from the lock and the process table"
    if base["watchdog"]:
        msg += f"; watchdog {base['watchdog']}"
        if state == "running" and not supervised:
            state = "unsupervised"
    return ServerStatus(
        state,
        message=msg,
        live=live,
        ready=ready,
        model_ready=model_ready,
        uptime_s=max(0.0, time.time() - st.started_at),
        processes=procs.group_members(st.pgid),
        dead_stubs=dead,
        model_restarts=dict(st.model_restarts),
        validation=validation,
        **base,
    )


def _noted(workdir: str, st: ServerState) -> tuple[ServerState, str]:
    """The record as its live watchdog noted it when it could not write it (toolkit.server.note)."""
    fields, error = unwritten(workdir, state_path(workdir)) if is_watchdog(st.watchdog_pid) else ({}, "")
    return replace(st, **fields), error


def _restarting(st: ServerState, supervised: bool, base: dict[str, Any], unsaved: str = "") -> ServerStatus:
    """The status of a server its watchdog is restarting (or was, until the watchdog died)."""
    failed = f"failed {st.restart_errors} times: {st.restart_error}; " if st.restart_errors else ""
    msg = f"{failed}after {st.restart_why}"
    msg += f"; the watchdog cannot write {state_path(st.workdir)} ({unsaved})" if unsaved else ""
    if st.status == "starting":
        msg += f"; the new server (pid {st.pid}) is starting"
    elif (wait := st.next_restart_at - time.time()) > 0:
        msg += f"; next try in {wait:.0f}s"
    if not supervised:
        gone = f"its watchdog (pid {st.watchdog_pid}) is gone: nothing brings the server back"
        return ServerStatus("dead", message=f"{msg}; {gone}; `sdtk stop` cleans up", **base)
    return ServerStatus("restarting", message=f"{msg}; watchdog pid {st.watchdog_pid}", **base)


def is_watchdog(pid: int | None) -> bool:
    """`pid` is a live sdtk watchdog (not a reused pid)."""
    return bool(pid) and procs.alive(pid) and WATCHDOG_MODULE in " ".join(procs.cmdline(pid))  # type: ignore[arg-type]


def stop_watchdog(st: ServerState, timeout: float = 3.0) -> None:
    """SIGTERM the deployment's watchdog (toolkit.server.watchdog), if it runs, and wait until
    it is gone (never the calling process: the watchdog's own `stop` policy stops the server)."""
    pid = st.watchdog_pid
    if pid and pid != os.getpid() and is_watchdog(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        if not procs.wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _watchdog_line(st: ServerState) -> str:
    """'pid N (on failure: restart)', 'pid N is gone', or "" (none was started)."""
    if not st.watchdog_pid:
        return ""
    if is_watchdog(st.watchdog_pid):
        return f"pid {st.watchdog_pid} (on failure: {st.watchdog_policy or 'restart'})"
    return f"pid {st.watchdog_pid} is gone: failures are no longer handled"


def _log_path_for(workdir: Path | str) -> Path:
    st = read_state(workdir)
    return Path(st.log_path) if st else default_log_path(workdir)


def read_logs(workdir: Path | str, lines: int | None = None) -> str:
    """The server log of `workdir` (all of it, or its last `lines` lines)."""
    path = _log_path_for(workdir)
    if not path.is_file():
        raise ServerError(f"no server log at {path}", hint="start a server with `sdtk deploy` first")
    if lines is not None:
        return logscan.tail(path, lines)
    return path.read_text(errors="replace")


def follow_logs(
    workdir: Path | str,
    lines: int = 50,
    poll_s: float = 0.25,
    stop_when_dead: bool = True,
) -> Iterator[str]:
    """Yield the last `lines` lines, then every new line as it is written (`logs -f`).

    Ends when the recorded server is gone (if `stop_when_dead`), else runs until the caller
    stops iterating (Ctrl-C).
    """
    path = _log_path_for(workdir)
    st = read_state(workdir)
    if not path.is_file():
        raise ServerError(f"no server log at {path}", hint="start a server with `sdtk deploy` first")
    yield from logscan.tail(path, lines).splitlines(keepends=True)
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        pending = b""
        while True:
            chunk = f.read()
            if chunk:
                pending += chunk
                *done, pending = pending.split(b"\n")
                for line in done:
                    yield line.decode(errors="replace") + "\n"
                continue
            if stop_when_dead and (st is None or not _alive_and_ours(st)):
                if pending:
                    yield pending.decode(errors="replace")
                return
            time.sleep(poll_s)


@dataclass
class StopResult:
    workdir: str
    was_running: bool
    pid: int | None
    graceful: bool  # the server exited on SIGTERM within the grace period
    message: str


def _leftovers(st: ServerState) -> list[int]:
    """Members of the dead server's process group that are Triton's (stubs, ranks).

    The group id cannot be reused while any member lives; but if the group emptied and its
    number went to a new, unrelated group, nothing in it looks like Triton and it is left alone.
    """
    leader = procs.stat(st.pid)
    if leader is not None and leader.pgid == st.pgid and not _alive_and_ours(st) and procs.alive(st.pid):
        # The recorded pid now leads some other program's group: not ours to touch.
        return []
    out = []
    for pid in procs.group_members(st.pgid):
        argv0 = os.path.basename((procs.cmdline(pid) or [""])[0])
        if "triton" in argv0 or argv0 in ("mpirun", "orted", "prterun", "prted"):
            out.append(pid)
    return out


def _kill_leftovers(st: ServerState) -> None:
    for pid in _leftovers(st):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while _leftovers(st) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_server(workdir: Path | str, grace: float = 15.0, *, force: bool = False) -> StopResult:
    """SIGTERM the recorded server, wait `grace` s, SIGKILL its process group (Python backend
    stubs included), remove state.json. Safe to call when nothing runs. An unreadable record is
    rebuilt from the lock and the process table (read_state) or, when no server runs, removed.
    `force`: also stop every other server and watchdog of the workdir that the lock or the
    process table shows (toolkit.server.recover), recorded or not.
    """
    workdir = str(workdir)
    try:
        st = read_state(workdir)
    except RecordUnreadable as e:
        st, damaged = None, str(e)
    else:
        damaged = ""
    if st is not None:
        stop_watchdog(st)  # first, so that it does not take this stop for a failure
        with contextlib.suppress(RecordUnreadable):
            st = read_state(workdir) or st  # what the watchdog launched before it stopped
        result = _stop_recorded(workdir, st, grace)
    else:
        result = StopResult(
            workdir, False, None, True, damaged or f"no server recorded in {state_path(workdir)}"
        )
    if force or damaged or st is None:  # what no record names, found by the lock and /proc
        result.message += _sweep(workdir, grace)
    if damaged:
        remove_state(workdir)
        result.message += f"; removed the unreadable {state_path(workdir)}"
    return result


def _sweep(workdir: str, grace: float) -> str:
    """Stop the watchdogs and servers of `workdir` that no record names; what was stopped."""
    from toolkit.server.recover import servers_of, watchdogs_of

    done = []
    for pid in watchdogs_of(workdir):
        procs.terminate_group(pid, None, 3.0)
        done.append(f"watchdog pid {pid}")
    for pid in servers_of(workdir):
        procs.terminate_group(pid, pid, grace)
        done.append(f"tritonserver pid {pid}")
    return "; also stopped " + ", ".join(done) if done else ""


def _stop_recorded(workdir: str, st: ServerState, grace: float) -> StopResult:
    ours = _alive_and_ours(st)
    graceful = True
    if ours:
        with contextlib.suppress(ServerError, OSError):
            update_state(workdir, st.pid, status="stopping")
        graceful = procs.terminate_group(st.pid, st.pgid, grace)
    else:
        _kill_leftovers(st)
    left = _leftovers(st)
    if left:
        raise ServerError(
            f"processes of the server's group {st.pgid} survived SIGKILL: {left}",
            hint=f"check them with `ps -o pid,stat,cmd -g {st.pgid}`",
        )
    # Once the server is gone its lock is free: hold it while cleaning up, so that no deploy
    # starts in between (a foreground `sdtk deploy` may take a moment to exit and drop it).
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(WorkdirError):
            stack.enter_context(WorkdirLock.acquire(workdir, "sdtk stop", wait_s=STOP_LOCK_WAIT_S))
        remove_server_files(st.shm_prefix, st.python_env)
        try:
            now = read_state(workdir)
        except RecordUnreadable:
            now = st  # damaged, and its server is gone: nothing to rebuild it from
        if now is not None and now.pid == st.pid:  # not a newer deploy's record
            remove_state(workdir)
    rebuilt = f" (its record was rebuilt: {st.rebuilt})" if st.rebuilt else ""
    if not ours:
        msg = f"server pid {st.pid} was not running; removed {state_path(workdir)}"
    elif graceful:
        msg = f"stopped tritonserver (pid {st.pid}){rebuilt}"
    else:
        msg = f"tritonserver (pid {st.pid}) ignored SIGTERM for {grace:.0f}s and was killed{rebuilt}"
    return StopResult(workdir, ours, st.pid, graceful, msg)
