"""The watchdog of a detached deployment: `sdtk deploy --detach` starts one beside the server.

Triton never restarts a dead Python backend stub, its health endpoints keep answering 200 after
one died (server#8604), and Triton 2.51 holds the requests a dead stub had in flight through an
`ensemble` until the client gives up: neither unloading the model nor anything a client sends
ends them; only the end of `tritonserver` does (docs/runbooks/troubleshooting.md). A foreground
`sdtk deploy` supervises its server itself (`TritonServer.serve_forever`); a detached one has
this process, which polls the server every `poll_s` and, when a stub or the server died, or
stays frozen (stopped by a signal: /proc state T) for `frozen_s`, or stops answering Triton's
live endpoint, applies the deployment's `--on-failure` policy:

- `restart` (the default): SIGKILL the server's process group at once (every client of the dead
  model gets a closed connection within a second instead of a hang) and launch it again, as
  recorded in `<workdir>/launch.json`, on the same ports with the same repository and key;
- `restart-model`: reload only the dead models through Triton's model-control API (`sdtk
  restart`), keeping the other models' requests; the requests the dead stub held through the
  `ensemble` keep hanging (Triton 2.51), and a dead or frozen server is restarted as with
  `restart`;
- `stop`: stop the server (clients get closed connections; `sdtk status` then says stopped).

Restarts follow a crash-loop policy like systemd's (StartLimitBurst in StartLimitIntervalSec)
and the kubelet's (CrashLoopBackOff): the first failure in a window is restarted at once, each
next one after a pause that doubles (`backoff_s`, up to `backoff_max_s`), and a failure beyond
`limit` restarts within `window_s` ends in the `crash-loop` state: the server is stopped, the
record kept for `sdtk status` with the first and the last failure, and the watchdog exits 1. A
launch that fails (a port taken, a full disk, the lock held) is retried with the same backoff
for as long as it fails; meanwhile the record says `restarting` with the count and the last
error. The knobs: this module's flags, or the environment `sdtk deploy` runs in (ENV below).

Each failure it handled is recorded in state.json (`failures`, shown by `sdtk status`); the
failed server's log is kept as `logs/tritonserver.<pid>.log` (the newest KEPT_LOGS, and always
the first failure's). `sdtk stop` stops the watchdog first (and marks the record `stopping`), so
a deliberate stop is never taken for a failure. The watchdog never dies on its record: one it
cannot read is rewritten from memory (or rebuilt from the lock and the process table,
toolkit.server.recover), one it cannot write (a full disk) is written again at the next change.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path

from toolkit.errors import SdtkError
from toolkit.server import procs
from toolkit.server.liveness import frozen, frozen_message
from toolkit.server.modelcontrol import restart_model
from toolkit.server.note import NOTED, open_note, write_note
from toolkit.server.policies import WATCHDOG_POLICIES
from toolkit.server.state import (
    WATCHDOG_MODULE as MODULE,
)
from toolkit.server.state import (
    RecordUnreadable,
    ServerState,
    _alive_and_ours,
    _crash,
    dead_stubs,
    http_ok,
    read_state,
    remove_server_files,
    stop_server,
    stub_message,
    write_state,
)

SPEC_FILE = "launch.json"
MAX_FAILURES_KEPT = 20
KEPT_LOGS = 5  # logs of failed servers kept as tritonserver.<pid>.log, besides the first failure's
LIVE_MISSES = 3  # unanswered /v2/health/live probes in a row that make a failure


@dataclass(frozen=True)
class RestartPolicy:
    """When to restart, and when to give up (the environment variable of each knob in ENV)."""

    limit: int = 5  # restarts within `window_s`; the next failure is a crash loop
    window_s: float = 600.0
    backoff_s: float = 1.0  # the pause before the second restart within the window; doubles
    backoff_max_s: float = 60.0
    frozen_s: float = 2.0  # a process stopped this long is a failure (a debugger's pause is not)
    live_probe_s: float = 5.0  # probe /v2/health/live this often (timeout the same); 0: never

    def delay(self, failures: int) -> float:
        """The pause before restarting after the `failures`-th failure within the window."""
        return 0.0 if failures <= 1 else min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 2))

    def retry_delay(self, errors: int) -> float:
        """The pause before launching again after `errors` launches failed in a row."""
        return min(self.backoff_max_s, self.backoff_s * 2 ** max(0, errors - 1))

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> RestartPolicy:
        """The defaults, overridden by the ENV variables that are set (a bad value: UsageError)."""
        from toolkit.errors import UsageError

        values: dict[str, float | int] = {}
        for f in fields(cls):
            raw = env.get(ENV[f.name], "").strip()
            if not raw:
                continue
            try:
                value = int(raw) if f.name == "limit" else float(raw)
            except ValueError:
                value = -1
            if value < 0:
                raise UsageError(
                    f"{ENV[f.name]}={raw!r} is not a number ≥ 0", hint=f"unset it, or see {MODULE}"
                )
            values[f.name] = value
        return cls(**values)  # type: ignore[arg-type]


ENV = {
    "limit": "SDTK_RESTART_LIMIT",
    "window_s": "SDTK_RESTART_WINDOW_S",
    "backoff_s": "SDTK_RESTART_BACKOFF_S",
    "backoff_max_s": "SDTK_RESTART_BACKOFF_MAX_S",
    "frozen_s": "SDTK_FROZEN_S",
    "live_probe_s": "SDTK_LIVE_PROBE_S",
}


def spec_path(workdir: Path | str) -> Path:
    return Path(workdir) / SPEC_FILE


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _say(text: str) -> None:
    with contextlib.suppress(OSError):  # its log is on the workdir's disk, which may be full
        print(f"{_now()} sdtk watchdog: {text}", flush=True)


def _one_line(e: BaseException) -> str:
    return (str(e) or type(e).__name__).splitlines()[0][:300]


def failed_log(st: ServerState) -> Path:
    """Where the watchdog keeps the log of server `st` once it failed."""
    log = Path(st.log_path)
    return log.with_name(f"{log.stem}.{st.pid}{log.suffix}")


def keep_log(st: ServerState, keep: int = KEPT_LOGS, first: str = "") -> None:
    """Keep the failed server's log as tritonserver.<pid>.log (the newest `keep` of them, and
    `first`, the first failure's, whatever its age)."""
    log = Path(st.log_path)
    with contextlib.suppress(OSError):
        os.replace(log, failed_log(st))
    try:
        old = sorted(log.parent.glob(f"{log.stem}.*[0-9]{log.suffix}"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for path in [p for p in old if str(p) != first][:-keep]:
        with contextlib.suppress(OSError):
            path.unlink()


class Watchdog:
    """Watches the server recorded in `workdir` (see the module's docstring)."""

    def __init__(self, workdir: Path, policy: str, poll_s: float, rp: RestartPolicy):
        self.workdir, self.policy, self.poll_s, self.rp = workdir, policy, poll_s, rp
        self.pid = 0  # the server watched
        self.last: ServerState | None = None  # its record as last read or written
        self.failed_at: deque[float] = deque()  # monotonic times of the failures in the window
        self.frozen_since: float | None = None
        self.next_probe = time.monotonic() + rp.live_probe_s
        self.misses = 0
        self.note_fd = open_note(workdir)

    # ------------------------------------------------------------------ the record

    def write(self, st: ServerState) -> bool:
        """Write the record; on failure (a full disk) say so and go on: the next change writes it."""
        self.last = st
        error = ""
        try:
            write_state(self.workdir, st)
        except OSError as e:
            error = str(e)
            _say(f"cannot write the record ({e}); keeping it in memory and going on")
        note = {k: getattr(st, k) for k in NOTED}
        write_note(self.note_fd, note | dict(at=time.time(), write_error=error))
        return not error

    def read(self) -> ServerState | None:
        """The record; an unreadable one is rewritten from memory (or from the rebuilt record)."""
        try:
            st = read_state(self.workdir)
        except RecordUnreadable as e:  # and no server runs: ours died meanwhile, or never was
            if self.last is None:
                return None
            _say(f"{e}; rewriting it from memory")
            self.write(self.last)
            return self.last
        if st is not None and st.rebuilt:
            mine = self.last if self.last is not None and self.last.pid == st.pid else None
            fixed = replace(mine or st, rebuilt="", watchdog_pid=os.getpid(), watchdog_policy=self.policy)
            _say(f"{st.rebuilt}; rewrote it from {'memory' if mine else 'the lock and the process table'}")
            self.write(fixed)
            st = fixed
        if st is not None:
            self.last = st
        return st

    def stopped(self, st: ServerState | None, pid: int) -> bool:
        return st is None or st.pid != pid or st.status == "stopping"

    # ------------------------------------------------------------------ watching

    def failure(self, st: ServerState) -> tuple[str, dict[str, list[int]]] | None:
        """What failed and the dead stubs by model; None while the server lives and answers."""
        if not _alive_and_ours(st):
            crash = _crash(st)
            return f"tritonserver (pid {st.pid}) exited{crash or ' on its own'}", {}
        dead = dead_stubs(st)
        if dead:
            return stub_message(dead), dead
        found = frozen(st.pgid, st.pid)
        now = time.monotonic()
        if not found:
            self.frozen_since = None
        else:
            self.frozen_since = self.frozen_since or now
            if now - self.frozen_since >= self.rp.frozen_s:
                return f"{frozen_message(found)} (for {now - self.frozen_since:.1f}s)", {}
            return None
        if self.rp.live_probe_s and now >= self.next_probe:
            self.next_probe = now + self.rp.live_probe_s
            ok = http_ok(f"{st.http_url}/v2/health/live", self.rp.live_probe_s)
            self.misses = 0 if ok else self.misses + 1
            if self.misses >= LIVE_MISSES:
                self.misses = 0
                return (
                    f"tritonserver (pid {st.pid}) did not answer {st.http_url}/v2/health/live "
                    f"{LIVE_MISSES} times in a row ({self.rp.live_probe_s:g}s apart)"
                ), {}
        return None

    def run(self) -> int:
        """Watch until the server is stopped (or replaced by another deploy): 0; 1 after a crash loop."""
        st = self.read()
        if st is None:
            _say(f"no server recorded in {self.workdir}; nothing to watch")
            return 0
        self.pid = st.pid
        _say(f"watching tritonserver pid {self.pid} in {self.workdir} (on failure: {self.policy}; {self.rp})")
        while True:
            time.sleep(self.poll_s)
            try:
                code = self.step()
            except Exception as e:  # noqa: BLE001 - the watchdog outlives what it cannot handle
                _say(f"unexpected error, going on: {type(e).__name__}: {_one_line(e)}")
                continue
            if code is not None:
                return code

    def step(self) -> int | None:
        """One poll: None to go on watching, else the watchdog's exit code."""
        st = self.read()
        if st is None or self.stopped(st, self.pid):
            _say("the server was stopped; exiting")
            return 0
        found = self.failure(st)
        if found is None:
            return None
        if not _alive_and_ours(st):
            # A stop removes the record right after the server is gone: give it a moment.
            time.sleep(1.0)
            if self.stopped(self.read(), self.pid):
                _say("the server was stopped; exiting")
                return 0
        return self.handle(st, *found)

    def handle(self, st: ServerState, what: str, dead: dict[str, list[int]]) -> int | None:
        """Apply the policy to the failure `what` of server `st`: None to go on watching."""
        what = what.replace("`sdtk logs -n 40`", str(failed_log(st)))
        when = _now()
        _say(what)
        now = time.monotonic()
        self.failed_at.append(now)
        while self.failed_at and now - self.failed_at[0] > self.rp.window_s:
            self.failed_at.popleft()
        if not st.first_failure:
            st = replace(st, first_failure=f"{when} {what}", first_failure_log=str(failed_log(st)))
        if self.policy == "stop":
            self.write(self.noted(st, f"{when} {what}: stopped the server"))
            stop_server(self.workdir, grace=1.0)
            return 0
        if self.policy == "restart-model" and dead and _alive_and_ours(st):
            for model in dead:
                try:
                    _say(restart_model(self.workdir, model).message)
                    action = f"reloaded '{model}'"
                except SdtkError as e:
                    action = f"reloading '{model}' failed: {_one_line(e)}"
                    _say(action)
                if (now_st := self.read()) is not None:
                    st = replace(
                        now_st, first_failure=st.first_failure, first_failure_log=st.first_failure_log
                    )
                self.write(self.noted(st, f"{when} {what}: {action}"))
            return None
        if len(self.failed_at) > self.rp.limit:
            return self.crash_loop(st, f"{when} {what}")
        return self.restart(st, f"{when} {what}", self.rp.delay(len(self.failed_at)))

    @staticmethod
    def noted(st: ServerState, line: str) -> ServerState:
        return replace(st, failures=[*st.failures, line][-MAX_FAILURES_KEPT:])

    def _kill(self, st: ServerState) -> None:
        procs.kill_group_now(st.pgid)
        remove_server_files(st.shm_prefix, st.python_env)
        keep_log(st, first=st.first_failure_log)

    def crash_loop(self, st: ServerState, failure: str) -> int:
        n, rp = len(self.failed_at), self.rp
        why = (
            f"the server failed {n} times within {rp.window_s:g}s (limit: {rp.limit} restarts per "
            f"{rp.window_s:g}s): the watchdog stopped it and gave up"
        )
        self.write(
            replace(self.noted(st, f"{failure}: gave up (crash loop)"), status="crash-loop", restart_why=why)
        )
        self._kill(st)
        _say(f"crash loop: {why}")
        return 1

    def restart(self, st: ServerState, failure: str, delay: float) -> int | None:
        """Kill what is left of the server and launch it again from launch.json, after `delay`
        and, while launching fails, again with backoff. None once it is READY, 0 if it was
        stopped meanwhile."""
        base = replace(
            st, status="restarting", restart_why=failure, restart_errors=0, restart_error="",
            next_restart_at=time.time() + delay,
        )  # fmt: skip
        self.write(base)  # first: `sdtk status` says restarting, never dead, while it is down
        self._kill(st)
        if delay:
            _say(f"restarting in {delay:g}s (failure {len(self.failed_at)} within {self.rp.window_s:g}s)")
        t0, errors = time.monotonic(), 0
        while True:
            if not self.pause(delay):
                _say("the server was stopped; exiting")
                return 0
            try:
                new = self.launch(base)
                break
            except Exception as e:  # noqa: BLE001 - a launch that fails is retried, never fatal
                errors += 1
                delay = self.rp.retry_delay(errors)
                why = _one_line(e)
                if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                    with contextlib.suppress(OSError):
                        fs = os.statvfs(self.workdir)
                        why += f" (the disk of {self.workdir}: {fs.f_bavail * fs.f_frsize // 1024} KiB free)"
                _say(f"restart failed ({errors}× in a row): {why}; next try in {delay:g}s")
                base = replace(
                    base, restart_errors=errors, restart_error=why, next_restart_at=time.time() + delay
                )
                self.write(base)
        took = time.monotonic() - t0
        after = f", after {errors} failed launches" if errors else ""
        action = f"restarted the server (pid {new.pid}, ready in {took:.1f}s{after})"
        self.write(
            replace(
                self.noted(new, f"{failure}: {action}"),
                restart_why="",
                restart_errors=0,
                restart_error="",
                next_restart_at=0.0,
            )  # fmt: skip
        )
        _say(action)
        self.pid, self.frozen_since, self.misses = new.pid, None, 0
        self.next_probe = time.monotonic() + self.rp.live_probe_s
        return None

    def pause(self, seconds: float) -> bool:
        """Wait `seconds`, watching the record: False if the deployment was stopped meanwhile."""
        deadline = time.monotonic() + seconds
        while True:
            # Not by pid: a launch that failed may have left its own record (then rewritten).
            st = self.read()
            if st is None or st.status == "stopping":
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, self.poll_s))

    def launch(self, base: ServerState) -> ServerState:
        """Launch the server again from launch.json (same ports, repository, flags and key),
        its record carrying the watchdog's fields; the new record, once it is READY."""
        from toolkit.server.launch import TritonServer
        from toolkit.server.lock import WorkdirLock

        spec = json.loads(spec_path(self.workdir).read_text())
        server = TritonServer.from_spec(spec)
        server.repo_key = base.repo_key or None
        server.restarts = base.restarts + 1
        server.validation = base.validation
        server.keep_record = True  # a failed launch leaves the record to this watchdog
        carried = ("failures", "model_restarts", "first_failure", "first_failure_log", "restart_why",
                   "restart_errors", "restart_error")  # fmt: skip
        server.record_extra = {k: getattr(base, k) for k in carried} | dict(
            watchdog_pid=os.getpid(), watchdog_policy=self.policy
        )
        lock = WorkdirLock.acquire(self.workdir, "sdtk watchdog (restarting the server)", wait_s=5.0)
        try:
            server.start(detach=True, lock=lock)
        finally:
            lock.close()  # the server holds its inherited copy
        return self.read() or server.state()


def watch(workdir: Path, policy: str, poll_s: float = 0.5, rp: RestartPolicy | None = None) -> int:
    """Watch the server recorded in `workdir` until it is stopped (or replaced by another
    deploy). Returns 0 then; 1 after a crash loop (the record says why)."""
    return Watchdog(workdir, policy, poll_s, rp or RestartPolicy()).run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--on-failure", choices=list(WATCHDOG_POLICIES), default="restart")
    ap.add_argument("--poll", type=float, default=0.5)
    for name, var in ENV.items():
        ap.add_argument(f"--{name.removesuffix('_s').replace('_', '-')}", dest=name, type=float,
                        help=f"default: ${var}, else {getattr(RestartPolicy(), name)}")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        rp = RestartPolicy.from_env(os.environ)
    except SdtkError as e:
        _say(f"{e}; using the defaults")
        rp = RestartPolicy()
    given = {k: (int(v) if k == "limit" else v) for k in ENV if (v := getattr(args, k)) is not None}
    rp = replace(rp, **given)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(args.workdir.resolve(), args.on_failure, args.poll, rp)


if __name__ == "__main__":
    raise SystemExit(main())
