"""Is a server answering, not only present? A process that is stopped (SIGSTOP, SIGTSTP, a
tracer) still exists: its pid, its stubs and Triton's health endpoints all look fine, while the
requests it holds get no byte. `sdtk status` and the watchdog read /proc for it."""

from __future__ import annotations

from toolkit.server import procs, stubcheck

FROZEN_STATES = ("T", "t")  # /proc/<pid>/stat: stopped by a signal (SIGSTOP, SIGTSTP), by a tracer


def frozen(pgid: int, server_pid: int) -> dict[str, list[int]]:
    """Processes of the server's group `pgid` that are stopped (/proc state T or t), by what
    they serve: a stub's model, or "tritonserver" (the server `server_pid` itself). A stopped
    stub answers nothing: new requests fail after Triton's stub timeout, the ones it holds get
    no byte, and Triton's health endpoints still answer ready."""
    stopped = [p for p in procs.group_members(pgid) if (s := procs.stat(p)) and s.state in FROZEN_STATES]
    if not stopped:
        return {}
    found = stubcheck.stubs_by_model(stopped)
    return {"tritonserver": [server_pid], **found} if server_pid in stopped else found


def frozen_message(found: dict[str, list[int]]) -> str:
    what = "; ".join(
        f"tritonserver (pid {p[0]})"
        if m == "tritonserver"
        else f"the Python backend stub of model '{m}' (pid {', '.join(map(str, p))})"
        for m, p in found.items()
    )
    return (
        f"{what} is frozen (stopped by a signal: /proc state T): its requests get no answer "
        "while Triton's health endpoints still answer ready"
    )
