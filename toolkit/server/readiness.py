"""Waiting for a launched tritonserver to be READY, and saying why it is not: the process
exited, a Python backend stub could not start, the model is missing or failed to load, or the
deadline passed (`ServerStartError` with Triton's own errors and the log tail)."""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

from toolkit.errors import did_you_mean
from toolkit.server import logscan
from toolkit.server.ports import PORT_FIELDS
from toolkit.server.startup import Health, ServerStartError, StartFailure
from toolkit.server.state import http_ok

if TYPE_CHECKING:
    from toolkit.server.launch import TritonServer


def start_failure(
    server: TritonServer, reason: str, message: str, elapsed: float, hint: str | None
) -> ServerStartError:
    """The ServerStartError of `server`, with Triton's load errors from its log and a hint."""
    errors = logscan.startup_errors_in(server.log_path)
    if errors:
        message += ": " + "; ".join(errors)
    if hint is None:
        if any("already in use" in m for m in errors):
            hint = "a port is taken: " + ", ".join(
                f"{k} → {PORT_FIELDS[k][0]}" for k, _ in server.ports.items()
            )
        elif errors:
            hint = (
                f"Triton could not load the model repository {server.model_repo}; full log: {server.log_path}"
            )
        else:
            hint = f"see the server log: {server.log_path}"
    failure = StartFailure(reason, server.pid, elapsed, server.returncode, tuple(errors))
    return ServerStartError(
        message, failure, log_tail=logscan.tail(server.log_path), log_path=server.log_path, hint=hint
    )


def wait_ready(
    server: TritonServer, proc: subprocess.Popen, timeout: float, model: str | None, interval: float
) -> Health:
    """Poll until live + ready + `model` ready, the process exits, or `timeout` passes."""
    model = model or server.model_name
    t0 = time.monotonic()
    deadline = t0 + timeout
    health = Health(False, False, False)
    next_index_check = 0.0
    handshakes = _Handshakes(server)
    while True:
        rc = proc.poll()
        elapsed = time.monotonic() - t0
        if rc is not None:
            aborted = BACKEND_ABORT in logscan.tail(server.log_path, 400)
            raise start_failure(
                server,
                "backend_abort" if aborted else "exited",
                f"tritonserver exited with code {rc} {elapsed:.1f}s after launch "
                f"(pid {proc.pid}) before it was ready"
                + (
                    ": its Python backend aborted on a shared-memory lock (boost lock_exception, "
                    "triton-inference-server/server#8882, open upstream)"
                    if aborted
                    else ""
                ),
                elapsed,
                None,
            )
        health = Health(False, False, False)
        if http_ok(f"{server.http_url}/v2/health/live", 1.0):
            ready = http_ok(f"{server.http_url}/v2/health/ready", 1.0)
            model_ready = http_ok(f"{server.http_url}/v2/models/{model}/ready", 1.0)
            health = Health(True, ready, model_ready)
            if health.ok:
                return health
            if time.monotonic() >= next_index_check:
                next_index_check = time.monotonic() + 2.0
                _check_index(server, model, elapsed)
        _check_stub_launch(server, elapsed)
        handshakes.check(elapsed)
        if time.monotonic() >= deadline:
            raise start_failure(
                server,
                "timeout",
                f"tritonserver (pid {proc.pid}) was not ready after {timeout:.0f}s "
                f"(live={health.live}, ready={health.ready}, model '{model}' ready={health.model_ready})",
                elapsed,
                f"loading large engines can take minutes: raise the readiness timeout, "
                f"or see the log {server.log_path}",
            )
        time.sleep(interval)


# Triton's Python backend now and then aborts the server while many stubs start on a busy machine
# (triton-inference-server/server#8882): a start failure the launcher retries once, as a lost handshake.
BACKEND_ABORT = "boost::interprocess::lock_exception"
HANDSHAKE_S = 30.0  # an initialized instance's model is loaded within milliseconds; 30 s under any load


class _Handshakes:
    """A model whose every instance returned from initialize() (the line sdtk's models write,
    toolkit/serving/triton.py) but which Triton has not reported loaded for HANDSHAKE_S: Triton
    2.51's Python backend now and then loses that handshake and then waits forever (the stub
    idles, the server never turns live). Found, it is a start failure (`stub_handshake`), which
    the launcher retries once."""

    def __init__(self, server: TritonServer) -> None:
        self.server = server
        self.seen: dict[str, tuple[int, float]] = {}  # model → (instances, first seen so)
        self.next_check = 0.0

    def check(self, elapsed: float) -> None:
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + 1.0
        waiting = logscan.initialized_not_loaded(logscan.tail(self.server.log_path, 2000))
        self.seen = {
            m: self.seen[m] if self.seen.get(m, (0,))[0] == n else (n, now) for m, n in waiting.items()
        }
        for model, (n, since) in self.seen.items():
            if now - since >= HANDSHAKE_S:
                raise start_failure(
                    self.server,
                    "stub_handshake",
                    f"Triton did not take model '{model}' as loaded {now - since:.0f}s after its "
                    f"{n} Python stub(s) finished initialize ({elapsed:.1f}s after launch, pid "
                    f"{self.server.pid}): the stub handshake was lost, as Triton 2.51's Python "
                    "backend now and then does",
                    elapsed,
                    f"start it again; if it recurs, see the server log: {self.server.log_path}",
                )


def _check_stub_launch(server: TritonServer, elapsed: float) -> None:
    """A Python backend stub that bash could not start: Triton would wait for it for minutes
    (until its stub timeout, or our ready timeout); the log says so at once."""
    failures = logscan.stub_launch_failures(logscan.tail(server.log_path, 400))
    if failures:
        raise start_failure(
            server,
            "stub_failed",
            f"a Python backend stub could not be started {elapsed:.1f}s after launch "
            f"(pid {server.pid}): {failures[0]}",
            elapsed,
            "Triton's Python backend starts each stub with `bash -c` on unquoted paths "
            "(python_backend src/stub_launcher.cc): check that the paths of the model "
            f"repository and backends have no spaces, quotes or non-ASCII; full log: {server.log_path}",
        )


def _check_index(server: TritonServer, model: str, elapsed: float) -> None:
    """The server is live but `model` is not ready. In the default model-control mode
    Triton answers only after loading, so a missing model, or one UNAVAILABLE with a
    reason (it failed to load and --exit-on-error=false kept the server up), is final.
    """
    index = server.repository_index()
    if index is None:
        return
    names = sorted({m.get("name", "") for m in index})
    if model not in names:
        guess = did_you_mean(model, names)
        raise start_failure(
            server,
            "missing_model",
            f"model '{model}' is not in the model repository {server.model_repo} "
            f"(it has: {', '.join(names) or 'nothing'})",
            elapsed,
            f"did you mean '{guess}'? (serving.model_name)" if guess else "check serving.model_name",
        )
    for m in index:
        if m.get("name") == model and m.get("state") == "UNAVAILABLE" and m.get("reason"):
            raise start_failure(
                server,
                "load_failed",
                f"model '{model}' failed to load ({m['reason']}) {elapsed:.1f}s after launch (pid {server.pid})",
                elapsed,
                None,
            )
