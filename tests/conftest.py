"""Shared fixtures: keep every test away from the real home directory and hub."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.delenv("SDTK_DEBUG", raising=False)
