"""Finding a deployment's server without its record: when state.json is unreadable (garbage, an
empty file, a disk error), `sdtk status`, `sdtk stop` and the watchdog rebuild it from what still
names the server, so that no hint of sdtk's ever leaves a server running unrecorded.

What names it, in order of trust:
- the workdir lock (toolkit.server.lock): the server inherits its descriptor and the lock file
  records `server_pid`;
- the process table: a server is launched with the deployment directory as its working
  directory (toolkit.runner.spawn `cwd`) and leads its own process group;
- `<workdir>/launch.json`, the watchdog's launch spec (host, ports, model, log), and the server's
  own argv (ports, repository, shm prefix, repository key).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from toolkit.server import procs
from toolkit.server.lock import lock_path
from toolkit.server.record import (
    REPO_KEY_HEADER,
    WATCHDOG_MODULE,
    ServerState,
    connect_host,
    default_log_path,
)
from toolkit.server.stubcheck import stubs_by_model

SERVER_NAMES = ("tritonserver", "mpirun")  # what leads a server's process group
_SHM = "shm-region-prefix-name="  # the Python backend's /dev/shm prefix (toolkit.server.plan)
SPEC_FILE = "launch.json"  # the watchdog's launch spec (toolkit.server.watchdog)


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _is_server_of(pid: int, workdir: Path) -> bool:
    """`pid` leads its process group, runs tritonserver (or mpirun) and from `workdir`."""
    st = procs.stat(pid)
    if st is None or st.state in ("Z", "X") or st.pgid != pid:
        return False
    argv = procs.cmdline(pid)
    if not argv or os.path.basename(argv[0]) not in SERVER_NAMES:
        return False
    return _cwd(pid) == str(workdir)


def lock_holder(workdir: Path | str) -> dict[str, Any]:
    """What the workdir's lock file says (pid, what, server_pid), {} when unreadable."""
    try:
        data = json.loads(lock_path(Path(workdir)).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def servers_of(workdir: Path | str) -> list[int]:
    """The live servers launched from `workdir`: the lock's server first, then any other the
    process table shows (a server whose lock record was lost too)."""
    wd = Path(workdir).resolve()
    found: list[int] = []
    pid = lock_holder(wd).get("server_pid")
    if isinstance(pid, int) and _is_server_of(pid, wd):
        found.append(pid)
    for name in SERVER_NAMES:
        found += [p for p in procs.find_processes(name) if p not in found and _is_server_of(p, wd)]
    return found


def watchdogs_of(workdir: Path | str) -> list[int]:
    """The live watchdogs (toolkit.server.watchdog) of `workdir`."""
    wd = str(Path(workdir).resolve())
    out = []
    for pid in procs.find_processes("python"):
        argv = procs.cmdline(pid)
        if WATCHDOG_MODULE in argv and wd in argv:
            out.append(pid)
    return out


def _flag(argv: list[str], name: str) -> str:
    """The value of `--name=value` (or `--name value`) in `argv`, "" if absent."""
    for i, a in enumerate(argv):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return ""


def _started_at(start_ticks: int) -> float:
    """time.time() when a process started, from its start time in clock ticks after boot."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")


def _spec(workdir: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((workdir / SPEC_FILE).read_text())
        if isinstance(data, dict):
            return data
    return {}


def rebuild_state(workdir: Path | str, why: str) -> ServerState | None:
    """The record of the server that runs from `workdir`, rebuilt from its lock, the process
    table and launch.json; None when none runs. `why`: why state.json could not be used."""
    wd = Path(workdir).resolve()
    servers = servers_of(wd)
    if not servers:
        return None
    pid = servers[0]
    stat = procs.stat(pid)
    if stat is None:
        return None
    argv = procs.cmdline(pid)
    spec = _spec(wd)
    host = str(spec.get("host") or "127.0.0.1")

    def port(name: str) -> int:
        value = _flag(argv, f"--{name}-port")
        return int(value) if value.isdigit() else int(spec.get(f"{name}_port") or 0)

    http, grpc, metrics = port("http"), port("grpc"), port("metrics")
    shm = next((a.partition(_SHM)[2] for a in argv if _SHM in a), "")
    if os.path.basename(argv[0]) == "mpirun":  # one prefix per rank: <prefix><rank>_
        shm = re.sub(r"\d+_$", "", shm)
    key = _flag(argv, "--http-restricted-api").partition(f"{REPO_KEY_HEADER}=")[2]
    watchdogs = watchdogs_of(wd)
    policy = _flag(procs.cmdline(watchdogs[0]), "--on-failure") or "restart" if watchdogs else ""
    return ServerState(
        pid=pid,
        pgid=pid,
        start_ticks=stat.start_ticks,
        started_at=_started_at(stat.start_ticks),
        http_url=f"http://{connect_host(host)}:{http}",
        grpc_url=f"{connect_host(host)}:{grpc}",
        metrics_url=f"http://{connect_host(host)}:{metrics}/metrics",
        model_name=str(spec.get("model_name") or "ensemble"),
        model_repo=_flag(argv, "--model-repository") or str(spec.get("model_repo", "")),
        argv=[a.replace(key, "***") if key else a for a in argv],
        log_path=str(spec.get("log_path") or default_log_path(wd)),
        workdir=str(wd),
        host=host,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        executable=os.path.basename(argv[0]),
        status="ready",
        shm_prefix=shm,
        stubs=stubs_by_model(procs.group_members(pid)),
        repo_key=key,
        watchdog_pid=watchdogs[0] if watchdogs else None,
        watchdog_policy=policy,
        rebuilt=why,
    )
