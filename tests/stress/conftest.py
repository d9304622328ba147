"""Fixtures for the stress suite: live tiny deployments on the embedded Triton server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from triton_support import live_deployment

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


@contextlib.contextmanager
def live(name: str, workdir: Path) -> Iterator:
    """A detached deployment of recipes/<name>.yaml on free ports (no validation: the tests check
    it themselves); stopped, stubs and /dev/shm regions included, on exit."""
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(RECIPES / f"{name}.yaml"))
    with live_deployment(recipe, workdir) as result:
        yield recipe, result


def diagnosis(result) -> str:
    """For a failed assertion: is tritonserver still alive, and the end of its log (Triton prints
    `Signal (11) received` and a backtrace when it crashes)."""
    from toolkit.server import procs

    alive = procs.alive(result.pid) if result.pid else None
    log = Path(result.workdir) / "logs" / "tritonserver.log"
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as e:
        lines = [f"(no log: {e})"]
    signals = [line for line in lines if "Signal (" in line]
    return f"tritonserver alive: {alive}; signals: {signals}\n--- log tail ---\n" + "\n".join(lines[-40:])


@pytest.fixture
def deployment(request, tmp_path):
    with live(request.param, tmp_path) as d:
        yield d
