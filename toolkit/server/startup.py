"""What a tritonserver launch checks before it starts, and how a failed start is reported:
`ServerStartError`, `Health`, the launch-path and workdir checks, the model-control flags, and the
address a client uses (toolkit.server.launch re-exports them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ServerError, WorkdirError
from toolkit.server.record import REPO_KEY_HEADER
from toolkit.server.state import read_state, remove_state, server_status


@dataclass(frozen=True)
class StartFailure:
    """What a failed start is: `reason` (see ServerStartError), the process, how long after launch,
    its exit code, and Triton's own messages found in the log."""

    reason: str
    pid: int | None
    elapsed: float
    returncode: int | None = None
    errors: tuple[str, ...] = ()


class ServerStartError(ServerError):
    """tritonserver did not become ready. `reason`: "exited" (the process ended early),
    "stub_failed" (bash could not start a Python backend stub: the log says so long before
    Triton gives up on it), "timeout" (the readiness deadline passed), "missing_model" (the server is up but the
    repository has no such model), "load_failed" (the model is UNAVAILABLE while the server
    stays up), "stub_handshake" (a model's stubs finished initialize but Triton never took it as
    loaded), "backend_abort" (the Python backend aborted on its shared-memory lock). `errors`
    holds Triton's own messages found in the log."""

    def __init__(
        self,
        message: str,
        failure: StartFailure,
        *,
        log_tail: str = "",
        log_path: Path | None = None,
        hint: str | None = None,
    ):
        self.failure = failure
        self.reason = failure.reason
        self.pid = failure.pid
        self.elapsed = failure.elapsed
        self.returncode = failure.returncode
        self.errors = list(failure.errors)
        super().__init__(message, log_tail=log_tail, log_path=log_path, hint=hint)


# Start failures that are Triton 2.51's, not the deployment's: a lost stub handshake, a Python
# backend abort on its shared-memory lock (toolkit/server/readiness.py). The launcher retries once.
TRANSIENT = ("stub_handshake", "backend_abort")


@dataclass(frozen=True)
class Health:
    live: bool
    ready: bool
    model_ready: bool

    @property
    def ok(self) -> bool:
        return self.live and self.ready and self.model_ready


# What python_backend's stub launch survives in a path: it runs `bash -c` on the paths unquoted
# (src/stub_launcher.cc, r24.10), and the stub's embedded Python reads them as ASCII whatever the
# locale (PYTHONUTF8=1 and LC_ALL=C.UTF-8 do not help: measured on Triton 2.51).
_LAUNCH_SAFE = re.compile(r"[A-Za-z0-9_./+,:@%=~-]*")


def check_launch_path(path: Path | str, what: str) -> None:
    """WorkdirError, before anything is launched, for a path the Python backend cannot start
    stubs from: a space, a quote or another character bash treats specially, or non-ASCII."""
    text = str(path)
    if _LAUNCH_SAFE.fullmatch(text):
        return
    bad = sorted({c for c in text if not _LAUNCH_SAFE.fullmatch(c)})
    shown = ", ".join(repr(c) for c in bad)
    raise WorkdirError(
        f"the {what} {text!r} has characters Triton's Python backend cannot start its stubs from: {shown}",
        path=path,
        hint="use a --workdir made of ASCII letters, digits and . _ - + / , : @ % = ~: the Python "
        "backend runs `bash -c` on its paths unquoted (python_backend src/stub_launcher.cc) and "
        "its stubs read paths as ASCII",
    )


def model_control_args(key: str) -> list[str]:
    """Explicit model control, every model loaded at start, and the model-repository API (load,
    unload, index) only for requests that carry header REPO_KEY_HEADER: KEY (HTTP and gRPC)."""
    return [
        "--model-control-mode=explicit",
        "--load-model=*",
        f"--http-restricted-api=model-repository:{REPO_KEY_HEADER}={key}",
        f"--grpc-restricted-protocol=model-repository:{REPO_KEY_HEADER}={key}",
    ]


def check_workdir_free(workdir: Path) -> None:
    """ServerError if a server recorded in `workdir` still runs; a stale record is removed."""
    st = read_state(workdir)
    if st is None:
        return
    status = server_status(workdir, timeout=1.0)
    if status.running:
        raise ServerError(
            f"a server already runs from {workdir} (pid {st.pid}, {st.http_url})",
            hint=f"stop it first (sdtk stop --workdir {workdir}) or use another --workdir",
        )
    remove_state(workdir)  # stale record of a server that is gone
