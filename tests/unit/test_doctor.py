"""`sdtk doctor` on TensorRT-LLM 1.1 / 1.2 / 1.3 and inside a container sdtk has or lacks facts for.

TensorRT-LLM and the NGC containers cannot exist here: the installed version is passed in (the
function `sdtk doctor` calls with the package metadata's version), and the container is its
environment variable (`NVIDIA_TRITON_SERVER_VERSION`, set by server build.py's
dockerfile_prepare_container_linux in every Triton image) with the probe's installed version stubbed.
Facts: the engine path is deprecated on 1.2.x (NVIDIA/TensorRT-LLM PR #11723) and removed in the 1.3
line (PRs #15907, #15918).
"""

from __future__ import annotations

import pytest

from toolkit import checks, containers, doctor
from toolkit.containers import probe


@pytest.mark.parametrize(
    ("version", "status", "says"),
    [
        ("1.1.0", checks.PASSED, "engine path available"),
        ("1.2.0rc2", checks.WARNING, "PR #11723"),  # a 1.2 pre-release is a 1.2
        ("1.2.1", checks.WARNING, "PR #11723"),
        ("1.3.0rc24", checks.PASSED, "PR #15907"),
    ],
)
def test_tensorrt_llm_check_per_release_line(version, status, says):
    c = doctor._trtllm(version)
    assert c.status is status and c.value == version and says in c.detail
    if version.startswith("1.3"):
        assert c.detail.startswith("LLM-API path only") and "#15918" in c.detail and "llmapi" in (c.hint or "")


def test_inside_a_known_container_doctor_names_its_unverified_facts(monkeypatch):
    monkeypatch.setenv(containers.CONTAINER_ENV, "26.07")
    c = doctor._container()
    assert c is not None and c.status is checks.PASSED and c.value == "26.07"
    assert "container 26.07 layout" in c.detail and "unverified: inflight_batcher_llm_dir" in c.detail


def test_inside_an_unknown_container_doctor_warns_and_shows_what_it_probed(monkeypatch):
    monkeypatch.setenv(containers.CONTAINER_ENV, "26.11")
    monkeypatch.setattr(probe, "installed_trtllm_version", lambda: "1.3.0rc29")
    c = doctor._container()
    assert c is not None and c.status is checks.WARNING and c.value == "26.11"
    assert "NO FACTS" in c.detail and "TensorRT-LLM 1.3.0rc29" in c.detail
    assert "python=" in c.detail and "probed paths" in c.detail
    assert "docs/contracts.md" in (c.hint or "")


def test_outside_a_container_there_is_no_container_check(monkeypatch):
    monkeypatch.delenv(containers.CONTAINER_ENV, raising=False)
    assert doctor._container() is None
