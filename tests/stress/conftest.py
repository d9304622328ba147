"""Fixtures for the stress suite: live tiny deployments on the embedded Triton server."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


def diagnosis(result) -> str:
    """For a failed assertion: is tritonserver still alive, and the end of its log (Triton prints
    `Signal (11) received` and a backtrace when it crashes)."""
    from toolkit.server import procs
    from toolkit.server.crashsite import crash_site

    alive = procs.alive(result.pid) if result.pid else None
    log = Path(result.workdir) / "logs" / "tritonserver.log"
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as e:
        lines = [f"(no log: {e})"]
    signals = [line for line in lines if "Signal (" in line]
    site = crash_site("\n".join(lines)) if signals else None
    where = f"; crashed {site.describe()}" if site else ""
    return f"tritonserver alive: {alive}; signals: {signals}{where}\n--- log tail ---\n" + "\n".join(
        lines[-40:]
    )
