"""`sdtk status` of a Dynamo deployment: the supervisor (state.json), the frontend's model list,
each process alive or dead (with its restarts), and every TCP listener of the deployment that is
not on loopback, named."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import time
from pathlib import Path
from typing import Any

from toolkit.dynamo.launch import processes
from toolkit.dynamo.plan import PLAN_FILE, SUBDIR, DynamoPlan
from toolkit.server import procs
from toolkit.server.state import ServerStatus, StopResult, http_ok, read_state, server_status


def _hex_addr(text: str) -> str:
    """/proc/net/tcp{,6} 'AABBCCDD:PORT' → 'a.b.c.d:port'."""
    addr, port = text.rsplit(":", 1)
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        ip = ipaddress.ip_address(raw[::-1])
    else:  # four little-endian 32-bit words
        ip = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return f"{ip}:{int(port, 16)}"


def listeners(pids: list[int]) -> dict[int, list[str]]:
    """pid → the TCP addresses it listens on."""
    owner: dict[str, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        owner[link[8:-1]] = pid
    out: dict[int, list[str]] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) >= 10 and f[3] == "0A" and f[9] in owner:
                out.setdefault(owner[f[9]], []).append(_hex_addr(f[1]))
    return out


def not_loopback(pids: dict[str, int]) -> list[str]:
    """'<process> listens on <addr>' for every listener of `pids` (name → pid) off loopback."""
    found = listeners(list(pids.values()))
    names = {pid: name for name, pid in pids.items()}
    out = []
    for pid, addrs in sorted(found.items()):
        for addr in addrs:
            host = addr.rsplit(":", 1)[0]
            if not ipaddress.ip_address(host).is_loopback:
                out.append(f"{names[pid]} listens on {addr}")
    return out


def dynamo_status(root: Path | str, timeout: float = 2.0) -> ServerStatus:
    """As toolkit.server.state.server_status, for the supervisor of a Dynamo deployment."""
    import httpx

    base = server_status(root, timeout)
    st = read_state(root)
    if st is None or base.state == "stopped":
        return base
    if base.state in ("dead", "restarting"):  # the supervisor is gone: what of its processes is left
        left = [f"{n} pid {p['pid']}" for n, p in processes(root).items() if _alive(p)]
        base.message = base.message.replace("the server recorded", "the Dynamo supervisor recorded", 1)
        base.message += "; left running: " + (", ".join(left) if left else "none of its processes")
        return base
    plan = DynamoPlan.from_dict(json.loads((Path(root) / SUBDIR / PLAN_FILE).read_text()))
    record = processes(root)
    alive = {n: int(p["pid"]) for n, p in record.items() if p.get("pid") and procs.alive(int(p["pid"]))}
    dead = sorted(n for n in record if n not in alive)
    try:
        models = httpx.get(f"{plan.http_url}/v1/models", timeout=timeout).json().get("data", [])
        listed = plan.model in [m.get("id") for m in models]
    except (httpx.HTTPError, ValueError, AttributeError):
        listed = False
    restarts = {n: int(p.get("restarts", 0)) for n, p in record.items() if p.get("restarts")}
    metrics = {n: str(p["metrics_url"]) for n, p in record.items() if p.get("metrics_url")}
    loading = sorted(n for n, url in metrics.items() if n in alive and not http_ok(url, timeout))
    # A worker that died and is loading again: dead to its clients until it serves.
    restarting = {n: _last_failure(record[n]) for n in loading if restarts.get(n)}
    parts = [
        (f"{n} pid {alive[n]}" + (" (loading)" if n in loading else "") if n in alive else f"{n} DEAD")
        for n in record
    ]
    if restarts:
        parts.append("restarted: " + ", ".join(f"{n} ×{k}" for n, k in sorted(restarts.items())))
    failures = [f for p in record.values() for f in p.get("failures", [])]
    if dead or restarting:
        state = "unhealthy"
        msg = f"dead: {', '.join(dead)}; the supervisor (pid {st.pid}) restarts them unless --on-failure says not"
        if restarting:
            died = "; ".join(f"{n} died ({why}) and is restarting" for n, why in sorted(restarting.items()))
            msg = f"{died}; the live workers serve meanwhile" if not dead else f"{msg}; {died}"
    elif st.status == "starting" or not record or loading:
        state = "starting"
        msg = f"supervisor pid {st.pid} is starting " + (", ".join(loading) if loading else "the deployment")
    elif not listed:
        state, msg = "unhealthy", f"the frontend at {plan.http_url} does not list '{plan.model}'"
    else:
        state = "running"
        msg = f"serving '{plan.model}' at {plan.http_url}/v1 with {len(plan.workers)} worker(s), router {plan.router_mode}"
    msg += "; " + "; ".join(parts)
    off = not_loopback(alive)
    msg += "; off loopback: " + ("; ".join(off) if off else "nothing")
    base.state, base.message, base.live, base.ready, base.model_ready = state, msg, listed, listed, listed
    base.restarts = sum(restarts.values())
    base.failures = failures
    base.dead_stubs = {n: [] for n in [*dead, *restarting]}
    base.uptime_s = max(0.0, time.time() - st.started_at)
    return base


def _alive(entry: dict[str, Any]) -> bool:
    return bool(entry.get("pid")) and procs.alive(int(entry["pid"]))


def _last_failure(entry: dict[str, Any]) -> str:
    """'exited -9 at 2026-12-07 18:00:00' from a processes.json entry's last failure."""
    failures = entry.get("failures") or []
    if not failures:
        return "restarted"
    text = str(failures[-1])  # "<date> <time> <name> (pid P) exited CODE"
    stamp = " ".join(text.split(" ")[:2])
    exited = text.rsplit(")", 1)[-1].strip()
    return f"{exited} at {stamp}" if exited else text


def kill_orphans(root: Path | str) -> list[int]:
    """When the supervisor is gone but processes of its group live on (it was SIGKILLed), SIGKILL
    them: toolkit.server.state's stop only cleans up a dead server's group members that look like
    Triton's. Only processes of the recorded group whose command names a Dynamo module are
    touched. Returns their pids."""
    import signal

    st = read_state(root)
    if st is None or procs.same_process(st.pid, st.start_ticks, st.executable):
        return []
    killed = []
    for pid in procs.group_members(st.pgid):
        if any("dynamo" in a for a in procs.cmdline(pid)[:3]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    for pid in killed:
        procs.wait_gone(pid, 5.0)
    return killed


def stopped_message(res: StopResult, record: dict[str, dict[str, Any]], grace: float) -> str:
    """`sdtk stop`'s line for a Dynamo deployment: the supervisor and each process it ran (from
    processes.json, read before the stop), instead of the Triton wording of toolkit.server.state."""
    named = ", ".join(f"{n} (pid {p['pid']})" for n, p in record.items() if p.get("pid"))
    what = f"the Dynamo supervisor (pid {res.pid})" + (f" with {named}" if named else "")
    extra = res.message.split(";", 1)[1] if ";" in res.message else ""  # removed files, `--force`'s sweep
    if not res.was_running:
        return f"the Dynamo supervisor (pid {res.pid}) was not running;{extra}" if res.pid else res.message
    left = [n for n, p in record.items() if p.get("pid") and procs.alive(int(p["pid"]))]
    if res.graceful:
        msg = f"stopped {what}"
    else:
        msg = f"{what} ignored SIGTERM for {grace:.0f}s and was killed"
    if left:  # SIGKILLed with the group: not expected to be seen
        msg += f"; still alive: {', '.join(left)}"
    return msg + (f";{extra}" if extra else "")


def stop_dynamo(root: Path | str, grace: float = 15.0, force: bool = False) -> StopResult:
    """`sdtk stop` of a Dynamo deployment: what a SIGKILLed supervisor left behind (kill_orphans),
    then toolkit.server.state's stop (SIGTERM to the supervisor, which stops the workers and the
    frontend; SIGKILL to its group), reported with the processes it stopped."""
    from toolkit.server.state import stop_server

    record = processes(root)
    orphans = kill_orphans(root)
    res = stop_server(root, grace=grace, force=force)
    res.message = stopped_message(res, record, grace)
    if orphans:
        res.message += f"; killed {len(orphans)} process(es) its dead supervisor left: pids {orphans}"
    return res
