"""The record of a server, as data: `ServerState` (what `<workdir>/state.json` holds), where the
record and the log live, and the names every reader of the record shares. Pure data and paths, so
that the modules which find a server again when its record is damaged (toolkit.server.recover)
need not import the record's reader (toolkit.server.state), which calls them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "state.json"
REPO_KEY_HEADER = "sdtk-repo-key"  # the header that opens Triton's model-repository API
LOG_NAME = "tritonserver.log"
WATCHDOG_MODULE = "toolkit.server.watchdog"  # `python -m` it: a detached deploy's watchdog


def state_path(workdir: Path | str) -> Path:
    return Path(workdir) / STATE_FILE


def default_log_path(workdir: Path | str) -> Path:
    return Path(workdir) / "logs" / LOG_NAME


@dataclass
class ServerState:
    pid: int
    pgid: int
    start_ticks: int | None  # /proc/<pid>/stat starttime: guards against pid reuse
    started_at: float  # time.time() at launch
    http_url: str  # http://127.0.0.1:8000
    grpc_url: str  # 127.0.0.1:8001 (what tritonclient.grpc takes)
    metrics_url: str  # http://127.0.0.1:8002/metrics
    model_name: str
    model_repo: str
    argv: list[str]
    log_path: str
    workdir: str
    host: str = "127.0.0.1"
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    executable: str = "tritonserver"  # name to look for in /proc/<pid>/cmdline
    env: dict[str, str] = field(default_factory=dict)  # env vars sdtk set on top of the caller's
    detached: bool = True  # False: a foreground server, owned by the sdtk process owner_pid
    owner_pid: int | None = None
    # starting (spawned, not READY yet) | ready | stopping | restarting (by its watchdog, the old
    # server killed, the new one not launched yet) | crash-loop (its watchdog gave up)
    status: str = "ready"
    shm_prefix: str = ""  # the Python backend's /dev/shm region prefix (removed by stop)
    python_env: str = ""  # the Python backend's /tmp/python_env_* directory (removed by stop)
    stubs: dict[str, list[int]] = field(default_factory=dict)  # model → stub pids at READY
    restarts: int = 0  # server restarts by a supervising `sdtk deploy` or its watchdog
    # `sdtk deploy`'s validation: pending (to run after READY) | passed | skipped | "" (unknown)
    validation: str = ""
    # The key of Triton's model-repository API (explicit model control; "" = launched without):
    # kept only here, in a file readable by its owner alone.
    repo_key: str = ""
    model_restarts: dict[str, int] = field(default_factory=dict)  # `sdtk restart MODEL` counts
    # The watchdog of a detached deploy (toolkit.server.watchdog): its pid and policy, and the
    # failures it handled, newest last ("2026-12-04 10:00:00 <what>: <action>").
    watchdog_pid: int | None = None
    watchdog_policy: str = ""
    failures: list[str] = field(default_factory=list)
    # The first failure the watchdog handled and that server's kept log: never dropped or pruned
    # (the log that explains a crash loop is usually the first one).
    first_failure: str = ""
    first_failure_log: str = ""
    # While the watchdog brings the server back (`status` restarting, or starting with this
    # set): the failure it recovers from; launches that failed since, the last one's error, and
    # when it tries again (time.time()). With `status` crash-loop: why it gave up.
    restart_why: str = ""
    restart_errors: int = 0
    restart_error: str = ""
    next_restart_at: float = 0.0
    rebuilt: str = ""  # not from state.json (it was unreadable: why) but from the processes

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> ServerState:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def connect_host(host: str) -> str:
    """The address a client on this machine uses to reach a server bound to `host`."""
    h = host.strip("[]")
    if h in ("", "0.0.0.0"):
        return "127.0.0.1"
    if h == "::":
        return "[::1]"
    return f"[{h}]" if ":" in h else h
