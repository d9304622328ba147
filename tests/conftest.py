"""Shared fixtures: keep every test away from the real home directory and hub."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Shared test modules (triton_support, _hostile) import by name from any test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_support import live_deployment_factory  # noqa: E402, F401 - the shared fixture


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.delenv("SDTK_DEBUG", raising=False)
    # Stopping a deployment whose ensemble saw cancellations waits out Triton's exit timeout
    # (cancelled ensemble requests stay counted in flight in 2.51): 3 s instead of 10 in tests.
    monkeypatch.setenv("SDTK_EXIT_TIMEOUT_S", "3")
