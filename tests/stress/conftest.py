"""Fixtures for the stress suite: live tiny deployments on the embedded Triton server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


@contextlib.contextmanager
def live(name: str, workdir: Path) -> Iterator:
    """A detached deployment of recipes/<name>.yaml on free ports (no validation: the tests check
    it themselves); stopped, stubs and /dev/shm regions included, on exit."""
    from toolkit.deploy import deploy
    from toolkit.recipe import load_recipe
    from toolkit.server.state import stop_server

    recipe = load_recipe(str(RECIPES / f"{name}.yaml"))
    result = deploy(
        recipe, workdir=workdir, detach=True, auto_ports=True, validate=False, progress=lambda m: None
    )
    try:
        yield recipe, result
    finally:
        stop_server(result.workdir)


@pytest.fixture
def deployment(request, tmp_path):
    with live(request.param, tmp_path) as d:
        yield d
